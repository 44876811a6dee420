"""`team chat`: the input router, the goal, and the session driven through plain stdin
against the scripted server (real openai client over HTTP); token accounting in
`team status` and at the end of `team run`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import run_team, team_env
from test_e2e_agents import llm_env
from util import wait_until

from orchestrator.agent.transcript import transcript_path
from orchestrator.chat.commands import COMMANDS, Goal, help_text, nearest, route, unknown_command
from orchestrator.core.errors import UserError
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.tasks.store import TaskStore
from orchestrator.team.lead import LeadLock, lead_info
from orchestrator.team.roster import Team


def test_router_sends_slash_lines_to_commands_and_the_rest_to_the_model():
    assert route("  ").kind == "empty"
    assert (route("fix the tests").kind, route("fix the tests").text) == ("prompt", "fix the tests")
    r = route("/GOAL set ship it  ")
    assert (r.kind, r.name, r.text) == ("command", "goal", "set ship it")
    r = route("//etc/hosts is odd")
    assert (r.kind, r.text) == ("prompt", "/etc/hosts is odd")


def test_nearest_command_by_prefix_or_spelling():
    assert nearest("stauts") == "status"
    assert nearest("sta") == "status"
    assert nearest("cots") == "cost"
    assert nearest("inbx") == "inbox"
    assert nearest("xyzzy") is None
    text = unknown_command("stauts")
    assert text.splitlines()[0] == "unknown command /stauts — did you mean /status?"
    assert text.endswith(help_text())
    assert unknown_command("xyzzy").splitlines()[0] == "unknown command /xyzzy"
    for name in COMMANDS:
        assert f"/{name}" in help_text()


def test_goal_is_changed_only_through_its_actions():
    g = Goal()
    assert g.apply("") == "no goal set (/goal set TEXT)"
    with pytest.raises(UserError, match="no goal to pause"):
        g.apply("pause")
    assert g.apply("set Every module on httpx") == "goal (active): Every module on httpx"
    assert g.apply("pause") == "goal (paused): Every module on httpx"
    assert g.apply("resume") == "goal (active): Every module on httpx"
    assert g.apply("complete") == "goal (completed): Every module on httpx"
    with pytest.raises(UserError, match="unknown /goal action 'finish'"):
        g.apply("finish")
    with pytest.raises(UserError, match="needs the goal's text"):
        g.apply("set")
    assert g.apply("clear") == "goal cleared"
    assert (g.text, g.status) == (None, "active")


COMMANDS_SCRIPT = "\n".join([
    "/help", "/status", "/tasks", "/team", "/inbox", "/jobs", "/cost", "/compact",
    "/goal set Ship v2", "/goal pause", "/goal", "/stauts", "/quit", "never read",
]) + "\n"


def test_slash_commands_make_no_model_call_and_answer_locally(tmp_path):
    with ScriptedServer({"lead": []}) as srv:
        r = run_team(tmp_path, "chat", input=COMMANDS_SCRIPT, **llm_env(srv))
        assert srv.requests == []  # not one HTTP request reached the model server
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("team chat · lead of team team · model gpt-4o-mini · /help for commands")
    assert help_text() in out
    assert f"team: team   lead: running (pid {r.stdout.split('(pid ')[1].split(')')[0]}) · team chat\n" in out
    assert "no tasks yet\n" in out
    assert "members: none (add one with `team spawn NAME --role ROLE`)\n" in out
    assert "no unread messages for the lead\n" in out
    assert "no jobs yet\n" in out
    assert "no model calls yet\n" in out
    assert "nothing to compact yet\n" in out
    assert "goal (active): Ship v2\ngoal (paused): Ship v2\ngoal (paused): Ship v2\n" in out
    assert "unknown command /stauts — did you mean /status?\n" + help_text() in out
    assert out.endswith("bye: teammates are shutting down; `team chat --resume` continues\n")
    assert lead_info(tmp_path) is None  # the lock was released
    assert json.loads((tmp_path / ".team/chat.json").read_text())["goal"] == {"text": "Ship v2", "status": "paused"}


def test_a_line_goes_to_the_lead_and_its_answer_and_usage_are_recorded(tmp_path):
    with ScriptedServer({"lead": [Reply(content="Hello, I lead this team.", usage={
            "prompt_tokens": 1000, "completion_tokens": 20, "cached_tokens": 400})]}) as srv:
        r = run_team(tmp_path, "chat", input="who are you?\n", **llm_env(srv))
        srv.assert_complete()
        body = srv.chat_requests("lead")[0].body
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1:] == ["Hello, I lead this team."]
    assert body["stream"] is True
    assert body["messages"][0]["content"].startswith("You are lead, a lead on team team.\n\n# Role: lead")
    assert body["messages"][1] == {"role": "user", "content": "who are you?"}
    assert transcript_path(tmp_path, "lead").exists()
    (lead,) = json.loads(run_team(tmp_path, "status", "--json").stdout)["usage"]["agents"]  # the ledger's
    assert lead == {"name": "lead", "prompt_tokens": 1000, "completion_tokens": 20, "cached_tokens": 400,
                    "cost": pytest.approx((600 * 0.15 + 400 * 0.075 + 20 * 0.6) / 1e6), "calls": 1}
    status = run_team(tmp_path, "status")
    assert status.stdout.splitlines()[-4:] == [
        "tokens:          prompt completion     cached  calls  cost",
        "  by agent:",
        "  lead            1,000         20        400      1  $0.000132",
        "  total           1,000         20        400      1  $0.000132",
    ]


def test_missing_key_or_model_fails_before_the_prompt(tmp_path):
    r = run_team(tmp_path, "chat", input="hello\n", TEAM_MODEL="gpt-4o-mini")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "UserError: no API key: set OPENAI_API_KEY (any non-empty value for local servers)\n"
    r = run_team(tmp_path, "chat", input="hello\n", OPENAI_API_KEY="sk-x")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == "UserError: no model configured: pass --model, or set TEAM_MODEL\n"  # chat has no plan
    r = run_team(tmp_path, "chat", "--resume", input="", OPENAI_API_KEY="sk-x", TEAM_MODEL="m")
    assert r.returncode == 2
    assert r.stderr.startswith("UserError: nothing to resume: no earlier `team chat` session in")


def test_a_running_team_run_lead_is_named_and_chat_exits_2(tmp_path):
    with ScriptedServer({"lead": []}) as srv, LeadLock(tmp_path, plan="migrate"):
        r = run_team(tmp_path, "chat", input="hello\n", **llm_env(srv))
        assert srv.requests == []
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.startswith("LeadRunning: a `team run` lead (pid ")
    assert ", plan migrate) holds " in r.stderr and "stop it with `kill " in r.stderr


def test_team_spawn_reaches_the_chat_lead_and_quitting_shuts_teammates_down(tmp_path):
    with ScriptedServer({"lead": [], "bob": [Reply(tool_calls=[tool_call("send_message", {
            "to": "lead", "content": "bob here, ready"})]), Reply(content="said hello")]}) as srv:
        chat = subprocess.Popen([sys.executable, "-m", "orchestrator", "chat"], cwd=tmp_path, text=True,
                                env=team_env(tmp_path, **llm_env(srv)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: (lead_info(tmp_path) or {}).get("mode") == "chat"
                       and (tmp_path / ".team/control.json").exists(), 20, what="the chat lead")
            r = run_team(tmp_path, "spawn", "bob", "--role", "tester", "--prompt", "Say hello to the lead.")
            assert r.returncode == 0, r.stderr
            assert r.stdout.startswith("spawned bob (tester) in the lead (pid ")
            wait_until(lambda: Team(tmp_path).get("bob").status == "idle"
                       and len(srv.chat_requests("bob")) == 2, 20, what="bob's turn")
            out, err = chat.communicate("/inbox\n/team\n", timeout=30)
        finally:
            if chat.poll() is None:
                chat.kill()
        srv.assert_complete()
    assert chat.returncode == 0, err
    lines = out.splitlines()
    assert lines[1].endswith(" bob: bob here, ready")  # /inbox (the message was on disk before the line)
    assert lines[2] == "members:" and lines[3].split()[:3] == ["bob", "tester", "idle"]
    assert Team(tmp_path).get("bob").status == "shutdown"
    assert lead_info(tmp_path) is None
    assert json.loads((tmp_path / ".team/chat.json").read_text())["teammates"] == ["bob"]


PLAN = """\
name: tok
workers: 2
tasks:
  - id: one
    assignee: alice
    prompt: Say one.
  - id: two
    assignee: bob
    prompt: Say two.
"""


def test_team_run_ends_with_tokens_per_task_and_status_shows_them(tmp_path):
    (tmp_path / "plan.yaml").write_text(PLAN)
    script = {"alice": [Reply(content="one", usage={"prompt_tokens": 500, "completion_tokens": 5})],
              "bob": [Reply(content="two", usage={"prompt_tokens": 700, "completion_tokens": 7,
                                                  "cached_tokens": 100})]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv, TEAM_AUTOCLAIM="0"))
        srv.assert_complete()
    assert r.returncode == 0, r.stderr
    # gpt-4o-mini: $0.15 input, $0.075 cached input, $0.60 output per 1M tokens
    assert r.stdout.splitlines()[-8:] == [
        "tokens this run:      prompt completion     cached  calls  cost",
        "  by agent:",
        "  alice (coder)          500          5          0      1  $0.000078",
        "  bob (coder)            700          7        100      1  $0.000102",
        "  by task:",
        "  #1 tok.one             500          5          0      1  $0.000078",
        "  #2 tok.two             700          7        100      1  $0.000102",
        "  total                1,200         12        100      2  $0.00018",
    ]
    data = json.loads(run_team(tmp_path, "status", "--json").stdout)["usage"]
    assert [(a["name"], a["role"], a["prompt_tokens"], a["calls"]) for a in data["agents"]] == [
        ("alice", "coder", 500, 1), ("bob", "coder", 700, 1)]
    assert [(t["name"], t["completion_tokens"]) for t in data["tasks"]] == [("#1 tok.one", 5), ("#2 tok.two", 7)]
    assert data["total"]["prompt_tokens"] == 1200 and data["total"]["cached_tokens"] == 100
    assert TaskStore(tmp_path).get("tok.two").usage["cached_tokens"] == 100
