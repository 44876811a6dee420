"""Refactors a user can trust: no run exits 0 with less than the user asked for.

Real git repositories, real codemods (``ruff``), the real ``team`` entry
point; every result is compared with a serial run of the same tasks.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_team, team_env
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import (
    branches,
    codemod_tasks,
    git,
    make_project,
    plan_yaml,
    serial_tree,
    tree,
    yaml_str,
)
from util import wait_until

from orchestrator.git.worktrees import Worktrees


def integration(plan: str) -> str:
    return f"team/{plan}/integration"


# ---------------------------------------------------------------- item 1: a killed --fresh
def test_a_fresh_start_killed_after_the_branch_reset_is_finished_by_the_next_run(tmp_path):
    """Killed after --fresh reset the integration branch but before the old tasks were
    removed, the old code's next run said "nothing to run, all 5 tasks already
    completed ... 0 commits ahead" and exited 0 with an empty result."""
    tasks = codemod_tasks(4)
    repo = make_project(tmp_path / "repo", plan_yaml("fr", tasks))
    serial = serial_tree(repo, tasks, tmp_path / "serial")
    first = run_team(repo, "run", "plan.yaml")
    assert first.returncode == 0, first.stdout + first.stderr
    assert tree(repo, integration("fr")) == serial

    ref = repo / ".git/refs/heads/team/fr/integration"

    def tip() -> str | None:
        try:
            return ref.read_text()
        except FileNotFoundError:
            return None

    old = tip()
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--fresh"], cwd=repo,
                            env=team_env(repo), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: tip() != old or lead.poll() is not None, interval=0.0005,
               what="the integration branch to be reset")
    lead.kill()
    lead.wait()
    assert tip() != old, "the kill came too late to test anything"
    doctor = run_team(repo, "doctor")  # the old code's doctor said OK here
    assert doctor.returncode == 1
    assert ("  problem [fresh-interrupted] a `team run --fresh` of plan fr was interrupted: its tasks and branches "
            "may be half deleted\n          → run the plan again (`team run PLAN.yaml`): it finishes the fresh "
            "start first\n") in doctor.stdout

    again = run_team(repo, "run", "plan.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert tree(repo, integration("fr")) == serial
    assert "5 completed (of 5)" in again.stdout
    assert "the last `team run --fresh` of plan fr was interrupted: finishing the fresh start" in again.stderr


# ---------------------------------------------------------------- item 2: a re-run after a conflict
WAIT_FOR_FMT = ("i=0; until git log --format=%s team/clash/integration | grep -q '^team: merge fmt into'; "
                "do i=$((i+1)); [ $i -gt 600 ] && exit 3; sleep 0.05; done; ")  # fmt's merge, not just any
CLASH_TASKS = [
    {"id": "fmt", "run": f"{sys.executable} -m ruff format --no-cache -q settings.py"},
    {"id": "bump", "run": WAIT_FOR_FMT + "sed -i 's/TIMEOUT=10/TIMEOUT=30/' settings.py"},
    {"id": "other", "run": "echo ok > other.txt"},
    {"id": "after-fmt", "needs": ["fmt"], "run": "echo after > after-fmt.txt"},
    {"id": "after-bump", "needs": ["bump"], "run": "echo after > after-bump.txt"},
]


def test_a_redo_killed_after_its_rebuild_moved_integration_leaves_no_scratch_worktree_behind(tmp_path):
    """`--redo` rebuilds the integration branch in a scratch worktree (`_rebuild`), moves the branch, then
    removes the scratch. Killed in between (found by the sampled kill test), the next run finished the redo
    without a rebuild (the merge was already out) and `_rebuild` stayed registered for good: `git worktree
    list` showed it after every later run. The next run removes it (no rebuild runs outside the plan's lock,
    so one found under it is a leftover)."""
    tasks = codemod_tasks(4)
    repo = make_project(tmp_path / "repo", plan_yaml("rb", tasks))
    serial = serial_tree(repo, tasks, tmp_path / "serial")
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    ref = repo / ".git/refs/heads/team/rb/integration"
    scratch = repo / ".team/worktrees/rb/_rebuild"
    for _ in range(20):
        old = ref.read_text()
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--redo", "mod-1"],
                                cwd=repo, env=team_env(repo), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        wait_until(lambda p=lead, o=old: (ref.exists() and ref.read_text() != o) or p.poll() is not None,
                   interval=0.0002, what="the rebuild to move the integration branch")
        os.killpg(lead.pid, signal.SIGKILL)  # the lead and the git removing the scratch worktree
        lead.wait()
        if lead.returncode == -signal.SIGKILL and scratch.exists():
            break
        assert run_team(repo, "run", "plan.yaml").returncode == 0
    else:
        pytest.skip("every kill missed the moment between the rebuild and the scratch's removal")
    again = run_team(repo, "run", "plan.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert tree(repo, integration("rb")) == serial
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert not scratch.exists()


def clash_repo(tmp_path: Path) -> Path:
    return make_project(tmp_path / "repo", plan_yaml("clash", CLASH_TASKS, workers=3),
                        {"settings.py": "TIMEOUT=10\nRETRIES=3\n"}, modules=0)


def test_a_rerun_after_a_conflict_never_deletes_the_kept_branch(tmp_path):
    """The old code's second run re-forked `bump` from the new tip, where its sed
    matched nothing, deleted the kept branch and exited 0 with "5 completed":
    TIMEOUT=30 was gone from everywhere."""
    repo = clash_repo(tmp_path)
    first = run_team(repo, "run", "plan.yaml", "--keep-going")
    assert first.returncode == 1, first.stdout + first.stderr
    assert git(repo, "show", "team/clash/bump:settings.py") == "TIMEOUT=30\nRETRIES=3\n"
    kept = git(repo, "rev-parse", "team/clash/bump").strip()

    second = run_team(repo, "run", "plan.yaml")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "5 completed" not in second.stdout
    assert git(repo, "rev-parse", "team/clash/bump").strip() == kept  # the edit is still there
    assert git(repo, "show", "team/clash/bump:settings.py") == "TIMEOUT=30\nRETRIES=3\n"
    assert git(repo, "show", f"{integration('clash')}:settings.py") == "TIMEOUT = 10\nRETRIES = 3\n"
    assert ("#2 bump failed: merging the 1 commit of its own on team/clash/bump without running the task again; "
            "if the merge conflicts, the task fails again") in second.stderr
    wt = repo / ".team/worktrees/clash/bump"
    assert ("FAILED #2 bump: merge conflict: task 'bump' (team/clash/bump) conflicts with "
            "team/clash/integration in settings.py") in second.stdout
    assert f"\n    to resolve it: cd {wt} && git merge team/clash/integration; fix settings.py; " in second.stdout
    assert "\n    or drop the branch and run the task again on the current result: team run plan.yaml --redo bump" \
        in second.stdout

    # The printed commands resolve it; the next run merges the resolution without running `bump` again.
    git(wt, "merge", "team/clash/integration", check=False)
    (wt / "settings.py").write_text("TIMEOUT = 30\nRETRIES = 3\n")
    git(wt, "add", "-A")
    git(wt, "commit", "--no-edit", "-q")
    third = run_team(repo, "run", "plan.yaml")
    assert third.returncode == 0, third.stdout + third.stderr
    assert git(repo, "show", f"{integration('clash')}:settings.py") == "TIMEOUT = 30\nRETRIES = 3\n"
    assert git(repo, "show", f"{integration('clash')}:after-bump.txt") == "after\n"
    assert branches(repo) == ["main", integration("clash")]


def test_redo_after_a_conflict_drops_the_kept_branch_only_because_the_user_said_so(tmp_path):
    repo = clash_repo(tmp_path)
    assert run_team(repo, "run", "plan.yaml", "--keep-going").returncode == 1
    kept = git(repo, "rev-parse", "team/clash/bump").strip()
    redo = run_team(repo, "run", "plan.yaml", "--redo", "bump")
    assert redo.returncode == 0, redo.stdout + redo.stderr
    assert (f"dropped the kept branch team/clash/bump of #2 bump at {kept[:10]} (1 commit not merged; "
            f"`git branch team/clash/bump {kept}` brings it back)") in redo.stderr
    assert "5 completed (of 5)" in redo.stdout
    # bump ran again on the formatted file, where its sed matches nothing: that is what the user asked for
    assert git(repo, "show", f"{integration('clash')}:settings.py") == "TIMEOUT = 10\nRETRIES = 3\n"
    assert git(repo, "cat-file", "-t", kept).strip() == "commit"  # still there to bring back


def _worktree_state(repo: Path, wt: Path) -> dict:
    gitdir = Path(git(wt, "rev-parse", "--absolute-git-dir").strip())
    return {"files": {p.name: p.read_bytes() for p in wt.iterdir() if p.is_file()},
            "index": (gitdir / "index").read_bytes(), "MERGE_HEAD": (gitdir / "MERGE_HEAD").exists(),
            "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
            "tasks": sorted(p.read_text() for p in (repo / ".tasks").glob("task_*.json"))}


@pytest.mark.parametrize("resolution", ["edited", "ours-staged"])
def test_fresh_refuses_while_a_kept_worktree_holds_an_uncommitted_resolution(tmp_path, resolution):
    """Issue 26 item 1: the old `--fresh` deleted the worktree with the user's resolution in it (exit 0),
    printing only a `git branch` line that brings back the task's commit, not the resolution. A
    resolution staged as "ours" leaves `git status` clean: the merge in progress is work too."""
    repo = clash_repo(tmp_path)
    assert run_team(repo, "run", "plan.yaml", "--keep-going").returncode == 1
    wt = repo / ".team/worktrees/clash/bump"
    if resolution == "edited":
        git(wt, "merge", "team/clash/integration", check=False)  # conflicts, as the failure said it would
        (wt / "settings.py").write_text("TIMEOUT = 30\nRETRIES = 3\n")
        changed = " with changes in after-fmt.txt, other.txt, settings.py"
    else:  # resolved wholly as the branch has it, not committed: nothing for `git status` to list
        git(wt, "merge", "--no-commit", "-s", "ours", "team/clash/integration")
        assert git(wt, "status", "--porcelain") == ""
        changed = ""
    before = _worktree_state(repo, wt)
    r = run_team(repo, "run", "plan.yaml", "--fresh")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == (
        f"UserError: --fresh would delete uncommitted work: task bump's worktree {wt} has a merge in "
        f"progress{changed}: commit it on its branch team/clash/bump (`cd {wt} && git add -A && git commit "
        f"--no-edit`), or copy the folder away (`cp -a {wt} SOMEWHERE`); then `team run plan.yaml --fresh` "
        f"again. Nothing was changed\n")
    assert _worktree_state(repo, wt) == before
    assert not (repo / ".team/fresh/clash").exists()

    git(wt, "add", "-A")  # the printed command saves it; --fresh then drops the branch, saying how to get it back
    git(wt, "commit", "--no-edit", "-q")
    saved = git(repo, "rev-parse", "team/clash/bump").strip()
    fresh = run_team(repo, "run", "plan.yaml", "--fresh", "--keep-going")
    assert (f"--fresh: dropping team/clash/bump at {saved[:10]} (2 commits not merged; `git branch "
            f"team/clash/bump {saved}` brings it back)") in fresh.stderr
    assert git(repo, "show", f"{saved}:settings.py") == (
        "TIMEOUT = 30\nRETRIES = 3\n" if resolution == "edited" else "TIMEOUT=30\nRETRIES=3\n")


def test_redo_and_a_plain_rerun_keep_a_merge_under_way_whose_result_equals_the_branch(tmp_path):
    """`git status` is empty after an uncommitted `merge -s ours`: the merge in progress is work all the
    same (Git.dirty reads git's MERGE_HEAD), so `--redo` refuses and a plain run fails the task, both
    leaving it as it is."""
    repo = clash_repo(tmp_path)
    assert run_team(repo, "run", "plan.yaml", "--keep-going").returncode == 1
    wt = repo / ".team/worktrees/clash/bump"
    git(wt, "merge", "--no-commit", "-s", "ours", "team/clash/integration")
    before = _worktree_state(repo, wt)
    redo = run_team(repo, "run", "plan.yaml", "--redo", "bump")
    assert redo.returncode == 2 and f"its kept branch team/clash/bump has uncommitted changes in {wt}" in redo.stderr
    assert _worktree_state(repo, wt) == before
    plain = run_team(repo, "run", "plan.yaml")
    assert plain.returncode == 1
    assert ("#2 bump failed: its branch team/clash/bump holds 1 commit not on team/clash/integration and "
            f"uncommitted work in {wt}: the task fails until you commit it there") in plain.stderr
    assert (wt / ".git").is_file() and git(wt, "rev-parse", "-q", "--verify", "MERGE_HEAD").strip()


# ---------------------------------------------------------------- a failed task's own commits
def _committing_plan(count: Path, retries: int = 0) -> str:
    """Task `own` commits `a.txt` itself (as an agent CLI or a script may), then exits 1 on its first
    attempt and 0 after; `count` (outside the repository) counts its attempts."""
    run = (f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n+1)) > {count}; echo attempt$n > a.txt; "
           f"git add -A && git -c user.name=me -c user.email=me@x commit -qm \"own attempt $n\"; test $n -ge 1")
    return ("name: w\nisolation: worktree\ntasks:\n"
            f"  - id: own\n    run: {yaml_str(run)}\n    retries: {retries}\n"
            "  - id: next\n    needs: [own]\n    run: cat a.txt\n")


def test_a_failed_task_that_committed_on_its_branch_runs_again_and_its_commits_are_not_merged(tmp_path):
    """The old code took commits on a clean kept branch for finished work: the next run merged the failed
    attempt's commit as the task's result without running it again (exit 0, a.txt "attempt0")."""
    count = tmp_path / "count"
    repo = make_project(tmp_path / "repo", _committing_plan(count), modules=0)
    first = run_team(repo, "run", "plan.yaml")
    assert first.returncode == 1, first.stdout + first.stderr
    failed = git(repo, "rev-parse", "team/w/own").strip()
    assert git(repo, "log", "-1", "--format=%s", failed).strip() == "own attempt 0"  # there to look at
    assert (f"FAILED #1 own: failed: exit code 1\n    the 1 commit it made on team/w/own ({failed[:10]}) is not "
            f"merged: the next attempt starts afresh (`git branch own-failed {failed[:10]}` keeps a copy)"
            ) in first.stdout
    log = run_team(repo, "log", "w").stdout
    assert "#1 own  [failed]  branch team/w/own: 1 commit of a failed attempt, not merged (failed: exit code 1)\n" \
        in log
    second = run_team(repo, "run", "plan.yaml")
    assert second.returncode == 0, second.stdout + second.stderr
    assert count.read_text() == "2\n"  # it ran again
    assert ("#1 own failed: running it again; the 1 commit its failed attempt left on team/w/own "
            f"({failed[:10]}) is not merged (`git branch own-failed {failed[:10]}` keeps a copy)\n") in second.stderr
    assert git(repo, "show", "team/w/integration:a.txt") == "attempt1\n"
    assert "own attempt 0" not in git(repo, "log", "--format=%s", "team/w/integration")
    assert git(repo, "cat-file", "-t", failed).strip() == "commit"


def test_a_retry_in_the_same_run_does_not_merge_the_failed_attempts_commits(tmp_path):
    """With `retries: 1` the old code's second attempt merged the first one's commit without running."""
    count = tmp_path / "count"
    repo = make_project(tmp_path / "repo", _committing_plan(count, retries=1), modules=0)
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert count.read_text() == "2\n"
    assert git(repo, "show", "team/w/integration:a.txt") == "attempt1\n"
    assert "own attempt 0" not in git(repo, "log", "--format=%s", "team/w/integration")


@pytest.mark.parametrize("how", ["--redo", "task retry"])
def test_redo_and_task_retry_of_a_failed_task_drop_its_commits_saying_how_to_bring_them_back(tmp_path, how):
    count = tmp_path / "count"
    repo = make_project(tmp_path / "repo", _committing_plan(count), modules=0)
    assert run_team(repo, "run", "plan.yaml").returncode == 1
    failed = git(repo, "rev-parse", "team/w/own").strip()
    if how == "task retry":
        assert run_team(repo, "task", "retry", "own").returncode == 0
    r = run_team(repo, "run", "plan.yaml", *(["--redo", "own"] if how == "--redo" else []))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (f"dropped the kept branch team/w/own of #1 own at {failed[:10]} (1 commit of a failed attempt; "
            f"`git branch team/w/own {failed}` brings it back)") in r.stderr
    assert count.read_text() == "2\n" and git(repo, "show", "team/w/integration:a.txt") == "attempt1\n"


def test_commits_made_by_hand_on_a_failed_attempts_branch_are_merged_without_running_it_again(tmp_path):
    """Committing in a failed task's worktree keeps what is there: the next run merges the branch, as it
    merges a conflict's resolution; the task does not run again."""
    count = tmp_path / "count"
    repo = make_project(tmp_path / "repo", _committing_plan(count), modules=0)
    assert run_team(repo, "run", "plan.yaml").returncode == 1
    wt = repo / ".team/worktrees/w/own"
    (wt / "a.txt").write_text("fixed by hand\n")
    git(wt, "commit", "-qam", "own: fixed by hand")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert count.read_text() == "1\n"  # not run again
    assert "#1 own failed: merging the 2 commits of its own on team/w/own without running the task again" \
        in r.stderr
    assert git(repo, "show", "team/w/integration:a.txt") == "fixed by hand\n"


# ---------------------------------------------------------------- SIGKILL during --fresh, --redo and merges
def kill_rerun_rounds(tmp_path: Path, rounds: int, seed: int) -> dict[str, int]:
    """Each round starts `team run --fresh` or `team run --redo TASK` and SIGKILLs it: early (at
    a random instant in its start), after a random number of its --json events, or just after
    it reported a merge starting (`merging`). Then
    `team run` must exit 0 with the integration branch equal to a serial run's tree, each
    task merged exactly once, nothing left behind; or exit non-zero naming what is missing
    (it never did here)."""
    rng = random.Random(seed)
    tasks = codemod_tasks(6)
    repo = make_project(tmp_path / "repo", plan_yaml("ch", tasks, workers=3), modules=6)
    serial = serial_tree(repo, tasks, tmp_path / "serial")
    t0 = time.monotonic()
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    took = time.monotonic() - t0
    seen = {"fresh": 0, "redo": 0, "merging": 0}
    for r in range(rounds):
        how = rng.choice(["fresh", "redo"])
        args = ["--fresh"] if how == "fresh" else ["--redo", rng.choice([t["id"] for t in tasks])]
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--json", *args],
                                cwd=repo, env=team_env(repo), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        when = rng.random()
        at_merge = when >= 0.6
        assert lead.stdout is not None
        if when < 0.3:  # early: the fresh start's deletions, the rebuild, materialising
            time.sleep(rng.uniform(0, min(took, 0.5)))
        else:  # after the n-th event of the run, or just after a merge began
            n = rng.randint(1, 8)
            for line in lead.stdout:
                event = json.loads(line).get("event")
                n -= 1
                if (at_merge and event == "merging") or (not at_merge and n <= 0):
                    time.sleep(rng.uniform(0, 0.03))
                    break
        lead.kill()
        lead.wait()
        if lead.stdout is not None:
            lead.stdout.close()
        killed = lead.returncode == -signal.SIGKILL
        seen[how] += killed
        seen["merging"] += killed and at_merge
        after = run_team(repo, "run", "plan.yaml", timeout=120)
        where = f"seed {seed} round {r}: killed {' '.join(args)} {'at a merge' if at_merge else 'at random'}"
        assert after.returncode == 0, f"{where}\n{after.stdout}\n{after.stderr}"
        assert tree(repo, integration("ch")) == serial, where
        merged = Counter(Worktrees(repo, "ch").merged_tasks())
        assert merged == Counter(t["id"] for t in tasks if t["id"] != "check"), f"{where}: {merged}"
        assert branches(repo) == ["main", integration("ch")], where
        assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1, where
        assert git(repo, "status", "--porcelain") == "", where
    return seen


def test_kill_during_fresh_redo_and_merges_then_run_again_sampled(tmp_path):
    seen = kill_rerun_rounds(tmp_path, rounds=4, seed=5)
    assert sum(seen[k] for k in ("fresh", "redo")) >= 3


@pytest.mark.chaos
def test_kill_during_fresh_redo_and_merges_then_run_again_soak(tmp_path):
    seen = kill_rerun_rounds(tmp_path, rounds=24, seed=int(time.time()))
    print(seen)
    assert seen["fresh"] + seen["redo"] >= 20 and seen["merging"] >= 3, seen
