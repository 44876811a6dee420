"""Changing `needs:` of a plan that ran re-runs only the work the change invalidates (run/rewire.py).

A need taken away keeps every completed task; a need added keeps a completed
task that saw the need's work (no isolation: the need finished before the task
started; worktree: the need's merge is in the task's base) and re-runs it, with
what needs it, otherwise. The order of the first run is fixed by gates (a task
waits for a file another writes), never by timing.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_team
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import git, make_project, serial_tree, tree


def ran(ledger: Path) -> list[str]:
    out = sorted(ledger.read_text().split()) if ledger.exists() else []
    ledger.write_text("")
    return out


def blocked_by(root: Path) -> dict[str, list[str]]:
    tasks = [json.loads(p.read_text()) for p in (root / ".tasks").glob("task_*.json")]
    name = {t["id"]: t["plan_task"] for t in tasks}
    return {t["plan_task"]: sorted(name[i] for i in t["blockedBy"]) for t in tasks if t["status"] != "cancelled"}


def plan_of(tasks: dict[str, tuple[list[str], str]], ledger: Path, name: str = "nc", isolation: str = "none") -> str:
    """Each task appends its id to ``ledger`` (outside the repository), then runs its command."""
    lines = [f"name: {name}", "workers: 4", f"isolation: {isolation}", "tasks:"]
    for tid, (needs, run) in tasks.items():
        lines += [f"  - id: {tid}", f"    run: 'echo {tid} >> {ledger}; {run}'"]
        if needs:
            lines.append(f"    needs: [{', '.join(needs)}]")
    return "\n".join(lines) + "\n"


def test_changed_needs_without_isolation_rerun_only_what_they_invalidate(tmp_path):
    ledger, gates = tmp_path / "ledger", tmp_path / "gates"
    gates.mkdir()
    tasks = {"a": ([], "true"),
             "b": ([], f"until [ -f {gates}/c ]; do sleep 0.02; done"),  # b ends only once c has started
             "c": (["a"], f"touch {gates}/c"),
             "d": (["c"], "true")}
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_of(tasks, ledger))
    first = run_team(tmp_path, "run", "plan.yaml")
    assert first.returncode == 0, first.stdout + first.stderr
    assert ran(ledger) == ["a", "b", "c", "d"]

    # c now needs b, which finished after c had started: c runs again, and d, which needs it
    tasks["c"] = (["a", "b"], tasks["c"][1])
    plan.write_text(plan_of(tasks, ledger))
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(ledger) == ["c", "d"]
    assert r.stderr == "#3 c: its needs changed (+b) and it ran without b's work: running it again, and what " \
                       "needs it: #4 d\n"
    assert blocked_by(tmp_path) == {"a": [], "b": [], "c": ["a", "b"], "d": ["c"]}

    # a need taken away, and one added that had finished before the task started: nothing runs
    tasks["c"] = (["b"], tasks["c"][1])
    tasks["d"] = (["a", "c"], "true")
    plan.write_text(plan_of(tasks, ledger))
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(ledger) == []
    assert r.stderr.splitlines() == [
        "#3 c: its needs changed (-a); its completed work stays valid (taking a need away never invalidates work "
        "done after it): not running it again",
        "#4 d: its needs changed (+a); its completed work stays valid (a had finished before it started): not "
        "running it again"]
    assert "nothing to run, all 4 tasks already completed" in r.stdout
    assert blocked_by(tmp_path) == {"a": [], "b": [], "c": ["b"], "d": ["a", "c"]}

    # d needs a task new to the plan: it runs after it
    tasks["e"] = ([], "true")
    tasks["d"] = (["a", "c", "e"], "true")
    plan.write_text(plan_of(tasks, ledger))
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(ledger) == ["d", "e"]
    assert "#4 d: its needs changed (+e) and e has not completed (it is new to the plan): running it again\n" \
        in r.stderr
    assert blocked_by(tmp_path)["d"] == ["a", "c", "e"]
    assert run_team(tmp_path, "run", "plan.yaml").returncode == 0 and ran(ledger) == []


def wt_plan(tasks: dict[str, tuple[list[str], str]], ledger: Path) -> str:
    return plan_of(tasks, ledger, "nw", "worktree")


def test_changed_needs_of_a_worktree_plan_rerun_tasks_whose_base_lacked_the_new_need(tmp_path):
    ledger, gates = tmp_path / "ledger", tmp_path / "gates"
    gates.mkdir()
    tasks = {"a": ([], "echo a > a.txt"),
             "b": ([], f"until [ -f {gates}/t ]; do sleep 0.02; done; echo b > b.txt"),  # merged after t forked
             "t": (["a"], f"touch {gates}/t; cat a.txt b.txt > t.txt 2>/dev/null; true"),
             "u": (["t"], "cat t.txt > u.txt")}
    repo = make_project(tmp_path / "repo", wt_plan(tasks, ledger), modules=0)
    first = run_team(repo, "run", "plan.yaml")
    assert first.returncode == 0, first.stdout + first.stderr
    assert ran(ledger) == ["a", "b", "t", "u"]
    integ = "team/nw/integration"
    assert git(repo, "show", f"{integ}:t.txt") == "a\n"  # t's base had no b.txt

    # t needs b now: its base lacked b's merge, so t and u run again on a result holding it
    tasks["t"] = (["a", "b"], tasks["t"][1])
    (repo / "plan.yaml").write_text(wt_plan(tasks, ledger))
    serial = serial_tree(repo, [{"id": k, "run": v[1].replace(f"until [ -f {gates}/t ]; do sleep 0.02; done; ", "")}
                                for k, v in tasks.items()], tmp_path / "serial")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(ledger) == ["t", "u"]
    assert "#3 t: its needs changed (+b) and it ran without b's work: running it again, and what needs it: " \
           "#4 u\n" in r.stderr
    assert f"rebuilt {integ} without the merges of t, u" in r.stderr
    assert git(repo, "show", f"{integ}:t.txt") == git(repo, "show", f"{integ}:u.txt") == "a\nb\n"
    assert tree(repo, integ) == serial
    merges = git(repo, "log", "--first-parent", "--merges", "--format=%(trailers:key=Team-Task,valueonly)", integ)
    assert sorted(merges.split()) == ["a", "b", "t", "u"]  # each once

    # u needs b too: its base (after t's merge, which came after b's) holds it; a taken from t: nothing runs
    tasks["u"] = (["b", "t"], tasks["u"][1])
    tasks["t"] = (["b"], tasks["t"][1])
    (repo / "plan.yaml").write_text(wt_plan(tasks, ledger))
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(ledger) == []
    assert r.stderr.splitlines() == [
        "#3 t: its needs changed (-a); its completed work stays valid (taking a need away never invalidates work "
        "done after it): not running it again",
        "#4 u: its needs changed (+b); its completed work stays valid (b's merge is in the base it ran on): not "
        "running it again"]
    assert tree(repo, integ) == serial


def test_kept_work_made_without_an_added_need_is_refused_until_redone(tmp_path):
    wait_x = ("i=0; until git rev-parse -q --verify team/nk/integration^2 >/dev/null; do i=$((i+1)); "
              "[ $i -gt 600 ] && exit 3; sleep 0.05; done; ")
    tasks = {"x": ([], "printf \"v = 1\\n\" > s.py"),
             "y": ([], wait_x + "printf \"v = 2\\n\" > s.py")}  # merges after x: conflicts, its branch is kept

    def write(tasks):
        lines = ["name: nk", "isolation: worktree", "tasks:"]
        for tid, (needs, run) in tasks.items():
            lines += [f"  - id: {tid}", f"    run: '{run}'"] + ([f"    needs: [{', '.join(needs)}]"] if needs else [])
        return "\n".join(lines) + "\n"

    repo = make_project(tmp_path / "repo", write(tasks), {"s.py": "v = 0\n"}, modules=0)
    assert run_team(repo, "run", "plan.yaml").returncode == 1
    tasks["z"] = ([], "echo z > z.txt")
    tasks["y"] = (["z"], tasks["y"][1])
    (repo / "plan.yaml").write_text(write(tasks))
    before = sorted(p.read_text() for p in (repo / ".tasks").glob("task_*.json"))
    r = run_team(repo, "run", "plan.yaml")
    assert (r.returncode, r.stderr) == (2, (
        "UserError: #2 y: its needs changed (+z), but its branch team/nk/y keeps 1 commit made on a base without "
        "the work of z, which its changed `needs` ask for: drop them and run it again with `team run plan.yaml "
        "--redo y`, or put its needs back, run the plan to merge them, then change them; nothing was changed\n"))
    assert sorted(p.read_text() for p in (repo / ".tasks").glob("task_*.json")) == before

    redo = run_team(repo, "run", "plan.yaml", "--redo", "y")
    assert redo.returncode == 0, redo.stdout + redo.stderr
    assert "#2 y: its needs changed (+z); it has not completed: it runs once they have\n" in redo.stderr
    assert git(repo, "show", "team/nk/integration:s.py") == "v = 2\n" and \
        git(repo, "show", "team/nk/integration:z.txt") == "z\n"


def test_a_run_killed_after_flagging_but_before_the_edges_changed_is_finished_by_the_next(tmp_path):
    """The state a kill between the two writes leaves (the re-run flagged, the edges still old), made
    with the store's own call: the next run decides the same and ends as an uninterrupted one."""
    from orchestrator.tasks.store import TaskStore

    ledger, gates = tmp_path / "ledger", tmp_path / "gates"
    gates.mkdir()
    tasks = {"a": ([], "echo a > a.txt"),
             "b": ([], f"until [ -f {gates}/t ]; do sleep 0.02; done; echo b > b.txt"),
             "t": (["a"], f"touch {gates}/t; cat a.txt b.txt > t.txt 2>/dev/null; true"),
             "u": (["t"], "cat t.txt > u.txt")}
    repo = make_project(tmp_path / "repo", wt_plan(tasks, ledger), modules=0)
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    ran(ledger)
    tasks["t"] = (["a", "b"], tasks["t"][1])
    (repo / "plan.yaml").write_text(wt_plan(tasks, ledger))
    store = TaskStore(repo)
    t = next(x for x in store.all() if x.plan_task == "t")
    store.reopen([t.id], actor="lead", reason="its changed needs invalidate its work", redo=True)  # step 1 only
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(ledger) == ["t", "u"]
    assert git(repo, "show", "team/nw/integration:u.txt") == "a\nb\n"
    assert blocked_by(repo)["t"] == ["a", "b"]
    merges = git(repo, "log", "--first-parent", "--merges", "--format=%(trailers:key=Team-Task,valueonly)",
                 "team/nw/integration")
    assert sorted(merges.split()) == ["a", "b", "t", "u"]


def test_a_redo_the_changed_needs_cannot_make_is_refused_before_anything_is_written(tmp_path):
    """t's added need b invalidates t, and u, which needs t, is to run again with it; but u's kept worktree
    holds a resolution under way. The old run flagged t and changed its edges, then refused in reconcile
    saying "nothing was changed": putting the needs back still re-ran t (the flag stayed)."""
    ledger, gates = tmp_path / "ledger", tmp_path / "gates"
    gates.mkdir()
    integ = "team/nw/integration"
    tasks = {"a": ([], "echo a > a.txt"),
             "b": ([], f"until [ -f {gates}/t ]; do sleep 0.02; done; echo b > b.txt"),  # merged after t forked
             "t": (["a"], f"touch {gates}/t; cat a.txt b.txt > t.txt 2>/dev/null; true"),
             "x": ([], f"until [ -f {tmp_path}/repo/.team/worktrees/nw/.fork-u ]; do sleep 0.02; done; "
                       "printf \"v = 1\\n\" > s.py"),  # merged after u forked (its fork recorded): u conflicts
             "u": (["t"], f"until git show {integ}:s.py 2>/dev/null | grep -q 1; do sleep 0.02; done; "
                          "printf \"v = 2\\n\" > s.py")}
    repo = make_project(tmp_path / "repo", wt_plan(tasks, ledger), {"s.py": "v = 0\n"}, modules=0)
    first = run_team(repo, "run", "plan.yaml", "--keep-going")
    assert first.returncode == 1 and "FAILED #5 u: merge conflict" in first.stdout, first.stdout + first.stderr
    wt = repo / ".team/worktrees/nw/u"
    git(wt, "merge", integ, check=False)  # the user resolves it, not committed yet
    (wt / "s.py").write_text("v = 3\n")
    ran(ledger)

    before = sorted(p.read_text() for p in (repo / ".tasks").glob("task_*.json"))
    original = (repo / "plan.yaml").read_text()
    tasks["t"] = (["a", "b"], tasks["t"][1])
    (repo / "plan.yaml").write_text(wt_plan(tasks, ledger))
    r = run_team(repo, "run", "plan.yaml")
    assert (r.returncode, r.stderr) == (2, (
        "UserError: #3 t: its needs changed (+b) and it ran without b's work, so it runs again with what needs it; "
        f"#5 u is to run again, but its kept branch team/nw/u has uncommitted changes in {wt}: commit them there "
        "(`git add -A && git commit`) or throw them away (`git checkout -- . && git clean -fd`), then `team run "
        "plan.yaml` again; nothing was changed\n"))
    assert sorted(p.read_text() for p in (repo / ".tasks").glob("task_*.json")) == before
    assert (wt / "s.py").read_text() == "v = 3\n"

    (repo / "plan.yaml").write_text(original)  # the needs put back: nothing of the refused change is left
    r = run_team(repo, "run", "plan.yaml")
    assert "start #3 t" not in r.stdout and ran(ledger) == [], r.stdout + r.stderr
