"""Reused worktrees (git/pool.py) in `team run`, on real repositories and real codemods (ruff).

A plan of 8 codemod tasks with 2 workers: each task appends its id to its
own notes file (an edit applied twice would show two lines), checks that no
ignored file of an earlier task is there (a reset that left one would write
LEAK), leaves an ignored file of its own, and runs ``ruff format`` on its
module; a last task concatenates every notes file. The reference is a serial
run in a clone where each task starts without the ignored files of the ones
before (what a fresh worktree gives).

The kill tests SIGKILL `team run` while one of the pool's own steps runs,
found among the lead's child processes: a reset (``git checkout --detach`` or
``git clean`` in a task's worktree), a task (its ``sleep`` in a worktree), a
commit (``git commit`` on the task's detached HEAD, or its branch made there),
or a merge (``git merge-tree``, the ref transaction); sometimes the git child
dies with it. Then `team run` again must
exit 0 with the reference tree, every task merged and completed exactly once,
nothing left behind and the user's checkout unchanged.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_team, team_env
from gitutil import USER_ID, no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import MODULE, git, make_project, plan_yaml, serial_tree, tree
from test_isolation import snapshot

from orchestrator.git.worktrees import Worktrees

N, WORKERS = 8, 2
RUFF = f"{sys.executable} -m ruff format --no-cache -q"


def task_run(i: int) -> str:
    return (f"[ -e build/junk ] && echo LEAK >> notes/t{i}.txt; mkdir -p build notes && echo t{i} > build/junk; "
            f"printf 't{i}\\n' >> notes/t{i}.txt; sleep 0.05; {RUFF} pkg/m{i}.py")


LAST = "cat notes/*.txt > all.txt"


def make(path: Path, workers: int = WORKERS) -> Path:
    files = {f"pkg/m{i}.py": MODULE.format(i=i) for i in range(N)}
    files.update({".gitignore": "build/\n__pycache__/\n", "notes/README": "notes\n"})
    lines = [f"name: pl\nworkers: {workers}\nisolation: worktree\ntasks:"]
    for i in range(N):
        lines.append(f"  - id: t{i}\n    run: \"{task_run(i)}\"")
    lines.append(f"  - id: last\n    needs: [{', '.join(f't{i}' for i in range(N))}]\n    run: {LAST}")
    return make_project(path, "\n".join(lines) + "\n", files, modules=0)


def reference(repo: Path, where: Path) -> str:
    """The serial result: each task in plan order in a clone, its ignored files gone before the next."""
    git(where.parent, "clone", "-q", str(repo), str(where))
    for run in [task_run(i) for i in range(N)] + [LAST]:
        proc = subprocess.run(run, shell=True, cwd=where, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        git(where, "clean", "-q", "-fdX")
    git(where, "add", "-A")
    return git(where, "write-tree").strip()


def check(repo: Path, before: dict, ref: str, why: str) -> None:
    b = "team/pl/integration"
    assert tree(repo, b) == ref, why
    assert git(repo, "show", f"{b}:all.txt") == "".join(f"t{i}\n" for i in range(N)), why
    merged = Counter(Worktrees(repo, "pl").merged_tasks())
    assert merged == Counter(f"t{i}" for i in range(N)) + Counter(["last"]), f"{why}: {merged}"
    tasks = [json.loads(p.read_text()) for p in (repo / ".tasks").glob("task_*.json")]
    assert sorted(t["status"] for t in tasks) == ["completed"] * (N + 1), why
    events = [json.loads(line) for line in (repo / ".tasks/events.jsonl").read_text().splitlines()]
    done = Counter(e["task"] for e in events if e.get("to") == "completed")
    assert max(done.values()) == 1, f"{why}: completed twice: {done}"  # (a kill may fall between a task
    # file's completion and its event line, as test_crash says of releases: a missing line is no repeat)
    assert git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split() == ["main", b], why
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1, why
    assert sorted(p.name for p in (repo / ".team/worktrees/pl").iterdir()) == [".lock", "base.json"], why
    assert snapshot(repo) == before, why


def test_tasks_share_worktrees_one_per_worker_and_each_starts_clean(tmp_path):
    """8 tasks, 2 workers: 2 worktrees are made, the other tasks reuse them, each as clean as a new one
    (no LEAK, one line per notes file), and the result equals the serial run's; nothing is left after."""
    repo = make(tmp_path / "repo")
    before = snapshot(repo)
    ref = reference(repo, tmp_path / "serial")
    trace = tmp_path / "trace.json"
    r = run_team(repo, "run", "plan.yaml", GIT_TRACE2_EVENT=str(trace))
    assert r.returncode == 0, r.stdout + r.stderr
    check(repo, before, ref, "one run")
    starts = [json.loads(line)["argv"] for line in trace.read_text().splitlines() if '"event":"start"' in line]
    added = [a for a in starts if "worktree" in a and "add" in a]
    assert len(added) == WORKERS, added  # one worktree per worker slot, made as the run started: the
    assert all("/_pool-" in a[-2] for a in added), added  # 9 tasks ran in those two
    assert not [a for a in starts if "worktree" in a and "move" in a]  # moved by the pool itself (a rename)


def test_a_failed_task_keeps_its_worktree_on_its_branch_and_the_retry_starts_clean(tmp_path):
    """A failed attempt's worktree leaves the pool as before: at the task's path, on its branch, with
    what it left; the next run resets it in place and runs the task again on the current result."""
    repo = make(tmp_path / "repo")
    plan = (repo / "plan.yaml").read_text().replace(
        "notes/t3.txt; sleep", "notes/t3.txt; test -e $TEAM_ROOT/.team/go || exit 7; sleep")
    assert "exit 7" in plan
    (repo / "plan.yaml").write_text(plan)
    git(repo, "commit", "-q", "-am", "t3 waits for .team/go")
    before = snapshot(repo)
    ref = reference(repo, tmp_path / "serial")
    r = run_team(repo, "run", "plan.yaml", "-k")
    assert r.returncode == 1, r.stdout + r.stderr
    wt = repo / ".team/worktrees/pl/t3"
    assert git(wt, "symbolic-ref", "HEAD").strip() == "refs/heads/team/pl/t3"
    assert (wt / "notes/t3.txt").read_text() == "t3\n" and (wt / "build/junk").read_text() == "t3\n"
    t3 = next(t for t in (json.loads(p.read_text()) for p in (repo / ".tasks").glob("task_*.json"))
              if t["plan_task"] == "t3")
    assert (t3["status"], t3["branch"], t3["worktree"]) == ("failed", "team/pl/t3", ".team/worktrees/pl/t3")
    assert snapshot(repo) == before
    # a git killed in that worktree left its locks (the pool's kill test, seed 802125): they go, unheld
    admin = Path((wt / ".git").read_text().split(":", 1)[1].strip())
    for lock in (admin / "index.lock", repo / ".git/refs/heads/team/pl/t3.lock"):
        lock.write_text("")
    (repo / ".team/go").write_text("")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    check(repo, before, ref, "after the retry")  # t3's notes hold one line: its worktree was reset


def test_free_worktrees_a_killed_run_left_are_reused_their_stale_locks_removed(tmp_path):
    """A run killed while it filled a free worktree left it registered with git's index.lock in it; the
    next run takes it (it is healthy) and failed on the lock ('index.lock': File exists; the pool's kill
    test, seed 439593). Its locks go when no process holds them; nothing is left after the run."""
    repo = make(tmp_path / "repo")
    before = snapshot(repo)
    ref = reference(repo, tmp_path / "serial")
    slots = [repo / f".team/worktrees/pl/_pool-{k}" for k in (7, 8)]
    for slot in slots:
        git(repo, "worktree", "add", "-q", "--detach", str(slot), "HEAD")
        (Path(git(slot, "rev-parse", "--absolute-git-dir").strip()) / "index.lock").write_text("")
        (slot / "pkg/m0.py").write_text("left by a killed run\n")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    check(repo, before, ref, "after a run that reused them")


def test_every_kind_of_change_is_committed_exactly(tmp_path):
    """What a pooled task changed is committed as ``add -A`` would (``commit -a`` when it made no new file):
    an edit, a deletion, a rename, an executable bit, a file made a symlink, a new file in a new folder,
    a task that changes nothing but leaves build output, and one that changes nothing at all; the
    result equals the serial run's tree, and no task that changed nothing has a commit of its own."""
    kinds = {"edit": "printf 'x = 2\\n' >> src/a.py", "delete": "rm src/b.py", "rename": "mv src/c.py src/c2.py",
             "mode": "chmod +x src/d.py", "link": "rm src/e.py && ln -s a.py src/e.py",
             "new": "mkdir -p src/new && echo n > src/new/n.py",
             "junk": "mkdir -p build && echo o > build/out.o", "nothing": "true"}
    files = {f"src/{n}.py": f"{n} = 1\n" for n in "abcde"}
    files[".gitignore"] = "build/\n"
    tasks = [{"id": k, "run": run} for k, run in kinds.items()]
    repo = make_project(tmp_path / "repo", plan_yaml("pl", tasks, workers=2), files, modules=0)
    ref = serial_tree(repo, tasks, tmp_path / "serial")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert tree(repo, "team/pl/integration") == ref
    log = git(repo, "log", "--format=%s", "main..team/pl/integration")
    for kind in kinds:
        assert (f"merge {kind} into" in log) == (kind not in ("junk", "nothing")), log


def test_moves_a_kill_cut_in_half_and_a_deleted_worktree_are_repaired(tmp_path):
    """The pool moves a worktree itself: its folder renamed, then git's link back to it rewritten. A lead
    killed between the two leaves a folder at one place that git lists at the other: a free worktree
    renamed back from t5's path (git still lists it at t5), one renamed to t4's path with an attempt's
    edit in it (git still lists it as free). And a person deleted t3's worktree folder (git lists it,
    missing). The next run repairs all three; t3, moved into the path git's stale entry names, finds
    one worktree listed there, not two (a move by hand over that entry left both)."""
    repo = make(tmp_path / "repo")
    one = tmp_path / "one_entry.sh"
    one.write_text('n=$(git worktree list --porcelain | grep -cx "worktree $(cd "$TEAM_WORKTREE" && pwd -P)")\n'
                   '[ "$n" = 1 ] || { echo "git lists $n worktrees at $TEAM_WORKTREE" >&2; exit 9; }\n')
    plan = (repo / "plan.yaml").read_text().replace("notes/t3.txt; sleep", f"notes/t3.txt; sh {one} || exit 9; sleep")
    assert str(one) in plan
    (repo / "plan.yaml").write_text(plan)
    git(repo, "commit", "-q", "-am", "t3 checks git's list of worktrees")
    before = snapshot(repo)
    ref = reference(repo, tmp_path / "serial")
    base = repo / ".team/worktrees/pl"
    git(repo, "worktree", "add", "-q", "--detach", str(base / "t5"), "HEAD")
    (base / "t5").rename(base / "_pool-7")
    git(repo, "worktree", "add", "-q", "--detach", str(base / "_pool-8"), "HEAD")
    (base / "_pool-8").rename(base / "t4")
    (base / "t4/pkg/m4.py").write_text("an attempt cut short\n")
    git(repo, "worktree", "add", "-q", "--detach", str(base / "t3"), "HEAD")
    shutil.rmtree(base / "t3")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    check(repo, before, ref, "after a run that found them")


# ---------------------------------------------------------------- kill -9 at the pool's steps
def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def descendants(pid: int) -> list[int]:
    seen, todo = [], children(pid)
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += children(p)
    return seen


def argv_cwd(pid: int) -> tuple[list[str], str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        return argv, os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return [], ""


def step_of(argv: list[str], cwd: str, repo: Path) -> str | None:
    """Which of the pool's steps the process is (None: another one)."""
    if argv[:1] == ["sleep"] and "/.team/worktrees/pl/" in cwd:
        return "task"
    if argv[:1] != ["git"] or "-C" not in argv:
        return None
    where = argv[argv.index("-C") + 1]
    if ("checkout" in argv and "--detach" in argv) or "clean" in argv:
        return "reset"
    if "/.team/worktrees/pl/" in where and ("commit" in argv or ("update-ref" in argv and "--stdin" not in argv)):
        return "commit"  # the task's work committed on its detached HEAD, then its branch made there
    if "merge-tree" in argv or ("move" in argv and "/_pool-" in argv[-1]) or \
            (where == str(repo) and "update-ref" in argv and "--stdin" in argv):
        return "merge"
    return None


def kill_at(repo: Path, step: str, nth: int, rng: random.Random) -> bool:
    """Start `team run`, SIGKILL it at the ``nth`` time one of its processes is at ``step`` (and, half the
    time, that process too); False if the run ended first."""
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=repo,
                            env=team_env(repo, **USER_ID), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while lead.poll() is None and time.monotonic() < deadline:
            for pid in descendants(lead.pid):
                if pid in seen:
                    continue
                argv, cwd = argv_cwd(pid)
                if step_of(argv, cwd, repo) != step:
                    continue
                seen.add(pid)
                if len(seen) < nth:
                    continue
                lead.send_signal(signal.SIGKILL)
                if rng.random() < 0.5:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                return True
        return False
    finally:
        if lead.poll() is None:
            lead.kill()
        lead.wait()


def kill_rounds(tmp_path: Path, plan: list[list[str]], seed: int) -> Counter[str]:
    """Each round: a new copy of the project; one `team run` per step of the round, SIGKILLed at that step
    (a random occurrence); then `team run` to the end and every invariant."""
    rng = random.Random(seed)
    template = make(tmp_path / "template")
    ref = reference(template, tmp_path / "serial")
    hits: Counter[str] = Counter()
    for r, steps in enumerate(plan):
        repo = tmp_path / f"r{r}"
        shutil.copytree(template, repo, symlinks=True)
        before = snapshot(repo)
        for step in steps:
            hits[step] += kill_at(repo, step, rng.randint(1, 3), rng)
        final = run_team(repo, "run", "plan.yaml", timeout=180)
        why = f"seed {seed} round {r}: killed at {steps}"
        assert final.returncode == 0, f"{why}\n{final.stdout}\n{final.stderr}"
        check(repo, before, ref, why)
    return hits


def test_kill_nine_mid_reset_mid_task_and_mid_merge_then_rerun_sampled(tmp_path):
    seed = int(os.environ.get("CRASH_SEED", time.time_ns() % 1_000_000))
    hits = kill_rounds(tmp_path, [["reset"], ["task"], ["merge", "reset"], ["commit"]], seed)
    assert hits["reset"] >= 1 and hits["task"] >= 1 and hits["merge"] >= 1 and hits["commit"] >= 1, \
        f"seed {seed}: {hits}"


@pytest.mark.chaos
def test_kill_nine_at_the_pools_steps_soak(tmp_path):
    seed = int(os.environ.get("CRASH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    steps = ["reset", "task", "commit", "merge"]
    hits = kill_rounds(tmp_path, [[rng.choice(steps) for _ in range(rng.randint(1, 3))] for _ in range(12)], seed)
    assert all(hits[s] >= 3 for s in steps), f"seed {seed}: {hits}"
