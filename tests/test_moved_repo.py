"""A repository moved or copied with its state resumes where it is now.

Paths in the store are relative to the state root (a task's `cwd` and kept
`worktree`), and the git links of the plan's worktrees (absolute paths, in the
worktree's `.git` and in `.git/worktrees/<id>/gitdir`) are rewritten towards the
repository they are in: `mv repo repo2 && cd repo2 && team run plan.yaml`
finishes a half-run plan, and a copy resumes without touching the original.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from conftest import run_team, team_env
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import git, make_project
from util import wait_until

WAIT_GATE = 'echo s > s.txt; until [ -f "$GATE" ]; do sleep 0.05; done'


def stored(repo: Path) -> dict[str, dict]:
    return {t["name"]: t for t in (json.loads(p.read_text()) for p in (repo / ".tasks").glob("task_*.json"))}


def worktree_paths(repo: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]


def test_a_moved_repository_resumes_a_half_run_worktree_plan_and_a_plain_plan(tmp_path):
    gate = tmp_path / "gate"  # outside the repository: it stays where it is
    wt_plan = ("name: mv\nisolation: worktree\ndefaults:\n  env: {GATE: " + str(gate) + "}\ntasks:\n"
               "  - id: a\n    run: echo a > a.txt\n"
               f"  - id: slow\n    needs: [a]\n    run: '{WAIT_GATE}'\n"
               "  - id: c\n    needs: [slow]\n    run: echo c > c.txt\n")
    plain = ("name: plain\ndefaults:\n  cwd: work\n  env: {GATE: " + str(gate) + "}\ntasks:\n"
             "  - id: p1\n    run: pwd > p1.txt\n"
             "  - id: p2\n    needs: [p1]\n    run: 'test -f \"$GATE\" && pwd > p2.txt'\n")
    repo = make_project(tmp_path / "repo", wt_plan, {"plain.yaml": plain, "work/.keep": ""}, modules=0)

    # the plain plan: p1 done, p2 failed (its gate is not there yet)
    assert run_team(repo, "run", "plain.yaml").returncode == 1
    # the worktree plan: killed while `slow` runs in its worktree (a merged, the integration worktree live)
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=repo,
                            env=team_env(repo), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (repo / ".team/worktrees/mv/slow/s.txt").exists()
                   and stored(repo)["mv.slow"]["status"] == "in_progress", what="slow running")
    finally:
        lead.send_signal(signal.SIGKILL)
        lead.wait()
    assert stored(repo)["mv.a"]["status"] == "completed"
    assert all(str(repo) not in json.dumps(t) for t in stored(repo).values())  # paths relative to the root

    repo2 = tmp_path / "repo2"
    shutil.move(repo, repo2)
    gate.write_text("")
    r = run_team(repo2, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"relinked worktree slow at {repo2}/.team/worktrees/mv/slow (the repository was moved or copied)" \
        in r.stderr
    integ = "team/mv/integration"
    assert {f: git(repo2, "show", f"{integ}:{f}") for f in ("a.txt", "s.txt", "c.txt")} == \
        {"a.txt": "a\n", "s.txt": "s\n", "c.txt": "c\n"}
    merges = git(repo2, "log", "--first-parent", "--merges", "--format=%(trailers:key=Team-Task,valueonly)", integ)
    assert sorted(merges.split()) == ["a", "c", "slow"]  # each once
    assert worktree_paths(repo2) == [str(repo2)]  # nothing left pointing at the old place

    p = run_team(repo2, "run", "plain.yaml")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (repo2 / "work/p2.txt").read_text() == f"{repo2}/work\n"  # it ran where the repository is now
    assert {k: v["cwd"] for k, v in stored(repo2).items()} == {"mv.a": ".", "mv.slow": ".", "mv.c": ".",
                                                               "plain.p1": "work", "plain.p2": "work"}
    land = run_team(repo2, "land", "plan.yaml")
    assert land.returncode == 0, land.stdout + land.stderr
    assert (repo2 / "c.txt").read_text() == "c\n" and not repo.exists()


def test_a_copied_repository_resumes_and_leaves_the_original_as_it_was(tmp_path):
    gate = tmp_path / "gate"
    plan = ("name: cp\nisolation: worktree\ndefaults:\n  env: {GATE: " + str(gate) + "}\ntasks:\n"
            "  - id: a\n    run: echo a > a.txt\n"
            "  - id: b\n    needs: [a]\n    run: 'echo b > b.txt && test -f \"$GATE\"'\n")
    repo = make_project(tmp_path / "repo", plan, modules=0)
    assert run_team(repo, "run", "plan.yaml").returncode == 1  # b failed: its worktree is kept
    kept = repo / ".team/worktrees/cp/b"
    assert (kept / "b.txt").exists()
    before = (worktree_paths(repo), (kept / ".git").read_text(), git(kept, "status", "--short"))

    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(repo), str(copy)], check=True)
    gate.write_text("")
    r = run_team(copy, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert git(copy, "show", "team/cp/integration:b.txt") == "b\n"
    assert worktree_paths(copy) == [str(copy)]
    # the original still points at itself (git worktree repair run in the copy would have rewritten it) ...
    assert (worktree_paths(repo), (kept / ".git").read_text(), git(kept, "status", "--short")) == before
    # ... and resumes on its own
    again = run_team(repo, "run", "plan.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert worktree_paths(repo) == [str(repo)]


def test_an_agent_worktree_of_a_moved_repository_is_found_where_it_is_now(tmp_path):
    from test_agent_worktrees import Agent
    from test_worktree import make_repo

    from orchestrator.tasks.store import TaskStore

    repo = make_repo(tmp_path / "repo", {"a.py": "A = 1\n", ".gitignore": ".team/\n.tasks/\n"})
    lead = Agent(repo, "lead", "lead", TaskStore(repo))
    lead.ok("worktree_create", {"name": "wt-a"})
    lead.ok("worktree_run", {"name": "wt-a", "command": "echo 'A = 2' > a.py"})
    index = json.loads((repo / ".team/worktrees/index.json").read_text())["worktrees"]
    assert [w["path"] for w in index] == [".team/worktrees/agents/wt-a"]  # relative to the root

    repo2 = tmp_path / "repo2"
    shutil.move(repo, repo2)
    listed = run_team(repo2, "worktree", "list")
    assert listed.stdout == ("wt-a [active] team/agents/wt-a owner lead\n"
                             f"    {repo2}/.team/worktrees/agents/wt-a\n"), listed.stderr
    lead = Agent(repo2, "lead", "lead", TaskStore(repo2))
    assert "changes not committed:\n M a.py" in lead.ok("worktree_status", {"name": "wt-a"})
    assert lead.ok("worktree_merge", {"names": ["wt-a"]}).startswith("merged wt-a")
    assert git(repo2, "show", "team/agents/integration:a.py") == "A = 2\n"
    from orchestrator.git.worktrees import Worktrees

    in_checkout = [] if Worktrees(repo2, "agents").in_memory else [f"{repo2}/.team/worktrees/agents/_integration"]
    assert worktree_paths(repo2) == [str(repo2), *in_checkout]  # merges in memory (git >= 2.38) need none
