"""`team chat` used as a person would: a pseudo terminal (pexpect), typed lines, the
streamed answer on screen, slash commands, /quit; then `team chat --resume` and Ctrl-D.
The model is the scripted server (real HTTP on 127.0.0.1) in this test process."""

from __future__ import annotations

import json
import sys

import pexpect
from conftest import run_team, team_env
from test_e2e_agents import llm_env

from orchestrator.agent.transcript import transcript_path
from orchestrator.llm.script import Fault, Reply
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.team.lead import lead_info

PROMPT = "you> "
ANSWER = "We split the work into three tasks: parse, check, report."


def spawn_chat(root, srv, *args: str) -> pexpect.spawn:
    env = team_env(root, **llm_env(srv), TERM="dumb")
    return pexpect.spawn(sys.executable, ["-m", "orchestrator", "chat", *args], cwd=str(root), env=env,
                         encoding="utf-8", timeout=20, dimensions=(40, 200))


def test_a_person_chats_with_the_lead_then_resumes_the_session(tmp_path):
    script = {"lead": [Reply(content=ANSWER, chunk_size=5), Reply(content="Next: review the report task.")]}
    with ScriptedServer(script) as srv:
        child = spawn_chat(tmp_path, srv)
        try:
            child.expect_exact("/help for commands, /quit or Ctrl-D to leave")
            child.expect_exact(PROMPT)
            child.sendline("What is the plan?")
            child.expect_exact(ANSWER)  # streamed in 5-char pieces, whole on screen
            child.expect_exact(PROMPT)
            assert len(srv.chat_requests("lead")) == 1

            child.sendline("/status")
            child.expect(r"team: team   lead: running \(pid \d+\) · team chat\r\n")
            child.expect_exact("no goal set (/goal set TEXT)")
            child.expect_exact("tasks: none")
            child.expect_exact(PROMPT)

            child.sendline("/goal set Ship the parser")
            child.expect_exact("goal (active): Ship the parser")
            child.expect_exact(PROMPT)

            child.sendline("/cost")
            child.expect(r"tokens:\s+prompt completion\s+cached\s+calls\s+cost")
            child.expect(r"lead\s+[\d,]+\s+\d+\s+0\s+1  \$0\.0\d+")
            child.expect_exact(PROMPT)

            child.sendline("/stauts")
            child.expect_exact("unknown command /stauts — did you mean /status?")
            child.expect_exact("commands (answered here, never sent to the model):")
            child.expect_exact(PROMPT)

            child.sendline("/quit")
            child.expect_exact("bye: teammates are shutting down")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0
        assert len(srv.chat_requests("lead")) == 1  # the slash commands never reached the model
        assert transcript_path(tmp_path, "lead").exists()
        assert lead_info(tmp_path) is None

        child = spawn_chat(tmp_path, srv, "--resume")
        try:
            child.expect_exact("(resumed the lead's session: 2 earlier messages)")
            child.expect_exact("(goal (active): Ship the parser)")
            child.expect_exact(PROMPT)
            child.sendline("And next?")
            child.expect_exact("Next: review the report task.")
            child.expect_exact(PROMPT)
            child.sendeof()  # Ctrl-D leaves cleanly too
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0
        srv.assert_complete()
        resumed = srv.chat_requests("lead")[1].body["messages"]
    assert [(m["role"], m["content"]) for m in resumed[1:4]] == [
        ("user", "What is the plan?"), ("assistant", ANSWER), ("user", "And next?")]
    assert "Goal (active): Ship the parser" in resumed[-1]["content"]
    lead = json.loads(run_team(tmp_path, "status", "--json").stdout)["usage"]["agents"][0]  # the ledger's
    assert (lead["name"], lead["calls"]) == ("lead", 2)  # both sessions


def test_a_teammate_s_retry_line_names_it_and_the_prompt_comes_back_with_the_input(tmp_path):
    """A teammate's model call fails once while the person is typing at the prompt: the line says
    whose call it was, sits above the prompt, and the prompt returns with what was typed."""
    script = {"lead": [], "bob": [Fault(status=429, retry_after=0.1), Reply(content="hello back")]}
    with ScriptedServer(script) as srv:
        child = spawn_chat(tmp_path, srv)
        try:
            child.expect_exact(PROMPT)
            child.send("/sta")
            child.expect_exact("/sta")
            r = run_team(tmp_path, "spawn", "bob", "--role", "tester", "--prompt", "Say hello.")
            assert r.returncode == 0, r.stderr
            child.expect_exact("\r\x1b[K(bob: model call failed, retrying in 0.1 s (")
            child.expect_exact(")\r\n" + PROMPT + "/sta")
            child.sendline("tus")
            child.expect(r"team: team   lead: running \(pid \d+\) · team chat\r\n")
            child.expect_exact(PROMPT)
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0
        srv.assert_complete()
