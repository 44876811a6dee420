"""orchestrator.worktree on real git repositories in tmp_path.

No identity is configured (HOME and the global config point into tmp_path), so
every test also proves the fallback author works without touching git config.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from gitutil import USER_ID, no_git_identity  # noqa: F401  (autouse fixture)

from orchestrator.core.errors import InvalidName, UserError, WorkFailed
from orchestrator.git.command import GitError
from orchestrator.git.orphans import find_orphans
from orchestrator.git.worktrees import MergeConflict, Worktrees

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "refactor"


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """The test's own git (as the user): identity given, no opportunistic index writes."""
    env = {**os.environ, **USER_ID, "GIT_OPTIONAL_LOCKS": "0"}
    proc = subprocess.run(["git", "-C", str(cwd), *args], env=env, capture_output=True, text=True)
    if check and proc.returncode:
        raise AssertionError(f"git {args}: {proc.stderr}")
    return proc.stdout


def make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def show(repo: Path, ref: str, name: str) -> str:
    return git(repo, "show", f"{ref}:{name}")


def snapshot(repo: Path) -> dict:
    """Everything of the user's that must not change: files, index, HEAD, branch, config."""
    files = {}
    for p in sorted(repo.rglob("*")):
        rel = p.relative_to(repo)
        if p.is_file() and rel.parts[0] not in (".git", ".team", ".tasks"):
            files[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    g = repo / ".git"
    return {"files": files, "status": git(repo, "status", "--porcelain=v2", "--branch", "--untracked-files=all"),
            "HEAD": (g / "HEAD").read_bytes(), "index": (g / "index").read_bytes(),
            "config": (g / "config").read_bytes(), "tip": git(repo, "rev-parse", "HEAD")}


def write_and_commit(wt: Worktrees, task: str, files: dict[str, str]) -> None:
    path = wt.prepare(task)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    assert wt.commit(task, f"{task}: edit") is not None


def assert_integration_clean(wt: Worktrees) -> None:
    integ = wt.integration_dir
    if wt.in_memory:  # merges need no checkout: none is made, none is left
        assert not integ.exists() and integ.resolve() not in wt.git.worktrees()
        return
    assert git(integ, "status", "--porcelain", "--untracked-files=all") == ""
    gitdir = Path(git(integ, "rev-parse", "--absolute-git-dir").strip())
    assert not (gitdir / "MERGE_HEAD").exists() and list(gitdir.glob("*.lock")) == []
    assert git(integ, "symbolic-ref", "HEAD").strip() == f"refs/heads/{wt.integration}"


def test_parallel_tasks_editing_different_files_all_land(tmp_path):
    repo = make_repo(tmp_path / "repo", {f"m{i}.py": f"x = {i}\n" for i in range(4)})
    wt = Worktrees(repo, "par")
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            write_and_commit(wt, f"t{i}", {f"m{i}.py": f"x = {i * 10}\n", f"new{i}.txt": "hi\n"})
            wt.merge(f"t{i}")
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    b = wt.integration
    assert sorted(wt.merged_tasks()) == ["t0", "t1", "t2", "t3"]
    for i in range(4):
        assert show(repo, b, f"m{i}.py") == f"x = {i * 10}\n"
        assert show(repo, b, f"new{i}.txt") == "hi\n"
        assert not wt.path(f"t{i}").exists()
    assert wt.task_branches() == []  # merged branches are deleted
    parents = git(repo, "log", "--first-parent", "--format=%P", b).split("\n")[:4]
    assert all(len(p.split()) == 2 for p in parents)  # four --no-ff merge commits
    assert_integration_clean(wt)
    assert show(repo, "main", "m1.py") == "x = 1\n"  # the user's branch did not move


def test_a_task_commits_while_another_worktree_is_half_made(tmp_path):
    """`git worktree add` makes .git/worktrees/NAME/ before the files in it, and `git worktree
    list` fails while one is half made ("failed to read .git/worktrees/mod-1/commondir"). A run's
    merge thread commits a finished task while its prepare thread adds the next worktree: the
    commit must not depend on the other worktree being complete (a run failed a task on this)."""
    repo = make_repo(tmp_path / "repo", {"a.py": "a = 1\n"})
    wt = Worktrees(repo, "half")
    path = wt.prepare("done")
    (path / "a.py").write_text("a = 2\n")
    half = repo / ".git/worktrees/being-added"  # what a concurrent `git worktree add` has made so far:
    half.mkdir()                                  # the entry, its gitdir, and commondir not written yet
    (tmp_path / "being-added").mkdir()
    (tmp_path / "being-added/.git").write_text(f"gitdir: {half}\n")
    (half / "gitdir").write_text(f"{tmp_path / 'being-added/.git'}\n")
    (half / "commondir").touch()
    assert subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True).returncode == 128
    assert wt.commit("done", "done: edit") is not None
    assert show(repo, "team/half/done", "a.py") == "a = 2\n"


def test_a_merge_leaves_the_ref_lock_of_a_task_committing_meanwhile(tmp_path):
    """A task commits in its own worktree without the plan's flock, in parallel with merges of other
    tasks; its `git commit` holds refs/heads/team/<plan>/<task>.lock meanwhile. A merge must not take
    that for a dead git's leftover: removing it made the commit fail ("couldn't set
    'refs/heads/team/rv/mod-0'", 1 run in 34 of a 4-task plan)."""
    repo = make_repo(tmp_path / "repo", {"a.py": "a = 1\n", "b.py": "b = 1\n"})
    wt = Worktrees(repo, "busy")
    done, busy = wt.prepare("done"), wt.prepare("busy")
    (done / "a.py").write_text("a = 2\n")
    assert wt.commit("done", "done: edit") is not None
    live = repo / ".git/refs/heads/team/busy/busy.lock"  # busy's `git commit`, under way
    live.write_text(git(repo, "rev-parse", "HEAD"))
    assert wt.merge("done").status == "merged"
    assert live.exists()
    live.unlink()
    (busy / "b.py").write_text("b = 2\n")
    assert wt.commit("busy", "busy: edit") is not None


def test_a_listing_that_meets_a_half_made_worktree_reads_it_again(tmp_path):
    """Another process adding a worktree (``team doctor`` during a run): the listing waits it out."""
    repo = make_repo(tmp_path / "repo", {"a.py": "a = 1\n"})
    wt = Worktrees(repo, "half")
    half = repo / ".git/worktrees/late"
    half.mkdir(parents=True)
    (tmp_path / "late").mkdir()
    (tmp_path / "late/.git").write_text(f"gitdir: {half}\n")
    (half / "gitdir").write_text(f"{tmp_path / 'late/.git'}\n")
    (half / "commondir").touch()
    (half / "HEAD").write_text(git(repo, "rev-parse", "HEAD"))
    finish = threading.Timer(0.2, lambda: (half / "commondir").write_text("../..\n"))
    finish.start()
    try:
        listed = wt.git.worktrees()
    finally:
        finish.join()
    assert (tmp_path / "late").resolve() in listed


def test_same_lines_conflict_names_the_file_and_keeps_the_branch(tmp_path):
    repo = make_repo(tmp_path / "repo", {"shared.py": "VALUE = 1\n", "other.py": "o\n"})
    wt = Worktrees(repo, "cf")
    write_and_commit(wt, "first", {"shared.py": "VALUE = 2\n"})
    write_and_commit(wt, "second", {"shared.py": "VALUE = 3\n", "other.py": "changed\n"})
    assert wt.merge("first").status == "merged"
    tip_before = git(repo, "rev-parse", wt.integration)

    with pytest.raises(MergeConflict) as info:
        wt.merge("second")
    err = info.value
    assert err.files == ["shared.py"]
    assert err.exit_code == 1
    assert str(err) == (
        f"merge conflict: task 'second' (team/cf/second) conflicts with team/cf/integration in "
        f"shared.py; nothing was merged, the branch and its worktree {wt.path('second')} are kept.\n"
        f"to resolve it: cd {wt.path('second')} && git merge team/cf/integration; fix shared.py; "
        f"git add -A && git commit --no-edit; the next run merges your resolution without running the task again")
    assert git(repo, "rev-parse", wt.integration) == tip_before
    assert show(repo, "team/cf/second", "shared.py") == "VALUE = 3\n"
    assert (wt.path("second") / "shared.py").read_text() == "VALUE = 3\n"
    assert wt.task_branches() == ["second"]
    assert_integration_clean(wt)

    # Kept work is never deleted unless the caller says so (discard=True).
    with pytest.raises(WorkFailed, match=r"team/cf/second holds 1 commit not on team/cf/integration; "
                                         r"refusing to delete them"):
        wt.prepare("second", fresh=True)
    assert show(repo, "team/cf/second", "shared.py") == "VALUE = 3\n"
    # A retry from a fresh worktree starts from the current tip and merges.
    path = wt.prepare("second", fresh=True, discard=True)
    assert (path / "shared.py").read_text() == "VALUE = 2\n"
    (path / "shared.py").write_text("VALUE = 3\n")
    wt.commit("second", "retry")
    assert wt.merge("second").status == "merged"
    assert show(repo, wt.integration, "shared.py") == "VALUE = 3\n"
    assert wt.merged_tasks() == ["first", "second"]


def test_task_prepared_after_a_merge_sees_it_and_resume_reuses_the_worktree(tmp_path):
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    wt = Worktrees(repo, "dep")
    write_and_commit(wt, "schema", {"schema.sql": "create table t;\n"})
    early = wt.prepare("early")  # forked before the merge: does not see it
    wt.merge("schema")
    path = wt.prepare("migrate")
    assert (path / "schema.sql").read_text() == "create table t;\n"
    assert not (early / "schema.sql").exists()

    (path / "schema.sql").write_text("create table t (id int);\n")
    assert wt.prepare("migrate") == path  # a resumed task gets its unfinished work back
    assert (path / "schema.sql").read_text() == "create table t (id int);\n"
    assert wt.commit("migrate", "migrate") is not None
    assert wt.commit("migrate", "again") is None  # clean: no-op
    wt.merge("migrate")
    assert show(repo, wt.integration, "schema.sql") == "create table t (id int);\n"
    # "early" changed nothing and is behind: prepare re-forks it from the tip.
    assert (wt.prepare("early") / "schema.sql").exists()
    assert wt.merge("early").status == "up-to-date"
    assert git(repo, "log", "-1", "--format=%an <%ae>", "team/dep/integration^2") == "team <team@localhost>\n"


def test_user_tree_index_and_branch_are_byte_for_byte_unchanged(tmp_path):
    repo = make_repo(tmp_path / "repo", {"src/a.py": "a = 1\n", "src/b.py": "b = 1\n", "README": "r\n"})
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "src/a.py").write_text("a = 'unstaged'\n")
    (repo / "src/b.py").write_text("b = 'staged'\n")
    git(repo, "add", "src/b.py")
    (repo / "notes.txt").write_text("untracked\n")
    before = snapshot(repo)

    wt = Worktrees(repo, "safe")
    write_and_commit(wt, "one", {"src/a.py": "a = 2\n"})
    write_and_commit(wt, "two", {"src/a.py": "a = 3\n"})
    wt.merge("one")
    with pytest.raises(MergeConflict):
        wt.merge("two")
    find_orphans(wt)
    wt.summary()
    wt.release()

    assert snapshot(repo) == before
    assert git(repo, "status", "--porcelain") == " M src/a.py\nM  src/b.py\n?? notes.txt\n"
    assert (repo / ".git/info/exclude").read_text().splitlines()[-2:] == [".tasks/", ".team/"]
    assert show(repo, wt.integration, "src/a.py") == "a = 2\n"
    assert show(repo, wt.integration, "src/b.py") == "b = 1\n"  # forked from HEAD, not the index


def test_summary_names_the_branch_and_the_commands(tmp_path):
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    wt = Worktrees(repo, "sum")
    write_and_commit(wt, "x", {"a.txt": "x\n"})
    write_and_commit(wt, "y", {"a.txt": "y\n"})
    wt.merge("x")
    with pytest.raises(MergeConflict):
        wt.merge("y")
    wt.release()
    assert not wt.integration_dir.exists()
    assert wt.summary().text() == (
        "result: branch team/sum/integration (2 commits ahead of your HEAD; 1 task merged)\n"
        "not merged (branches kept): y\n"
        "to review and take the result into your current branch:\n"
        "  team log sum                          # the tasks in merge order, with their commits\n"
        "  team diff sum.TASK                    # one task's own change\n"
        "  git diff HEAD...team/sum/integration  # everything at once\n"
        "  team land sum                         # into your branch: one commit (--per-task: one per task); "
        "removes the plan's branches")
    assert git(repo, "diff", "HEAD...team/sum/integration") == (  # the printed git command works
        "diff --git a/a.txt b/a.txt\nindex 7898192..587be6b 100644\n--- a/a.txt\n+++ b/a.txt\n"
        "@@ -1 +1 @@\n-a\n+x\n")


def test_summary_once_the_result_is_in_your_branch_offers_nothing_to_take(tmp_path):
    """The user merged the result by hand: a rerun's summary no longer says "0 commits ahead",
    "to review and take the result"."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    wt = Worktrees(repo, "sum")
    wt.ensure_integration(False)
    assert wt.summary().text() == "result: branch team/sum/integration: nothing merged into it yet"
    write_and_commit(wt, "x", {"a.txt": "x\n"})
    wt.merge("x")
    wt.release()
    assert wt.summary().text().startswith("result: branch team/sum/integration (2 commits ahead of your HEAD; "
                                          "1 task merged)\nto review and take")
    git(repo, "merge", "-q", "--ff-only", "team/sum/integration")
    assert wt.summary().text() == (
        "result: branch team/sum/integration (1 task merged): your HEAD has all of it already\n"
        "nothing to take; `team land sum` removes the plan's branches and worktrees")


def test_bad_roots_names_and_git_failures_are_clear(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserError, match=r"isolation: worktree needs a git repository at .*plain"):
        Worktrees(tmp_path / "plain", "p")
    empty = tmp_path / "empty"
    git(tmp_path, "init", "-q", str(empty))
    with pytest.raises(UserError, match="needs at least one commit"):
        Worktrees(empty, "p").prepare("t")
    repo = make_repo(tmp_path / "repo", {"a": "a\n"})
    with pytest.raises(InvalidName, match="plan name '../x'"):
        Worktrees(repo, "../x")
    wt = Worktrees(repo, "p")
    with pytest.raises(InvalidName, match="reserved"):
        wt.prepare("integration")
    with pytest.raises(UserError, match="call prepare"):
        wt.merge("never")
    git(repo, "checkout", "-q", "-b", "team/q/integration")  # the user checked it out
    with pytest.raises(GitError, match="worktree add .* failed with exit 128: .*already checked out"):
        Worktrees(repo, "q", in_memory=False).prepare("t")
    with pytest.raises(UserError, match=f"team/q/integration is checked out in {repo}: the plan's merges would "
                                        f"move it under that checkout; check out another branch there"):
        Worktrees(repo, "q", in_memory=True).prepare("t")


def test_leftover_merge_state_is_repaired_and_nothing_merges_twice(tmp_path):
    """Merging in the integration worktree (a git older than 2.38): what a killed merger left there."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    wt = Worktrees(repo, "rec", in_memory=False)
    write_and_commit(wt, "a", {"a.txt": "A\n"})
    integ = wt.integration_dir
    # A merger killed half way: MERGE_HEAD, a half-written index, a stale index.lock.
    git(integ, "merge", "--no-commit", "--no-ff", "team/rec/a")
    gitdir = Path(git(integ, "rev-parse", "--absolute-git-dir").strip())
    (gitdir / "index.lock").write_text("")
    (integ / "junk.tmp").write_text("x")
    kinds = sorted(o.kind for o in find_orphans(wt, live=["a"]))
    assert kinds == ["merge-in-progress", "stale-lock"]

    result = wt.merge("a")
    assert result.status == "merged"
    assert result.recovered == ("removed stale index.lock", "aborted an unfinished merge",
                                "reset the integration worktree to its branch")
    assert wt.merged_tasks() == ["a"]
    assert_integration_clean(wt)

    # Killed after the merge commit, before the branch was deleted: skipped, cleaned.
    tip = git(repo, "rev-parse", f"{wt.integration}^2").strip()
    git(repo, "branch", "team/rec/a", tip)
    assert wt.merge("a").status == "up-to-date"
    assert wt.task_branches() == [] and wt.merged_tasks() == ["a"]
    assert wt.merge("a").status == "up-to-date"  # branch gone: found by its trailer

    # Killed while removing the merged worktree: half its files gone, a marker left.
    git(repo, "branch", "team/rec/a", tip)
    git(repo, "worktree", "add", "-q", str(wt.path("a")), "team/rec/a")
    (wt.path("a") / "a.txt").unlink()
    (wt.base_dir / ".removing-a").touch()
    assert [o.name for o in find_orphans(wt)] == ["a"]
    result = wt.merge("a")
    assert (result.status, result.recovered) == ("up-to-date", ("finished removing task a's worktree",))
    assert not wt.path("a").exists() and wt.task_branches() == [] and wt.merged_tasks() == ["a"]


def test_in_memory_merge_drops_an_old_integration_worktree_and_finishes_what_a_kill_left(tmp_path):
    """In memory (git ≥ 2.38): an integration worktree an older run left, half merged, goes (merges need
    none); the merge moves the branch and deletes the task's branch in one ref transaction, so a kill
    leaves at most the task's worktree, which the next merge removes without merging twice."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    wt = Worktrees(repo, "rec", in_memory=True)
    write_and_commit(wt, "a", {"a.txt": "A\n"})
    Worktrees(repo, "rec", in_memory=False).ensure_integration()  # an older run's integration worktree
    integ = wt.integration_dir
    git(integ, "merge", "--no-commit", "--no-ff", "team/rec/a")  # killed half way, in that worktree
    assert wt.merge("a").status == "merged"
    assert wt.merged_tasks() == ["a"] and wt.task_branches() == [] and not wt.path("a").exists()
    assert_integration_clean(wt)
    assert show(repo, wt.integration, "a.txt") == "A\n"
    git(repo, "diff", "--quiet", f"{wt.integration}^2", wt.integration)

    # Killed after the ref transaction, before the worktree was removed: the worktree, no branch.
    git(repo, "worktree", "add", "-q", "--detach", str(wt.path("a")), f"{wt.integration}^2")
    assert [o.name for o in find_orphans(wt)] == ["a"]
    assert wt.merge("a").status == "up-to-date"
    assert not wt.path("a").exists() and wt.merged_tasks() == ["a"]
    git(repo, "worktree", "add", "-q", "--detach", str(wt.path("a")), f"{wt.integration}^2")
    assert wt.drop_merged("a") and not wt.path("a").exists()  # what a resumed run does (isolation.py)


def test_an_in_memory_merge_removes_the_ref_locks_a_killed_merge_left_but_not_a_live_one(tmp_path):
    """The merge's ref transaction locks integration, the task's branch and (to delete the branch)
    packed-refs: killed inside it, it left those locks and every later merge failed ("Unable to create
    '.git/packed-refs.lock': File exists"; the pool's kill test, seed 802125). A stale one goes; one a
    live git holds open stays, and git says so."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    wt = Worktrees(repo, "lk", in_memory=True)
    write_and_commit(wt, "a", {"a.txt": "A\n"})
    write_and_commit(wt, "b", {"b.txt": "B\n"})
    packed = repo / ".git/packed-refs.lock"
    branch_lock = repo / ".git/refs/heads/team/lk/a.lock"
    for lock in (packed, branch_lock):
        lock.write_text("")
        os.utime(lock, (time.time() - 10, time.time() - 10))  # left by a git killed a while ago
    assert wt.merge("a").status == "merged"
    assert not packed.exists() and not branch_lock.exists()
    with open(packed, "w"):  # a live git's (the user's `git fetch --prune`, say)
        os.utime(packed, (time.time() - 10, time.time() - 10))
        with pytest.raises(GitError, match="packed-refs.lock"):
            wt.merge("b")
        assert packed.exists()
    packed.unlink()
    assert wt.merge("b").status == "merged" and wt.merged_tasks() == ["a", "b"]


def test_a_removal_killed_in_its_branch_deletion_is_finished_despite_the_packed_refs_lock_git_left(tmp_path):
    """A lead SIGKILLed with its git in the `git branch -D` that follows a merge leaves the removal's
    marker, the branch and `.git/packed-refs.lock`, which fails every later ref deletion ("File
    exists"). The resumed merge removes that lock (open in no process, no longer written) and finishes
    the removal (found by test_kill_mid_merge_then_resume_sampled under load: the resumed merge failed)."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    wt = Worktrees(repo, "pk")
    write_and_commit(wt, "a", {"a.txt": "A\n"})
    assert wt.merge("a").status == "merged"
    git(repo, "branch", "team/pk/a", git(repo, "rev-parse", f"{wt.integration}^2").strip())
    (wt.base_dir / ".removing-a").touch()
    lock = repo / ".git" / "packed-refs.lock"
    lock.write_text("")
    old = time.time() - 60
    os.utime(lock, (old, old))  # the killed git's: written a while ago, open in no process
    result = wt.merge("a")
    assert (result.status, result.recovered) == ("up-to-date", ("finished removing task a's worktree",))
    assert wt.task_branches() == [] and wt.merged_tasks() == ["a"] and not lock.exists()


def test_prepare_repairs_half_created_worktrees(tmp_path):
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    wt = Worktrees(repo, "fix")
    path = wt.prepare("t")
    admin = Path(git(path, "rev-parse", "--absolute-git-dir").strip())
    (admin / "locked").write_text("initializing")  # `git worktree add` killed mid-checkout
    (path / "b.txt").unlink()
    assert wt.prepare("t") == path
    assert (path / "b.txt").read_text() == "b\n"
    assert git(path, "status", "--porcelain") == ""
    assert "locked" not in git(repo, "worktree", "list", "--porcelain")

    stray = wt.path("s")
    stray.mkdir(parents=True)
    (stray / "junk").write_text("x")  # a directory git does not know
    assert (wt.prepare("s") / "a.txt").read_text() == "a\n"
    assert not (stray / "junk").exists()
    wt.path("f").write_text("a file where the worktree goes")
    assert (wt.prepare("f") / "b.txt").read_text() == "b\n"


def test_orphans_are_found_and_nothing_is_removed(tmp_path):
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    wt = Worktrees(repo, "orph")
    for t in ("live", "dead", "gone"):
        write_and_commit(wt, t, {f"{t}.txt": t})
    shutil.rmtree(wt.path("gone"))  # worktree dir deleted by hand: a stale git entry
    (wt.base_dir / "stray").mkdir()
    found = {(o.kind, o.name): o.detail for o in find_orphans(wt, live=["live"])}
    assert found == {
        ("task", "dead"): f"branch team/orph/dead (1 unmerged commit), worktree {wt.path('dead')}",
        ("task", "gone"): f"branch team/orph/gone (1 unmerged commit), worktree {wt.path('gone')}",
        ("stray-dir", "stray"): f"{wt.base_dir / 'stray'} is not a registered worktree",
        ("stale-entry", "gone"): f"git worktree entry for missing {wt.path('gone').resolve()}",
    }
    assert wt.task_branches() == ["dead", "gone", "live"]  # finding them removed nothing
    assert wt.path("dead").is_dir() and (wt.base_dir / "stray").is_dir()


MERGER = """
import sys
from orchestrator.git.worktrees import Worktrees
wt = Worktrees(sys.argv[1], sys.argv[2], in_memory=sys.argv[4] == "memory")
print("merging", flush=True)
wt.merge(sys.argv[3])
print("done", flush=True)
"""


def kill_mid_merge_rounds(tmp_path: Path, rounds: int, seed: int, files: int = 1500, mode: str = "memory") -> None:
    """Each round a subprocess merges a task rewriting ``files`` files and is SIGKILLed at a
    random instant: alone (its git child runs on while it holds the lock, until its
    next write to the dead pipe) or with its whole process group (leaving git's
    half-written state). A resumed merge() must leave integration holding every task
    exactly once, with exactly that task's tree. ``mode``: merges in memory, or in the integration
    worktree (a git older than 2.38)."""
    rng = random.Random(seed)
    repo = make_repo(tmp_path / "repo", {"base.txt": "base\n"})
    wt = Worktrees(repo, "kill", in_memory=mode == "memory")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    expect: list[str] = []
    for r in range(rounds):
        task = f"big{r}"
        path = wt.prepare(task)
        for i in range(files):
            (path / "bulk" / f"d{i % 30}").mkdir(parents=True, exist_ok=True)
            (path / "bulk" / f"d{i % 30}" / f"f{i}.txt").write_text(f"{task} {i}\n" * 10)
        wt.commit(task, task)
        proc = subprocess.Popen([sys.executable, "-c", MERGER, str(repo), "kill", task, mode], env=env,
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert proc.stdout.readline() == "merging\n"
        time.sleep(rng.uniform(0, 0.4))  # the kill instant, not a wait for state
        whole_group = rng.random() < 0.5
        if whole_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        result = wt.merge(task)  # the resumed lead
        print(f"round {r}: killed {'group' if whole_group else 'lead'}: {result.status} {result.recovered}")
        expect.append(task)
        where = f"round {r} (seed {seed}, killed {'group' if whole_group else 'lead'})"
        assert wt.merged_tasks() == expect, where
        assert_integration_clean(wt)
        assert not wt.path(task).exists() and wt.task_branches() == [], where
        git(repo, "diff", "--quiet", f"{wt.integration}^2", wt.integration)  # the task's tree exactly
        assert show(repo, wt.integration, "bulk/d7/f157.txt") == f"{task} 157\n" * 10
    assert len(git(repo, "ls-tree", "-r", "--name-only", wt.integration).split()) == files + 1
    assert git(repo, "fsck", "--no-dangling", "--no-progress") == ""


@pytest.mark.parametrize("mode", ["memory", "checkout"])
def test_kill_mid_merge_then_resume_sampled(tmp_path, mode):
    kill_mid_merge_rounds(tmp_path, rounds=3, seed=7, files=800, mode=mode)


@pytest.mark.chaos
@pytest.mark.parametrize("mode", ["memory", "checkout"])
def test_kill_mid_merge_then_resume_soak(tmp_path, mode):
    kill_mid_merge_rounds(tmp_path, rounds=25, seed=int(time.time()), mode=mode)


def test_refactor_example_offline_plan(tmp_path):
    """Run plan-offline.yaml's tasks by hand through Worktrees: the codemods run in
    parallel worktrees, merge back, and the final test task passes on the result."""
    from orchestrator.plan.load import load_plan

    repo = tmp_path / "refactor"
    out = subprocess.run([str(EXAMPLE / "setup.sh"), str(repo)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{repo}\nnext: cd {repo} && team run plan-offline.yaml\n"
    plan = load_plan(repo / "plan-offline.yaml").plan
    assert plan.isolation == "worktree"
    before = snapshot(repo)
    wt = Worktrees(repo, plan.name)
    runs: dict[str, subprocess.CompletedProcess] = {}

    def run(task) -> None:
        cwd = wt.prepare(task.id)
        runs[task.id] = subprocess.run(task.run, shell=True, cwd=cwd, capture_output=True, text=True)
        wt.commit(task.id, task.id)
        wt.merge(task.id)

    codemods = [t for t in plan.tasks if not t.needs]
    threads = [threading.Thread(target=run, args=(t,)) for t in codemods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {k: (r.returncode, r.stdout) for k, r in runs.items()} == {
        t.id: (0, f"{t.run.split()[-1]}: renamed {1 if t.id != 'rename-orders' else 3} x fetch_data -> load_data\n")
        for t in codemods}
    (final,) = [t for t in plan.tasks if t.needs]
    assert sorted(final.needs) == sorted(t.id for t in codemods)
    run(final)
    assert runs["test"].returncode == 0, runs["test"].stderr
    assert "Ran 5 tests" in runs["test"].stderr and runs["test"].stderr.rstrip().endswith("OK")
    assert sorted(wt.merged_tasks()) == sorted(t.id for t in codemods)  # tests changed nothing
    assert "def load_data(" in show(repo, wt.integration, "shop/api.py")
    assert snapshot(repo) == before  # the user's checkout still has fetch_data
    assert "def fetch_data(" in (repo / "shop/api.py").read_text()


def test_root_in_a_subdirectory_runs_tasks_in_that_subdirectory(tmp_path):
    repo = make_repo(tmp_path / "repo", {"svc/app.py": "a\n", "lib/x.py": "x\n"})
    wt = Worktrees(repo / "svc", "sub")
    cwd = wt.prepare("t")
    assert cwd == repo / "svc/.team/worktrees/sub/t/svc"
    (cwd / "app.py").write_text("b\n")
    wt.commit("t", "t")
    wt.merge("t")
    assert show(repo, wt.integration, "svc/app.py") == "b\n"
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_refs_read_from_git_files_agree_with_git(tmp_path):
    """Worktrees.tip and .head read refs from git's files (git/refs.py) instead of asking git: the answers
    are git's for a loose ref, a packed one (`git pack-refs --all`, as gc does), one packed and then moved
    (loose again, the packed line stale), a deleted one, a symbolic branch, and a worktree's HEAD detached,
    on a branch, and on a packed branch."""
    repo = make_repo(tmp_path / "repo", {"a.py": "a = 1\n"})
    wt = Worktrees(repo, "refs")
    wt.ensure_integration()
    first = git(repo, "rev-parse", "HEAD").strip()
    assert wt.tip(wt.integration) == first
    path = wt.prepare("t1")
    (path / "a.py").write_text("a = 2\n")
    second = wt.commit("t1", "t1")
    assert second is not None and wt.tip(wt.branch("t1")) == second and wt.head(path) == second
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git/refs/heads/team/refs/t1").exists()  # packed: read from packed-refs
    assert wt.tip(wt.branch("t1")) == second and wt.head(path) == second and wt.tip(wt.integration) == first
    git(repo, "update-ref", f"refs/heads/{wt.branch('t1')}", first)  # loose again, packed line stale
    assert wt.tip(wt.branch("t1")) == first == git(repo, "rev-parse", wt.branch("t1")).strip()
    git(repo, "update-ref", f"refs/heads/{wt.branch('t1')}", second)
    git(path, "checkout", "-q", "--detach", first)
    assert wt.head(path) == first
    git(repo, "symbolic-ref", "refs/heads/team/refs/alias", f"refs/heads/{wt.integration}")
    assert wt.tip("team/refs/alias") == first  # a symbolic branch: asked of git
    git(repo, "update-ref", "--no-deref", "-d", "refs/heads/team/refs/alias")
    assert wt.tip(wt.integration) == first
    git(repo, "update-ref", "-d", f"refs/heads/{wt.branch('t1')}")  # gone from the file and packed-refs
    assert wt.tip(wt.branch("t1")) is None and wt.tip("team/refs/none") is None
