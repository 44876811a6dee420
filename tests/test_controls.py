"""The lead's controls for people, from another process, while a `team run` is live: the real
CLI in subprocesses, the real openai client against the scripted OpenAI-compatible server.

* `team approve` / `team deny` answer a teammate's `ask` tool call (issue 14 item 5); nobody
  answering in time is a denial the agent reads as the tool's result;
* `team approve` answers a plan-mode teammate's plan;
* `team shutdown NAME` runs the shutdown handshake and prints the teammate's answer; `--force`
  stops one that does not answer.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import util
from conftest import run_team, team_env
from util import wait_until

from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

KEY = "sk-controls-secret-51c0ffee"

ROLE = """\
---
name: coder
description: A coder whose file writes and pushes wait for a person.
tools: [read_file, write_file, bash, task_update, idle]
ask: [write_file, "bash(git push*)"]
---
You are a coder. Do the task, then mark it completed.
"""

PLAN = """\
name: risky
team:
  - {name: ada, role: coder}
tasks:
  - id: notes
    assignee: ada
    prompt: Write notes.txt.
"""


def llm_env(srv: ScriptedServer, **extra: str) -> dict[str, str]:
    return util.llm_env(srv.base_url, KEY, **extra)


def start_run(root: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root,
                            env=team_env(root, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=90)
    return proc.returncode, out + err


def pending(root: Path) -> list[dict]:
    """The pending requests as another process lists them (`team approve --json`)."""
    r = run_team(root, "approve", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def last_tool_result(body: dict) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m.get("role") == "tool")


def report_last_result(body: dict) -> Reply:
    """Ada ends her task with what her last tool call returned (the test reads it from the store)."""
    return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed",
                                                       "result": last_tool_result(body)})])


def task_result(root: Path) -> dict:
    return json.loads((root / ".tasks" / "task_1.json").read_text())


def setup(root: Path, plan: str = PLAN, role: str = ROLE) -> None:
    (root / "agents").mkdir()
    (root / "agents" / "coder.md").write_text(role)
    (root / "plan.yaml").write_text(plan)


def write_notes() -> Reply:
    return Reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "v1\n"})])


def test_an_ask_tool_waits_for_team_approve_from_another_process(tmp_path):
    root = tmp_path
    setup(root)
    with ScriptedServer({"ada": [write_notes(), report_last_result]}) as srv:
        proc = start_run(root, llm_env(srv))
        try:
            (req,) = wait_until(lambda: pending(root), timeout=60, interval=0.2, what="ada's approval request")
            assert (req["kind"], req["sender"], req["tool"], req["rule"], req["task"]) == (
                "tool", "ada", "write_file", "write_file", 1)
            assert req["summary"] == "write_file notes.txt (new file, 1 line, 3 chars)"
            assert not (root / "notes.txt").exists()  # nothing runs before the answer
            # the waiting request shows in `team status` and in the lead's inbox, with how to answer it
            status = run_team(root, "status").stdout
            assert "approvals: 1 pending" in status and f"{req['id']}  tool  ada: write_file notes.txt" in status
            inbox = run_team(root, "inbox", "lead", "--peek").stdout
            assert f"[approval_request {req['id']}]" in inbox and f"team approve {req['id']}" in inbox
            r = run_team(root, "approve", req["id"][:6])  # a unique prefix will do
            assert r.returncode == 0, r.stderr
            assert r.stdout == f"approved {req['id']}: tool request of ada: write_file notes.txt (new file, 1 line, 3 chars)\n"
        finally:
            code, output = finish(proc)
        assert code == 0, output
        srv.assert_complete()
    assert (root / "notes.txt").read_text() == "v1\n"
    assert task_result(root)["result"] == "created notes.txt (1 line, 3 bytes)"
    assert f"ada asks to run write_file notes.txt (new file, 1 line, 3 chars) (rule write_file, request {req['id']})" in output
    # a second answer is refused, naming the first
    again = run_team(root, "deny", req["id"], "--reason", "too late")
    assert again.returncode == 2 and f"request {req['id']} was already approved by user" in again.stderr
    assert pending(root) == []


def test_a_denied_ask_tool_is_not_run_and_the_agent_reads_the_reason(tmp_path):
    root = tmp_path
    setup(root)
    with ScriptedServer({"ada": [write_notes(), report_last_result]}) as srv:
        proc = start_run(root, llm_env(srv))
        try:
            (req,) = wait_until(lambda: pending(root), timeout=60, interval=0.2, what="ada's approval request")
            r = run_team(root, "deny", req["id"], "--reason", "notes live in the wiki")
            assert r.returncode == 0 and r.stdout.startswith(f"rejected {req['id']}: tool request of ada"), r.stderr
        finally:
            code, output = finish(proc)
        assert code == 0, output
        srv.assert_complete()
    assert not (root / "notes.txt").exists()
    assert task_result(root)["result"] == (
        f"denied: this call needs approval (ask rule 'write_file') and user denied it (request {req['id']}): "
        "notes live in the wiki. It was not run. Do not repeat it; do the task another way, or report that you "
        "could not.")
    stored = json.loads((root / ".team" / "requests" / f"{req['id']}.json").read_text())
    assert (stored["status"], stored["decided_by"], stored["reason"]) == ("rejected", "user", "notes live in the wiki")


def test_an_unanswered_ask_tool_times_out_as_a_denial(tmp_path):
    root = tmp_path
    setup(root)
    push = Reply(tool_calls=[tool_call("bash", {"command": "echo release && git push origin main"})])
    with ScriptedServer({"ada": [push, report_last_result]}) as srv:
        code, output = finish(start_run(root, llm_env(srv, TEAM_APPROVAL_TIMEOUT="1")))
        assert code == 0, output
        srv.assert_complete()
    result = task_result(root)["result"]
    assert re.fullmatch(r"denied: this call needs approval \(ask rule 'bash\(git push\*\)'\) and the approval "
                        r"timeout denied it \(request \w+\): nobody answered within 1s\. It was not run\..*", result)
    (stored,) = [json.loads(p.read_text()) for p in (root / ".team" / "requests").glob("*.json")]
    assert (stored["status"], stored["summary"]) == ("expired", "bash: echo release && git push origin main")
    assert pending(root) == []


PLAN_MODE = """\
name: planned
team:
  - {name: pam, role: coder, plan_mode: true}
tasks:
  - id: notes
    assignee: pam
    prompt: Write notes.txt, after your plan is approved.
"""

PLAIN_ROLE = ROLE.replace('ask: [write_file, "bash(git push*)"]\n', "")


def test_a_plan_is_approved_with_team_approve_from_another_process(tmp_path):
    root = tmp_path
    setup(root, PLAN_MODE, PLAIN_ROLE)
    script = {"pam": [
        Reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "too early\n"})]),
        Reply(tool_calls=[tool_call("submit_plan", {"plan": "Write notes.txt with one line.\nNothing else."})]),
        Reply(tool_calls=[tool_call("idle", {})]),  # wait for the answer inside the task
        Reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "planned\n"})]),
        Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "written"})]),
    ]}
    with ScriptedServer(script) as srv:
        proc = start_run(root, llm_env(srv))
        try:
            (req,) = wait_until(lambda: pending(root), timeout=60, interval=0.2, what="pam's plan")
            assert (req["kind"], req["sender"], req["summary"]) == ("plan", "pam", "plan: Write notes.txt with one line.")
            assert req["detail"] == "Write notes.txt with one line.\nNothing else."
            assert not (root / "notes.txt").exists()
            r = run_team(root, "approve", req["id"], "--reason", "go ahead, keep it short")
            assert r.returncode == 0, r.stderr
        finally:
            code, output = finish(proc)
        assert code == 0, output
        srv.assert_complete()
        # pam was refused while in plan mode, then read the approval before writing
        bodies = [json.dumps(q.body["messages"]) for q in srv.chat_requests("pam")]
    assert "plan mode: write_file (write) is not allowed" in bodies[1]
    assert f"plan_approval_response, request {req['id']}" in bodies[3] and "go ahead, keep it short" in bodies[3]
    assert (root / "notes.txt").read_text() == "planned\n"
    assert (f"pam submitted a plan: Write notes.txt with one line. (request {req['id']}): `team approve {req['id']}` "
            f"or `team reject {req['id']} --reason TEXT`; it waits in plan mode until then") in output
    stored = json.loads((root / ".team" / "requests" / f"{req['id']}.json").read_text())
    assert (stored["status"], stored["decided_by"]) == ("approved", "user")


SHUTDOWN_PLAN = """\
name: shut
team:
  - {name: ada, role: coder}
  - {name: bob, role: coder}
tasks:
  - id: long
    assignee: ada
    prompt: Work until told otherwise.
  - id: gate
    run: "while [ ! -f release ]; do sleep 0.05; done"
"""


def shutdown_request_id(body: dict) -> str:
    return re.findall(r"shutdown_request, request (\w+)", json.dumps(body["messages"]))[-1]


def test_team_shutdown_from_another_process_idle_busy_refusing_and_forced(tmp_path):
    root = tmp_path
    setup(root, SHUTDOWN_PLAN, PLAIN_ROLE)

    def refuse(body: dict) -> Reply:
        return Reply(tool_calls=[tool_call("respond_shutdown", {"request_id": shutdown_request_id(body),
                                                                "approve": False, "reason": "busy with #1"})])

    idle = Reply(tool_calls=[tool_call("idle", {})])
    # ada: waits inside her task; refuses the first request; ignores the second (and is forced)
    with ScriptedServer({"ada": [idle, refuse, idle, idle]}) as srv:
        proc = start_run(root, llm_env(srv))
        try:
            wait_until(lambda: len(srv.chat_requests("ada")) == 1, timeout=60, what="ada at work")
            # bob is idle: he approves at once, without a model call
            r = run_team(root, "shutdown", "bob", "--reason", "not needed")
            assert r.returncode == 0, r.stderr
            assert re.fullmatch(r"bob approved shutdown request \w+: idle: shutting down; it has shut down\n", r.stdout)
            again = run_team(root, "shutdown", "bob")
            assert (again.returncode, again.stderr) == (2, "UserError: bob has already shut down; nothing to do\n")
            unknown = run_team(root, "shutdown", "zed")
            assert unknown.returncode == 2 and "unknown teammate 'zed'; teammates: ada, bob" in unknown.stderr
            # ada is busy: her model answers, and refuses
            r = run_team(root, "shutdown", "ada")
            assert r.returncode == 1, r.stdout + r.stderr
            assert re.fullmatch(r"ada refused shutdown request \w+: busy with #1\n", r.stdout)
            assert "ada was not shut down; `team shutdown ada --force` stops it anyway" in r.stderr
            # ignored, then forced once the timeout passes
            r = run_team(root, "shutdown", "ada", "--timeout", "5", "--force")
            assert r.returncode == 0, r.stdout + r.stderr
            assert re.fullmatch(r"ada did not answer shutdown request \w+ within 5s .*; stopped anyway \(--force\): "
                                r"its running task attempt, if any, ended as interrupted\n", r.stdout)
            roster = json.loads((root / ".team" / "config.json").read_text())
            assert {m["name"]: m["status"] for m in roster["members"]} == {"ada": "shutdown", "bob": "shutdown"}
        finally:
            (root / "release").write_text("")
            code, output = finish(proc)
    assert srv.errors == []
    assert code == 1 and "FAIL  #1 long: ada was shut down by `team shutdown --force`" in output, output


BUDGET_PLAN = """\
name: asking
team:
  - {name: alice, role: coder, budget: {tokens: 150}}
tasks:
  - {id: work, assignee: alice, prompt: Work on.}
"""


def test_a_budget_request_under_ask_is_answered_with_team_approve_like_any_other(tmp_path):
    (tmp_path / "plan.yaml").write_text(BUDGET_PLAN)
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    step = Reply(tool_calls=[tool_call("glob", {"pattern": "*"})], usage=usage)
    done = Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "finished"})],
                 usage=usage)
    with ScriptedServer({"alice": [step, step, done]}) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--ask"], cwd=tmp_path,
                                env=team_env(tmp_path, **llm_env(srv)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            (req,) = wait_until(lambda: pending(tmp_path), timeout=60, interval=0.2, what="alice's budget request")
            assert (req["kind"], req["sender"], req["summary"]) == (
                "budget", "alice", "more budget: alice used 220 of 150 tokens")
            r = run_team(tmp_path, "approve", req["id"])
            assert r.returncode == 0 and r.stdout.startswith(f"approved {req['id']}: budget request of alice"), r.stderr
        finally:
            code, output = finish(proc)
        assert code == 0, output
        srv.assert_complete()
    assert f"`team approve {req['id']}` or `team deny {req['id']} --reason TEXT`" in output
    assert json.loads((tmp_path / ".tasks" / "task_1.json").read_text())["status"] == "completed"
