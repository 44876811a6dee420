"""Pure queries over a list of ``models.Task``: no I/O, no printing.

State is derived from two stored facts per task: its ``status`` and its
declared ``blockedBy`` ids. Definitions used throughout:

* *open blockers* of a task: ids in ``blockedBy`` whose task is not
  ``completed`` (a missing id counts as open: it can never complete).
* *ready*: ``pending`` with no open blockers (whether or not an owner is
  already assigned: ``claim`` lets only that owner take it). *Blocked*:
  ``pending`` with some. One meaning everywhere: ``is_ready``, ``ready``,
  ``TaskFilter``.
* *unfinished work*: every task that is not ``completed`` or ``cancelled``
  (pending, in_progress, failed-awaiting-retry).
* A *root blocker* of a blocked task is where a chain of open blockers ends:
  a task that is running, ready, failed, cancelled or missing. Each root says
  what it is doing (``Root.state``), e.g. ``running by alice`` or
  ``failed → blocked until #3 is retried``.

Queries (all O(tasks + edges) except path enumeration, which is capped):
``ready``, ``TaskFilter.select``, ``blocked_chains``, ``critical_path``,
``waves``, ``find_cycles``.
Turning their results into text lives in ``render.py``; the CLI prints it.

Cycles can only exist through hand edits (the store refuses them); queries
that need a DAG ignore the tasks on a cycle and report them in ``stuck``.
networkx is imported lazily and only for cycle finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

from ..core.states import Status

if TYPE_CHECKING:
    from ..core.models import Task


class TaskLike(Protocol):
    """What the listing queries read of a task: a ``Task``, or an ``index.Row`` read from the
    task index without pydantic (``team task list``)."""

    @property
    def id(self) -> int: ...
    @property
    def status(self) -> Status: ...
    @property
    def blockedBy(self) -> list[int]: ...  # noqa: N802 (the seed's key)
    @property
    def owner(self) -> str: ...
    @property
    def subject(self) -> str: ...


T = TypeVar("T", bound=TaskLike)

MAX_PATHS = 20
"""Most chains reported per blocked task (a wide diamond has exponentially many)."""
PATH_HEAD = 6
PATH_TAIL = 5
"""A chain longer than HEAD + TAIL ids keeps both ends; ``elided`` counts the middle."""
CYCLE_STATE = "on or behind a dependency cycle (see `team doctor`)"


# ---------------------------------------------------------------------- basics
def index(tasks: Iterable[T]) -> dict[int, T]:
    return {t.id: t for t in tasks}


def open_blockers(task: TaskLike, by_id: dict[int, T]) -> list[int]:
    """Ids in ``task.blockedBy`` that are not completed (missing ones included)."""
    out = []
    for dep in task.blockedBy:
        d = by_id.get(dep)
        if d is None or d.status != Status.completed:
            out.append(dep)
    return out


def is_ready(task: TaskLike, by_id: dict[int, T]) -> bool:
    return task.status == Status.pending and not open_blockers(task, by_id)


def ready(tasks: Sequence[Task]) -> list[Task]:
    """Pending tasks whose every dependency is completed, by id."""
    by_id = index(tasks)
    return [t for t in sorted(tasks, key=lambda t: t.id) if is_ready(t, by_id)]


def is_blocked(task: TaskLike, by_id: dict[int, T]) -> bool:
    """Pending and waiting on at least one blocker that is not completed."""
    return task.status == Status.pending and bool(open_blockers(task, by_id))


@dataclass(frozen=True)
class TaskFilter:
    """Which tasks a listing shows (``team task list``, the ``task_list`` tool): every given
    condition must hold; ``ready`` and ``blocked`` together mean either."""

    status: Status | None = None
    owner: str | None = None
    ready: bool = False
    blocked: bool = False

    def select(self, tasks: Sequence[T]) -> list[T]:
        by_id = index(tasks)
        out = []
        for t in tasks:
            if self.status is not None and t.status != self.status:
                continue
            if self.owner is not None and t.owner != self.owner:
                continue
            if (self.ready or self.blocked) and not (
                    (self.ready and is_ready(t, by_id)) or (self.blocked and is_blocked(t, by_id))):
                continue
            out.append(t)
        return out


def dependents(tasks: Iterable[Task]) -> dict[int, list[int]]:
    """id -> ids of the tasks that declare it in ``blockedBy`` (sorted)."""
    out: dict[int, list[int]] = {}
    for t in sorted(tasks, key=lambda t: t.id):
        for dep in t.blockedBy:
            out.setdefault(dep, []).append(t.id)
    return out


def downstream(tasks: Iterable[Task], roots: Iterable[int]) -> list[int]:
    """``roots`` and every task that needs one of them, transitively (sorted ids)."""
    return reach(dependents(tasks), roots)


def reach(kids: dict[int, list[int]], roots: Iterable[int]) -> list[int]:
    """``roots`` and every id ``kids`` (id -> its dependents) leads to from them, transitively (sorted)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        tid = stack.pop()
        if tid not in seen:
            seen.add(tid)
            stack.extend(kids.get(tid, []))
    return sorted(seen)


# ---------------------------------------------------------------------- blocked chains
@dataclass(frozen=True)
class Root:
    """Where a chain of open blockers ends, and what that task is doing."""

    id: int
    subject: str | None  # None when the task does not exist
    status: str  # a Status value, or "missing"
    owner: str
    state: str  # human sentence: "running by alice", "ready but not started", ...


@dataclass
class BlockedChain:
    """Why one task waits: every path (task first) down to a root blocker."""

    id: int
    subject: str
    paths: list[list[int]] = field(default_factory=list)
    elided: list[int] = field(default_factory=list)  # per path: ids left out after the first PATH_HEAD
    roots: list[Root] = field(default_factory=list)
    truncated: bool = False  # more than MAX_PATHS paths exist


def describe_root(tid: int, by_id: dict[int, Task], now: float | None = None) -> Root:
    """What root blocker ``tid`` is doing; with ``now``, a running task whose lease ran out says so
    (its owner stopped renewing it: gone, or stuck)."""
    t = by_id.get(tid)
    if t is None:
        return Root(tid, None, "missing", "", f"missing → #{tid} does not exist (see `team doctor`)")
    st = t.status
    if st == Status.in_progress:
        state = f"running by {t.owner}" if t.owner else "running (no owner recorded)"
        if now is not None and t.lease_expires is not None and t.lease_expires < now:
            state += (f", but its lease expired {now - t.lease_expires:.0f}s ago (the owner is gone or stuck; "
                      f"`team doctor --fix` gives it back)")
    elif st == Status.pending:
        state = "ready but not started" + (f" (assigned to {t.owner})" if t.owner else "")
    elif st == Status.failed:
        state = f"failed → blocked until #{tid} is retried"
    elif st == Status.cancelled:
        state = f"cancelled → blocked until #{tid} is reopened or the dependency removed"
    else:  # completed cannot be a root; kept for completeness
        state = st.value
    return Root(tid, t.subject, st.value, t.owner, state)


# A suffix is a linked path from a node down to its root, shared between all
# the tasks whose chains run through that node: (node, next, length, tail)
# where ``tail`` holds the last PATH_TAIL ids. Building every suffix costs
# O(edges * max_paths); expanding one costs O(PATH_HEAD + PATH_TAIL), so even
# a 10,000-long chain is answered in linear time.
_Suffix: TypeAlias = "tuple[int, _Suffix | None, int, tuple[int, ...]]"


def _suffixes(by_id: dict[int, Task], max_paths: int) -> tuple[dict[int, list[_Suffix]], set[int]]:
    """Suffixes of every blocked task (capped at ``max_paths + 1``) and the
    blocked ids on or behind a hand-made cycle (they are their own roots)."""
    blocked: dict[int, list[int]] = {}
    for tid, t in by_id.items():
        if t.status == Status.pending:
            ob = open_blockers(t, by_id)
            if ob:
                blocked[tid] = ob
    rdeps: dict[int, list[int]] = {}
    remaining = {}
    for tid, bs in blocked.items():
        remaining[tid] = len(bs)
        for b in bs:
            rdeps.setdefault(b, []).append(tid)
    suf: dict[int, list[_Suffix]] = {}
    queue = []
    for b in rdeps:
        if b not in blocked:
            suf[b] = [(b, None, 1, (b,))]
            queue.append(b)
    while queue:
        node = queue.pop()
        for n in rdeps.get(node, ()):
            remaining[n] -= 1
            if remaining[n]:
                continue
            mine: list[_Suffix] = []
            for b in blocked[n]:
                for s in suf[b]:
                    if len(mine) > max_paths:
                        break
                    tail = ((n,) + s[3]) if s[2] < PATH_TAIL else s[3]
                    mine.append((n, s, s[2] + 1, tail))
            suf[n] = mine
            queue.append(n)
    cyclic = {tid for tid, left in remaining.items() if left}
    for tid in cyclic:
        suf[tid] = [(tid, None, 1, (tid,))]
    return suf, cyclic


def _expand(s: _Suffix) -> tuple[list[int], int]:
    """A suffix as ids (head + tail when long) and the count elided between."""
    length = s[2]
    node: _Suffix | None = s
    if length <= PATH_HEAD + PATH_TAIL:
        ids = []
        while node is not None:
            ids.append(node[0])
            node = node[1]
        return ids, 0
    head: list[int] = []
    while node is not None and len(head) < PATH_HEAD:
        head.append(node[0])
        node = node[1]
    return head + list(node[3] if node is not None else ()), length - PATH_HEAD - PATH_TAIL


def blocked_chains(tasks: Sequence[Task], ref: int | None = None, max_paths: int = MAX_PATHS,
                   now: float | None = None) -> list[BlockedChain]:
    """Chains for every blocked task (or only for task ``ref``), by id.

    A task that is not blocked yields no chain (``ref`` given: an empty list).
    """
    by_id = index(tasks)
    suf, cyclic = _suffixes(by_id, max_paths)
    targets = [ref] if ref is not None else sorted(by_id)
    out = []
    for tid in targets:
        t = by_id.get(tid)
        if t is None or t.status != Status.pending or tid not in suf:
            continue
        chain = BlockedChain(tid, t.subject)
        if tid in cyclic:
            chain.paths, chain.elided = [[tid]], [0]
            chain.roots = [Root(tid, t.subject, t.status.value, t.owner, CYCLE_STATE)]
            out.append(chain)
            continue
        roots: dict[int, Root] = {}
        for s in suf[tid][:max_paths]:
            ids, skipped = _expand(s)
            chain.paths.append(ids)
            chain.elided.append(skipped)
            end = ids[-1]
            if end not in roots:
                roots[end] = (
                    Root(end, by_id[end].subject, by_id[end].status.value, by_id[end].owner, CYCLE_STATE)
                    if end in cyclic
                    else describe_root(end, by_id, now)
                )
        chain.truncated = len(suf[tid]) > max_paths
        chain.roots = sorted(roots.values(), key=lambda r: r.id)
        out.append(chain)
    return out


# ---------------------------------------------------------------------- DAG of unfinished work
UNFINISHED = frozenset({Status.pending, Status.in_progress, Status.failed})


@dataclass
class Waves:
    """Unfinished work in topological layers: each wave could run in parallel."""

    waves: list[list[int]]
    stuck: list[int]  # waits on a cancelled/missing task, or on a cycle: never runs as is


def _unfinished_dag(tasks: Sequence[Task]) -> tuple[dict[int, Task], dict[int, list[int]], list[int]]:
    """Unfinished tasks, their unfinished deps, and the ids that can never run."""
    by_id = index(tasks)
    work = {t.id: t for t in tasks if t.status in UNFINISHED}
    deps: dict[int, list[int]] = {}
    dead: set[int] = set()
    for tid, t in work.items():
        ds = []
        for d in t.blockedBy:
            dt = by_id.get(d)
            if dt is None or dt.status == Status.cancelled:
                dead.add(tid)
            elif dt.status != Status.completed:
                ds.append(d)
        deps[tid] = ds
    return work, deps, sorted(dead)


def waves(tasks: Sequence[Task]) -> Waves:
    """Kahn layering of unfinished work. Wave 1 holds what is running or ready now."""
    work, deps, dead = _unfinished_dag(tasks)
    indeg = {tid: len(ds) for tid, ds in deps.items()}
    rdeps: dict[int, list[int]] = {}
    for tid, ds in deps.items():
        for d in ds:
            rdeps.setdefault(d, []).append(tid)
    blocked = set(dead)
    # Propagate "can never run" to everything downstream of a dead task.
    frontier = list(dead)
    while frontier:
        for nxt in rdeps.get(frontier.pop(), ()):
            if nxt not in blocked:
                blocked.add(nxt)
                frontier.append(nxt)
    layer = sorted(tid for tid, n in indeg.items() if n == 0 and tid not in blocked)
    out: list[list[int]] = []
    placed: set[int] = set()
    while layer:
        out.append(layer)
        placed.update(layer)
        nxt_layer = []
        for tid in layer:
            for nxt in rdeps.get(tid, ()):
                indeg[nxt] -= 1
                if indeg[nxt] == 0 and nxt not in blocked:
                    nxt_layer.append(nxt)
        layer = sorted(nxt_layer)
    stuck = sorted(tid for tid in work if tid not in placed)
    return Waves(out, stuck)


@dataclass
class CriticalPath:
    """The longest chain of unfinished work."""

    ids: list[int]
    total: float
    by: str  # "estimate" (some task has one) or "count"


def critical_path(tasks: Sequence[Task]) -> CriticalPath:
    """Longest path through unfinished work, weighting each task by its
    ``estimate`` where given and by 1 otherwise (``by="count"`` when no
    unfinished task has an estimate). Ties break toward lower ids. Stuck
    tasks (see ``waves``) are left out: they cannot run as the graph stands.
    """
    work, deps, _ = _unfinished_dag(tasks)
    w = waves(tasks)
    by = "estimate" if any(t.estimate is not None for t in work.values()) else "count"

    def weight(t: Task) -> float:
        return float(t.estimate) if t.estimate is not None else 1.0

    best: dict[int, float] = {}
    prev: dict[int, int | None] = {}
    for layer in w.waves:
        for tid in layer:
            cands = [(best[d], -d) for d in deps[tid] if d in best]
            if cands:
                score, neg = max(cands)
                best[tid], prev[tid] = score + weight(work[tid]), -neg
            else:
                best[tid], prev[tid] = weight(work[tid]), None
    if not best:
        return CriticalPath([], 0, by)
    end = max(best, key=lambda tid: (best[tid], -tid))
    ids = [end]
    while prev[ids[-1]] is not None:
        ids.append(prev[ids[-1]])  # type: ignore[arg-type]
    ids.reverse()
    total = best[end]
    return CriticalPath(ids, int(total) if total == int(total) else total, by)


def find_cycles(tasks: Sequence[Task]) -> list[list[int]]:
    """One cycle per strongly connected tangle, each closed (``[4, 7, 4]``)."""
    import networkx as nx

    g = nx.DiGraph()
    ids = {t.id for t in tasks}
    for t in tasks:
        g.add_node(t.id)
        for d in t.blockedBy:
            if d in ids:
                g.add_edge(t.id, d)
    out = []
    for comp in nx.strongly_connected_components(g):
        if len(comp) == 1:
            (only,) = comp
            if g.has_edge(only, only):
                out.append([only, only])
            continue
        start = min(comp)
        edges = nx.find_cycle(g.subgraph(comp), source=start)
        cyc = [u for u, _ in edges]
        k = cyc.index(min(cyc))
        cyc = cyc[k:] + cyc[:k]
        out.append(cyc + [cyc[0]])
    return sorted(out)
