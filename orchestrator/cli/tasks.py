"""``team task list|show|create|update|retry|blocked|graph|critical``.

Reads go through ``TaskStore.scan()``: a task file that cannot be read (torn
by hand, not JSON) does not take the listing down. The readable tasks are
shown as usual, each unreadable file is named in one ``warning:`` line on
stderr (with a pointer to ``team doctor``), and the command exits 1: the
answer is incomplete, and a script must notice. Writes go through the
store's locked, validated methods, so a refused change writes nothing. Queries are
``graph`` functions and their text comes from ``render``; this module only
prints.

``task list``, ``create`` and ``update`` are on the cold-start budget
(issue 13: 80 ms for a listing of 1,000 tasks): their bodies are in
taskcore.py, which the fast path (fast.py) calls without typer; ``list``
reads through the task index (tasks/index.py), which validates only the
files it has not seen, so a warm listing imports no pydantic. Nothing here
may import pydantic, networkx, rich or yaml at module level; the other
commands import the store inside their bodies.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..core.paths import at_root
from ..core.text import plural, shown
from ..tasks import graph, render
from .common import JsonOpt, RootOpt, exit_with, out, print_json, root_of
from .taskcore import EMPTY, create_task, list_tasks, store_at, update_task, warn

if TYPE_CHECKING:
    from ..core.models import Task
    from ..tasks.store import TaskStore

task_app = typer.Typer(no_args_is_help=True, help="Inspect and edit the task graph (.tasks/).")


def _store(root, ctx) -> TaskStore:
    return store_at(root_of(root, ctx))


class Readable:
    """The tasks a listing could read; ``done()`` ends the command with exit 1 if some could not."""

    def __init__(self, store: TaskStore):
        self.tasks, bad = store.scan()
        self.bad = [path for path, _ in bad]
        warn(bad)

    def done(self) -> None:
        if self.bad:
            raise typer.Exit(1)


def _task_json(task: Task, by_id: dict[int, Task]) -> dict[str, Any]:
    data = task.to_json()
    data["ready"] = graph.is_ready(task, by_id)
    data["waiting_on"] = graph.open_blockers(task, by_id)
    return data


@task_app.command("list")
def list_cmd(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option("--status", help="Only tasks with this status.")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Only tasks owned by NAME.")] = None,
    ready: Annotated[bool, typer.Option("--ready", help="Only tasks that could start now.")] = False,
    blocked: Annotated[bool, typer.Option("--blocked", help="Only pending tasks waiting on others.")] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """One line per task: [ ] pending, [>] running, [x] done, [!] failed, [-] cancelled."""
    exit_with(list_tasks(root_of(root, ctx), status=status, owner=owner, ready=ready, blocked=blocked, as_json=as_json))


@task_app.command("show")
def show_cmd(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="Task id (4 or #4), name, or a plan's task id (one plan has it).")],
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Everything about one task: fields, dependencies, dependents, history."""
    store = _store(root, ctx)
    tid = store.resolve(ref)
    readable = Readable(store)
    tasks = readable.tasks
    by_id = {t.id: t for t in tasks}
    task = by_id[tid] if tid in by_id else store.read(tid)
    blocks = graph.dependents(tasks).get(tid, [])
    history = [e for e in store.events()[0] if e.get("task") == tid]
    if as_json:
        data = _task_json(task, by_id)
        data["blocks"] = blocks
        data["events"] = history
        print_json(data)
        readable.done()
        return

    def ref_line(i: int) -> str:
        d = by_id.get(i)
        return f"#{i} {shown(d.subject)} [{d.status.value}]" if d else f"#{i} [missing]"

    waiting = graph.open_blockers(task, by_id)
    state = task.status.value
    if task.status == "pending":
        state += f" (blocked by {waiting})" if waiting else " (ready)"
    rows = [("status", state), ("owner", shown(task.owner) or "-")]
    if task.name:
        rows.insert(0, ("name", shown(task.name)))
    rows.append(("blocked by", ", ".join(ref_line(i) for i in task.blockedBy) or "-"))
    rows.append(("blocks", ", ".join(ref_line(i) for i in blocks) or "-"))
    for key in ("kind", "command", "prompt", "assignee", "role", "estimate", "attempts", "lease_expires", "branch",
                "merge_commit", "landed", "worktree", "result", "error", "log"):
        value = getattr(task, key)
        if key == "worktree" and value and "/" in value:  # a plan task's worktree, stored relative to the root
            value = at_root(value, store.root)
        if value not in (None, "", 0) and not (key == "kind" and value == "manual"):
            rows.append(({"merge_commit": "merge"}.get(key, key),
                         _attempts(task) if key == "attempts" else shown(str(value))))
    out(f"#{task.id}: {shown(task.subject)}")
    for key, value in rows:
        out(f"  {key + ':':<12} {value}")
    if task.description:
        out("  description:")
        for line in task.description.splitlines():
            out(f"    {shown(line)}")
    if history:
        out("  history:")
        for e in history[-10:]:
            move = f" {e.get('from') or '-'} → {e.get('to')}" if "to" in e else ""
            out(f"    {_ts(e.get('ts'))} {shown(str(e.get('event')))}{move} by {shown(str(e.get('actor') or '?'))}")
    readable.done()


def _attempts(task: Task) -> str:
    """``5 (1 failed, 3 interrupted)``: a failed attempt used a retry, an interrupted one
    (Ctrl-C, SIGTERM, a lead that died, an expired lease) did not."""
    if not task.failures and not task.interrupted:
        return str(task.attempts)
    return f"{task.attempts} ({task.failures} failed, {task.interrupted} interrupted)"


def _ts(ts: Any) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if isinstance(ts, int | float) else "?"


@task_app.command("create")
def create_cmd(
    ctx: typer.Context,
    subject: Annotated[str, typer.Argument(help="One-line title.")],
    description: Annotated[str, typer.Option("-d", "--description", help="What done means.")] = "",
    blocked_by: Annotated[list[str] | None, typer.Option("--blocked-by", help="A task this one waits on (repeatable).")] = None,
    owner: Annotated[str, typer.Option("--owner", help="Member holding the task.")] = "",
    name: Annotated[str | None, typer.Option("--name", help="Unique slug usable wherever an id is.")] = None,
    estimate: Annotated[float | None, typer.Option("--estimate", help="Expected seconds (critical path).")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Create a task with the next id. Dependencies must exist."""
    exit_with(create_task(root_of(root, ctx, creates=True), subject, description=description, blocked_by=blocked_by, owner=owner,
                      name=name, estimate=estimate, as_json=as_json))


@task_app.command("update")
def update_cmd(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="Task id (4 or #4), name, or a plan's task id (one plan has it).")],
    status: Annotated[str | None, typer.Option("--status", help="pending|in_progress|completed|failed|cancelled")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="New owner ('' clears it).")] = None,
    add_blocked_by: Annotated[list[str] | None, typer.Option("--add-blocked-by", help="Add a dependency (repeatable).")] = None,
    remove_blocked_by: Annotated[list[str] | None, typer.Option("--remove-blocked-by", help="Drop a dependency (repeatable).")] = None,
    subject: Annotated[str | None, typer.Option("--subject", help="New title.")] = None,
    description: Annotated[str | None, typer.Option("-d", "--description", help="New description.")] = None,
    estimate: Annotated[float | None, typer.Option("--estimate", help="Expected seconds.")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Change status, owner, dependencies or text of a task; checked, all or nothing."""
    exit_with(update_task(root_of(root, ctx), ref, status=status, owner=owner, add_blocked_by=add_blocked_by,
                      remove_blocked_by=remove_blocked_by, subject=subject, description=description,
                      estimate=estimate, as_json=as_json))


@task_app.command("retry")
def retry_cmd(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="Task id (4 or #4), name, or a plan's task id (one plan has it).")],
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Run a task again, and every task that needs it: pending again with a fresh retry budget.

    For a plan task the next `team run` does it: with isolation: worktree it first takes
    the task's merge (and its dependents') out of the integration branch and drops
    its kept branch, exactly like `team run PLAN --redo TASK`."""
    store = _store(root, ctx)
    task = store.get(ref)
    tasks = store.all()
    todo = [task.id] + [i for i in graph.downstream(tasks, [task.id]) if i != task.id]
    by_id = {t.id: t for t in tasks}
    landed = [by_id[i] for i in todo if by_id[i].landed]
    if landed:
        from ..core.errors import UserError

        raise UserError(f"#{landed[0].id} was landed into your branch by `team land` (commit "
                        f"{(landed[0].landed or '')[:10]}): it cannot run again; revert the landed commit yourself, "
                        f"or start the plan over with `team run PLAN.yaml --fresh`")
    fields = {"redo": True} if task.plan else {}
    done = store.reopen(todo, actor="cli", reason=f"team task retry {ref}", **fields)
    if as_json:
        print_json([t.to_json() for t in done])
        return
    others = ", ".join(f"#{t.id}" for t in done[1:])
    out(f"Task #{task.id}: {shown(task.subject)} [pending, will run again]" + (f"; so will what needs it: {others}"
                                                                          if others else ""))
    if task.plan:
        how = (" Its merge and kept branch are dropped first." if task.isolation == "worktree" else "")
        out(f"The next `team run` of plan {task.plan} runs them.{how}")


@task_app.command("blocked")
def blocked_cmd(
    ctx: typer.Context,
    ref: Annotated[str | None, typer.Argument(help="Only this task (id, name, or a plan's task id).")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Why each blocked task waits: every chain down to its root blockers."""
    store = _store(root, ctx)
    tid = store.resolve(ref) if ref is not None else None
    readable = Readable(store)
    _blocked(readable.tasks, tid, as_json, unreadable=bool(readable.bad), now=store.clock())
    readable.done()


def _blocked(tasks: list[Task], tid: int | None, as_json: bool, *, unreadable: bool, now: float) -> None:
    chains = graph.blocked_chains(tasks, tid, now=now)
    if as_json:
        print_json([_chain_json(c) for c in chains])
        return
    if chains:
        out(render.render_chains(chains, tasks))
    elif tid is not None:
        task = next((t for t in tasks if t.id == tid), None)
        if task is None:
            return  # its file is the unreadable one (named on stderr)
        out(render.not_blocked(task))
    elif not tasks and not unreadable:
        out(EMPTY)
    else:
        out("No blocked tasks: every pending task is ready.")


def _chain_json(c: graph.BlockedChain) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(c)


class Format(str, Enum):
    tree = "tree"
    mermaid = "mermaid"
    dot = "dot"


@task_app.command("graph")
def graph_cmd(
    ctx: typer.Context,
    fmt: Annotated[Format, typer.Option("--format", help="tree, mermaid or dot.")] = Format.tree,
    root: RootOpt = None,
) -> None:
    """Draw the task graph (an edge goes from a blocker to what it blocks)."""
    readable = Readable(_store(root, ctx))
    tasks = readable.tasks
    if not tasks and fmt == Format.tree:
        if not readable.bad:
            out(EMPTY)
        readable.done()
        return
    draw = {Format.tree: render.render_tree, Format.mermaid: render.render_mermaid, Format.dot: render.render_dot}[fmt]
    out(draw(tasks))
    readable.done()


@task_app.command("critical")
def critical_cmd(ctx: typer.Context, as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Critical path of the unfinished work, and the waves that could run in parallel."""
    readable = Readable(_store(root, ctx))
    _critical(readable.tasks, as_json, unreadable=bool(readable.bad))
    readable.done()


def _critical(tasks: list[Task], as_json: bool, *, unreadable: bool) -> None:
    cp = graph.critical_path(tasks)
    wv = graph.waves(tasks)
    if as_json:
        print_json({"path": cp.ids, "total": cp.total, "by": cp.by, "waves": wv.waves, "stuck": wv.stuck})
        return
    if not tasks:
        if not unreadable:
            out(EMPTY)
        return
    if not cp.ids and not wv.stuck:
        out("Nothing left to do: every task is completed or cancelled.")
        return
    by_id = {t.id: t for t in tasks}
    if cp.ids:
        out("Critical path: " + " → ".join(f"#{i} {by_id[i].subject}" for i in cp.ids))
        if cp.by == "estimate":
            out(f"Length: {cp.total} s estimated over {plural(len(cp.ids), 'task')} (tasks without an estimate count 1 s)")
        else:
            out(f"Length: {plural(int(cp.total), 'task')} (no estimates given: counted by tasks)")
        out("Waves (tasks in one wave could run in parallel):")
        for n, layer in enumerate(wv.waves, 1):
            shown = ", ".join(f"#{i}" for i in layer[:20])
            more = f" … (+{len(layer) - 20} more)" if len(layer) > 20 else ""
            out(f"  {n}: {shown}{more}")
    if wv.stuck:
        out(f"Stuck (wait on a cancelled or missing task, or on a cycle): {', '.join(f'#{i}' for i in wv.stuck)}")


def register(app: typer.Typer) -> None:
    """Add ``team task ...`` to ``app``."""
    app.add_typer(task_app, name="task")
