"""Issue 16 item 3: agents' shell commands against a real bubblewrap sandbox.

Every command below gets past the text policy (shellpolicy.py) and runs; the
sandbox is what keeps ``.tasks``, ``.team`` and ``.git`` byte-identical, the
rest of the machine untouched, no process alive after the call and the
network closed. Each test failed on main (the commands ran unconfined).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from util import pids_running, wait_until

from hostile.attacks import Agent, Listener, bwrap_installed, make_root, snapshot

# The bypasses of the deny-list listed in issue 16, item 3, and more of the same kind.
BYPASSES = [
    "echo x>.tasks/task_1.json",
    "echo x >| .tasks/task_1.json",
    "sh -xc 'rm -rf .tasks'",
    "bash -c -- 'rm -rf .tasks .team .git'",
    "echo 'rm -rf .tasks' | bash",
    "nice -n 10 rm -rf .tasks",
    "env -u X rm -rf .team",
    "timeout 5 rm -rf .tasks",
    "setsid rm -rf .tasks",
    "stdbuf -o0 rm -rf .git",
    "rm -rf $'.tasks'",
    "rm -rf {.tasks,.git}",
    "find . -type f -delete",
    "find . -name '*' -delete",
    "git stash --all",
    # hard links never cross a mount; a symlink made inside leads to the same read-only mount
    "ln .tasks/task_1.json hard && echo pwned >> hard",
    "ln -s .tasks/task_1.json soft && echo pwned > soft",
    "ln -s .team t && rm -rf t/ && echo '{}' > t/config.json",
    "python3 -c \"import shutil; shutil.rmtree('.tasks')\"",
    "python3 -c \"open('.team/config.json', 'w').write('{}')\"",
    "mv $'.tasks' gone",
    "chmod -R 000 $'.team'",
    "touch -d 2001-01-01 {.tasks,x}/task_1.json",
    # getting the mounts back: no capabilities, no new user namespace
    "mount -o remount,rw .tasks; python3 -c \"import shutil; shutil.rmtree('.tasks')\"",
    "umount .git; python3 -c \"import shutil; shutil.rmtree('.git')\"",
    "unshare -Urm sh -c 'umount -l .tasks; rm -rf .tasks'",
    "unshare -Um sh -c 'umount -l .tasks; rm -rf .tasks'",
]


@pytest.fixture
def root(tmp_path):
    bwrap_installed()
    return make_root(tmp_path / "proj")


@pytest.fixture
def agent(root):
    a = Agent(root)
    yield a
    a.close()


@pytest.mark.parametrize("command", BYPASSES)
def test_a_bypass_of_the_text_policy_cannot_change_the_state(root, agent, command):
    before = snapshot(root)
    obs = agent.bash(command)
    assert snapshot(root) == before, obs.content
    assert obs.stage == "ok", f"the text policy stopped {command!r} ({obs.content}); pick a bypass that reaches the sandbox"
    assert obs.meta["sandboxed"] is True
    # the model is told why, in words it can act on (git stash fails silently: its exit code says it)
    assert not obs.content.startswith("exit code: 0\n"), obs.content
    if command != "git stash --all":
        assert any(why in obs.content for why in (
            "Read-only file system", "Invalid cross-device link", "Device or resource busy", "not writable",
            "permission denied", "must be superuser", "unshare failed")), obs.content
    # and the workspace is still its to change
    assert agent.bash("echo legit > legit.txt && cat legit.txt").content == "exit code: 0\nlegit\n"
    assert (root / "legit.txt").read_text() == "legit\n"


def test_the_observation_explains_the_read_only_state(agent):
    obs = agent.bash("echo x>.tasks/task_1.json")
    assert obs.content.startswith("exit code: 1\n")
    assert ".tasks/task_1.json: Read-only file system" in obs.content
    assert obs.content.endswith("[sandbox: only the workspace and /tmp are writable; .tasks, .team and .git are "
                                "read-only. Change tasks with the task tools; the lead owns git state.]")


def test_the_rest_of_the_machine_is_read_only_and_tmp_is_private(root, agent):
    # outside the workspace and outside /tmp (which the sandbox replaces): a file of our own, so an
    # unconfined run of this test changes nothing but it
    outside = Path(f"/var/tmp/team-hostile-{os.getpid()}")
    outside.mkdir(exist_ok=True)
    (outside / "file").write_text("untouched\n")
    marker = f"/tmp/team-hostile-{os.getpid()}"
    try:
        obs = agent.bash(f"echo pwned > {outside}/file; touch {outside}/new; rm -rf {outside}; "
                         f"echo inside > {marker} && cat {marker}")
        assert (outside / "file").read_text() == "untouched\n" and not (outside / "new").exists()
        assert obs.stage == "ok"
        assert "Read-only file system" in obs.content and obs.content.endswith("\ninside\n")  # /tmp works ...
        assert not Path(marker).exists()  # ... and is the sandbox's own
    finally:
        shutil.rmtree(outside, ignore_errors=True)
        Path(marker).unlink(missing_ok=True)


def test_background_processes_do_not_outlive_the_call(agent):
    marks = [f"42{i}.{os.getpid()}" for i in range(4)]
    obs = agent.bash(
        f"setsid sleep {marks[0]} & "
        f"nohup sleep {marks[1]} >/dev/null 2>&1 & "
        f"(setsid sh -c 'sleep {marks[2]}' &) ; "
        f"python3 -c \"import os, subprocess; os.fork() or subprocess.Popen(['sleep', '{marks[3]}'], "
        f"start_new_session=True)\"; echo started")
    assert obs.stage == "ok" and obs.content.startswith("exit code: 0\n"), obs.content
    # no waiting: the call returned, and nothing it started is left (the PID namespace went with it)
    assert [m for m in marks if pids_running(["sleep", m])] == []


def test_none_of_many_background_processes_is_alive_when_the_call_returns(agent):
    """The kernel kills a PID namespace's processes when its first process exits, and that takes
    a moment with many of them: the call returns once they are all gone, not while they die."""
    mark = f"44.{os.getpid()}"
    obs = agent.bash(f"for i in $(seq 200); do nohup sleep {mark} >/dev/null 2>&1 & done; echo started")
    assert obs.stage == "ok" and obs.content.startswith("exit code: 0\n"), obs.content
    assert pids_running(["sleep", mark]) == []


def test_a_setsid_child_of_a_timed_out_command_dies_with_it(agent):
    mark = f"43.{os.getpid()}"
    obs = agent.bash(f"setsid sleep {mark} & sleep 30", timeout=0.5)
    assert obs.stage == "execute" and obs.content.startswith("timed out after 0.5s")
    wait_until(lambda: not pids_running(["sleep", mark]), timeout=5, what="the setsid child killed")


def test_a_background_job_is_sandboxed_and_takes_its_processes_with_it(root, agent):
    before = snapshot(root)
    mark = f"44.{os.getpid()}"
    obs = agent.call("background_run", {"command": f"setsid sleep {mark} & sh -xc 'rm -rf .tasks .team .git'; echo tried"})
    assert obs.stage == "ok", obs.content
    job_id = obs.content.split()[3].rstrip(":")
    record = wait_until(lambda: (r := agent.jobs.get(job_id)).status != "running" and r, timeout=20,
                        what="the job to end")
    assert record.status == "completed" and "Read-only file system" in (record.tail or "")
    assert (record.tail or "").endswith("tried\n")
    assert snapshot(root) == before
    wait_until(lambda: not pids_running(["sleep", mark]), timeout=5, what="the job's setsid child killed")


def test_processes_outside_the_sandbox_cannot_be_seen_or_signalled(agent):
    """Its own PID namespace: the host's processes are not there to kill. (The target is a
    process of this test, so an unconfined run kills nothing else.)"""
    bystander = subprocess.Popen(["sleep", "45.5"])
    try:
        obs = agent.bash(f"kill -9 {bystander.pid}; ls /proc | grep -c '^[0-9]'")
        time.sleep(0.2)
        assert bystander.poll() is None, "a process outside the sandbox was killed"
        assert obs.stage == "ok" and "No such process" in obs.content
        # only the sandbox's own processes are visible: its init, bash, ls and grep
        assert int(obs.content.splitlines()[-1]) <= 4, obs.content
    finally:
        bystander.kill()
        bystander.wait()


def test_no_network_unless_the_role_allows_it(root):
    listener = Listener()
    closed, open_ = Agent(root, "offline"), Agent(root, "online", network=True)
    try:
        obs = closed.bash(listener.connect_command())
        assert obs.stage == "ok" and "connected" not in obs.content
        assert "Connection refused" in obs.content or "Network is unreachable" in obs.content, obs.content
        assert listener.accepted == 0
        obs = open_.bash(listener.connect_command())
        assert obs.content == "exit code: 0\nconnected: hello from the host\n"
        assert listener.accepted == 1
    finally:
        listener.close()
        closed.close()
        open_.close()


def test_without_bwrap_agent_shell_commands_are_refused_with_the_fix(root, tmp_path):
    from orchestrator.core.sandbox import Sandbox

    agent = Agent(root, sandbox=Sandbox(program=str(tmp_path / "no-such-bwrap")))
    try:
        for obs in (agent.bash("touch ran"), agent.call("background_run", {"command": "touch ran"})):
            assert (obs.is_error, obs.stage) == (True, "sandbox"), obs.content
            assert "cannot be set up here" in obs.content and "cannot be run" in obs.content
            assert "apt-get install bubblewrap" in obs.content and "`sandbox: off` in the plan" in obs.content
            assert "TEAM_SANDBOX=off" in obs.content and obs.content.endswith("The command was not run.")
        assert not (root / "ran").exists() and agent.jobs.list() == []
    finally:
        agent.close()


def test_a_bwrap_that_fails_its_trial_run_refuses_too(root, tmp_path):
    from orchestrator.core.sandbox import Sandbox

    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    agent = Agent(root, sandbox=Sandbox(program=str(fake)))
    try:
        obs = agent.bash("touch ran")
        assert (obs.is_error, obs.stage) == (True, "sandbox")
        assert "failed (exit 1: bwrap: No permissions to create new namespace)" in obs.content
        assert not (root / "ran").exists()
    finally:
        agent.close()


def test_an_explicit_opt_out_runs_unconfined(root):
    from orchestrator.core.sandbox import Sandbox

    agent = Agent(root, sandbox=Sandbox.off("TEAM_SANDBOX=off"))
    try:
        obs = agent.bash("echo free > /tmp/team-optout-$PPID && cat /tmp/team-optout-$PPID && rm /tmp/team-optout-$PPID")
        assert obs.content == "exit code: 0\nfree\n" and obs.meta["sandboxed"] is False
    finally:
        agent.close()


def test_a_linked_worktree_keeps_its_git_dirs_read_only(root, tmp_path):
    """The workspace of `isolation: worktree`: its .git is a file; the worktree's own git dir and
    the common dir (the main repository's .git, which holds the objects) stay read-only."""
    from hostile.attacks import git

    wt = root / ".team" / "worktrees" / "p" / "t1"
    git(root, "worktree", "add", "-q", "-b", "team/p/t1", str(wt))
    agent = Agent(root)
    agent.ctx.workspace = wt
    mine = str(wt.relative_to(root))
    before = {k: v for k, v in snapshot(root).items() if not k.startswith(mine + "/")}
    try:
        obs = agent.bash("git status --short; git commit -q --allow-empty -m x; rm -rf \"$(git rev-parse --git-common-dir)\"; "
                         "echo change > src.py && cat src.py")
        assert obs.stage == "ok"
        assert obs.content.endswith("change\n"), obs.content
        assert (wt / "src.py").read_text() == "change\n"  # the worktree is the agent's to change
        assert {k: v for k, v in snapshot(root).items() if not k.startswith(mine + "/")} == before, obs.content
    finally:
        agent.close()


def test_python_exec_of_the_lead_cannot_write_the_store(root, agent):
    """`team` itself run inside the sandbox (here: the task store written from Python) cannot change it."""
    before = snapshot(root)
    code = ("from orchestrator.tasks.store import TaskStore; TaskStore('.').create('planted')")
    obs = agent.bash(f"{sys.executable} -c \"{code}\"")
    assert obs.stage == "ok" and "NotWritable: .tasks is not writable" in obs.content, obs.content
    assert snapshot(root) == before


def test_programs_under_tmp_stay_reachable_and_read_only(root, agent, monkeypatch):
    """The private /tmp hides the machine's /tmp, but not what the agent's commands run from:
    a directory on PATH under /tmp (a virtualenv or a checkout there, as on many CI machines)
    is visible inside the sandbox, read-only."""
    tools = Path(tempfile.mkdtemp(prefix="team-tools-", dir="/tmp"))
    try:
        program = tools / "hello-from-tmp"
        program.write_text("#!/bin/sh\necho hello from a tool in /tmp\n")
        program.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
        obs = agent.bash(f"hello-from-tmp; touch {tools}/planted")
        assert obs.stage == "ok" and "hello from a tool in /tmp\n" in obs.content, obs.content
        assert "Read-only file system" in obs.content and not (tools / "planted").exists(), obs.content
    finally:
        shutil.rmtree(tools)
