"""Redo one task of a worktree plan: `team run --redo`, `team task retry`, a task reopened by hand.

A task's merge comes out of the integration branch (rebuilt without it, the
other merges replayed), the task and everything downstream of it run again,
and the result equals a fresh run of the plan as it now is.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_team
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import (
    RUFF,
    branches,
    codemod_tasks,
    git,
    make_project,
    plan_yaml,
    serial_tree,
    tree,
)

PLAN = "rd"
INTEG = f"team/{PLAN}/integration"


def ledger_tasks(ledger: Path) -> list[dict]:
    """codemod_tasks plus `stamp`, which needs mod-0 and records what mod-0 produced; each task
    appends its id to $LEDGER (outside the repository) when it runs."""
    tasks = codemod_tasks(4)
    check = tasks.pop()
    tasks.append({"id": "stamp", "needs": ["mod-0"], "run": "sha256sum pkg/m0.py > stamp.txt"})
    check["needs"] = [*check["needs"], "stamp"]
    tasks.append(check)
    for t in tasks:
        t["run"] = f"echo {t['id']} >> {ledger} && {t['run']}"
    return tasks


def ran(ledger: Path) -> list[str]:
    out = ledger.read_text().split() if ledger.exists() else []
    ledger.write_text("")
    return sorted(out)


def first_parent_tasks(repo: Path) -> list[str]:
    out = git(repo, "log", "--first-parent", "--merges", "--reverse", "--format=%(trailers:key=Team-Task,valueonly)",
              INTEG)
    return [line.strip() for line in out.splitlines() if line.strip()]


def test_redo_a_changed_task_reruns_it_and_its_dependents_and_equals_a_fresh_run(tmp_path):
    ledger = tmp_path / "ledger"
    tasks = ledger_tasks(ledger)
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks))
    first = run_team(repo, "run", "plan.yaml")
    assert first.returncode == 0, first.stdout + first.stderr
    assert ran(ledger) == sorted(t["id"] for t in tasks)
    old_stamp = git(repo, "show", f"{INTEG}:stamp.txt")

    # mod-0's codemod changes: only sort imports now (no pyupgrade)
    tasks[0]["run"] = f"echo mod-0 >> {ledger} && {RUFF} check --no-cache --fix --exit-zero --select I -q pkg/m0.py"
    (repo / "plan.yaml").write_text(plan_yaml(PLAN, tasks))  # (left uncommitted: the base stays the same)
    serial = serial_tree(repo, tasks, tmp_path / "serial")
    ran(ledger)  # the serial reference's own entries

    redo = run_team(repo, "run", "plan.yaml", "--redo", "mod-0")
    assert redo.returncode == 0, redo.stdout + redo.stderr
    assert ran(ledger) == ["check", "mod-0", "stamp"]  # the task and what needs it; nothing else
    assert "--redo: running #1 mod-0 again, and what needs it: #5 stamp, #6 check; their merges come out of " \
           f"{INTEG} first" in redo.stderr
    assert f"rebuilt {INTEG} without the merges of mod-0, stamp" in redo.stderr
    assert tree(repo, INTEG) == serial
    assert git(repo, "show", f"{INTEG}:stamp.txt") != old_stamp
    assert sorted(first_parent_tasks(repo)) == ["mod-0", "mod-1", "mod-2", "mod-3", "stamp"]  # each once
    assert branches(repo) == ["main", INTEG]
    store = {t["plan_task"]: t for t in map(json.loads, (p.read_text() for p in (repo / ".tasks").glob("task_*.json")))}
    merges = {task: sha for sha, task in (line.split() for line in git(
        repo, "log", "--first-parent", "--merges", "--format=%H %(trailers:key=Team-Task,valueonly,separator=)",
        INTEG).splitlines() if line.strip())}
    assert {k: v.get("merge_commit") for k, v in store.items() if k != "check"} == merges  # replays recorded
    assert not any(v.get("redo") for v in store.values())

    # A fresh run of the changed plan gives the same tree.
    fresh = run_team(repo, "run", "plan.yaml", "--fresh")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert tree(repo, INTEG) == serial


def test_task_retry_and_a_task_reopened_by_hand_run_again_with_their_dependents(tmp_path):
    ledger = tmp_path / "ledger"
    tasks = ledger_tasks(ledger)
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks))
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    serial = serial_tree(repo, tasks, tmp_path / "serial")
    ran(ledger)

    retry = run_team(repo, "task", "retry", f"{PLAN}.mod-0")
    assert retry.returncode == 0, retry.stderr
    assert retry.stdout == (
        f"Task #1: mod-0: {tasks[0]['run'][:80]} [pending, will run again]; so will what needs it: #5, #6\n"
        f"The next `team run` of plan {PLAN} runs them. Its merge and kept branch are dropped first.\n")
    again = run_team(repo, "run", "plan.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert ran(ledger) == ["check", "mod-0", "stamp"]
    assert "#1 mod-0 is to run again (`team task retry`, or a redo that was cut short): running it again" \
        in again.stderr
    assert tree(repo, INTEG) == serial

    # The old symptom: `task update --status pending` on a merged task ran nothing ("done in 0.00s").
    upd = run_team(repo, "task", "update", f"{PLAN}.mod-2", "--status", "pending")
    assert upd.returncode == 0
    assert "takes that merge out and runs it again, with every task that needs it" in upd.stderr
    again = run_team(repo, "run", "plan.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert ran(ledger) == ["check", "mod-2"]
    assert "#3 mod-2 was reopened after it was merged" in again.stderr
    assert tree(repo, INTEG) == serial
    assert sorted(first_parent_tasks(repo)) == ["mod-0", "mod-1", "mod-2", "mod-3", "stamp"]


def test_a_merge_that_does_not_replay_without_the_redone_task_runs_again_too(tmp_path):
    """`late` conflicted with `early` (adjacent lines) and the user resolved it by hand, on top
    of early's merge. Redoing early takes that merge out: late's resolution no longer applies,
    so late runs again too (and is said to), and the result equals a serial run."""
    wait = ("i=0; until git log --format=%s team/rd/integration | grep -q 'merge early into'; "
            "do i=$((i+1)); [ $i -gt 600 ] && exit 3; sleep 0.05; done; ")
    tasks = [{"id": "early", "run": "sed -i 's/^mode = .*/mode = 2/' conf.py"},
             {"id": "late", "run": wait + "sed -i 's/^level = .*/level = 2/' conf.py"},
             {"id": "other", "run": "echo x > other.txt"}]
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks, workers=3),
                        {"conf.py": "mode = 1\nlevel = 1\na\nb\nc\ntail = 1\n"}, modules=0)
    first = run_team(repo, "run", "plan.yaml", "-k")
    assert first.returncode == 1, first.stdout + first.stderr  # late conflicts with early
    wt = repo / ".team/worktrees/rd/late"
    git(wt, "merge", "team/rd/integration", check=False)
    (wt / "conf.py").write_text("mode = 2\nlevel = 2\na\nb\nc\ntail = 1\n")
    git(wt, "commit", "-qam", "late: resolved by hand")
    resumed = run_team(repo, "run", "plan.yaml")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + git(repo, "log", "--oneline", "--all", "--graph")
    assert sorted(first_parent_tasks(repo)) == ["early", "late", "other"]

    tasks[0]["run"] = "sed -i 's/^tail = .*/tail = 2/' conf.py"
    (repo / "plan.yaml").write_text(plan_yaml(PLAN, tasks, workers=3))
    serial = serial_tree(repo, [{**t, "run": t["run"].removeprefix(wait)} for t in tasks], tmp_path / "serial")
    redo = run_team(repo, "run", "plan.yaml", "--redo", "early")
    assert redo.returncode == 0, redo.stdout + redo.stderr
    assert "#2 late did not apply without them: running again too" in redo.stderr
    assert git(repo, "show", f"{INTEG}:conf.py") == "mode = 1\nlevel = 2\na\nb\nc\ntail = 2\n"
    assert tree(repo, INTEG) == serial
    assert sorted(first_parent_tasks(repo)) == ["early", "late", "other"]
    assert git(repo, "show", f"{INTEG}:other.txt") == "x\n"  # replayed, not lost


def test_redo_names_are_checked_before_anything_runs(tmp_path):
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, codemod_tasks(2)), modules=2)
    r = run_team(repo, "run", "plan.yaml", "--redo", "mod-9")
    assert r.returncode == 2
    assert r.stderr == (f"UserError: --redo mod-9: plan {PLAN} has no task 'mod-9'; did you mean 'mod-1'? its tasks: "
                        f"mod-0, mod-1, check\n")
    assert not (repo / ".tasks").exists()


def test_redo_refuses_to_drop_uncommitted_edits_in_a_kept_worktree(tmp_path):
    wait = ("i=0; until git rev-parse -q --verify 'team/rd/integration^2' >/dev/null; "
            "do i=$((i+1)); [ $i -gt 600 ] && exit 3; sleep 0.05; done; ")
    tasks = [{"id": "a", "run": "echo a > s.txt"}, {"id": "b", "run": wait + "echo b > s.txt"}]
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks), {"s.txt": "0\n"}, modules=0)
    assert run_team(repo, "run", "plan.yaml", "-k").returncode == 1
    wt = repo / ".team/worktrees/rd/b"
    (wt / "s.txt").write_text("half resolved\n")
    r = run_team(repo, "run", "plan.yaml", "--redo", "b")
    assert r.returncode == 2
    assert r.stderr == (f"UserError: #2 b is to run again, but its kept branch team/rd/b has uncommitted changes in "
                        f"{wt}: commit them there (`git add -A && git commit`) or throw them away (`git checkout -- "
                        f". && git clean -fd`), then `team run plan.yaml` again; nothing was changed\n")
    assert (wt / "s.txt").read_text() == "half resolved\n"
    assert git(repo, "show", "team/rd/b:s.txt") == "b\n"
    plain = run_team(repo, "run", "plan.yaml")  # without --redo: the task fails, saying why and what to do
    assert plain.returncode == 1
    assert (f"task b: its branch team/rd/b holds 1 commit not on team/rd/integration and its worktree {wt} has "
            f"uncommitted changes") in plain.stdout
    assert (wt / "s.txt").read_text() == "half resolved\n"


def test_redo_in_a_plan_without_isolation_reruns_the_task_and_its_dependents(tmp_path):
    ledger = tmp_path / "ledger"
    (tmp_path / "plan.yaml").write_text(
        f"name: plain\ntasks:\n"
        f"  - {{id: a, run: 'echo a >> {ledger}'}}\n"
        f"  - {{id: b, needs: [a], run: 'echo b >> {ledger}'}}\n"
        f"  - {{id: c, run: 'echo c >> {ledger}'}}\n")
    assert run_team(tmp_path, "run", "plan.yaml").returncode == 0
    ran(ledger)
    r = run_team(tmp_path, "run", "plan.yaml", "--redo", "a")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ran(ledger) == ["a", "b"]
    assert r.stderr == "--redo: running #1 a again, and what needs it: #2 b\n"


def test_task_retry_of_plain_tasks_reopens_the_task_and_what_needs_it(tmp_path):
    for args in (["task", "create", "build", "--name", "build"], ["task", "create", "test", "--blocked-by", "build"],
                 ["task", "create", "other"]):
        assert run_team(tmp_path, *args).returncode == 0
    for ref in ("1", "2", "3"):
        assert run_team(tmp_path, "task", "update", ref, "--status", "completed").returncode == 0
    r = run_team(tmp_path, "task", "retry", "build")
    assert (r.returncode, r.stdout) == (0, "Task #1: build [pending, will run again]; so will what needs it: #2\n")
    listed = run_team(tmp_path, "task", "list").stdout
    assert listed == "[ ] #1: build\n[ ] #2: test (blocked by: [1])\n[x] #3: other\n"
    assert run_team(tmp_path, "task", "update", "1", "--status", "in_progress", "--owner", "ann").returncode == 0
    busy = run_team(tmp_path, "task", "retry", "1")
    assert (busy.returncode, busy.stderr) == (
        2, "ConflictError: #1 (ann) is running: wait for the attempt to end (or stop the run), then retry\n")
