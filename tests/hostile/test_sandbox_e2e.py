"""Issue 16 item 3 end to end: `team run` and `team chat` with agents driven by the scripted
OpenAI-compatible server, the real CLI, real bubblewrap. On main every attack here succeeded
(or, for the opt-out, was not shown)."""

from __future__ import annotations

import json
import os
import subprocess

from conftest import run_team
from util import pids_running, wait_until

from hostile.attacks import Listener, bwrap_installed, git, snapshot
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

KEY = "sk-e2e-sandbox-1c2d3e4f5a"


def llm_env(srv: ScriptedServer, **extra: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": KEY, "TEAM_MODEL": "gpt-4o-mini",
            "TEAM_LLM_BACKOFF_BASE": "0", "TEAM_LLM_BACKOFF_MAX": "0", "TEAM_AUTOCLAIM": "0", **extra}


def tool_results(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


def repo(tmp_path):
    bwrap_installed()
    root = tmp_path / "proj"
    root.mkdir()
    (root / "src.py").write_text("print('hello')\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "src.py")
    git(root, "commit", "-q", "-m", "first")
    return root


ATTACK_PLAN = """\
name: attack
tasks:
  - id: wreck
    prompt: Clean up the repository.
  - id: after
    needs: [wreck]
    run: echo still-here
"""


def test_an_agent_task_cannot_wreck_the_state_it_runs_in(tmp_path):
    root = repo(tmp_path)
    (root / "plan.yaml").write_text(ATTACK_PLAN)
    git_before = {k: v for k, v in snapshot(root).items() if k.startswith(".git")}
    mark = f"46.{os.getpid()}"  # unique to this suite: another running at once has its own
    seen: list[str] = []

    def check(body: dict) -> Reply:
        seen.extend(tool_results(body))
        # the job's end is queued for the agent; wait for it, so it is drained before the next request
        wait_until(lambda: [j for j in (root / ".team" / "jobs").glob("*.json")
                            if json.loads(j.read_text())["status"] != "running"], timeout=20, what="the job")
        return Reply(tool_calls=[tool_call("check_background", {})])

    def finish(body: dict) -> Reply:
        assert "[background job " in json.dumps(body["messages"]), "the job's notification never came"
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "cleaned"})])

    script = {"coder-1": [
        Reply(tool_calls=[
            tool_call("bash", {"command": "rm -rf {.tasks,.git,.team}"}),
            tool_call("bash", {"command": "sh -xc 'rm -rf .tasks .team .git'; echo x>.tasks/task_1.json"}),
            tool_call("bash", {"command": f"setsid sleep {mark} >/dev/null 2>&1 & echo spawned"}),
            tool_call("background_run", {"command": "find . -path ./src.py -prune -o -name '*' -delete"}),
        ]),
        check,
        finish,
    ]}
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(seen) == 4 and all("Read-only file system" in text for text in seen[:2]), seen
    assert seen[2] == "exit code: 0\nspawned\n" and pids_running(["sleep", mark]) == []
    # the store went on as if nothing happened: both tasks done, the shell task after the agent's
    tasks = {json.loads(p.read_text())["plan_task"]: json.loads(p.read_text())
             for p in (root / ".tasks").glob("task_*.json")}
    assert {k: t["status"] for k, t in tasks.items()} == {"wreck": "completed", "after": "completed"}
    assert tasks["after"]["result"].strip() == "still-here"
    assert {k: v for k, v in snapshot(root).items() if k.startswith(".git")} == git_before
    assert (root / "src.py").read_text() == "print('hello')\n"
    calls = (root / ".team" / "calls" / "coder-1.jsonl").read_text()
    assert calls.count("Read-only file system") >= 2


NET_ROLE = """\
---
name: netcoder
description: A coder whose shell commands may use the network.
tools: [bash, task_update]
network: true
---
You are a coder with network access.
"""

NET_PLAN = """\
name: net
tasks:
  - id: online
    role: netcoder
    prompt: Fetch the greeting.
  - id: offline
    role: coder
    prompt: Fetch the greeting.
"""


def test_only_a_role_with_network_true_reaches_the_network(tmp_path):
    root = repo(tmp_path)
    (root / "agents").mkdir()
    (root / "agents" / "netcoder.md").write_text(NET_ROLE)
    (root / "plan.yaml").write_text(NET_PLAN)
    listener = Listener()
    results: dict[str, str] = {}

    def finish(name: str, task: int):
        def step(body: dict) -> Reply:
            results[name] = tool_results(body)[-1]
            return Reply(tool_calls=[tool_call("task_update", {"task": task, "status": "completed", "result": "ok"})])
        return step

    script = {
        "netcoder-1": [Reply(tool_calls=[tool_call("bash", {"command": listener.connect_command()})]),
                       finish("netcoder-1", 1)],
        "coder-1": [Reply(tool_calls=[tool_call("bash", {"command": listener.connect_command()})]),
                    finish("coder-1", 2)],
    }
    try:
        with ScriptedServer(script) as srv:
            r = run_team(root, "run", "plan.yaml", **llm_env(srv))
            srv.assert_complete()
    finally:
        listener.close()
    assert r.returncode == 0, r.stdout + r.stderr
    assert results["netcoder-1"] == "exit code: 0\nconnected: hello from the host\n"
    assert results["coder-1"].startswith("exit code: 1\n") and "Connection refused" in results["coder-1"]
    assert listener.accepted == 1


OFF_PLAN = """\
name: loose
sandbox: off
tasks:
  - id: work
    prompt: Do it.
"""


def test_an_opted_out_run_says_so_at_the_start_and_in_team_status(tmp_path):
    root = repo(tmp_path)
    (root / "plan.yaml").write_text(OFF_PLAN)
    status: list[subprocess.CompletedProcess] = []

    def look(body: dict) -> Reply:
        status.append(run_team(root, "status"))  # while the lead runs
        return Reply(content="done")

    with ScriptedServer({"coder-1": [look]}) as srv:
        r = run_team(root, "run", "plan.yaml", **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sandbox off (sandbox: off in plan.yaml): agents' shell commands run without an OS sandbox" in r.stderr
    line = status[0].stdout.splitlines()[0]
    assert line.startswith("team: loose   lead: running (pid ") and line.endswith(
        ") · sandbox off (sandbox: off in plan.yaml)"), status[0].stdout
    # a run that keeps the sandbox says nothing about it
    (root / "plan.yaml").write_text(OFF_PLAN.replace("sandbox: off\n", ""))
    with ScriptedServer({"coder-1": [look]}) as srv:
        r = run_team(root, "run", "plan.yaml", "--fresh", **llm_env(srv))
    assert r.returncode == 0 and "sandbox" not in r.stderr
    assert "sandbox" not in status[1].stdout


def test_team_chat_runs_the_leads_commands_in_the_sandbox_unless_told_otherwise(tmp_path):
    root = repo(tmp_path)
    seen: list[str] = []
    status: list[str] = []

    def answer(body: dict) -> Reply:
        seen.append(tool_results(body)[-1])
        status.append(run_team(root, "status").stdout)
        return Reply(content="tried")

    attack = Reply(tool_calls=[tool_call("bash", {"command": "echo x>.tasks/task_1.json; rm -rf {.git,.team}"})])
    with ScriptedServer({"lead": [attack, answer]}) as srv:
        r = run_team(root, "chat", input="clean up\n", **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 0, r.stderr
    assert "Read-only file system" in seen[0] and (root / ".git" / "HEAD").exists()
    assert "sandbox" not in r.stdout and "sandbox" not in status[0]
    # TEAM_SANDBOX=off: the user's explicit choice, shown at the start and in team status
    with ScriptedServer({"lead": [Reply(tool_calls=[tool_call("bash", {"command": "echo free > /tmp/x-$$ && "
                                                                       "cat /tmp/x-$$ && rm /tmp/x-$$"})]),
                                  answer]}) as srv:
        r = run_team(root, "chat", input="go\n", **llm_env(srv, TEAM_SANDBOX="off"))
        srv.assert_complete()
    assert r.returncode == 0, r.stderr
    assert "(sandbox off (TEAM_SANDBOX=off): agents' shell commands run without an OS sandbox" in r.stdout
    assert seen[1] == "exit code: 0\nfree\n"
    assert " · team chat · sandbox off (TEAM_SANDBOX=off)\n" in status[1]
    r = run_team(root, "chat", input="go\n", **llm_env(srv, TEAM_SANDBOX="maybe"))
    assert (r.returncode, r.stderr) == (2, "UserError: TEAM_SANDBOX='maybe': use on or off\n")


def test_without_bwrap_a_run_says_so_and_its_agents_commands_are_refused_with_the_fix(tmp_path):
    root = repo(tmp_path)
    (root / "plan.yaml").write_text("name: nobwrap\ntasks:\n  - id: work\n    prompt: Do it.\n")
    bare = tmp_path / "bin"  # a PATH without bwrap (the lead itself needs nothing from PATH)
    bare.mkdir()
    seen: list[str] = []
    status: list[str] = []

    def answer(body: dict) -> Reply:
        seen.append(tool_results(body)[-1])
        status.append(run_team(root, "status").stdout)
        return Reply(content="could not run it")

    attack = Reply(tool_calls=[tool_call("bash", {"command": "touch ran"})])
    with ScriptedServer({"coder-1": [attack, answer]}) as srv:
        r = run_team(root, "run", "plan.yaml", **llm_env(srv, PATH=str(bare)))
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("sandbox unavailable: bwrap (bubblewrap) is not installed (not found on PATH); agents' shell "
            "commands will be refused. Install bubblewrap") in r.stderr
    assert seen[0].startswith("agent shell commands run in an OS sandbox, and it cannot be set up here: bwrap")
    assert "`sandbox: off` in the plan" in seen[0] and seen[0].endswith("The command was not run.")
    assert not (root / "ran").exists()
    assert " · sandbox unavailable: bwrap (bubblewrap) is not installed" in status[0].splitlines()[0]
