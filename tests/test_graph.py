"""Graph queries and their renderings on hand-built task lists: whole outputs asserted."""

from __future__ import annotations

from dataclasses import asdict

from orchestrator.core.models import Task
from orchestrator.tasks import graph, render


def T(id, subject=None, status="pending", deps=(), owner="", estimate=None):
    return Task(id=id, subject=subject or f"t{id}", status=status, blockedBy=list(deps), owner=owner, estimate=estimate)


# 1 setup (running by alice) ── 2 build ──┬── 4 test ── 5 deploy
# 3 lint (failed)  ───────────────────────┘
# 6 docs (completed) ── 7 publish (ready)     8 cleanup → 99 (missing)
# 9 old (cancelled) ── 10 archive
DEMO = [
    T(1, "setup", "in_progress", owner="alice"),
    T(2, "build", deps=[1]),
    T(3, "lint", "failed"),
    T(4, "test", deps=[2, 3]),
    T(5, "deploy", deps=[4]),
    T(6, "docs", "completed"),
    T(7, "publish", deps=[6]),
    T(8, "cleanup", deps=[99]),
    T(9, "old", "cancelled"),
    T(10, "archive", deps=[9]),
]


def test_ready_is_pending_with_every_blocker_completed():
    assert [t.id for t in graph.ready(DEMO)] == [7]


def test_blocked_chains_show_every_path_and_what_each_root_does():
    chains = graph.blocked_chains(DEMO)
    assert [(c.id, c.paths) for c in chains] == [
        (2, [[2, 1]]),
        (4, [[4, 2, 1], [4, 3]]),
        (5, [[5, 4, 2, 1], [5, 4, 3]]),
        (8, [[8, 99]]),
        (10, [[10, 9]]),
    ]
    assert render.render_chains(chains, DEMO) == "\n".join(
        [
            "#2 build waits on:",
            "  #2 → #1   #1 setup: running by alice",
            "#4 test waits on:",
            "  #4 → #2 → #1   #1 setup: running by alice",
            "  #4 → #3   #3 lint: failed → blocked until #3 is retried",
            "#5 deploy waits on:",
            "  #5 → #4 → #2 → #1   #1 setup: running by alice",
            "  #5 → #4 → #3   #3 lint: failed → blocked until #3 is retried",
            "#8 cleanup waits on:",
            "  #8 → #99   #99: missing → #99 does not exist (see `team doctor`)",
            "#10 archive waits on:",
            "  #10 → #9   #9 old: cancelled → blocked until #9 is reopened or the dependency removed",
        ]
    )


def test_blocked_chain_for_one_ref_as_data():
    (chain,) = graph.blocked_chains(DEMO, 4)
    assert asdict(chain) == {
        "id": 4,
        "subject": "test",
        "paths": [[4, 2, 1], [4, 3]],
        "elided": [0, 0],
        "roots": [
            {"id": 1, "subject": "setup", "status": "in_progress", "owner": "alice", "state": "running by alice"},
            {"id": 3, "subject": "lint", "status": "failed", "owner": "", "state": "failed → blocked until #3 is retried"},
        ],
        "truncated": False,
    }
    assert graph.blocked_chains(DEMO, 7) == []  # ready: not blocked
    assert graph.blocked_chains(DEMO, 1) == []  # running


def test_ready_root_and_long_chain_is_elided_in_the_middle():
    tasks = [T(1, "first")] + [T(i, deps=[i - 1]) for i in range(2, 31)]
    (chain,) = graph.blocked_chains(tasks, 30)
    assert chain.paths == [[30, 29, 28, 27, 26, 25, 5, 4, 3, 2, 1]]
    assert chain.elided == [19]
    assert render.render_chains([chain], tasks) == (
        "#30 t30 waits on:\n"
        "  #30 → #29 → #28 → #27 → #26 → #25 → … 19 more … → #5 → #4 → #3 → #2 → #1"
        "   #1 first: ready but not started"
    )


def test_wide_diamonds_cap_the_paths():
    # Three layers of 3 tasks fully connected: 27 paths from the top, capped at 5.
    tasks = [T(i) for i in (1, 2, 3)]
    tasks += [T(i, deps=[1, 2, 3]) for i in (4, 5, 6)]
    tasks += [T(i, deps=[4, 5, 6]) for i in (7, 8, 9)]
    tasks += [T(10, deps=[7, 8, 9])]
    (chain,) = graph.blocked_chains(tasks, 10, max_paths=5)
    assert chain.paths == [[10, 7, 4, 1], [10, 7, 4, 2], [10, 7, 4, 3], [10, 7, 5, 1], [10, 7, 5, 2]]
    assert chain.truncated
    assert [r.id for r in chain.roots] == [1, 2, 3]


def test_hand_made_cycle_is_reported_not_looped_on():
    tasks = [T(1, deps=[2]), T(2, deps=[1]), T(3, deps=[2])]
    chains = graph.blocked_chains(tasks)
    assert [(c.id, c.paths, c.roots[0].state) for c in chains] == [
        (1, [[1]], graph.CYCLE_STATE),
        (2, [[2]], graph.CYCLE_STATE),
        (3, [[3]], graph.CYCLE_STATE),
    ]
    assert graph.find_cycles(tasks) == [[1, 2, 1]]
    assert graph.find_cycles([T(5, deps=[5])]) == [[5, 5]]
    assert graph.waves(tasks) == graph.Waves(waves=[], stuck=[1, 2, 3])


def test_waves_and_stuck_work():
    w = graph.waves(DEMO)
    # 1 running and 3 failed (awaiting retry) are unfinished work with no open deps.
    assert w == graph.Waves(waves=[[1, 3, 7], [2], [4], [5]], stuck=[8, 10])


def test_critical_path_by_count_and_by_estimate():
    cp = graph.critical_path(DEMO)
    assert (cp.ids, cp.total, cp.by) == ([1, 2, 4, 5], 4, "count")
    tasks = [
        T(1, estimate=10),
        T(2, deps=[1], estimate=5),
        T(3, estimate=100),
        T(4, deps=[2, 3], estimate=1),
        T(5, "done", "completed", estimate=1000),
    ]
    cp = graph.critical_path(tasks)
    assert (cp.ids, cp.total, cp.by) == ([3, 4], 101, "estimate")
    # Without estimate a task weighs 1.
    tasks[2] = T(3)
    cp = graph.critical_path(tasks)
    assert (cp.ids, cp.total, cp.by) == ([1, 2, 4], 16, "estimate")
    assert graph.critical_path([T(1, status="completed")]) == graph.CriticalPath([], 0, "count")


def test_list_line_keeps_the_seed_shape():
    by_id = graph.index(DEMO)
    assert [render.list_line(t, by_id) for t in DEMO] == [
        "[>] #1: setup (alice)",
        "[ ] #2: build (blocked by: [1])",
        "[!] #3: lint",
        "[ ] #4: test (blocked by: [2, 3])",
        "[ ] #5: deploy (blocked by: [4])",
        "[x] #6: docs",
        "[ ] #7: publish",
        "[ ] #8: cleanup (blocked by: [99])",
        "[-] #9: old",
        "[ ] #10: archive (blocked by: [9])",
    ]


SMALL = [T(1, "setup", "completed"), T(2, "a", "in_progress", [1], owner="bob"), T(3, 'say "hi"', deps=[1]), T(4, "join", deps=[2, 3])]


def test_render_tree():
    assert render.render_tree(SMALL) == "\n".join(
        [
            "[x] #1 setup",
            "├── [>] #2 a (bob)",
            "│   └── [ ] #4 join",
            '└── [ ] #3 say "hi"',
            "    └── [ ] #4 join  (↑ above)",
        ]
    )


def test_render_mermaid():
    assert render.render_mermaid(SMALL + [T(5, deps=[77])]).splitlines()[:12] == [
        "flowchart TD",
        '    t1["#1 setup"]:::completed',
        '    t2["#2 a (bob)"]:::in_progress',
        "    t3[\"#3 say 'hi'\"]:::pending",
        '    t4["#4 join"]:::pending',
        '    t5["#5 t5"]:::pending',
        '    t77["#77 (missing)"]:::missing',
        "    t1 --> t2",
        "    t1 --> t3",
        "    t2 --> t4",
        "    t3 --> t4",
        "    t77 --> t5",
    ]


def test_render_dot():
    assert render.render_dot(SMALL) == "\n".join(
        [
            "digraph tasks {",
            "    rankdir=LR;",
            '    node [shape=box, style="rounded,filled"];',
            '    t1 [label="#1 setup\\ncompleted", fillcolor=palegreen];',
            '    t2 [label="#2 a (bob)\\nin_progress", fillcolor=lightblue];',
            "    t3 [label=\"#3 say 'hi'\\npending\", fillcolor=white];",
            '    t4 [label="#4 join\\npending", fillcolor=white];',
            "    t1 -> t2;",
            "    t1 -> t3;",
            "    t2 -> t4;",
            "    t3 -> t4;",
            "}",
        ]
    )


def test_queries_on_a_deep_chain_stay_linear():
    # 5,000 tasks in one chain: quadratic work here would take minutes.
    tasks = [T(1, status="in_progress", owner="x")] + [T(i, deps=[i - 1]) for i in range(2, 5001)]
    chains = graph.blocked_chains(tasks)
    assert len(chains) == 4999 and chains[-1].elided == [5000 - 11]
    assert graph.critical_path(tasks).total == 5000
    assert len(graph.waves(tasks).waves) == 5000
    assert len(render.render_tree(tasks).splitlines()) == 5000
