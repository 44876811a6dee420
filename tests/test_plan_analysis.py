"""plan/analysis.py against plain reference versions of itself (the straightforward code it replaced):
the same waves, critical path, ties, remaining path and cycles on random graphs."""

from __future__ import annotations

import random

from orchestrator.plan.analysis import analyse, find_cycle, topo_order
from orchestrator.plan.model import Plan


def ref_find_cycle(needs):
    state = {}
    for start in needs:
        if start in state:
            continue
        stack, path = [(start, 0)], [start]
        state[start] = 1
        while stack:
            node, k = stack[-1]
            deps = needs.get(node, [])
            if k < len(deps):
                stack[-1] = (node, k + 1)
                nxt = deps[k]
                if state.get(nxt) == 1:
                    return path[path.index(nxt):] + [nxt]
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                state[node] = 2
                stack.pop()
                path.pop()
    return None


def ref_topo(needs):
    indeg = {tid: len(set(deps)) for tid, deps in needs.items()}
    dependents = {tid: [] for tid in needs}
    for tid, deps in needs.items():
        for d in set(deps):
            dependents[d].append(tid)
    ready, out = [tid for tid, n in indeg.items() if n == 0], []
    while ready:
        nxt = []
        for tid in ready:
            out.append(tid)
            for dep in dependents[tid]:
                indeg[dep] -= 1
                if indeg[dep] == 0:
                    nxt.append(dep)
        ready = nxt
    return out


def ref_analyse(plan):
    weight = {t.id: t.estimate or 1.0 for t in plan.tasks}
    needs = {t.id: t.needs for t in plan.tasks}
    order = ref_topo(needs)
    level = {}
    for tid in order:
        level[tid] = 1 + max((level[d] for d in needs[tid]), default=-1)
    waves = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for t in plan.tasks:
        waves[level[t.id]].append(t.id)
    dependents = {tid: [] for tid in needs}
    for tid, deps in needs.items():
        for d in deps:
            dependents[d].append(tid)
    remaining, nxt = {}, {}
    for tid in reversed(order):
        best = max(dependents[tid], key=lambda d: remaining[d], default=None)
        remaining[tid] = weight[tid] + (remaining[best] if best else 0.0)
        nxt[tid] = best
    start = max(reversed(order), key=lambda t: remaining[t]) if order else None
    path = []
    while start is not None:
        path.append(start)
        start = nxt[start]
    return (waves, path, remaining[path[0]] if path else 0.0, sum(weight.values()),
            max((len(w) for w in waves), default=0), remaining)


def test_analyse_matches_the_reference_on_random_plans():
    rnd = random.Random(5)
    for _ in range(400):
        n = rnd.randint(1, 60)
        tasks = []
        for i in range(n):
            t = {"id": f"t{i}", "run": "x"}
            if i and rnd.random() < 0.8:
                t["needs"] = [f"t{j}" for j in rnd.sample(range(i), min(i, rnd.randint(0, 4)))]
            if rnd.random() < 0.5:
                t["estimate"] = rnd.choice([1, 2, 3, 0.5, 10])  # ties, often
            tasks.append(t)
        plan = Plan.model_validate({"name": "p", "tasks": tasks})
        a = analyse(plan)
        got = (a.waves, a.critical_path, a.critical_length, a.total_work, a.max_parallelism, a.remaining)
        assert repr(got) == repr(ref_analyse(plan))
        needs = {t.id: t.needs for t in plan.tasks}
        assert topo_order(needs) == ref_topo(needs)


def test_find_cycle_matches_the_reference_on_random_graphs():
    rnd = random.Random(7)
    found = 0
    for _ in range(3000):
        n = rnd.randint(1, 30)
        g = {f"t{i}": [f"t{j}" for j in rnd.sample(range(n + 2), rnd.randint(0, 3))] for i in range(n)}
        assert find_cycle(g) == ref_find_cycle(g), g
        found += find_cycle(g) is not None
    assert 100 < found < 2900  # both kinds, many times
