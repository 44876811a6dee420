"""Dependency analysis of a plan (``team run --dry-run``): cycles, order, waves, critical path.

Pure functions over ``{task id: [ids it needs]}`` (or a ``Plan``):

* ``find_cycle``: one cycle ``a → b → a`` following ``needs``, for the
  loader's error message (iterative DFS, no recursion limit);
* ``topo_order``: Kahn's order, stable in declaration order;
* ``analyse``: topological waves (ASAP levels), the critical path weighted
  by ``estimate`` (1 when absent), total work, the widest wave (max useful
  parallelism) and each task's remaining path-to-end.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Plan


def find_cycle(needs: dict[str, list[str]]) -> list[str] | None:
    """A cycle ``[a, b, ..., a]`` following ``needs`` edges, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    for start in needs:
        if start in state:
            continue
        state[start] = 1
        path = [start]
        stack = [iter(needs.get(start, ()))]  # the dependencies of path[i] still to follow
        while stack:
            for nxt in stack[-1]:
                seen = state.get(nxt)
                if seen == 1:
                    return path[path.index(nxt):] + [nxt]
                if seen is None:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append(iter(needs.get(nxt, ())))
                    break
            else:
                state[path.pop()] = 2
                stack.pop()
    return None


@dataclass
class Analysis:
    waves: list[list[str]]
    critical_path: list[str]
    critical_length: float
    total_work: float
    max_parallelism: int
    remaining: dict[str, float]


def analyse(plan: Plan) -> Analysis:
    """Waves (ASAP levels), critical path by estimate, widest wave, path-to-end per task.

    One pass each way over Kahn's order, with plain loops (a 10,000-task plan is analysed on
    every ``team run`` start): ties go to the first in ``max``'s order, as they always did."""
    weight = {t.id: t.estimate or 1.0 for t in plan.tasks}
    needs = {t.id: t.needs for t in plan.tasks}
    order = _kahn(needs)[0]
    level: dict[str, int] = {}
    for tid in order:
        top = -1
        for d in needs[tid]:
            if level[d] > top:
                top = level[d]
        level[tid] = top + 1
    waves: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for t in plan.tasks:
        waves[level[t.id]].append(t.id)
    dependents: dict[str, list[str]] = {tid: [] for tid in needs}
    for tid, deps in needs.items():
        for d in deps:
            dependents[d].append(tid)
    remaining: dict[str, float] = {}
    nxt: dict[str, str | None] = {}
    for tid in reversed(order):
        best = None
        most = 0.0
        for d in dependents[tid]:
            if best is None or remaining[d] > most:
                best, most = d, remaining[d]
        remaining[tid] = weight[tid] + (most if best else 0.0)
        nxt[tid] = best
    start = None
    for tid in reversed(order):
        if start is None or remaining[tid] > remaining[start]:
            start = tid
    path = []
    while start is not None:
        path.append(start)
        start = nxt[start]
    return Analysis(
        waves=waves,
        critical_path=path,
        critical_length=remaining[path[0]] if path else 0.0,
        total_work=sum(weight.values()),
        max_parallelism=max((len(w) for w in waves), default=0),
        remaining=remaining,
    )


def topo_order(needs: dict[str, list[str]]) -> list[str]:
    """Kahn's order, stable in declaration order; the graph must be acyclic."""
    return _kahn(needs)[0]


def _kahn(needs: dict[str, list[str]]) -> tuple[list[str], dict[str, list[str]]]:
    """(Kahn's order, each task's dependents): a dependency named twice counts once."""
    indeg: dict[str, int] = {}
    dependents: dict[str, list[str]] = {tid: [] for tid in needs}
    for tid, deps in needs.items():
        distinct = set(deps) if len(deps) > 1 else deps
        indeg[tid] = len(distinct)
        for d in distinct:
            dependents[d].append(tid)
    ready = [tid for tid, n in indeg.items() if n == 0]
    out = []
    while ready:
        nxt = []
        for tid in ready:
            out.append(tid)
            for dep in dependents[tid]:
                indeg[dep] -= 1
                if indeg[dep] == 0:
                    nxt.append(dep)
        ready = nxt
    return out, dependents
