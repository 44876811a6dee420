"""``team task ...`` through the real entry point: outputs and exit codes."""

from __future__ import annotations

import json

from conftest import run_team

from orchestrator.tasks.store import TaskStore


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def bad(result, message: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [message]


def build(team) -> None:
    """#1 setup (done) → #2 build (alice) → #4 test ← #3 lint (failed); #5 deploy ← #4; #6 docs (cancelled)."""
    outputs = [
        ok(team("task", "create", "Set up env", "--name", "setup")),
        ok(team("task", "create", "Build", "--blocked-by", "setup", "--owner", "alice")),
        ok(team("task", "create", "Lint", "-d", "ruff everything")),
        ok(team("task", "create", "Test", "--blocked-by", "2", "--blocked-by", "#3", "--estimate", "30")),
        ok(team("task", "create", "Deploy", "--blocked-by", "4")),
        ok(team("task", "create", "Docs")),
    ]
    assert outputs == [
        "Created task #1: Set up env\n",
        "Created task #2: Build (blocked by: [1])\n",
        "Created task #3: Lint\n",
        "Created task #4: Test (blocked by: [2, 3])\n",
        "Created task #5: Deploy (blocked by: [4])\n",
        "Created task #6: Docs\n",
    ]
    ok(team("task", "update", "setup", "--status", "completed"))
    ok(team("task", "update", "2", "--status", "in_progress"))
    ok(team("task", "update", "3", "--status", "failed"))
    assert ok(team("task", "update", "6", "--status", "cancelled")) == "Updated task #6: Docs [cancelled]\n"


def build_fast(team) -> None:
    """The same state as ``build`` through the store API (fewer subprocesses)."""
    store = TaskStore(team.root)
    store.create("Set up env", name="setup")
    store.create("Build", blocked_by=["setup"], owner="alice")
    store.create("Lint", "ruff everything")
    store.create("Test", blocked_by=[2, 3], estimate=30)
    store.create("Deploy", blocked_by=[4])
    store.create("Docs")
    for ref, status in (("setup", "completed"), (2, "in_progress"), (3, "failed"), (6, "cancelled")):
        store.update(ref, status=status)


def test_empty_store_says_how_to_start(team):
    empty = "No tasks yet. Create one with `team task create SUBJECT` or run a plan with `team run PLAN.yaml`.\n"
    assert ok(team("task", "list")) == empty
    assert ok(team("task", "list", "--json")) == "[]\n"
    assert not (team.root / ".tasks").exists()  # reading creates nothing


def test_list_keeps_the_seed_line_shape_and_filters(team):
    build(team)
    assert ok(team("task", "list")) == (
        "[x] #1: Set up env\n"
        "[>] #2: Build (alice)\n"
        "[!] #3: Lint\n"
        "[ ] #4: Test (blocked by: [2, 3])\n"
        "[ ] #5: Deploy (blocked by: [4])\n"
        "[-] #6: Docs\n"
    )
    assert ok(team("task", "list", "--owner", "alice")) == "[>] #2: Build (alice)\n"
    assert ok(team("task", "list", "--blocked")) == "[ ] #4: Test (blocked by: [2, 3])\n[ ] #5: Deploy (blocked by: [4])\n"
    assert ok(team("task", "list", "--ready")) == "No tasks match these filters (6 tasks in total).\n"
    rows = json.loads(ok(team("task", "list", "--json", "--status", "pending")))
    assert [(r["id"], r["ready"], r["waiting_on"], r["blockedBy"]) for r in rows] == [
        (4, False, [2, 3], [2, 3]),
        (5, False, [4], [4]),
    ]
    bad(team("task", "list", "--status", "done"),
        "UserError: invalid status 'done': use one of pending, in_progress, completed, failed, cancelled")


def test_blocked_graph_critical_show(team):
    build_fast(team)
    assert ok(team("task", "blocked")) == (
        "#4 Test waits on:\n"
        "  #4 → #2   #2 Build: running by alice\n"
        "  #4 → #3   #3 Lint: failed → blocked until #3 is retried\n"
        "#5 Deploy waits on:\n"
        "  #5 → #4 → #2   #2 Build: running by alice\n"
        "  #5 → #4 → #3   #3 Lint: failed → blocked until #3 is retried\n"
    )
    assert ok(team("task", "blocked", "setup")) == "#1 Set up env is not blocked: it is completed.\n"
    (chain,) = json.loads(ok(team("task", "blocked", "5", "--json")))
    assert (chain["paths"], [r["state"] for r in chain["roots"]]) == (
        [[5, 4, 2], [5, 4, 3]],
        ["running by alice", "failed → blocked until #3 is retried"],
    )
    assert ok(team("task", "graph")) == (
        "[x] #1 Set up env\n"
        "└── [>] #2 Build (alice)\n"
        "    └── [ ] #4 Test\n"
        "        └── [ ] #5 Deploy\n"
        "[!] #3 Lint\n"
        "└── [ ] #4 Test  (↑ above)\n"
        "[-] #6 Docs\n"
    )
    assert "    t4 --> t5\n" in ok(team("task", "graph", "--format", "mermaid"))
    assert ok(team("task", "graph", "--format", "dot")).startswith("digraph tasks {\n")
    assert team("task", "graph", "--format", "png").returncode == 2
    assert ok(team("task", "critical")) == (
        "Critical path: #2 Build → #4 Test → #5 Deploy\n"
        "Length: 32 s estimated over 3 tasks (tasks without an estimate count 1 s)\n"
        "Waves (tasks in one wave could run in parallel):\n"
        "  1: #2, #3\n"
        "  2: #4\n"
        "  3: #5\n"
    )
    assert json.loads(ok(team("task", "critical", "--json"))) == {
        "path": [2, 4, 5], "total": 32, "by": "estimate", "waves": [[2, 3], [4], [5]], "stuck": [],
    }
    shown = ok(team("task", "show", "4"))
    assert shown.splitlines()[:5] == [
        "#4: Test",
        "  status:      pending (blocked by [2, 3])",
        "  owner:       -",
        "  blocked by:  #2 Build [in_progress], #3 Lint [failed]",
        "  blocks:      #5 Deploy [pending]",
    ]
    data = json.loads(ok(team("task", "show", "setup", "--json")))
    assert (data["id"], data["name"], data["blocks"], [e["to"] for e in data["events"]]) == (
        1, "setup", [2], ["pending", "completed"],
    )


def test_update_edits_dependencies_and_refuses_bad_input_writing_nothing(team):
    build_fast(team)
    before = {p.name: p.read_bytes() for p in (team.root / ".tasks").glob("task_*.json")}
    bad(team("task", "update", "1", "--add-blocked-by", "5"),
        "CycleError: dependency cycle: #1 → #5 → #4 → #2 → #1")
    bad(team("task", "update", "nope", "--status", "completed"),
        "UnknownRef: no task named 'nope'; `team task list` shows the tasks")
    bad(team("task", "update", "4", "--add-blocked-by", "99"),
        "UnknownRef: no task #99; `team task list` shows the tasks")
    bad(team("task", "update", "4", "--status", "finished", "--add-blocked-by", "6"),
        "UserError: invalid status 'finished': use one of pending, in_progress, completed, failed, cancelled")
    bad(team("task", "create", "X", "--blocked-by", "ghost"),
        "UnknownRef: no task named 'ghost'; `team task list` shows the tasks")
    bad(team("task", "show", "42"), "UnknownRef: no task #42; `team task list` shows the tasks")
    after = {p.name: p.read_bytes() for p in (team.root / ".tasks").glob("task_*.json")}
    assert after == before
    assert ok(team("task", "update", "4", "--remove-blocked-by", "3", "--add-blocked-by", "1")) == (
        "Updated task #4: Test [pending, blocked by [1, 2]]\n"
    )
    assert ok(team("task", "list", "--blocked")) == "[ ] #4: Test (blocked by: [2])\n[ ] #5: Deploy (blocked by: [4])\n"


def test_corrupt_file_and_unwritable_root_are_one_clear_line(team, tmp_path):
    build_fast(team)
    (team.root / ".tasks" / "task_3.json").write_text('{"id": 3, "subject": ')
    r = team("task", "list")  # the rest is listed; the bad file is named; exit 1: the listing is incomplete
    assert r.returncode == 1
    assert "#3" not in r.stdout and len(r.stdout.splitlines()) == 5
    assert r.stderr == (
        "warning: .tasks/task_3.json cannot be read (file: Invalid JSON: EOF while parsing a value at line 1 "
        "column 21); it is left out (`team doctor` says more)\n"
    )
    not_dir = tmp_path / "plain-file"
    not_dir.write_text("")
    r = run_team(team.root, "task", "create", "x", "--root", str(not_dir))  # --root is checked first (paths.py)
    bad(r, f"UserError: --root {not_dir} is a file, not a directory; did you mean {tmp_path}? give the project's "
           "directory")
    r = run_team(team.root, "task", "create", "x", TEAM_ROOT=str(not_dir))
    bad(r, f"NotWritable: cannot create {not_dir}/.tasks: Not a directory; pass a writable --root or set TEAM_ROOT")


def test_a_mistyped_root_is_refused_naming_the_one_meant_and_creates_nothing(team, tmp_path):
    """A --root with a typo used to start a new, empty store there, quietly (issue 27 item 6)."""
    project = tmp_path / "project"
    project.mkdir()
    ok(team("task", "create", "real work", "--root", str(project)))
    typo = tmp_path / "projcet"
    meant = f"did you mean {project}?"
    for args in (("task", "list"), ("task", "update", "1", "--status", "completed"), ("status",),
                 ("task", "create", "lost work"), ("send", "lead", "hi"), ("mcp", "--as", "claude")):
        for r in (team(*args, "--root", str(typo), input=""), team("--root", str(typo), *args, input="")):
            assert r.returncode == 2 and r.stderr.count("\n") == 1, (args, r.stderr)
            assert r.stderr.startswith(f"UserError: --root {typo} does not exist; {meant}"), (args, r.stderr)
    assert not typo.exists()
    # an existing directory without a store: reads are refused with the way to start one; creating starts it
    empty = tmp_path / "fresh"
    empty.mkdir()
    r = team("status", "--root", str(empty))
    assert r.returncode == 2 and "holds no team state (no .tasks/ or .team/); a new project starts with" in r.stderr
    assert not any(empty.iterdir())
    ok(team("task", "create", "first", "--root", str(empty)))
    assert ok(team("task", "list", "--root", str(empty))) == "[ ] #1: first\n"
    # a new project: a missing directory is made by a creating command, unless a store has a close name
    assert team("mcp", "--init", "--as", "claude", "--root", str(tmp_path / "newbie"), input="").returncode == 0
    assert (tmp_path / "newbie" / ".tasks").is_dir()
    r = team("task", "create", "x", "--root", str(tmp_path / "newbee"))
    assert r.returncode == 2 and f"did you mean {tmp_path / 'newbie'}?" in r.stderr
    (tmp_path / "newbee").mkdir()
    ok(team("task", "create", "x", "--root", str(tmp_path / "newbee")))


def test_root_option_and_env_agree(team, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    ok(team("task", "create", "Here", "--root", str(other)))
    assert ok(team("--root", str(other), "task", "list")) == "[ ] #1: Here\n"
    assert ok(run_team(other, "task", "list")) == "[ ] #1: Here\n"
    assert ok(team("task", "list")).startswith("No tasks yet.")


def test_reopening_a_finished_task_unassigns_it_so_it_can_be_claimed_again(team):
    assert team("task", "create", "build").returncode == 0
    from orchestrator.tasks.store import TaskStore

    store = TaskStore(team.root)
    t = store.claim(1, "lead")
    store.finish(1, t.epoch, "completed")
    r = team("task", "update", "1", "--status", "pending")
    assert (r.returncode, r.stdout) == (0, "Updated task #1: build [pending]\n")
    assert team("task", "list", "--ready").stdout == "[ ] #1: build\n"
    assert store.claim(1, "bob").owner == "bob"
    # an explicit --owner is kept, and that owner may claim it; nobody else can
    store.finish(1, store.read(1).epoch, "failed")
    assert team("task", "update", "1", "--status", "pending", "--owner", "carol").returncode == 0
    assert store.try_claim(1, "dave") is None and store.claim(1, "carol").owner == "carol"
    r = team("task", "update", "1", "--owner", "a b/c")
    assert r.returncode == 2 and r.stderr.startswith("InvalidName: invalid owner 'a b/c'")


def test_a_copied_task_file_is_refused_not_listed_twice(team):
    assert team("task", "create", "one").returncode == 0
    root = team.root / ".tasks"
    (root / "task_2.json").write_text((root / "task_1.json").read_text())  # a hand copy, still id 1
    r = team("task", "list")  # listed once; the copy is named and left out (exit 1: incomplete)
    assert (r.returncode, r.stdout) == (1, "[ ] #1: one\n")
    assert r.stderr == ("warning: .tasks/task_2.json cannot be read (holds id 1, not 2); it is left out "
                        "(`team doctor` says more)\n")


def test_finished_tasks_do_not_show_an_owner_in_the_list(team):
    from orchestrator.tasks.store import TaskStore

    store = TaskStore(team.root)
    for name in ("a", "b", "c"):
        store.create(name)
    for tid, status in ((1, "completed"), (2, "failed")):
        t = store.claim(tid, "lead")
        store.finish(tid, t.epoch, status)
    store.claim(3, "alice")
    assert team("task", "list").stdout == "[x] #1: a\n[!] #2: b\n[>] #3: c (alice)\n"


def test_the_state_root_comes_from_the_command_then_team_root_then_the_environment(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert run_team(tmp_path, "--root", str(a), "task", "create", "in a").returncode == 0
    assert run_team(b, "task", "create", "in b").returncode == 0  # TEAM_ROOT=b (conftest)
    assert run_team(b, "--root", str(a), "task", "list").stdout == "[ ] #1: in a\n"
    assert run_team(b, "task", "list", "--root", str(a)).stdout == "[ ] #1: in a\n"
    assert run_team(a, "--root", str(a), "task", "list", "--root", str(b)).stdout == "[ ] #1: in b\n"
    assert run_team(b, "task", "list").stdout == "[ ] #1: in b\n"


def test_a_nonsense_estimate_is_refused_and_nothing_is_written(team):
    """A negative, zero, NaN, infinite or absurd estimate weighed the critical path with nonsense
    (issue 27 item 6); both command-line parsers and `task update` refuse it, naming the bound."""
    assert team("task", "create", "keep").returncode == 0
    for value in ("-5", "0", "nan", "inf", "1e300", "2592001"):
        for args in (("task", "create", "x", "--estimate", value), ("task", "create", "x", f"--estimate={value}"),
                     ("task", "update", "1", "--estimate", value)):
            r = team(*args)
            assert r.returncode == 2 and r.stderr.startswith("UserError: invalid estimate "), (args, r.stderr)
            assert "above 0 and at most 2,592,000 (30 days)" in r.stderr and "Traceback" not in r.stderr
    tasks = json.loads(team("task", "list", "--json").stdout)
    assert [(t["subject"], t.get("estimate")) for t in tasks] == [("keep", None)]
    assert team("task", "update", "1", "--estimate", "90").returncode == 0
