"""`team run` with `isolation: worktree`, on real git repositories in tmp_path.

Every test goes through the real entry point (`python -m orchestrator run`)
and checks the outcome in git: what is on the integration branch, which
branches and worktrees are left, and that the user's checkout did not change.
"""

from __future__ import annotations

import hashlib
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
from gitutil import USER_ID, no_git_identity  # noqa: F401  (autouse fixture)
from util import wait_until

from orchestrator.git.worktrees import Worktrees


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **USER_ID, "GIT_OPTIONAL_LOCKS": "0"}
    proc = subprocess.run(["git", "-C", str(cwd), *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout


def make_repo(path: Path, files: dict[str, str], plan: str) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).write_text(text)
    (path / "plan.yaml").write_text(plan)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def snapshot(repo: Path) -> dict:
    """The user's files, index, HEAD, config and status: what must never change."""
    files = {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(repo.rglob("*")) if p.is_file()
             and p.relative_to(repo).parts[0] not in (".git", ".team", ".tasks")}
    g = repo / ".git"
    return {"files": files, "status": git(repo, "status", "--porcelain=v2", "--branch", "--untracked-files=all"),
            "HEAD": (g / "HEAD").read_bytes(), "index": (g / "index").read_bytes(),
            "config": (g / "config").read_bytes(), "tip": git(repo, "rev-parse", "HEAD")}


def show(repo: Path, ref: str, name: str) -> str:
    return git(repo, "show", f"{ref}:{name}")


def tasks(root: Path) -> dict[str, dict]:
    out = {}
    for p in (root / ".tasks").glob("task_*.json"):
        t = json.loads(p.read_text())
        out[t["plan_task"]] = t
    return out


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()


def test_parallel_tasks_land_dependents_see_them_and_the_user_checkout_is_untouched(tmp_path):
    plan = "name: par\nworkers: 4\nisolation: worktree\ntasks:\n" + "".join(
        f"  - id: edit-{i}\n    run: printf 'x = {i * 10}\\n' > m{i}.py && echo new > new{i}.txt\n"
        for i in range(4)) + (
        "  - id: check\n    needs: [edit-0, edit-1, edit-2, edit-3]\n"
        "    run: cat m0.py m1.py m2.py m3.py new0.txt > seen.txt\n")
    repo = make_repo(tmp_path / "repo", {f"m{i}.py": f"x = {i}\n" for i in range(4)}, plan)
    before = snapshot(repo)
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    b = "team/par/integration"
    for i in range(4):
        assert show(repo, b, f"m{i}.py") == f"x = {i * 10}\n"
    assert show(repo, b, "seen.txt") == "x = 0\nx = 10\nx = 20\nx = 30\nnew\n"  # `check` saw all four
    assert snapshot(repo) == before
    assert branches(repo) == ["main", b]  # merged task branches are gone
    assert not (repo / ".team/worktrees/par").exists() or \
        sorted(p.name for p in (repo / ".team/worktrees/par").iterdir()) == [".lock", "base.json"]
    merged = git(repo, "log", "--first-parent", "--format=%s", b).splitlines()[:5]
    assert sorted(merged) == sorted(f"team: merge {t} into par" for t in
                                    ["edit-0", "edit-1", "edit-2", "edit-3", "check"])
    summary = r.stdout[r.stdout.index("result: branch"):].splitlines()
    assert summary == [
        f"result: branch {b} (10 commits ahead of your HEAD; 5 tasks merged)",
        "to review and take the result into your current branch:",
        "  team log par                          # the tasks in merge order, with their commits",
        "  team diff par.TASK                    # one task's own change",
        f"  git diff HEAD...{b}  # everything at once",
        "  team land plan.yaml                   # into your branch: one commit (--per-task: one per task); "
        "removes the plan's branches",
    ]
    t = tasks(repo)
    assert {k: (v["status"], v["branch"], v.get("worktree")) for k, v in t.items()} == {
        k: ("completed", b, None) for k in ["edit-0", "edit-1", "edit-2", "edit-3", "check"]}
    again = run_team(repo, "run", "plan.yaml")  # resume: nothing to do, the summary still says where
    assert again.returncode == 0
    assert "plan par: nothing to run, all 5 tasks already completed (--fresh starts over)\n" in again.stdout
    assert f"result: branch {b} (10 commits ahead of your HEAD; 5 tasks merged)" in again.stdout


def test_same_lines_conflict_fails_one_task_keeps_its_branch_and_keep_going_continues(tmp_path):
    plan = ("name: clash\nworkers: 3\nisolation: worktree\ntasks:\n"
            "  - id: a\n    run: printf 'v = \"a\"\\n' > settings.py\n"
            "  - id: b\n    run: printf 'v = \"b\"\\n' > settings.py\n"
            "  - id: other\n    run: echo ok > other.txt\n"
            "  - id: after-a\n    needs: [a]\n    run: echo after > after-a.txt\n"
            "  - id: after-b\n    needs: [b]\n    run: echo after > after-b.txt\n")
    repo = make_repo(tmp_path / "repo", {"settings.py": "v = 0\n"}, plan)
    before = snapshot(repo)
    r = run_team(repo, "run", "plan.yaml", "--keep-going")
    assert r.returncode == 1, r.stdout + r.stderr
    t = tasks(repo)
    statuses = {k: v["status"] for k, v in t.items()}
    loser = "a" if statuses["a"] == "failed" else "b"
    winner = "b" if loser == "a" else "a"
    assert statuses == {winner: "completed", loser: "failed", "other": "completed",
                        f"after-{winner}": "completed", f"after-{loser}": "cancelled"}
    wt = tmp_path / "repo/.team/worktrees/clash" / loser
    assert t[loser]["error"] == (
        f"merge conflict: task '{loser}' (team/clash/{loser}) conflicts with team/clash/integration in "
        f"settings.py; nothing was merged, the branch and its worktree {wt} are kept.\n"
        f"to resolve it: cd {wt} && git merge team/clash/integration; fix settings.py; git add -A && "
        f"git commit --no-edit; the next run merges your resolution without running the task again\n"
        f"or drop the branch and run the task again on the current result: team run plan.yaml --redo {loser}")
    assert f"FAILED #{t[loser]['id']} {loser}: merge conflict: task '{loser}'" in r.stdout
    assert (t[loser]["branch"], t[loser]["worktree"]) == (f"team/clash/{loser}", f".team/worktrees/clash/{loser}")
    assert (wt / "settings.py").read_text() == f'v = "{loser}"\n'
    assert branches(repo) == ["main", f"team/clash/{loser}", "team/clash/integration"]
    assert show(repo, "team/clash/integration", "settings.py") == f'v = "{winner}"\n'
    assert "not merged (branches kept): " + loser in r.stdout
    assert snapshot(repo) == before


def test_conflict_resolved_by_hand_is_merged_by_the_next_run_without_rerunning(tmp_path):
    plan = ("name: fix\nworkers: 2\nisolation: worktree\ntasks:\n"
            "  - id: a\n    run: printf 'v = 1\\n' > s.py && echo a >> ran.log\n"
            "  - id: b\n    run: printf 'v = 2\\n' > s.py && echo b >> ran.log\n")
    repo = make_repo(tmp_path / "repo", {"s.py": "v = 0\n", "ran.log": ""}, plan)
    assert run_team(repo, "run", "plan.yaml", "-k").returncode == 1
    loser = next(k for k, v in tasks(repo).items() if v["status"] == "failed")
    wt = repo / ".team/worktrees/fix" / loser
    subprocess.run(["git", "-C", str(wt), "merge", "-q", "team/fix/integration"], capture_output=True,
                   env={**os.environ, **USER_ID})
    (wt / "s.py").write_text("v = 3\n")
    (wt / "ran.log").write_text("a\nb\n")
    git(wt, "commit", "-q", "-am", "resolved")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert show(repo, "team/fix/integration", "s.py") == "v = 3\n"
    assert show(repo, "team/fix/integration", "ran.log") == "a\nb\n"  # the task was not run again
    assert tasks(repo)[loser]["result"] == f"merged the work an earlier attempt committed on team/fix/{loser}"
    assert sorted(Worktrees(repo, "fix").merged_tasks()) == ["a", "b"]


def test_fresh_resets_branches_and_a_root_in_a_subfolder_maps_to_it(tmp_path):
    plan = ("name: sub\nisolation: worktree\ntasks:\n"
            "  - id: t\n    run: echo changed >> app.txt && pwd > where.txt\n")
    repo = make_repo(tmp_path / "repo", {"top.txt": "top\n"}, "")
    svc = repo / "svc"
    svc.mkdir()
    (svc / "app.txt").write_text("app\n")
    (svc / "plan.yaml").write_text(plan)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "svc")
    for _ in range(2):  # the second run is --fresh: one merge again, not two
        r = run_team(svc, "run", "plan.yaml", "--fresh")
        assert r.returncode == 0, r.stdout + r.stderr
        assert Worktrees(svc, "sub").merged_tasks() == ["t"]
    assert show(repo, "team/sub/integration", "svc/app.txt") == "app\nchanged\n"
    where = show(repo, "team/sub/integration", "svc/where.txt").strip()
    assert where == str(svc / ".team/worktrees/sub/t/svc")
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_an_older_git_merges_in_the_integration_worktree_and_the_run_says_so_once(tmp_path):
    """git < 2.38 has no `merge-tree --write-tree`: the run merges in a checkout of the integration
    branch as before (same result, same conflict message), and says why once."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True).stdout.strip()
    (bin_dir / "git").write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = version ] && { echo "git version 2.37.1"; '
                                 f'exit 0; }}; done\nexec {real} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    plan = ("name: old\nworkers: 3\nisolation: worktree\ntasks:\n"
            "  - id: a\n    run: printf 'v = 1\\n' > s.py\n"
            "  - id: b\n    run: printf 'v = 2\\n' > s.py\n"
            "  - id: c\n    run: echo c > c.txt\n")
    repo = make_repo(tmp_path / "repo", {"s.py": "v = 0\n"}, plan)
    before = snapshot(repo)
    r = run_team(repo, "run", "plan.yaml", "-k", PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert r.returncode == 1, r.stdout + r.stderr
    said = (f"git 2.37.1 cannot merge without a checkout (`git merge-tree --write-tree` needs git 2.38): the "
            f"plan's merges happen in the worktree {repo}/.team/worktrees/old/_integration, one at a time, as "
            f"before (slower)")
    assert r.stderr.count(said) == 1, r.stderr
    t = tasks(repo)
    loser = next(k for k in ("a", "b") if t[k]["status"] == "failed")
    assert t[loser]["error"].startswith(f"merge conflict: task '{loser}' (team/old/{loser}) conflicts with "
                                        f"team/old/integration in s.py; nothing was merged")
    assert show(repo, "team/old/integration", "c.txt") == "c\n"
    assert sorted(Worktrees(repo, "old").merged_tasks()) == sorted({"a", "b"} - {loser} | {"c"})
    assert snapshot(repo) == before
    assert not (repo / ".team/worktrees/old/_integration").exists()  # released at the end, as before


def test_a_run_removes_the_ref_locks_a_killed_git_left_before_it_deletes_a_branch(tmp_path):
    """A merge's ref transaction and a branch deletion take packed-refs.lock; a git killed holding it
    (and its branch's lock) made the next run's `git branch -D` of a merged task's branch fail (the
    pool's kill test, seed 891896). The run removes them at its start when stale, and the temporary
    file of a .fork-* write a kill cut short (seed 627155: it stayed in the plan's folder)."""
    plan = ("name: lk\nworkers: 2\nisolation: worktree\ntasks:\n"
            "  - id: a\n    run: echo a > a.txt\n  - id: b\n    run: echo b > b.txt\n")
    repo = make_repo(tmp_path / "repo", {"README": "r\n"}, plan)
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    merge = Worktrees(repo, "lk").merges()["a"]
    # what a lead killed after merging `a` leaves: its branch, its completion not recorded, and the locks
    # of a git killed while deleting that branch
    git(repo, "branch", "team/lk/a", f"{merge}^2")
    path = next(p for p in (repo / ".tasks").glob("task_*.json") if json.loads(p.read_text())["plan_task"] == "a")
    task = json.loads(path.read_text())
    task.update(status="pending", owner="")
    task.pop("merge_commit")
    path.write_text(json.dumps(task))
    locks = [repo / ".git/packed-refs.lock", repo / ".git/refs/heads/team/lk/a.lock",
             repo / ".team/worktrees/lk/.tmp-k1ll3d.part"]  # and a write of .fork-a cut short
    for lock in locks:
        lock.write_text("")
        os.utime(lock, (time.time() - 10, time.time() - 10))
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [lock.exists() for lock in locks] == [False, False, False]
    assert branches(repo) == ["main", "team/lk/integration"]
    assert tasks(repo)["a"]["merge_commit"] == merge and tasks(repo)["a"]["status"] == "completed"


def test_no_git_repository_is_a_clear_error_before_any_state(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: nogit\nisolation: worktree\ntasks:\n  - id: t\n    run: 'true'\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"UserError: isolation: worktree needs a git repository at {tmp_path} (run `git init && git add -A && "
        f"git commit -m init` there, or set `isolation: none` in the plan)")
    assert not (tmp_path / ".tasks").exists()


# ---------------------------------------------------------------- kill -9 and resume
def kill_and_resume(tmp_path: Path, kills: int) -> None:
    n = 8
    ledger = tmp_path / "ledger"  # outside the repository: the user's checkout must stay as it was
    plan = f"name: crash\nworkers: 4\nisolation: worktree\ndefaults:\n  env: {{LEDGER: {ledger}}}\ntasks:\n" + "".join(
        f"  - id: t{i}\n    run: echo {i} > f{i}.txt && echo t{i} >> \"$LEDGER\"\n"
        + (f"    needs: [t{i - 4}]\n" if i >= 4 else "") for i in range(n)) + (
        "  - id: last\n    needs: [t4, t5, t6, t7]\n    run: cat f*.txt > all.txt\n")
    repo = make_repo(tmp_path / "repo", {"README": "r\n"}, plan)
    before = snapshot(repo)
    seed = int(os.environ.get("CRASH_SEED", time.time_ns() % 1_000_000))
    rnd = random.Random(seed)
    events = repo / ".tasks/events.jsonl"

    def lines() -> int:
        return events.read_bytes().count(b"\n") if events.exists() else 0

    for _ in range(kills):
        target = lines() + rnd.randint(1, 12)
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=repo,
                                env=team_env(repo), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_until(lambda t=target, p=lead: lines() >= t or p.poll() is not None, timeout=60, interval=0.002,
                   what=f"progress (seed {seed})")
        if lead.poll() is None:
            lead.send_signal(signal.SIGKILL)
        lead.wait()
        lead.stderr.close()
    final = run_team(repo, "run", "plan.yaml", timeout=120)
    assert final.returncode == 0, f"seed {seed}: {final.stdout}\n{final.stderr}"
    ids = [f"t{i}" for i in range(n)] + ["last"]
    b = "team/crash/integration"
    merged = Counter(Worktrees(repo, "crash").merged_tasks())
    assert merged == Counter({t: 1 for t in ids}), f"seed {seed}: {merged}"
    assert show(repo, b, "all.txt") == "".join(f"{i}\n" for i in range(n)), f"seed {seed}"
    t = tasks(repo)
    assert {k: v["status"] for k, v in t.items()} == {k: "completed" for k in ids}
    finished = Counter(json.loads(line)["task"] for line in events.read_text().splitlines()
                       if '"to":"completed"' in line.replace(" ", ""))
    assert set(finished.values()) == {1}, f"seed {seed}: completed twice: {finished}"
    assert branches(repo) == ["main", b], f"seed {seed}"
    wts = git(repo, "worktree", "list", "--porcelain")
    assert wts.count("worktree ") == 1, f"seed {seed}: {wts}"  # only the user's own checkout is left
    assert snapshot(repo) == before, f"seed {seed}"
    assert set(ledger.read_text().split()) == set(ids[:-1])  # every task ran (at least once)


def test_kill_nine_mid_run_and_mid_merge_then_resume_sampled(tmp_path):
    kill_and_resume(tmp_path, kills=3)


@pytest.mark.chaos
def test_kill_nine_mid_run_and_mid_merge_then_resume_soak(tmp_path):
    for i in range(10):
        kill_and_resume(tmp_path / str(i), kills=6)


def test_agent_tasks_work_in_their_own_worktree_and_are_merged(tmp_path):
    """Real CLI + openai client against the scripted server: the agent's tools act in its worktree."""
    from orchestrator.llm.script import Reply, tool_call
    from orchestrator.llm.scripted import ScriptedServer

    plan = ("name: ag\nworkers: 2\nisolation: worktree\nteam:\n  - {name: ada, role: coder}\ntasks:\n"
            "  - id: write\n    assignee: ada\n    prompt: Put hello in greet.txt.\n"
            "  - id: after\n    needs: [write]\n    run: cat greet.txt > copy.txt\n")
    repo = make_repo(tmp_path / "repo", {"README": "r\n"}, plan)
    before = snapshot(repo)
    seen: list[str] = []

    def finish(body: dict) -> Reply:
        seen.append(json.dumps(body["messages"]))
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "wrote it"})])

    script = {"ada": [Reply(tool_calls=[tool_call("write_file", {"path": "greet.txt", "content": "hello\n"})]),
                      finish]}
    with ScriptedServer(script) as srv:
        r = run_team(repo, "run", "plan.yaml", OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-local",
                     TEAM_MODEL="gpt-4o-mini", TEAM_LLM_BACKOFF_BASE="0")
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    wt = repo / ".team/worktrees/ag/write"
    assert f"Your workspace for this task is {wt}, a git worktree on branch team/ag/write" in seen[0]
    assert show(repo, "team/ag/integration", "greet.txt") == "hello\n"
    assert show(repo, "team/ag/integration", "copy.txt") == "hello\n"  # the shell task saw the agent's work
    assert snapshot(repo) == before and not (repo / "greet.txt").exists()


def test_doctor_does_not_call_a_cancelled_tasks_kept_branch_an_orphan(tmp_path):
    """A cancelled task runs again on the next `team run`, which merges the work its branch keeps; the old
    doctor called that branch an orphan and said to `git branch -D` it."""
    plan = ("name: doc\nworkers: 2\nisolation: worktree\ntasks:\n"
            "  - id: a\n    run: echo a > s.txt\n  - id: b\n    run: echo b > s.txt\n")
    repo = make_repo(tmp_path / "repo", {"s.txt": "0\n"}, plan)
    assert run_team(repo, "run", "plan.yaml", "-k").returncode == 1  # one of them conflicts: its branch is kept
    kept = next(p.name for p in (repo / ".team/worktrees/doc").iterdir() if p.name in ("a", "b"))
    assert run_team(repo, "task", "update", kept, "--status", "cancelled").returncode == 0
    r = run_team(repo, "doctor")
    assert (r.returncode, r.stdout) == (0, f"team doctor: {repo}\nOK: no problems found.\n")
    again = run_team(repo, "run", "plan.yaml")
    assert f" {kept} was cancelled: merging the 1 commit of its own on team/doc/{kept} without running" in again.stderr
    assert git(repo, "branch", "--list", f"team/doc/{kept}").strip()  # it conflicts again: still kept
    other = "a" if kept == "b" else "b"  # taken out of the plan (so cancelled), nothing comes back for it: an orphan
    assert run_team(repo, "task", "update", kept, "--status", "pending").returncode == 0
    (repo / "plan.yaml").write_text(f"name: doc\nisolation: worktree\ntasks:\n  - id: {other}\n    run: echo {other} > s.txt\n"
                                    "  - id: c\n    run: echo c > c.txt\n")
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    r = run_team(repo, "doctor")
    assert r.returncode == 1 and f"plan doc: task {kept}: branch team/doc/{kept} (1 unmerged commit)" in r.stdout


def test_doctor_reports_orphaned_worktrees_but_not_a_failed_tasks_kept_branch(tmp_path):
    plan = ("name: doc\nworkers: 2\nisolation: worktree\ntasks:\n"
            "  - id: a\n    run: echo a > s.txt\n  - id: b\n    run: echo b > s.txt\n")
    repo = make_repo(tmp_path / "repo", {"s.txt": "0\n"}, plan)
    assert run_team(repo, "run", "plan.yaml", "-k").returncode == 1  # one of them conflicts: kept, not orphaned
    ok = run_team(repo, "doctor")
    assert (ok.returncode, ok.stdout) == (0, f"team doctor: {repo}\nOK: no problems found.\n")
    git(repo, "branch", "team/doc/ghost", "HEAD")
    (repo / ".team/worktrees/doc/junk").mkdir()
    r = run_team(repo, "doctor")
    assert r.returncode == 1
    assert r.stdout.splitlines()[1:] == [
        "  problem [orphan-worktree] plan doc: task ghost: branch team/doc/ghost (0 unmerged commits)",
        "          → inspect it (`git log` of the branch), then `git worktree remove --force PATH` and "
        "`git branch -D BRANCH`",
        f"  problem [orphan-worktree] plan doc: stray-dir junk: {repo}/.team/worktrees/doc/junk is not a "
        "registered worktree",
        "          → git does not know it: remove the directory",
        "2 problems remain; 2 need a human.",
    ]
