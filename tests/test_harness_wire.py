"""Harness acceptance over the wire: the chat lead (ChatSession) and a teammate loop talk
to the scripted OpenAI-compatible server through the real openai client; the tests read
what actually went over HTTP (the recorded request bodies)."""

from __future__ import annotations

import json

from util import wait_until

from orchestrator.agent.projection import estimate_tokens
from orchestrator.chat.session import ChatSession
from orchestrator.llm.client import LLMClient
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.llm.types import LLMConfig
from orchestrator.runtime.runtime import TeamRuntime
from orchestrator.tasks.store import TaskStore
from orchestrator.team.roster import Team


def client(srv: ScriptedServer) -> LLMClient:
    return LLMClient(LLMConfig(model="gpt-4o-mini", base_url=srv.base_url, api_key="k-local", max_retries=0))


def chat(root, srv: ScriptedServer, **kw) -> ChatSession:
    c = client(srv)
    return ChatSession(root, model_for=lambda role: c, heartbeat_every=0.05, **kw)


def lead_bodies(srv: ScriptedServer) -> list[dict]:
    return [r.body for r in srv.chat_requests("lead")]


def texts(body: dict) -> list[str]:
    return [m.get("content") or "" for m in body["messages"]]


def facts(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("You are", "Current task", "Goal", "- "))]


def test_after_compact_the_next_request_still_knows_identity_role_task_roster_and_goal(tmp_path):
    store = TaskStore(tmp_path)
    task = store.create("Migrate the api to httpx")
    store.update(task.id, status="in_progress", owner="lead")
    Team(tmp_path).add("bob", "tester")
    script = {"lead": [Reply(content=f"answer {i}") for i in range(1, 4)] + [Reply(content="still here")]}
    with ScriptedServer(script) as srv, chat(tmp_path, srv) as s:
        assert s.handle("/goal set Every module on httpx, tests green").text.startswith("goal (active)")
        for q in ("first question", "second question", "third question"):
            assert s.handle(q).result.status == "completed"
        before = len(srv.requests)
        done = s.handle("/compact").text
        assert len(srv.requests) == before  # /compact itself made no model call
        assert done.startswith("compacted 2 messages; full transcript: ")
        s.handle("where are we?")
        srv.assert_complete()
        body = lead_bodies(srv)[-1]
    msgs = texts(body)
    assert msgs[0].startswith("You are lead, a lead on team team.\n\n# Role: lead\n")
    assert msgs[1].startswith("[compaction boundary #1: requested with /compact; 2 earlier messages")
    assert "first question" not in msgs[2:]
    expected = ["You are lead, a lead on team team.", "Current task: #1: Migrate the api to httpx",
                "Goal (active): Every module on httpx, tests green", "- bob (tester, idle)"]
    assert facts(msgs[2]) == expected  # the state block right after the boundary
    assert facts(msgs[-1]) == expected  # and at the end of the request
    assert msgs[-2] == "where are we?"


def test_auto_compaction_near_a_tiny_budget_keeps_the_state_and_uses_the_model_summary(tmp_path):
    big = "log line that matters\n" * 1800  # ~40,000 chars, ~10,000 tokens
    script = {"lead": [Reply(content=f"ok {i}") for i in range(1, 5)],
              "*": [Reply(content="SUMMARY: the user asked three short questions; all answered.")]}
    with ScriptedServer(script) as srv, chat(tmp_path, srv, budget=8000) as s:
        s.handle("/goal set Keep the logs small")
        for q in ("q1", "q2", "q3"):
            s.handle(q)
        first = lead_bodies(srv)[0]
        assert estimate_tokens(first["messages"], first["tools"]) < 0.8 * 8000  # no compaction before
        s.handle("look at this log:\n" + big)
        srv.assert_complete()
        summary_req = srv.chat_requests("*")[0].body
        body = lead_bodies(srv)[-1]
    assert summary_req["messages"][0]["content"].startswith("You summarize an agent's working session")
    assert "tools" not in summary_req
    msgs = texts(body)
    assert msgs[1].startswith("[compaction boundary #1: auto at ~")
    assert msgs[1].endswith("SUMMARY: the user asked three short questions; all answered.")
    assert facts(msgs[2]) == facts(msgs[-1]) == ["You are lead, a lead on team team.", "Current task: none",
                                                  "Goal (active): Keep the logs small"]
    assert msgs[-2].startswith("look at this log:")


def test_the_system_prefix_and_tools_are_byte_identical_across_turns(tmp_path):
    script = {"lead": [
        Reply(content="hello"),
        Reply(tool_calls=[tool_call("task_create", {"subject": "Write the parser"})]),
        Reply(tool_calls=[tool_call("spawn_teammate", {"name": "ann", "role": "coder"})]),
        Reply(content="created the task and spawned ann"),
        Reply(tool_calls=[tool_call("list_teammates", {})]),
        Reply(content="ann is idle"),
    ]}
    with ScriptedServer(script) as srv, chat(tmp_path, srv) as s:
        s.handle("hello")
        s.handle("/goal set Parser done")
        s.handle("plan the parser")
        s.handle("/goal pause")
        s.handle("who is on the team?")
        srv.assert_complete()
    bodies = lead_bodies(srv)
    assert len(bodies) == 6
    spawned = [m["content"] for m in bodies[3]["messages"] if m.get("role") == "tool"][-1]
    assert spawned == "spawned ann (coder); message it with send_message"  # the role's name, not the Role
    prefixes = {json.dumps(b["messages"][0]) + json.dumps(b["tools"]) for b in bodies}
    assert len(prefixes) == 1
    assert [t["function"]["name"] for t in bodies[0]["tools"]] == sorted(t["function"]["name"]
                                                                         for t in bodies[0]["tools"])
    # what changed went into the state block at the end, never into the prefix
    assert "Goal: none set" in texts(bodies[0])[-1]
    assert "Goal (paused): Parser done" in texts(bodies[-1])[-1] and "- ann (coder, idle)" in texts(bodies[-1])[-1]
    assert "set_goal" not in {t["function"]["name"] for t in bodies[0]["tools"]}
    assert not any("goal" in t["function"]["name"] for t in bodies[0]["tools"])  # no tool can change the goal


def test_an_edit_after_an_external_change_is_refused_and_the_changed_lines_are_shown(tmp_path):
    cfg = tmp_path / "config.py"
    cfg.write_text("HOST = 'x'\nTIMEOUT = 30\nRETRIES = 3\n")

    def edit_after_someone_else(body):
        cfg.write_text("HOST = 'x'\nREQUEST_TIMEOUT = 45\nRETRY_TIMEOUT = 30\nRETRIES = 3\n")
        return Reply(tool_calls=[tool_call("edit_file", {"path": "config.py", "old_string": "TIMEOUT = 30",
                                                         "new_string": "TIMEOUT = 60"})])

    script = {"alice": [Reply(tool_calls=[tool_call("read_file", {"path": "config.py"})]),
                        edit_after_someone_else, Reply(content="the file changed under me; re-reading")]}
    with ScriptedServer(script) as srv:
        rt = TeamRuntime(tmp_path, model_for=lambda role, c=client(srv): c, heartbeat_every=0.05)
        try:
            rt.spawn("alice", "coder", "Raise TIMEOUT to 60 in config.py.")
            wait_until(lambda: len(srv.chat_requests("alice")) == 3 and Team(tmp_path).get("alice").status == "idle",
                       20, what="alice's three calls")
        finally:
            rt.close()
        srv.assert_complete()
        third = srv.chat_requests("alice")[2].body
    assert cfg.read_text() == "HOST = 'x'\nREQUEST_TIMEOUT = 45\nRETRY_TIMEOUT = 30\nRETRIES = 3\n"  # untouched
    tool_msgs = [m for m in third["messages"] if m["role"] == "tool"]
    refusal = tool_msgs[-1]["content"]
    assert "config.py changed on disk since you last read it" in refusal
    assert "the edit was refused" in refusal
    assert "Changed lines:" in refusal
    assert "-TIMEOUT = 30\n+REQUEST_TIMEOUT = 45\n+RETRY_TIMEOUT = 30" in refusal
    assert refusal.rstrip().endswith("Read config.py again and redo the change against the current content.")


def test_agents_md_is_in_the_prefix_and_a_skill_body_only_after_load_skill(tmp_path):
    (tmp_path / "AGENTS.md").write_text("Run make test before you report.\n")
    skill = tmp_path / "skills" / "release"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: release\ndescription: 'Cut a release: bump version, changelog, tag.'\n"
                                    "---\n1. Bump the version in pyproject.toml\n2. Tag vX.Y.Z\n")
    body_line = "1. Bump the version in pyproject.toml"
    script = {"lead": [Reply(tool_calls=[tool_call("load_skill", {"name": "release"})]),
                       Reply(content="Loaded the release procedure.")]}
    with ScriptedServer(script) as srv, chat(tmp_path, srv) as s:
        s.handle("how do we release?")
        srv.assert_complete()
    first, second = lead_bodies(srv)
    system = first["messages"][0]["content"]
    assert "# Workspace instructions (AGENTS.md)" in system
    assert "## AGENTS.md\n\nRun make test before you report." in system
    assert "- release: Cut a release: bump version, changelog, tag." in system
    assert body_line not in json.dumps(first)
    assert second["messages"][0] == first["messages"][0]
    loaded = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(loaded) == 1 and body_line in loaded[0]["content"]
    assert loaded[0]["content"].startswith("# Skill: release (skills/release/SKILL.md)")
