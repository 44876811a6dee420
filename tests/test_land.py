"""`team land PLAN [--squash | --per-task]`: the result into the user's branch, or a refusal.

The land is checked the way a user would: the branch's tree equals a serial
run's, the commits say which task made them, work in the user's checkout is
never overwritten, and a `team land` SIGKILLed at any instant is finished by
the next one with the same result.
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
)
from util import wait_until

PLAN = "ld"
INTEG = f"team/{PLAN}/integration"


def store(repo: Path) -> dict[str, dict]:
    return {t["plan_task"]: t for t in (json.loads(p.read_text()) for p in (repo / ".tasks").glob("task_*.json"))}


def worktrees(repo: Path) -> int:
    return git(repo, "worktree", "list", "--porcelain").count("worktree ")


def ran_plan(tmp_path: Path, tasks: list[dict] | None = None, **files: str) -> tuple[Path, list[dict], str]:
    tasks = tasks or codemod_tasks(4)
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks), dict(files))
    serial = serial_tree(repo, tasks, tmp_path / "serial")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    return repo, tasks, serial


def test_squash_lands_one_commit_equal_to_a_serial_run_and_removes_the_plans_branches(tmp_path):
    repo, tasks, serial = ran_plan(tmp_path)
    head = git(repo, "rev-parse", "HEAD").strip()
    (repo / "notes.txt").write_text("mine\n")  # the user's own untracked file: kept as it is
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    new = git(repo, "rev-parse", "HEAD").strip()
    assert r.stdout == (f"landed plan {PLAN} into main: 1 commit, {head[:10]}..{new[:10]}\n"
                        f"  {new[:10]} {PLAN}: land 5 tasks of plan {PLAN}\n"
                        f"removed the plan's branches and worktrees (team/{PLAN}/*)\n")
    assert git(repo, "rev-parse", "HEAD~1").strip() == head
    assert tree(repo, "HEAD") == serial
    assert git(repo, "status", "--porcelain") == "?? notes.txt\n"
    assert (repo / "notes.txt").read_text() == "mine\n"
    message = git(repo, "log", "-1", "--format=%B")
    subjects = {k: v["subject"] for k, v in store(repo).items()}
    assert message == (f"{PLAN}: land 5 tasks of plan {PLAN}\n\n"
                       + "".join(f"- {subjects[f'mod-{i}']}\n" for i in _merge_order(message)) + "\n"
                       + "".join(f"Team-Task: mod-{i}\n" for i in _merge_order(message)) + "\n")
    assert branches(repo) == ["main"] and worktrees(repo) == 1
    assert {k: v.get("landed") for k, v in store(repo).items()} == {k: new for k in store(repo)}
    assert not (repo / ".team/worktrees" / PLAN / "land.json").exists()

    again = run_team(repo, "run", "plan.yaml")  # nothing to run, and no new integration branch
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"plan {PLAN} was landed into your branch by `team land` (commit {new[:10]})" in again.stderr
    assert branches(repo) == ["main"]
    twice = run_team(repo, "land", PLAN)
    assert (twice.returncode, twice.stdout) == (0, f"plan {PLAN} was landed already (commit {new[:10]}): nothing to do\n")
    redo = run_team(repo, "run", "plan.yaml", "--redo", "mod-1")
    assert (redo.returncode, redo.stderr.splitlines()[-1]) == (2, (
        f"UserError: #2 mod-1 of plan {PLAN} was landed into your branch by `team land` (commit {new[:10]}) and "
        f"cannot be redone: revert that landing yourself (`git revert`), or start over with `team run plan.yaml --fresh`"))
    retry = run_team(repo, "task", "retry", f"{PLAN}.mod-1")
    assert (retry.returncode, retry.stderr) == (2, (
        f"UserError: #2 was landed into your branch by `team land` (commit {new[:10]}): it cannot run again; revert "
        f"the landed commit yourself, or start the plan over with `team run PLAN.yaml --fresh`\n"))


def _merge_order(message: str) -> list[int]:
    return [int(line.rsplit("-", 1)[1]) for line in message.splitlines() if line.startswith("Team-Task: ")]


def test_per_task_lands_one_commit_per_task_with_its_subject_and_trailer(tmp_path):
    repo, tasks, serial = ran_plan(tmp_path)
    order = [line.strip() for line in git(repo, "log", "--first-parent", "--merges", "--reverse",
                                          "--format=%(trailers:key=Team-Task,valueonly,separator=)",
                                          INTEG).splitlines()]
    head = git(repo, "rev-parse", "HEAD").strip()
    r = run_team(repo, "land", "plan.yaml", "--per-task")  # a plan file works as well as its name
    assert r.returncode == 0, r.stdout + r.stderr
    subjects = {k: v["subject"] for k, v in store(repo).items()}
    log = git(repo, "log", "--reverse", "--format=%s%x00%(trailers:key=Team-Task,valueonly,separator=)%x00%P",
              f"{head}..HEAD").splitlines()
    assert [line.split("\0")[:2] for line in log] == [[subjects[t], t] for t in order]
    assert all(len(line.split("\0")[2].split()) == 1 for line in log)  # plain commits, no merges
    assert tree(repo, "HEAD") == serial
    assert git(repo, "status", "--porcelain") == ""
    landed = {k: v.get("landed") for k, v in store(repo).items()}
    for sha, line in zip(git(repo, "rev-list", "--reverse", f"{head}..HEAD").split(), log, strict=True):
        assert landed[line.split("\0")[1]] == sha
    assert landed["check"] == git(repo, "rev-parse", "HEAD").strip()  # changed nothing: the tip holds it
    assert branches(repo) == ["main"] and worktrees(repo) == 1


def test_land_refuses_to_overwrite_local_changes_and_changes_nothing(tmp_path):
    repo, tasks, serial = ran_plan(tmp_path)
    (repo / "pkg/m1.py").write_text((repo / "pkg/m1.py").read_text() + "# my edit\n")
    (repo / "README").write_text("unrelated edit\n")
    before = _snapshot(repo)
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 2
    assert r.stderr == ("LandRefused: your checkout has changes the land would overwrite in pkg/m1.py: commit or "
                        "stash them (`git stash -u`), then `team land` again; nothing was changed\n")
    assert _snapshot(repo) == before
    assert INTEG in branches(repo)

    git(repo, "checkout", "--", "pkg/m1.py")  # the edit in README does not overlap: it is kept
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "HEAD") == serial
    assert git(repo, "status", "--porcelain") == "?? README\n"
    assert (repo / "README").read_text() == "unrelated edit\n"


def _content(repo: Path, path: str) -> None:
    (repo / path).write_text((repo / path).read_text() + "# my edit\n")


def _symlink(repo: Path, path: str) -> None:
    (repo / path).unlink()
    (repo / path).symlink_to("m0.py")


CHANGES = {"content": _content, "delete": lambda repo, path: (repo / path).unlink(),
           "mode": lambda repo, path: (repo / path).chmod(0o755), "type": _symlink}


@pytest.mark.parametrize("staged", [False, True], ids=["unstaged", "staged"])
@pytest.mark.parametrize("kind", list(CHANGES))
def test_land_refuses_every_uncommitted_change_to_a_path_it_changes_and_changes_nothing(tmp_path, kind, staged):
    """Issue 26 item 2: the old check compared file contents only, so a deletion (`rm`, `git rm`) or a
    `chmod +x` of a file the land rewrites was overwritten, exit 0. Compared as git compares (mode and
    object id), each kind of change refuses, staged or not, in both land modes."""
    repo, tasks, serial = ran_plan(tmp_path)
    CHANGES[kind](repo, "pkg/m1.py")  # mod-1 rewrites it
    if staged:
        git(repo, "add", "-A", "pkg/m1.py")
    assert git(repo, "status", "--porcelain", "pkg/m1.py")[:2] == ("M " if staged else " M").replace(
        "M", {"content": "M", "delete": "D", "mode": "M", "type": "T"}[kind])
    before = _snapshot(repo)
    for mode in ("--squash", "--per-task"):
        r = run_team(repo, "land", PLAN, mode)
        assert (r.returncode, r.stderr) == (2, (
            "LandRefused: your checkout has changes the land would overwrite in pkg/m1.py: commit or stash them "
            "(`git stash -u`), then `team land` again; nothing was changed\n")), mode
        assert _snapshot(repo) == before, mode
    assert INTEG in branches(repo) and not (repo / ".team/worktrees" / PLAN / "land.json").exists()


def _killed_after_its_intent(tmp_path: Path) -> tuple[Path, str]:
    """A plan run and a `team land` of it SIGKILLed after it recorded its intent, before it moved the
    branch (tried again on a fresh run of the plan when the kill came too late)."""
    repo, tasks, serial = ran_plan(tmp_path)
    base = git(repo, "rev-parse", "HEAD").strip()
    intent = repo / ".team/worktrees" / PLAN / "land.json"
    for _ in range(10):
        land = subprocess.Popen([sys.executable, "-m", "orchestrator", "land", PLAN], cwd=repo, env=team_env(repo),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_until(lambda p=land: intent.exists() or p.poll() is not None, timeout=60, interval=0.0005,
                   what="the land's intent")
        os.killpg(land.pid, signal.SIGKILL)
        land.wait()
        if intent.exists() and git(repo, "rev-parse", "HEAD").strip() == base:
            return repo, serial
        git(repo, "reset", "-q", "--hard", base)
        for lock in (repo / ".git").rglob("*.lock"):
            lock.unlink()
        run = run_team(repo, "run", "plan.yaml", "--fresh")
        assert run.returncode == 0, run.stdout + run.stderr
    raise AssertionError("every kill came after the land moved the branch")


def test_a_resumed_land_refuses_the_same_changes_but_takes_a_file_its_killed_git_left_missing(tmp_path):
    """The land that finishes a killed one checks again: each uncommitted change to a path it writes
    refuses it, except a file missing from the working tree, which is what a checkout cut short leaves."""
    repo, serial = _killed_after_its_intent(tmp_path)
    path = repo / "pkg/m1.py"
    index = (repo / ".git/index").read_bytes()
    kept = (path.read_bytes(), path.lstat().st_mode) if path.exists() else None
    for kind in CHANGES:
        for staged in (False, True):
            if kind == "delete" and not staged or kept is None and kind != "delete":
                continue
            if kept is not None:
                CHANGES[kind](repo, "pkg/m1.py")
            if staged:
                git(repo, "add", "-A", "pkg/m1.py")
            before = _snapshot(repo)
            r = run_team(repo, "land", PLAN)
            assert (r.returncode, r.stderr) == (2, (
                "LandRefused: your checkout has changes the land would overwrite in pkg/m1.py: commit or stash them "
                "(`git stash -u`), then `team land` again; nothing was changed\n")), (kind, staged)
            assert _snapshot(repo) == before, (kind, staged)
            if path.exists() or path.is_symlink():
                path.unlink()
            if kept is not None:
                path.write_bytes(kept[0])
                path.chmod(kept[1] & 0o7777)
            (repo / ".git/index").write_bytes(index)
    path.unlink(missing_ok=True)  # as the killed checkout may have left it
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(finishing the --squash land a killed `team land` left)" in r.stdout
    assert tree(repo, "HEAD") == serial and git(repo, "status", "--porcelain") == ""


def test_land_onto_a_branch_that_moved(tmp_path):
    repo, tasks, serial = ran_plan(tmp_path, **{"README": "r\n"})
    base = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "pkg/m2.py").write_text("CONFLICT = True\n")
    git(repo, "commit", "-qam", "rewrite m2")
    before = _snapshot(repo)
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 2
    assert r.stderr == (f"LandRefused: your branch side moved since plan {PLAN} started and conflicts with its result "
                        f"in pkg/m2.py; nothing was changed. Merge it yourself: git merge {INTEG}\n")
    assert _snapshot(repo) == before

    git(repo, "checkout", "-q", "main")
    (repo / "README").write_text("moved on\n")
    git(repo, "commit", "-qam", "readme")  # moved, but without touching what the plan changed
    r = run_team(repo, "land", PLAN, "--per-task")
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(repo, "show", "HEAD:README") == "moved on\n"
    assert git(repo, "log", "-1", "--format=%s", "HEAD~4") == "readme\n"  # then one commit per changing task
    assert git(repo, "diff", "--stat", f"{base}..HEAD~4", "--", "pkg").strip() == ""
    reference = tmp_path / "reference"
    git(tmp_path, "clone", "-q", str(repo), str(reference))
    git(reference, "checkout", "-q", "-B", "ref", git(repo, "rev-parse", "HEAD~4").strip())
    for t in tasks:
        assert subprocess.run(t["run"], shell=True, cwd=reference).returncode == 0
    git(reference, "add", "-A")
    assert git(reference, "write-tree").strip() == tree(repo, "HEAD")


def test_land_refuses_an_unfinished_plan_and_a_detached_head(tmp_path):
    tasks = codemod_tasks(2)
    tasks.insert(0, {"id": "broken", "run": "exit 3"})
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks), modules=2)
    assert run_team(repo, "run", "plan.yaml", "-k").returncode == 1
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 2
    assert r.stderr == (f"UserError: plan {PLAN} is not finished: #1 broken (failed); landing now would leave them "
                        f"out. Finish it (`team run plan.yaml`), or take those tasks out of the plan file, then "
                        f"land again\n")
    (repo / "plan.yaml").write_text(plan_yaml(PLAN, tasks[1:]))  # the user takes it out of the plan
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    git(repo, "checkout", "-q", "--detach")
    r = run_team(repo, "land", "plan.yaml")
    assert r.returncode == 2
    assert r.stderr == (f"LandRefused: your checkout {repo} has a detached HEAD: check out the branch to land plan "
                        f"{PLAN} into (`git switch BRANCH`), then `team land` again\n")
    git(repo, "checkout", "-q", "main")
    r = run_team(repo, "land", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "import os\nimport sys\n" in git(repo, "show", "HEAD:pkg/m0.py")


def test_include_uncommitted_puts_them_in_the_base_and_land_commits_them(tmp_path):
    tasks = codemod_tasks(2)
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks), modules=2)
    (repo / "pkg/m1.py").write_text((repo / "pkg/m1.py").read_text().replace("'tags'", "'labels'"))
    (repo / "pkg/new.py").write_text("X=1\n")
    before = _snapshot(repo)
    warned = run_team(repo, "run", "plan.yaml", "--dry-run")
    assert ("warning: your checkout has uncommitted changes the tasks will not see (pkg/m1.py, pkg/new.py): "
            "commit them first, or run with --include-uncommitted to put them in the plan's base") in warned.stdout
    r = run_team(repo, "run", "plan.yaml", "--include-uncommitted")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--include-uncommitted: your uncommitted changes (pkg/m1.py, pkg/new.py) are in the plan's base" in r.stderr
    assert _snapshot(repo) == before  # the user's files and index as they were
    assert '"labels": ["a", "b"]' in git(repo, "show", f"{INTEG}:pkg/m1.py")  # the format task saw the edit
    assert git(repo, "show", f"{INTEG}:pkg/new.py") == "X=1\n"
    assert not [p for p in git(repo, "ls-tree", "-r", "--name-only", INTEG).split()
                if p.startswith((".team/", ".tasks/"))]  # the state root is never snapshotted
    r = run_team(repo, "land", PLAN, "--per-task")
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(repo, "log", "--format=%s", "-3").splitlines()[2] == \
        f"team: uncommitted changes of main when plan {PLAN} started"
    assert git(repo, "status", "--porcelain") == ""
    assert '"labels"' in (repo / "pkg/m1.py").read_text()


def _snapshot(repo: Path) -> dict:
    """The user's checkout byte for byte: each path's type and mode, a file's bytes, a link's target;
    the index file, HEAD and what `git status` says."""
    files = {}
    for p in sorted(repo.rglob("*")):
        if p.relative_to(repo).parts[0] in (".git", ".team", ".tasks") or p.is_dir() and not p.is_symlink():
            continue
        st = p.lstat()
        files[str(p.relative_to(repo))] = (st.st_mode, os.readlink(p) if p.is_symlink() else
                                           hashlib.sha256(p.read_bytes()).hexdigest())
    g = repo / ".git"
    return {"files": files, "status": git(repo, "status", "--porcelain=v2", "--branch", "--untracked-files=all"),
            "HEAD": (g / "HEAD").read_bytes(), "index": (g / "index").read_bytes(),
            "tip": git(repo, "rev-parse", "HEAD")}


# ---------------------------------------------------------------- SIGKILL during land
BULK = 150


def bulk_tasks() -> list[dict]:
    """Tasks that rewrite many files (so a land writes many), one deleting some."""
    tasks = [{"id": f"bulk-{d}", "run": f"sed -i 's/old/new/' data/d{d}/*.txt"} for d in range(3)]
    tasks.append({"id": "prune", "run": "rm data/d3/f1*.txt && echo pruned > data/d3/PRUNED"})
    tasks.append({"id": "verify", "needs": [t["id"] for t in tasks], "run": "! grep -rq old data/d0 data/d1 data/d2"})
    return tasks


def kill_land_rounds(tmp_path: Path, rounds: int, kills: int, seed: int) -> tuple[int, int]:
    """Each round runs the plan afresh from the same base, SIGKILLs `team land` ``kills`` times
    (at a random instant, or just after it recorded its intent: while it writes the user's
    files and moves the branch), then lands for good: the branch's tree must equal a serial
    run's, the user's untracked file must be untouched, nothing of the plan left."""
    rng = random.Random(seed)
    files = {f"data/d{d}/f{i}.txt": f"{d} {i} old\n" * 40 for d in range(4) for i in range(BULK)}
    tasks = bulk_tasks()
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks), files, modules=0)
    base = git(repo, "rev-parse", "HEAD").strip()
    serial = serial_tree(repo, tasks, tmp_path / "serial")
    (repo / "mine.txt").write_text("untracked, mine\n")
    done = critical = 0
    doctored = False
    took = None
    intent = repo / ".team/worktrees" / PLAN / "land.json"
    for r in range(rounds):
        git(repo, "reset", "-q", "--hard", base)
        run = run_team(repo, "run", "plan.yaml", "--fresh", timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        mode = rng.choice(["squash", "per-task"])
        for k in range(kills if took is not None else 0):
            had = intent.exists()  # an earlier kill of this round left it: this land resumes that one
            land = subprocess.Popen([sys.executable, "-m", "orchestrator", "land", PLAN, f"--{mode}"], cwd=repo,
                                    env=team_env(repo), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            if rng.random() < 0.4:
                time.sleep(rng.uniform(0, took * 0.7))  # anywhere in the land (a resumed one is shorter)
            else:  # in its last, critical part: the user's files written, the branch moved
                wait_until(lambda p=land: intent.exists() or p.poll() is not None, timeout=60,
                           interval=0.0005, what="the land's intent")
                time.sleep(rng.uniform(0, 0.06))
            whole = rng.random() < 0.5
            if whole:
                os.killpg(land.pid, signal.SIGKILL)  # team and its git child
            else:
                land.send_signal(signal.SIGKILL)  # team alone: its git runs on
            land.wait()
            land.stderr.close()
            done += land.returncode == -signal.SIGKILL
            moved = git(repo, "rev-parse", "HEAD").strip() != base
            critical += land.returncode == -signal.SIGKILL and intent.exists() and not had
            if intent.exists() and not doctored:
                doctored = True
                doctor = run_team(repo, "doctor")
                assert f"  problem [land-interrupted] a `team land` of plan {PLAN} was interrupted" in doctor.stdout
                assert run_team(repo, "run", "plan.yaml").stderr == (
                    f"UserError: a `team land` of plan {PLAN} was interrupted: run `team land {PLAN}` to finish it "
                    f"before running the plan again\n")
            print(f"round {r} kill {k}: {'group' if whole else 'lead'} rc={land.returncode} "
                  f"intent={intent.exists()} moved={moved}")
        t0 = time.monotonic()
        final = run_team(repo, "land", PLAN, f"--{mode}", timeout=120)
        took = took or time.monotonic() - t0
        where = f"seed {seed} round {r} ({mode})"
        assert final.returncode == 0, f"{where}: {final.stdout}{final.stderr}"
        assert tree(repo, "HEAD") == serial, where
        assert git(repo, "status", "--porcelain") == "?? mine.txt\n", where
        assert (repo / "mine.txt").read_text() == "untracked, mine\n"
        assert branches(repo) == ["main"] and worktrees(repo) == 1, where
        assert _ref_locks(repo) == [], where  # no ref lock of a killed git left to refuse the next run
        assert all(v.get("landed") for v in store(repo).values()), where
        n = len(git(repo, "rev-list", f"{base}..HEAD").split())
        assert n == (1 if mode == "squash" else 4), f"{where}: {n} commits landed"
        assert git(repo, "fsck", "--no-dangling", "--no-progress") == ""
    print(f"{done} kills, {critical} in the critical part")
    return done, critical


def _ref_locks(repo: Path) -> list[str]:
    heads = repo / ".git" / "refs" / "heads"
    return sorted(str(p.relative_to(heads)) for p in heads.rglob("*.lock"))


def test_ref_locks_a_killed_git_left_under_the_plans_refs_block_neither_land_nor_a_fresh_run(tmp_path):
    """A `team land` SIGKILLed with its `git branch -D` leaves `refs/heads/team/<plan>/X.lock`: git
    then refuses every write of that ref ("cannot lock ref"). The plan's refs are written only
    under the plan's flock, so whoever holds it next removes them (found by the sampled kill test:
    the next round's `team run --fresh` failed to create the integration branch)."""
    repo, tasks, serial = ran_plan(tmp_path)
    heads = repo / ".git" / "refs" / "heads" / "team" / PLAN
    heads.mkdir(parents=True, exist_ok=True)
    (heads / "integration.lock").write_text("")
    (heads / f"{tasks[0]['id']}.lock").write_text("")
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "HEAD") == serial and _ref_locks(repo) == []
    base = git(repo, "rev-parse", "HEAD~1").strip()
    git(repo, "reset", "-q", "--hard", base)
    heads.mkdir(parents=True, exist_ok=True)
    (heads / "integration.lock").write_text("")  # as if that land's branch deletion had been killed
    r = run_team(repo, "run", "plan.yaml", "--fresh")
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(repo, "rev-parse", "--verify", "-q", INTEG).strip() and _ref_locks(repo) == []


def test_an_index_lock_held_by_a_running_git_refuses_the_land_before_its_intent_is_recorded(tmp_path):
    """The old land refused only after writing land.json: "nothing was changed", yet `team run` then
    refused to start because "a `team land` of plan ld was interrupted"."""
    repo, tasks, serial = ran_plan(tmp_path)
    lock, ready = repo / ".git" / "index.lock", tmp_path / "holding"
    holder = subprocess.Popen(["sh", "-c", f"exec 3>'{lock}'; touch '{ready}'; exec sleep 120"])
    try:
        wait_until(ready.exists, timeout=60, what="the lock held open")
        before = _snapshot(repo)
        r = run_team(repo, "land", PLAN)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr == (f"LandRefused: {lock} exists: a git command is running in your checkout; wait for it to "
                            f"end (or remove the file if none is), then `team land` again; nothing was changed\n")
        assert not (repo / ".team/worktrees" / PLAN / "land.json").exists()
        assert _snapshot(repo) == before and INTEG in branches(repo)
        again = run_team(repo, "run", "plan.yaml")
        assert again.returncode == 0 and "interrupted" not in again.stdout + again.stderr, again.stdout + again.stderr
    finally:
        holder.kill()
        holder.wait()
    lock.unlink()  # as the git holding it does when it ends
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "HEAD") == serial


def test_a_packed_refs_lock_a_killed_git_left_is_removed_but_never_a_live_one(tmp_path):
    """git takes `.git/packed-refs.lock` to delete any ref; a `team land` SIGKILLed in its `git branch -D`
    leaves it, and every later ref deletion fails (found by `make chaos`: the next `team land` failed).
    The lock is the whole repository's, so `reset` removes it only when no process has it open."""
    repo, tasks, serial = ran_plan(tmp_path)
    lock = repo / ".git" / "packed-refs.lock"
    with open(lock, "w"):  # a live git holding it (this process has it open): left alone, git says so
        r = run_team(repo, "land", PLAN)
        assert r.returncode == 1 and "packed-refs.lock': File exists" in r.stderr
        assert lock.exists()
    r = run_team(repo, "land", PLAN)  # now closed, as a killed git leaves it
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "HEAD") == serial and not lock.exists()
    assert git(repo, "branch", "--list", f"team/{PLAN}/*").strip() == ""


def test_a_branch_lock_the_killed_lands_update_ref_left_does_not_stop_the_land_that_resumes_it(tmp_path):
    """A `team land` SIGKILLed in its last `git update-ref` of your branch leaves `.git/refs/heads/main.lock`
    (found by the sampled kill test): the land that resumes the interrupted one removes it when no process
    has it open, and moves the branch."""
    repo, serial = _killed_after_its_intent(tmp_path)
    branch = git(repo, "symbolic-ref", "HEAD").strip()
    (repo / ".git" / f"{branch}.lock").write_text("")  # as its update-ref, killed, left it
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "HEAD") == serial and not (repo / ".git" / f"{branch}.lock").exists()


@pytest.mark.parametrize("moved", [True, False], ids=["branch-moved", "branch-not-moved"])
def test_the_head_lock_the_killed_lands_update_ref_left_is_removed_by_the_land_that_resumes_it(tmp_path, moved):
    """`git update-ref` of your checked-out branch locks `HEAD` too (to log the move in HEAD's reflog) and
    unlocks both at its end: a `team land` SIGKILLed there leaves `.git/HEAD.lock`, with your branch moved
    or not (found by the kill soak: the next `git reset` failed on it). The land that resumes the
    interrupted one removes it when no process has it open, and your next git command works."""
    repo, serial = _killed_after_its_intent(tmp_path)
    intent = repo / ".team/worktrees" / PLAN / "land.json"
    if moved:  # the killed update-ref got as far as moving the branch
        git(repo, "update-ref", git(repo, "symbolic-ref", "HEAD").strip(), json.loads(intent.read_text())["new"])
    (repo / ".git" / "HEAD.lock").write_text("")  # as its update-ref, killed, left it
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "HEAD") == serial and not (repo / ".git" / "HEAD.lock").exists()
    git(repo, "commit", "-q", "--allow-empty", "-m", "mine after the land")  # your next git command works


def test_kill_during_land_then_land_again_sampled(tmp_path):
    done, critical = kill_land_rounds(tmp_path, rounds=3, kills=3, seed=11)
    assert done >= 3


@pytest.mark.chaos
def test_kill_during_land_then_land_again_soak(tmp_path):
    done, critical = kill_land_rounds(tmp_path, rounds=9, kills=4, seed=int(time.time()))
    assert done >= 20 and critical >= 3


def test_land_refuses_merges_of_tasks_the_plan_no_longer_has(tmp_path):
    repo, tasks, serial = ran_plan(tmp_path, tasks=codemod_tasks(4)[:-1])  # no `check` needing them all
    (repo / "plan.yaml").write_text(plan_yaml(PLAN, [t for t in tasks if t["id"] != "mod-3"]))
    assert run_team(repo, "run", "plan.yaml").returncode == 0  # mod-3 is cancelled: removed from the plan
    before = _snapshot(repo)
    r = run_team(repo, "land", "plan.yaml")  # the plan file says which tasks the plan has now
    assert (r.returncode, r.stderr) == (2, (
        f"UserError: {INTEG} holds the merges of mod-3, which plan {PLAN} no longer has: landing would bring them "
        f"in. Put them back in the plan, or start over with `team run plan.yaml --fresh`\n"))
    assert _snapshot(repo) == before


def test_land_refuses_while_a_task_worktree_holds_uncommitted_work(tmp_path):
    """`team land` deletes the plan's worktrees once the result is in: one left behind (a lead killed
    between a merge and the removal that follows it) with a person's edit in it is refused, naming it."""
    repo, tasks, serial = ran_plan(tmp_path)
    wt = repo / ".team/worktrees" / PLAN / "mod-0"
    git(repo, "worktree", "add", "-q", "-b", f"team/{PLAN}/mod-0", str(wt), INTEG)
    (wt / "pkg/m0.py").write_text("# my note\n")
    before = _snapshot(repo)
    r = run_team(repo, "land", PLAN)
    assert (r.returncode, r.stderr) == (2, (
        f"UserError: team land would delete uncommitted work: task mod-0's worktree {wt} has changes in pkg/m0.py: "
        f"commit it on its branch team/{PLAN}/mod-0 (`cd {wt} && git add -A && git commit -m 'my changes'`), stash "
        f"it (`git -C {wt} stash push -u`; `git stash list` shows it), or copy the folder away (`cp -a {wt} "
        f"SOMEWHERE`); then `team land plan.yaml` again. Nothing was changed\n"))
    assert _snapshot(repo) == before and (wt / "pkg/m0.py").read_text() == "# my note\n"
    git(wt, "stash", "push", "-q", "-u")  # saved where the land does not reach
    r = run_team(repo, "land", PLAN)
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "HEAD") == serial
    assert git(repo, "show", "stash@{0}:pkg/m0.py") == "# my note\n"


def test_land_by_name_refuses_what_the_plan_file_refuses_and_the_run_suggests_the_file(tmp_path):
    """Issue 26 item 5: `team land NAME` took the store's tasks as the plan, so it landed the change of a
    task taken out of plan.yaml since the run, which `team land plan.yaml` refused; and the run's summary
    offered `team land NAME`, after a failed run too. Now the name lands what the plan file the run ran
    from says, and the summary offers the file, only once the plan is finished."""
    tasks = codemod_tasks(4)[:-1]
    broken = [*tasks, {"id": "broken", "run": "exit 3"}]
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, broken), modules=4)
    failed = run_team(repo, "run", "plan.yaml", "-k")
    assert failed.returncode == 1
    assert "team land ld" not in failed.stdout and "team land plan.yaml" not in failed.stdout
    assert failed.stdout.endswith("  git diff HEAD...team/ld/integration  # everything at once\n"
                                  "not finished: `team land` takes the result once every task completed; run the "
                                  "plan again\n")
    by_file, by_name = run_team(repo, "land", "plan.yaml"), run_team(repo, "land", PLAN)
    assert (by_name.returncode, by_name.stderr) == (by_file.returncode, by_file.stderr) == (2, (
        f"UserError: plan {PLAN} is not finished: #5 broken (failed); landing now would leave them out. Finish it "
        f"(`team run plan.yaml`), or take those tasks out of the plan file, then land again\n"))

    (repo / "plan.yaml").write_text(plan_yaml(PLAN, tasks))
    done = run_team(repo, "run", "plan.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.endswith("  team land plan.yaml                  # into your branch: one commit (--per-task: "
                                "one per task); removes the plan's branches\n")

    (repo / "plan.yaml").write_text(plan_yaml(PLAN, tasks[:-1]))  # mod-3 taken out, not run since
    before = _snapshot(repo)
    by_file, by_name = run_team(repo, "land", "plan.yaml"), run_team(repo, "land", PLAN)
    assert (by_name.returncode, by_name.stderr) == (by_file.returncode, by_file.stderr) == (2, (
        f"UserError: {INTEG} holds the merges of mod-3, which plan {PLAN} no longer has: landing would bring them "
        f"in. Put them back in the plan, or start over with `team run plan.yaml --fresh`\n"))
    assert _snapshot(repo) == before

    (repo / "plan.yaml").rename(repo / "old-plan.yaml")
    gone = run_team(repo, "land", PLAN)
    assert (gone.returncode, gone.stderr) == (2, (
        f"UserError: plan '{PLAN}' ran from plan.yaml, which is no longer there: land it with its plan file as it "
        f"is now, `team land PATH/TO/PLAN.yaml`\n"))
    (repo / "old-plan.yaml").write_text(plan_yaml(PLAN, tasks))
    r = run_team(repo, "land", "old-plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _snapshot(repo) != before
