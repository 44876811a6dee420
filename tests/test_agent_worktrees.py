"""Agent worktrees (seed s12) through the real tools, real git and the sandboxed shell: binding to
tasks, entering, running in, keeping, removing, the ordered merge-back, permissions, and the
index and event log on disk -- and `team worktree` / `team task show` for people."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_team
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from test_worktree import git, make_repo, show

from orchestrator.core.fsutil import read_jsonl
from orchestrator.roles.roles import get_role
from orchestrator.tasks.store import TaskStore
from orchestrator.tools import FileTruth, Observation, ToolContext
from orchestrator.tools.coordination import agent_registry

REG = agent_registry()


class Agent:
    """One agent's tool context over the repository at ``root`` (the workspace is the root)."""

    def __init__(self, root: Path, name: str, role: str, store: TaskStore):
        self.ctx = ToolContext(workspace=root, root=root, agent=name, truth=FileTruth(), store=store,
                               outputs_dir=root / ".team/outputs" / name, call_log=root / f".team/calls/{name}.jsonl",
                               permissions=get_role(role).permissions)
        self.n = 0

    def call(self, tool: str, args: dict) -> Observation:
        self.n += 1
        return REG.call(tool, json.dumps(args), self.ctx, f"c{self.n}")

    def ok(self, tool: str, args: dict) -> str:
        obs = self.call(tool, args)
        assert not obs.is_error, f"{tool} failed at {obs.stage}: {obs.content}"
        return obs.content


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"a.py": "A = 1\n", "b.py": "B = 1\n", ".gitignore": ".team/\n.tasks/\n"})


@pytest.fixture
def team(repo):
    store = TaskStore(repo)
    return Agent(repo, "lead", "lead", store), Agent(repo, "carl", "coder", store), Agent(repo, "bob", "coder", store)


def events(repo: Path) -> list[tuple[str, str]]:
    return [(e["event"], e.get("worktree", {}).get("name", "")) for e in read_jsonl(repo / ".team/worktrees/events.jsonl")]


def index(repo: Path) -> dict[str, dict]:
    return {w["name"]: w for w in json.loads((repo / ".team/worktrees/index.json").read_text())["worktrees"]}


def test_a_worktree_bound_to_a_task_is_entered_run_in_and_merged_back(repo, team):
    lead, carl, bob = team
    lead.ok("task_create", {"subject": "rename A", "owner": "carl"})
    out = lead.ok("worktree_create", {"name": "wt-a", "task": 1, "owner": "carl"})
    path = repo / ".team/worktrees/agents/wt-a"
    assert out.startswith(f"created worktree wt-a at {path} on branch team/agents/wt-a (owner carl); "
                          f"task #1 is bound to it (in_progress)")
    task = lead.ctx.store.read(1)
    assert (task.worktree, task.status.value) == ("wt-a", "in_progress")
    shown = run_team(repo, "task", "show", "1")
    assert shown.returncode == 0 and "\n  worktree:    wt-a\n" in shown.stdout
    # carl works in it: file tools and bash there, the user's checkout untouched
    assert carl.ok("worktree_enter", {"name": "wt-a"}).startswith(f"you are in worktree wt-a (team/agents/wt-a) at {path}")
    carl.ok("read_file", {"path": "a.py"})
    carl.ok("edit_file", {"path": "a.py", "old_string": "A = 1", "new_string": "ALPHA = 1"})
    assert carl.ok("bash", {"command": "pwd && cat a.py"}) == f"exit code: 0\n{path}\nALPHA = 1\n"
    assert carl.ok("worktree_leave", {}) == f"left worktree wt-a; back in {repo}"
    assert (repo / "a.py").read_text() == "A = 1\n"
    assert carl.ok("worktree_run", {"name": "wt-a", "command": "git status --short"}) == "exit code: 0\n M a.py\n"
    # the shell policy and the sandbox apply in a worktree: only the worktree is writable
    assert carl.call("worktree_run", {"name": "wt-a", "command": f"touch {repo}/.tasks/x"}).stage == "policy"
    carl.call("worktree_run", {"name": "wt-a", "command": f"echo hacked > {repo}/b.py"})
    assert (repo / "b.py").read_text() == "B = 1\n"  # read-only, or (under /tmp) the sandbox's private copy
    assert "changes not committed:\n M a.py" in lead.ok("worktree_status", {"name": "wt-a"})
    # bob may not use carl's worktree; a coder may not merge
    for tool, args in (("worktree_enter", {"name": "wt-a"}), ("worktree_run", {"name": "wt-a", "command": "ls"}),
                       ("worktree_remove", {"name": "wt-a", "force": True})):
        obs = bob.call(tool, args)
        assert obs.is_error and obs.stage == "permission", tool
        assert obs.content.startswith("worktree 'wt-a' is carl's: you may ")
    obs = carl.call("worktree_merge", {"names": ["wt-a"]})
    assert obs.is_error and obs.content.startswith("only the lead merges worktrees")
    obs = carl.call("worktree_create", {"name": "for-bob", "owner": "bob"})
    assert obs.is_error and obs.content.startswith("only the lead makes worktrees for others")
    # the lead merges: the integration branch has it, the task completes, the worktree is gone
    merged = lead.ok("worktree_merge", {"names": ["wt-a"], "complete_tasks": True})
    assert merged.startswith("merged wt-a (") and merged.endswith(
        "; task #1 completed\nintegration branch: team/agents/integration")
    assert show(repo, "team/agents/integration", "a.py") == "ALPHA = 1\n"
    assert not path.exists() and git(repo, "branch", "--list", "team/agents/wt-a") == ""
    task = lead.ctx.store.read(1)
    assert (task.worktree, task.status.value) == (None, "completed")
    entry = index(repo)["wt-a"]
    assert (entry["status"], entry["task_id"], entry["owner"], entry["created_by"]) == ("merged", 1, "carl", "lead")
    assert entry["merge_commit"] == git(repo, "rev-parse", "team/agents/integration").strip()
    assert events(repo) == [("worktree.create.before", "wt-a"), ("worktree.create.after", "wt-a"),
                            ("worktree.merge.before", "wt-a"), ("worktree.merge.after", "wt-a"),
                            ("task.completed", "wt-a")]
    # people take it with `team worktree land`; the user's branch gets it
    listed = run_team(repo, "worktree", "list")
    assert listed.stdout.startswith("wt-a [merged] team/agents/wt-a owner carl task #1 merge ")
    landed = run_team(repo, "worktree", "land")
    assert landed.returncode == 0, landed.stderr
    assert landed.stdout.startswith("landed 1 worktree (wt-a) into main: ")
    assert (repo / "a.py").read_text() == "ALPHA = 1\n"
    assert index(repo)["wt-a"]["status"] == "landed"
    assert events(repo)[-1] == ("worktree.land", "")


def test_keep_remove_refusals_and_conflicts(repo, team):
    lead, carl, _ = team
    carl.ok("worktree_create", {"name": "mine"})
    carl.ok("worktree_run", {"name": "mine", "command": "echo 'A = 2' > a.py"})
    obs = carl.call("worktree_remove", {"name": "mine"})
    assert obs.is_error and obs.content == ("worktree 'mine' has uncommitted changes not merged: merge it "
                                            "(worktree_merge) or remove it with force (that discards them)")
    assert carl.ok("worktree_keep", {"name": "mine"}) == f"kept worktree mine at {repo}/.team/worktrees/agents/mine"
    obs = carl.call("worktree_create", {"name": "mine"})
    assert obs.is_error and "worktree 'mine' already exists (kept, owner carl)" in obs.content
    # two worktrees change the same line: the first merges, the second stops with the files named
    lead.ok("worktree_create", {"name": "other"})
    lead.ok("worktree_run", {"name": "other", "command": "echo 'A = 3' > a.py"})
    obs = lead.call("worktree_merge", {"names": ["other", "mine"]})
    assert obs.is_error
    assert obs.content.startswith("merged other (")
    assert "stopped: merge conflict: task 'mine' (team/agents/mine) conflicts with team/agents/integration in a.py" \
        in obs.content
    assert obs.content.endswith("not merged: mine")
    assert index(repo)["mine"]["status"] == "kept" and index(repo)["other"]["status"] == "merged"
    assert ("worktree.merge.failed", "mine") in events(repo)
    # people remove it (the work is discarded on their word)
    r = run_team(repo, "worktree", "remove", "mine")
    assert r.returncode == 2 and "has 1 commit not merged" in r.stderr and "Traceback" not in r.stderr
    r = run_team(repo, "worktree", "remove", "mine", "--force")
    assert r.returncode == 0 and r.stdout == "removed worktree mine\n"
    r = run_team(repo, "worktree", "keep", "mine")
    assert r.returncode == 2 and r.stderr == ("UserError: worktree 'mine' is removed: its directory is gone; make a "
                                              "new one with worktree_create\n")
    assert events(repo)[-2:] == [("worktree.remove.before", "mine"), ("worktree.remove.after", "mine")]
    r = run_team(repo, "worktree", "events")
    assert r.stdout.splitlines()[0].split() == ["worktree.create.before", "mine", "by", "carl"]
    # the name is free again
    carl.ok("worktree_create", {"name": "mine"})
    assert index(repo)["mine"]["status"] == "active"


def test_an_entered_worktree_merged_meanwhile_sends_the_agent_home(repo, team):
    lead, carl, _ = team
    lead.ok("worktree_create", {"name": "wt", "owner": "carl"})
    carl.ok("worktree_enter", {"name": "wt"})
    carl.ok("write_file", {"path": "new.py", "content": "x = 1\n"})
    lead.ok("worktree_merge", {"names": ["wt"]})
    out = carl.ok("bash", {"command": "pwd"})
    assert out == (f"[worktree wt you were in is gone (merged or removed): you are back in {repo}]\n"
                   f"exit code: 0\n{repo}\n")
    assert show(repo, "team/agents/integration", "new.py") == "x = 1\n"


def test_outside_a_git_repository_the_tools_say_so(tmp_path):
    lead = Agent(tmp_path, "lead", "lead", TaskStore(tmp_path))
    obs = lead.call("worktree_create", {"name": "x"})
    assert obs.is_error and obs.content.startswith(f"agent worktrees need a git repository at {tmp_path}")
    assert lead.ok("worktree_list", {}) == "no worktrees yet; worktree_create makes one"


def test_doctor_knows_live_agent_worktrees_from_orphans(repo, team):
    lead, carl, _ = team
    carl.ok("worktree_create", {"name": "live"})
    assert run_team(repo, "doctor").stdout.endswith("OK: no problems found.\n")
    git(repo, "branch", "team/agents/ghost")
    r = run_team(repo, "doctor")
    assert "plan agents: task ghost: branch team/agents/ghost" in r.stdout
    assert "task live" not in r.stdout
