"""Role permissions on the task tools, a skill's allowed-tools, and bash's kept working directory,
all enforced by the tool pipeline over a real store, real files and real (sandboxed) bash."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools_harness import Harness

from orchestrator.core.errors import UserError
from orchestrator.core.sandbox import Sandbox
from orchestrator.roles.roles import Permissions, get_role, parse_role
from orchestrator.tools.coordination import agent_registry

CODER = Permissions()  # a role without `permissions:` gets these: create, update-own


@pytest.fixture
def team(tmp_path):
    """lead (the built-in lead's permissions) and two coders sharing one store."""
    reg = agent_registry()
    lead = Harness(tmp_path, agent="lead", registry=reg)
    lead.ctx.permissions = get_role("lead").permissions
    mates = {}
    for name in ("carl", "bob"):
        h = Harness(tmp_path, agent=name, registry=reg, store=lead.store)
        h.ctx.permissions = get_role("coder").permissions
        mates[name] = h
    return lead, mates["carl"], mates["bob"]


def test_builtin_roles_declare_task_tools_and_permissions():
    for name in ("coder", "tester", "reviewer", "lead"):
        role = get_role(name)
        assert {"task_create", "task_list", "task_get", "task_update"} <= set(role.tools), name
    assert get_role("lead").permissions == Permissions(frozenset({"create", "update-any", "assign"}), "any")
    assert get_role("coder").permissions == CODER
    assert get_role("reviewer").permissions.tasks == frozenset({"create", "update-own"})


def test_bad_permissions_in_a_role_file_are_clear_errors(tmp_path):
    head = "---\nname: x\ndescription: d\ntools: [bash]\n"
    with pytest.raises(UserError, match=r"unknown task right \['reassign'\].*known: \['create'"):
        parse_role(head + "permissions: {tasks: [reassign]}\n---\nhi\n", tmp_path / "x.md")
    with pytest.raises(UserError, match="'permissions.worktrees' must be one of"):
        parse_role(head + "permissions: {worktrees: all}\n---\nhi\n", tmp_path / "x.md")
    with pytest.raises(UserError, match="'permissions' must be a mapping"):
        parse_role(head + "permissions: lead\n---\nhi\n", tmp_path / "x.md")


def test_a_coder_creates_subtasks_and_updates_its_own_but_not_anothers(team):
    lead, carl, bob = team
    lead.ok("task_create", {"subject": "bob's job", "owner": "bob"})  # #1
    assert carl.ok("task_create", {"subject": "parse"}) == "created task #2: parse"
    carl.ok("task_create", {"subject": "test", "blocked_by": [2]})  # #3
    assert carl.store.read(2).created_by == "carl"
    # its own (created, nobody owns it): status, dependencies, taking it
    assert carl.ok("task_update", {"task": 2, "status": "in_progress"}) == "updated: [>] #2: parse"
    carl.ok("task_update", {"task": 3, "owner": "carl"})
    # another's: refused before the store is touched, saying whose it is
    obs = carl.call("task_update", {"task": 1, "status": "completed"})
    assert obs.is_error and obs.stage == "permission"
    assert obs.content.startswith("task #1 is owned by bob: you may update only tasks you own or created")
    assert "ask the lead with send_message" in obs.content
    obs = carl.call("task_update", {"task": 1, "owner": "carl"})
    assert obs.is_error and obs.stage == "permission"
    # reassigning its own task to someone else, or creating one for someone else: the lead's
    obs = carl.call("task_update", {"task": 3, "owner": "bob"})
    assert obs.is_error and obs.content.startswith("only the lead reassigns tasks: task #3 cannot go from carl to bob")
    obs = carl.call("task_create", {"subject": "for bob", "owner": "bob"})
    assert obs.is_error and obs.content.startswith("only the lead assigns tasks to others")
    # bob may not touch carl's subtask either
    assert bob.call("task_update", {"task": 2, "status": "completed"}).stage == "permission"
    assert lead.store.read(1).status == "pending" and lead.store.read(1).owner == "bob"
    assert lead.store.read(3).owner == "carl"
    assert len(lead.store.all()) == 3
    # the lead reassigns anything
    assert lead.ok("task_update", {"task": 1, "owner": "carl"}) == "updated: [ ] #1: bob's job (carl)"
    assert carl.ok("task_update", {"task": 1, "status": "completed"}) == "updated: [x] #1: bob's job"
    # refusals are in the call log with their stage
    stages = [r["stage"] for r in carl.log() if r["is_error"]]
    assert stages == ["permission"] * 4


def test_a_role_without_create_may_not_create(tmp_path):
    h = Harness(tmp_path, agent="rita", registry=agent_registry())
    h.ctx.permissions = Permissions(frozenset({"update-own"}), "none")
    obs = h.call("task_create", {"subject": "x"})
    assert obs.is_error and obs.content.startswith("your role may not create tasks (your role's permissions: "
                                                   "tasks: update-own; worktrees: none)")
    assert h.store.all() == []


def _skill(ws: Path, name: str, allowed: str | None) -> None:
    d = ws / "skills" / name
    d.mkdir(parents=True)
    extra = f"allowed-tools: {allowed}\n" if allowed is not None else ""
    (d / "SKILL.md").write_text(f"---\nname: {name}\ndescription: do {name}\n{extra}---\n1. read the file\n")


def test_a_loaded_skill_limits_the_tools_to_its_allowed_tools(tmp_path):
    h = Harness(tmp_path, registry=agent_registry())
    _skill(h.ws, "inspect", "read_file, grep")
    _skill(h.ws, "free", None)
    (h.ws / "a.txt").write_text("hello\n")
    loaded = h.ok("load_skill", {"name": "inspect"})
    assert loaded.startswith("# Skill: inspect (skills/inspect/SKILL.md)\n[allowed-tools: read_file, grep.")
    assert "hello" in h.ok("read_file", {"path": "a.txt"})
    obs = h.call("write_file", {"path": "b.txt", "content": "x"})
    assert obs.is_error and obs.stage == "permission"
    assert obs.content.startswith("the skill 'inspect' you loaded allows only ")
    assert "write_file is refused while you follow it (its allowed-tools)" in obs.content
    assert not (h.ws / "b.txt").exists()
    assert h.call("bash", {"command": "touch c.txt"}).stage == "permission"
    assert not (h.ws / "c.txt").exists()
    h.ok("task_list", {})  # reporting and finishing stay allowed
    h.ok("load_skill", {"name": "free"})  # a skill without allowed-tools lifts the limit
    h.ok("write_file", {"path": "b.txt", "content": "x"})
    assert (h.ws / "b.txt").read_text() == "x"


def test_bash_keeps_its_directory_between_calls_inside_the_workspace(tmp_path):
    h = Harness(tmp_path)
    h.ctx.sandbox = Sandbox.choose(None, {})
    (h.ws / "pkg" / "sub").mkdir(parents=True)
    assert h.ok("bash", {"command": "cd pkg/sub && touch here.txt"}) == "exit code: 0\n(no output)\n[cwd: pkg/sub]"
    assert (h.ws / "pkg/sub/here.txt").exists()
    assert h.ok("bash", {"command": "pwd"}) == f"exit code: 0\n{h.ws}/pkg/sub\n"
    assert h.ok("bash", {"command": "cd .."}) == "exit code: 0\n(no output)\n[cwd: pkg]"
    # leaving the workspace: the command ran there (read-only), the directory stays inside
    out = h.ok("bash", {"command": "cd /etc && ls passwd"})
    assert out == (f"exit code: 0\npasswd\n\n[cwd: the command ended in /etc, outside the workspace; the working "
                   f"directory stays pkg (commands work inside the workspace {h.ws} only)]")
    out = h.ok("bash", {"command": "cd ../.. && pwd"})
    assert "the working directory stays pkg" in out
    assert h.ok("bash", {"command": "pwd"}) == f"exit code: 0\n{h.ws}/pkg\n"
    # a cd with a failing command still moves; exit status is kept
    assert h.ok("bash", {"command": "cd sub; false"}) == "exit code: 1\n(no output)\n[cwd: pkg/sub]"
    # the directory disappears: back to the top, saying so
    (h.ws / "pkg/sub/here.txt").unlink()
    (h.ws / "pkg/sub").rmdir()
    assert h.ok("bash", {"command": "pwd"}) == (
        f"[cwd: pkg/sub is gone; this command ran at the workspace top]\nexit code: 0\n{h.ws}\n")
    # moving to another workspace (a worktree) starts at its top
    h.ok("bash", {"command": "cd pkg"})
    other = tmp_path / "other"
    other.mkdir()
    h.ctx.move_to(other)
    assert h.ok("bash", {"command": "pwd"}) == f"exit code: 0\n{other}\n"


@pytest.mark.parametrize("sandbox", [Sandbox(), Sandbox.off("the test")], ids=["sandbox", "no-sandbox"])
def test_a_symlink_out_of_the_workspace_does_not_move_the_directory(tmp_path, sandbox):
    h = Harness(tmp_path)
    h.ctx.sandbox = sandbox
    (h.ws / "link").symlink_to("/usr")
    out = h.ok("bash", {"command": "cd link && ls -d bin"})
    assert out.startswith("exit code: 0\nbin\n")
    assert "the command ended in /usr, outside the workspace; the working directory stays ." in out
    assert h.ctx.cwd is None
    assert h.ok("bash", {"command": "pwd"}) == f"exit code: 0\n{h.ws}\n"


def test_the_task_an_agent_was_given_is_its_own_to_finish(team):
    lead, carl, _ = team
    lead.ok("task_create", {"subject": "given to carl by a run", "owner": "runner"})
    assert carl.call("task_update", {"task": 1, "result": "x"}).stage == "permission"
    carl.ctx.task_id = 1  # the attempt a scheduler placed on carl (its hand-over may have lost a race)
    assert carl.ok("task_update", {"task": 1, "status": "completed", "result": "done"}) == \
        "updated: [x] #1: given to carl by a run"
