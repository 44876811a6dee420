"""`team chat`: the lead's controls as slash commands (/tools /skills /reset /doctor /approve
/deny), the lead's own `ask` calls answered at the terminal (y / n / always), and a teammate's
`ask` call answered with /approve — the real CLI on piped stdin or a pseudo terminal, the scripted server."""

from __future__ import annotations

import json
import subprocess
import sys

import pexpect
from conftest import run_team, team_env
from test_chat_pty import PROMPT, spawn_chat
from test_e2e_agents import llm_env
from util import wait_until

from orchestrator.core.fsutil import TMP_PREFIX
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.roles.roles import builtin_agents_dir
from orchestrator.team.lead import lead_info
from orchestrator.team.requests import Requests


def lead_role_with(ask: str) -> str:
    text = (builtin_agents_dir() / "lead.md").read_text()
    head, sep, body = text.partition("\n---\n")
    return f"{head}\nask: {ask}{sep}{body}"


def test_slash_commands_tools_skills_doctor_approve_reset_answer_locally(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "lead.md").write_text(lead_role_with('["bash(git push*)"]'))
    skill = tmp_path / "skills" / "release"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: release\ndescription: How we cut a release.\n---\nTag, then push.\n")
    (tmp_path / ".tasks").mkdir()
    leftover = tmp_path / ".tasks" / f"{TMP_PREFIX}task_7.json"
    leftover.write_text("{half")
    script = "/tools\n/skills\n/doctor\n/approve\n/deny\n/approve zz9\nhello\n/reset\nhello again\n/quit\n"
    with ScriptedServer({"lead": [Reply(content="first conversation"), Reply(content="second conversation")]}) as srv:
        r = run_team(tmp_path, "chat", input=script, **llm_env(srv))
        srv.assert_complete()
        second = srv.chat_requests("lead")[1].body["messages"]
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # /tools: every tool of the lead with its risk, the ask rule on bash
    tools_block = out.split("the lead's tools (")[1].split("\nskills")[0]
    assert "  bash " in tools_block and "execute" in tools_block and "ask: bash(git push*)" in tools_block
    assert "  spawn_teammate " in tools_block and "  read_file " in tools_block
    # /skills
    assert "skills (1; an agent loads one with load_skill):\n  release  How we cut a release.  (skills/release/SKILL.md)" in out
    # /doctor reads, never fixes
    assert (f"doctor: 1 problem:\n  [temp-file] leftover temp file .tasks/{leftover.name} (a writer was killed "
            "mid-write; the real file is intact) (fixable)\n    → safe to delete\n"
            "repair what is safe with `team doctor --fix` once you have left the chat (/quit)\n") in out
    assert leftover.exists()  # /doctor only reads
    # /approve lists; /deny needs an id; an unknown id is named
    assert "no pending approval requests\n" in out
    assert "/deny needs a request id (/approve lists them) and a reason: /deny ID REASON\n" in out
    assert "no approval request 'zz9'; pending: none (`team approve` lists them)\n" in out
    # /reset: the lead's second turn starts a fresh conversation; the first is archived
    assert "the lead starts a fresh conversation (the last one is kept under transcripts/lead-sessions/); goal kept" in out
    assert [m["content"] for m in second if m["role"] == "user"][0] == "hello again"
    assert "first conversation" not in json.dumps(second)
    archived = list((tmp_path / ".team" / "transcripts" / "lead-sessions").glob("*.jsonl"))
    assert len(archived) == 1 and "first conversation" in archived[0].read_text()
    lead = json.loads(run_team(tmp_path, "status", "--json").stdout)["usage"]["agents"][0]  # the ledger's
    assert (lead["name"], lead["calls"]) == ("lead", 2)


def test_the_leads_own_ask_calls_are_answered_at_the_terminal_yes_no_always(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "lead.md").write_text(lead_role_with('["bash(echo *)"]'))

    def run(command: str) -> Reply:
        return Reply(tool_calls=[tool_call("bash", {"command": command})])

    def said(body: dict) -> Reply:
        result = next(m["content"] for m in reversed(body["messages"]) if m.get("role") == "tool")
        return Reply(content="tool said: " + " ".join(result.split()))

    script = {"lead": [run("echo one"), said, run("echo two"), said, run("echo three"), said,
                       run("echo four"), said]}
    stdin = "first\ny\nsecond\nn not today\nthird\nalways\nfourth\n"
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "chat", input=stdin, **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.count("approval needed: bash: echo") == 3  # asked for one, two, three; "always" covers four
    assert "approval needed: bash: echo one (rule bash(echo *))" in out
    assert "tool said: exit code: 0 one" in out, out
    assert ("tool said: denied: this call needs approval (ask rule 'bash(echo *)') and user denied it: not today. "
            "It was not run.") in out
    assert "tool said: exit code: 0 three" in out and "tool said: exit code: 0 four" in out
    assert not (tmp_path / ".team" / "requests").exists()  # answered at the terminal, nothing waited on disk


CODER = """\
---
name: coder
description: A coder whose file writes wait for a person.
tools: [write_file, task_update, idle, send_message]
ask: [write_file]
---
You are a coder.
"""


def test_a_teammates_ask_call_waits_for_slash_approve_in_the_chat(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "coder.md").write_text(CODER)

    def done(body: dict) -> Reply:
        result = next(m["content"] for m in reversed(body["messages"]) if m.get("role") == "tool")
        return Reply(content="bob: " + result)

    script = {"lead": [], "bob": [Reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "a\n"})]),
                                  done]}
    with ScriptedServer(script) as srv:
        chat = subprocess.Popen([sys.executable, "-m", "orchestrator", "chat"], cwd=tmp_path, text=True,
                                env=team_env(tmp_path, **llm_env(srv)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: (lead_info(tmp_path) or {}).get("mode") == "chat"
                       and (tmp_path / ".team/control.json").exists(), 20, what="the chat lead")
            r = run_team(tmp_path, "spawn", "bob", "--prompt", "Write a.txt.")
            assert r.returncode == 0, r.stderr
            (req,) = wait_until(lambda: Requests(tmp_path).pending(), 30, what="bob's request")
            assert not (tmp_path / "a.txt").exists()
            assert chat.stdin is not None
            chat.stdin.write(f"/approve {req.id}\n")
            chat.stdin.flush()
            wait_until(lambda: len(srv.chat_requests("bob")) == 2, 30, what="bob's next step")
            out, err = chat.communicate("/quit\n", timeout=30)
        finally:
            if chat.poll() is None:
                chat.kill()
        srv.assert_complete()
    assert chat.returncode == 0, err
    assert (f"(bob asks to run write_file a.txt (new file, 1 line, 2 chars) (rule write_file): /approve {req.id} "
            f"(or /approve {req.id} always) or /deny {req.id} REASON)") in out
    assert f"approved {req.id}: tool request of bob: write_file a.txt (new file, 1 line, 2 chars)" in out
    assert (tmp_path / "a.txt").read_text() == "a\n"
    # a chat does not put approval requests in the lead model's inbox
    assert "approval_request" not in run_team(tmp_path, "inbox", "lead", "--peek").stdout


def test_at_a_terminal_the_lead_asks_y_n_always_and_a_teammates_request_prints_above_the_prompt(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "coder.md").write_text(CODER)
    (tmp_path / "agents" / "lead.md").write_text(lead_role_with('["bash(touch *)"]'))

    def said(body: dict) -> Reply:
        result = next(m["content"] for m in reversed(body["messages"]) if m.get("role") == "tool")
        return Reply(content="lead: " + " ".join(result.split()))

    script = {"lead": [Reply(tool_calls=[tool_call("bash", {"command": "touch lead.txt"})]), said],
              "bob": [Reply(tool_calls=[tool_call("write_file", {"path": "b.txt", "content": "b\n"})]),
                      Reply(content="done")]}
    with ScriptedServer(script) as srv:
        child = spawn_chat(tmp_path, srv)
        try:
            child.expect_exact(PROMPT)
            child.sendline("make lead.txt")
            child.expect_exact("approval needed: bash: touch lead.txt (rule bash(touch *))")
            child.expect_exact("allow? [y]es / [n]o [reason] / [a]lways: ")
            child.sendline("maybe")
            child.expect_exact("answer y, n (optionally with a reason) or always")
            child.sendline("a")
            child.expect_exact("lead: exit code: 0")
            child.expect_exact(PROMPT)
            # a teammate's request shows up while the prompt waits, and the prompt comes back
            r = run_team(tmp_path, "spawn", "bob", "--prompt", "Write b.txt.")
            assert r.returncode == 0, r.stderr
            child.expect(r"\(bob asks to run write_file b\.txt \(new file, 1 line, 2 chars\) \(rule write_file\): "
                         r"/approve (\w+) ")
            rid = child.match.group(1)
            child.expect_exact(PROMPT)
            child.sendline(f"/approve {rid}")
            child.expect_exact(f"approved {rid}: tool request of bob")
            child.expect_exact(PROMPT)
            wait_until(lambda: (tmp_path / "b.txt").exists(), 20, what="bob's write")
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        srv.assert_complete()
    assert (tmp_path / "lead.txt").exists() and (tmp_path / "b.txt").read_text() == "b\n"
