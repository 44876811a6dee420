"""Text renderings of the task graph: no I/O, no printing; the CLI prints.

* ``list_line``: one line of ``team task list`` (``[ ] #5: subject (blocked by: [3, 4])``).
* ``render_chains``: ``team task blocked``, one line per path of
  ``graph.blocked_chains`` down to its root blocker and what that root is doing;
  long chains keep ``graph.PATH_HEAD`` ids, ``… N more …``, then the tail.
  ``not_blocked``: the sentence for a task that has no chain.
* ``render_tree`` / ``render_mermaid`` / ``render_dot``: ``team task graph``.
  The tree puts tasks with no dependencies at the top and nests dependents
  below; a task reached again is shown once more with ``(↑ above)`` and not
  expanded, so output is linear in edges. Mermaid and DOT draw an edge from a
  blocker to the task it blocks; a missing blocker id gets a dashed node.

Every function takes the tasks (or query results) and returns a string, so
tests compare whole outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.states import MARKERS, TERMINAL, Status
from ..core.text import shown
from .graph import PATH_HEAD, BlockedChain, T, TaskLike, dependents, index, open_blockers

if TYPE_CHECKING:
    from ..core.models import Task


def format_ids(ids: Sequence[int]) -> str:
    return " → ".join(f"#{i}" for i in ids)


def list_line(task: TaskLike, by_id: dict[int, T]) -> str:
    """The seed's line: ``[ ] #5: subject (blocked by: [3, 4])``."""
    line = f"{MARKERS[task.status]} #{task.id}: {shown(task.subject)}"
    if task.owner and task.status not in TERMINAL:  # who runs it, or who it is assigned to
        line += f" ({shown(task.owner)})"
    waiting = open_blockers(task, by_id)
    if waiting:
        line += f" (blocked by: {waiting})"
    return line


def render_chains(chains: Sequence[BlockedChain], tasks: Sequence[Task]) -> str:
    by_id = index(tasks)
    lines = []
    for c in chains:
        lines.append(f"#{c.id} {shown(c.subject)} waits on:")
        states = {r.id: r.state for r in c.roots}
        for p, skipped in zip(c.paths, c.elided, strict=True):
            root = by_id.get(p[-1])
            name = f"#{p[-1]} {shown(root.subject)}" if root else f"#{p[-1]}"
            path_text = format_ids(p)
            if skipped:
                head = format_ids(p[:PATH_HEAD])
                path_text = f"{head} → … {skipped} more … → {format_ids(p[PATH_HEAD:])}"
            lines.append(f"  {path_text}   {name}: {shown(states[p[-1]])}")
        if c.truncated:
            lines.append(f"  … more paths (showing the first {len(c.paths)})")
    return "\n".join(lines)


def not_blocked(task: Task) -> str:
    """``team task blocked REF`` for a task that waits on nothing: what it is doing instead."""
    if task.status == Status.pending:
        why = "it is ready to start"
    elif task.status == Status.in_progress:
        why = f"it is running{' by ' + shown(task.owner) if task.owner else ''}"
    else:
        why = f"it is {task.status.value}"
    return f"#{task.id} {shown(task.subject)} is not blocked: {why}."


def _node_label(t: Task) -> str:
    label = f"#{t.id} {shown(t.subject)}"
    if t.owner:
        label += f" ({shown(t.owner)})"
    return label


def render_tree(tasks: Sequence[Task]) -> str:
    """Indented tree: tasks with no dependencies at the top, their dependents
    nested below. A task reached again is printed once more with ``(↑ above)``
    and not expanded, so output stays linear in the number of edges."""
    by_id = index(tasks)
    kids = dependents(tasks)
    tops = [t.id for t in sorted(tasks, key=lambda t: t.id) if not any(d in by_id for d in t.blockedBy)]
    lines: list[str] = []
    seen: set[int] = set()
    # Tasks only on cycles have no top; start from them so nothing is hidden.
    for t in sorted(tasks, key=lambda t: t.id):
        if t.id not in tops:
            continue
        _walk(t.id, "", "", by_id, kids, seen, lines)
    for t in sorted(tasks, key=lambda t: t.id):
        if t.id not in seen:
            _walk(t.id, "", "", by_id, kids, seen, lines)
    return "\n".join(lines)


MAX_INDENT = 24
"""Tree levels that indent; deeper levels keep the last indent and show ``⋯``."""


def _walk(root: int, first: str, rest: str, by_id: dict[int, Task], kids: dict[int, list[int]],
          seen: set[int], lines: list[str]) -> None:
    stack = [(root, first, rest, 0)]
    while stack:
        tid, lead, cont, depth = stack.pop()
        t = by_id[tid]
        again = tid in seen
        mark = "⋯ " if depth > MAX_INDENT else ""
        lines.append(f"{lead}{mark}{MARKERS[t.status]} {_node_label(t)}" + ("  (↑ above)" if again else ""))
        if again:
            continue
        seen.add(tid)
        children = kids.get(tid, [])
        for i in reversed(range(len(children))):
            last = i == len(children) - 1
            if depth >= MAX_INDENT:
                stack.append((children[i], cont, cont, depth + 1))
            else:
                stack.append((children[i], cont + ("└── " if last else "├── "), cont + ("    " if last else "│   "), depth + 1))


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', "'")


def _missing(tasks: Sequence[Task], by_id: dict[int, Task]) -> list[int]:
    return sorted({d for t in tasks for d in t.blockedBy if d not in by_id})


def render_mermaid(tasks: Sequence[Task]) -> str:
    """``flowchart TD``: an arrow goes from a blocker to the task it blocks."""
    by_id = index(tasks)
    lines = ["flowchart TD"]
    for t in sorted(tasks, key=lambda t: t.id):
        lines.append(f'    t{t.id}["{_esc(_node_label(t))}"]:::{t.status.value}')
    for d in _missing(tasks, by_id):
        lines.append(f'    t{d}["#{d} (missing)"]:::missing')
    for t in sorted(tasks, key=lambda t: t.id):
        for d in t.blockedBy:
            lines.append(f"    t{d} --> t{t.id}")
    lines += [
        "    classDef pending fill:#fff,stroke:#888",
        "    classDef in_progress fill:#cce5ff,stroke:#004085",
        "    classDef completed fill:#d4edda,stroke:#155724",
        "    classDef failed fill:#f8d7da,stroke:#721c24",
        "    classDef cancelled fill:#eee,stroke:#aaa,stroke-dasharray:4",
        "    classDef missing fill:#fff3cd,stroke:#856404,stroke-dasharray:4",
    ]
    return "\n".join(lines)


DOT_COLORS = {
    Status.pending: "white",
    Status.in_progress: "lightblue",
    Status.completed: "palegreen",
    Status.failed: "lightpink",
    Status.cancelled: "lightgrey",
}


def render_dot(tasks: Sequence[Task]) -> str:
    """Graphviz ``digraph``: an edge goes from a blocker to the task it blocks."""
    by_id = index(tasks)
    lines = ["digraph tasks {", "    rankdir=LR;", '    node [shape=box, style="rounded,filled"];']
    for t in sorted(tasks, key=lambda t: t.id):
        lines.append(f'    t{t.id} [label="{_esc(_node_label(t))}\\n{t.status.value}", fillcolor={DOT_COLORS[t.status]}];')
    for d in _missing(tasks, by_id):
        lines.append(f'    t{d} [label="#{d} (missing)", fillcolor=yellow, style="dashed,filled"];')
    for t in sorted(tasks, key=lambda t: t.id):
        for d in t.blockedBy:
            lines.append(f"    t{d} -> t{t.id};")
    lines.append("}")
    return "\n".join(lines)
