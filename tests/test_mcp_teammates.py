"""MCP servers as teammates' tools, end to end: `team run` (the real CLI and openai client against
the scripted OpenAI-compatible server on 127.0.0.1) with a plan whose teammate uses a real
third-party MCP server installed from PyPI (``mcp-server-time``), started by the run over stdio."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
import util
from conftest import run_team

from orchestrator.core.errors import UserError
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.roles.roles import parse_role

KEY = "sk-mcp-secret-4b1e8d2c"
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")


def llm_env(srv: ScriptedServer, **extra: str) -> dict[str, str]:
    return util.llm_env(srv.base_url, KEY, **extra)


def task(root: Path, plan_task: str) -> dict:
    for f in (root / ".tasks").glob("task_*.json"):
        t = json.loads(f.read_text())
        if t.get("plan_task") == plan_task:
            return t
    raise AssertionError(f"no task {plan_task}")


def tool_messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m.get("role") == "tool"]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" in status.read_text()  # a zombie has exited


WATCHER = """\
---
name: clockwatcher
description: Tells the time.
tools: [read_file, task_update]
mcp_tools: [time.get_current_time]
---
You tell the time with the time server's tools.
"""


def plan(server_cmd: str, *, extra: str = "") -> str:
    return f"""\
name: clock
mcp_servers:
  - name: time
    command: sh
    args: [-c, 'echo $$ > server.pid; env > server.env; exec {server_cmd}']
    env: {{GREETING: hello}}
    {extra}
tasks:
  - id: now
    assignee: alice
    role: clockwatcher
    prompt: What is the time in UTC? Put it in the task's result.
"""


def test_a_teammate_uses_a_real_mcp_server_and_its_result_lands_in_the_task(tmp_path):
    root = tmp_path
    (root / "agents").mkdir()
    (root / "agents" / "clockwatcher.md").write_text(WATCHER)
    (root / "plan.yaml").write_text(plan(f"{TIME_SERVER} --local-timezone UTC"))

    def check_validation_then_call(body: dict) -> Reply:
        refused = tool_messages(body)[-1]["content"]
        assert "invalid arguments for time__get_current_time" in refused and "timezone" in refused
        return Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})])

    def finish_with_the_time(body: dict) -> Reply:
        answer = json.loads(tool_messages(body)[-1]["content"])
        assert answer["timezone"] == "UTC"
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed",
                                                           "result": f"It is {answer['datetime']} in UTC."})])

    script = {"alice": [Reply(tool_calls=[tool_call("time__get_current_time", {"tz": "UTC"})]),
                        check_validation_then_call, finish_with_the_time]}
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", timeout=180, SECRET_TOKEN="tok-should-not-leak",
                     **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
        tools = {t["function"]["name"]: t["function"] for t in srv.chat_requests("alice")[0].body["tools"]}

    # the server's tool sits next to the built-in ones, namespaced, with the server's own schema;
    # the role's allow-list let get_current_time through and kept convert_time out
    assert {"read_file", "task_update", "time__get_current_time"} <= set(tools)
    assert "time__convert_time" not in tools
    assert tools["time__get_current_time"]["parameters"]["required"] == ["timezone"]
    assert tools["time__get_current_time"]["description"].startswith("[MCP time] ")

    t = task(root, "now")
    assert t["status"] == "completed" and t["owner"] == "alice"
    assert re.fullmatch(r"It is \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 in UTC\.", t["result"]), t["result"]

    # every call went through the pipeline: the refused one and the real one are in the call log
    calls = [json.loads(line) for line in (root / ".team" / "calls" / "alice.jsonl").read_text().splitlines()]
    mcp_calls = [(c["stage"], c["is_error"]) for c in calls if c["tool"] == "time__get_current_time"]
    assert mcp_calls == [("validate", True), ("ok", False)]
    lines = [json.loads(line) for line in (root / ".team" / "transcripts" / "alice.jsonl").read_text().splitlines()]
    results = [m["msg"]["content"] for m in lines if m.get("kind") == "message" and m["msg"].get("role") == "tool"]
    assert any(r.startswith("invalid arguments for time__get_current_time") for r in results)
    assert any(r.startswith("{") and json.loads(r)["datetime"] in t["result"] for r in results)

    # started with the allow-listed environment plus its declared env; reaped with the run
    env = dict(line.split("=", 1) for line in (root / "server.env").read_text().splitlines() if "=" in line)
    assert env["GREETING"] == "hello"
    assert "SECRET_TOKEN" not in env and "OPENAI_API_KEY" not in env and KEY not in json.dumps(env)
    assert gone(int((root / "server.pid").read_text()))


def test_a_server_that_exits_mid_run_fails_the_task_with_the_reason(tmp_path):
    root = tmp_path
    (root / "plan.yaml").write_text(plan(f"{TIME_SERVER} --local-timezone UTC").replace("    role: clockwatcher\n", ""))

    def kill_the_server_then_call(body: dict) -> Reply:
        assert "UTC" in tool_messages(body)[-1]["content"]  # the first call worked
        os.kill(int((root / "server.pid").read_text()), signal.SIGKILL)
        return Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})])

    script = {"alice": [Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})]),
                        kill_the_server_then_call]}
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", timeout=180, **llm_env(srv))
        srv.assert_complete()  # no model call after the dead server: the task ended there
    assert r.returncode == 1, r.stdout + r.stderr
    t = task(root, "now")
    assert t["status"] == "failed"
    assert "mcp server 'time' closed its connection (did the process exit?) while in use" in t["error"]
    assert "Traceback" not in r.stderr


def test_a_server_that_cannot_start_fails_its_task_clearly_and_nothing_hangs(tmp_path):
    root = tmp_path
    (root / "plan.yaml").write_text(plan("/nonexistent/mcp-server-nope").replace("    role: clockwatcher\n", ""))
    with ScriptedServer({"alice": []}) as srv:
        r = run_team(root, "run", "plan.yaml", timeout=180, **llm_env(srv))
    assert r.returncode == 1, r.stdout + r.stderr
    t = task(root, "now")
    assert t["status"] == "failed"
    assert "mcp server 'time' failed to start" in t["error"], t["error"]
    assert "mcp-server-nope" in t["error"]  # its stderr's last line names the missing program
    assert "Traceback" not in r.stderr


def test_a_server_that_never_answers_times_out_and_is_reaped(tmp_path):
    root = tmp_path
    (root / "plan.yaml").write_text(plan("sleep 600", extra="startup_timeout: 2").replace("    role: clockwatcher\n", ""))
    with ScriptedServer({"alice": []}) as srv:
        r = run_team(root, "run", "plan.yaml", timeout=180, **llm_env(srv))
    assert r.returncode == 1, r.stdout + r.stderr
    t = task(root, "now")
    assert t["status"] == "failed" and "mcp server 'time' did not answer within 2s" in t["error"], t["error"]
    assert gone(int((root / "server.pid").read_text()))


def test_mcp_servers_in_plans_and_roles_are_checked(tmp_path):
    bad = "name: p\nmcp_servers:\n  - {name: a.b, command: x}\ntasks:\n  - {id: t, run: 'true'}\n"
    (tmp_path / "p.yaml").write_text(bad)
    r = run_team(tmp_path, "plan", "check", "p.yaml")
    assert r.returncode == 2 and "mcp_servers" in r.stderr and "Traceback" not in r.stderr
    both = "name: p\nmcp_servers:\n  - {name: a, command: x, url: 'http://127.0.0.1:1/mcp'}\ntasks:\n  - {id: t, run: 'true'}\n"
    (tmp_path / "p.yaml").write_text(both)
    r = run_team(tmp_path, "plan", "check", "p.yaml")
    assert r.returncode == 2 and "either `command` (stdio) or `url` (HTTP), not both" in r.stderr
    schema = json.loads(run_team(tmp_path, "plan", "schema").stdout)
    assert "mcp_servers" in schema["properties"]

    role = WATCHER.replace("mcp_tools: [time.get_current_time]\n",
                           "mcp_servers:\n  - {name: git, command: mcp-server-git}\nmcp_tools: [git.*]\n")
    parsed = parse_role(role, Path("agents/clockwatcher.md"))
    assert [s.name for s in parsed.mcp_servers] == ["git"] and parsed.mcp_tools == ("git.*",)
    with pytest.raises(UserError, match=r"mcp_servers\[0\]"):
        parse_role(role.replace("command: mcp-server-git", "cmd: x"), Path("agents/clockwatcher.md"))


def test_a_team_member_whose_server_cannot_start_stops_the_run_before_any_work(tmp_path):
    text = plan("/nonexistent/mcp-server-nope").replace("    role: clockwatcher\n", "")
    text = text.replace("tasks:\n", "team:\n  - {name: alice, role: coder}\ntasks:\n")
    (tmp_path / "plan.yaml").write_text(text)
    with ScriptedServer({"alice": []}) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", timeout=180, **llm_env(srv))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "McpStartFailed: mcp server 'time' failed to start" in r.stderr and "Traceback" not in r.stderr
    stored = [json.loads(f.read_text()) for f in (tmp_path / ".tasks").glob("task_*.json")]
    assert all(t["status"] == "pending" and t["attempts"] == 0 for t in stored)  # no work started


def test_the_facade_serves_many_threads_over_http_against_team_mcp(tmp_path):
    """The client side over streamable HTTP (``url:``), against our own ``team mcp --http``: eight
    threads call through one connection at once; every call lands, once."""
    import threading

    from test_mcp_server import http_server

    from orchestrator.core.mcpspec import McpServerSpec
    from orchestrator.mcpclient.hub import McpHub
    from orchestrator.tasks.store import TaskStore

    served = tmp_path / "served"
    served.mkdir()
    with http_server(served) as url:
        hub = McpHub([McpServerSpec(name="team", url=url)], root=tmp_path)
        try:
            conn = hub.connect(hub.specs["team"])
            assert {"task_create", "task_claim"} <= {t.name for t in conn.tools()}
            results: list = []

            def create(i: int) -> None:
                results.append(conn.call("task_create", {"subject": f"from thread {i}"}))

            threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
            for th in threads:
                th.start()
            for th in threads:
                th.join(60)
            assert len(results) == 8 and not any(r.is_error for r in results)
            bad = conn.call("task_get", {"task": 99})
            assert bad.is_error and bad.text.startswith("UnknownRef: ")
        finally:
            hub.close()
    subjects = sorted(t.subject for t in TaskStore(served).all())
    assert subjects == sorted(f"from thread {i}" for i in range(8))


def test_task_list_does_not_load_the_mcp_sdk(tmp_path):
    code = ("import sys; from orchestrator.cli import main; main(['--root', sys.argv[1], 'task', 'list']); "
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    import subprocess

    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_a_lead_killed_with_sigkill_leaves_no_mcp_server_behind(tmp_path):
    """SIGKILL gives the lead no chance to stop its servers: a stdio server still goes, because its
    stdin (the lead's pipe) reaches end-of-file, which ends the stdio transport."""
    import subprocess
    import time

    from conftest import team_env

    root = tmp_path
    (root / "plan.yaml").write_text(plan(f"{TIME_SERVER} --local-timezone UTC").replace("    role: clockwatcher\n", ""))
    lead: list[subprocess.Popen] = []

    def kill_the_lead(body: dict) -> Reply:
        assert "UTC" in tool_messages(body)[-1]["content"]
        os.kill(lead[0].pid, signal.SIGKILL)
        return Reply(content="nobody hears this")

    script = {"alice": [Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})]), kill_the_lead]}
    with ScriptedServer(script) as srv:
        lead.append(subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root,
                                     env=team_env(root, **llm_env(srv)), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL))
        assert lead[0].wait(120) == -signal.SIGKILL
    pid = int((root / "server.pid").read_text())
    deadline = time.monotonic() + 30
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid), f"mcp server {pid} outlived its lead"


def test_a_retry_after_the_server_died_gets_the_server_back(tmp_path):
    root = tmp_path
    text = plan(f"{TIME_SERVER} --local-timezone UTC").replace("    role: clockwatcher\n", "    retries: 1\n    retry_delay: 0\n")
    (root / "plan.yaml").write_text(text)
    killed: list[int] = []

    def kill_the_server_then_call(body: dict) -> Reply:
        killed.append(int((root / "server.pid").read_text()))
        os.kill(killed[0], signal.SIGKILL)
        return Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})])

    def finish(body: dict) -> Reply:
        answer = json.loads(tool_messages(body)[-1]["content"])
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed",
                                                           "result": f"{answer['timezone']} after a restart"})])

    script = {"alice": [Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})]),
                        kill_the_server_then_call,
                        Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})]),
                        finish]}
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", timeout=180, **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    t = task(root, "now")
    assert (t["status"], t["result"], t["attempts"], t["failures"]) == ("completed", "UTC after a restart", 2, 1)
    restarted = int((root / "server.pid").read_text())
    assert restarted != killed[0] and gone(restarted) and gone(killed[0])


def test_a_server_that_prints_junk_on_stdout_is_one_line_naming_it_not_tracebacks(tmp_path):
    """A server's stdout is the protocol; one that prints a two-line banner there costs the run
    one line for each, naming the server, and its tools still work."""
    root = tmp_path
    (root / "agents").mkdir()
    (root / "agents" / "clockwatcher.md").write_text(WATCHER)
    (root / "plan.yaml").write_text(plan(f"{TIME_SERVER} --local-timezone UTC").replace(
        "env > server.env;", "env > server.env; echo welcome to the time server; echo v1.0;"))
    script = {"alice": [Reply(tool_calls=[tool_call("time__get_current_time", {"timezone": "UTC"})]),
                        Reply(content="It is now.")]}
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", timeout=180, **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "validation error" not in r.stderr, r.stderr
    said = [line for line in r.stderr.splitlines() if "printed a line on stdout" in line]
    assert said == [f"mcp server 'time' printed a line on stdout that is not MCP (JSON-RPC); ignored: {junk!r} "
                    "(an MCP server's stdout is the protocol: it should log to stderr)"
                    for junk in ("welcome to the time server", "v1.0")], r.stderr
    assert json.loads(tool_messages(srv.chat_requests("alice")[1].body)[-1]["content"])["timezone"] == "UTC"
