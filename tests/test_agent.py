"""The agent loop in the library: stable prompt, transcript-before-act, inbox and job
draining, the finish signal of task_update, limits, compaction and usage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_model import FakeModel, call, say
from util import wait_until

from orchestrator.agent.loop import Agent
from orchestrator.agent.transcript import Transcript, transcript_path
from orchestrator.core.models import Status
from orchestrator.jobs.manager import JobManager
from orchestrator.llm.client import LLMClient
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.llm.types import LLMConfig
from orchestrator.roles.roles import get_role
from orchestrator.tasks.store import TaskStore
from orchestrator.team.inbox import Bus
from orchestrator.team.roster import Team
from orchestrator.tools import FileTruth, ToolContext
from orchestrator.tools.coordination import agent_registry


def make_agent(root, srv=None, *, max_steps=10, jobs=None, model=None):
    team, store = Team(root), TaskStore(root)
    team.add("alice", "coder", exist_ok=True)
    bus = Bus(root, team=team)
    ctx = ToolContext(workspace=root, root=root, agent="alice", truth=FileTruth(), store=store,
                      outputs_dir=root / ".team/outputs/alice", bus=bus, jobs=jobs)
    role = get_role("coder", root)

    def inbox(seen):
        batch = bus.fetch("alice", seen=seen)
        return batch.messages, batch.ack

    if model is None:
        model = LLMClient(LLMConfig(model="gpt-4o-mini", base_url=srv.base_url, api_key="k-local", max_retries=0))
    return Agent(name="alice", role=role, model=model, tools=agent_registry().only(role.tools), ctx=ctx,
                 transcript=Transcript(transcript_path(root, "alice")), inbox=inbox, jobs=jobs,
                 roster=team.members, max_steps=max_steps)


def transcript_lines(root):
    return [json.loads(x) for x in transcript_path(root, "alice").read_text().splitlines()]


def test_loop_keeps_the_prompt_stable_drains_the_inbox_and_records_before_acting(tmp_path):
    (tmp_path / "AGENTS.md").write_text("Always write tests.\n")
    script = {"alice": [Reply(tool_calls=[tool_call("write_file", {"path": "a.txt", "content": "A\n"})]),
                        Reply(content="wrote a.txt", usage={"prompt_tokens": 100, "completion_tokens": 5})]}
    with ScriptedServer(script) as srv:
        agent = make_agent(tmp_path, srv)
        sent = Bus(tmp_path).send("alice", "use UTF-8", sender="bob")
        result = agent.run("Write a.txt.")
        srv.assert_complete()
        reqs = srv.chat_requests("alice")
    assert (result.status, result.result, result.steps) == ("completed", "wrote a.txt", 2)
    assert result.usage.calls == 2 and result.usage.prompt_tokens >= 100 and agent.usage == result.usage
    systems = [r.body["messages"][0] for r in reqs]
    assert systems[0] == systems[1] and "Always write tests." in systems[0]["content"]
    assert systems[0]["content"].startswith("You are alice, a coder on team team.")
    first = reqs[0].body["messages"]
    assert [m["role"] for m in first] == ["system", "user", "user", "user"]
    assert first[2]["content"] == "<inbox>\n[message from bob (message)]\nuse UTF-8\n</inbox>"
    assert first[3]["content"].startswith("[team state:")  # the state block is always last
    assert reqs[0].body["tools"] == reqs[1].body["tools"]
    second = reqs[1].body["messages"]
    assert second[-2] == {"role": "tool", "tool_call_id": second[-3]["tool_calls"][0]["id"],
                          "content": "created a.txt (1 line, 2 bytes)"}
    lines = transcript_lines(tmp_path)
    kinds = [(x["kind"], x["msg"]["role"]) for x in lines]
    assert kinds == [("message", "user"), ("message", "user"), ("message", "assistant"),
                     ("message", "tool"), ("message", "assistant")]
    # the inbox message and its id are one transcript line: on disk together or not at all
    assert lines[1]["msg"]["content"] == "<inbox>\n[message from bob (message)]\nuse UTF-8\n</inbox>"
    assert [x.get("inbox_ids") for x in lines] == [None, [sent.id], None, None, None]
    assert Bus(tmp_path).peek("alice") == []


def test_task_update_on_the_current_task_ends_the_attempt_without_writing_the_store(tmp_path):
    script = {"alice": [Reply(tool_calls=[
        tool_call("task_update", {"task": 2, "status": "completed", "result": "side done"}),
        tool_call("task_update", {"task": 1, "status": "in_progress"}),
        tool_call("task_update", {"task": 1, "status": "completed", "result": "main done"}),
    ])]}
    with ScriptedServer(script) as srv:
        agent = make_agent(tmp_path, srv)
        store = agent.ctx.store
        store.create("main")
        store.create("side")
        store.claim(1, "lead")
        agent.ctx.task_id = 1
        result = agent.run("Do task 1.", task_label="#1: main")
        srv.assert_complete()
    assert (result.status, result.result, result.error) == ("completed", "main done", None)
    assert store.read(1).status == Status.in_progress and store.read(1).result is None
    assert (store.read(2).status, store.read(2).result) == (Status.completed, "side done")
    tools = [x["msg"]["content"] for x in transcript_lines(tmp_path) if x.get("msg", {}).get("role") == "tool"]
    assert tools[1].startswith("task #1 is your current task: set it to completed")
    assert tools[2] == "task #1 marked completed; this attempt ends after this step"


def test_step_limit_and_failure_marking(tmp_path):
    looping = [Reply(tool_calls=[tool_call("glob", {"pattern": "*"})]) for _ in range(3)]
    with ScriptedServer({"alice": looping}) as srv:
        result = make_agent(tmp_path, srv, max_steps=3).run("Loop forever.")
        srv.assert_complete()
    assert (result.status, result.steps) == ("failed", 3)
    assert result.error == "step limit reached (3 model calls) without finishing"


def test_job_notifications_are_drained_before_the_next_call(tmp_path):
    jobs = JobManager(tmp_path)
    try:
        rec = jobs.start("echo job-output", owner="alice")
        wait_until(lambda: jobs.running() == [], 10, what="the job's notification to be queued")
        with ScriptedServer({"alice": [Reply(content="ok")]}) as srv:
            make_agent(tmp_path, srv, jobs=jobs).run("Anything new?")
            srv.assert_complete()
            first = srv.chat_requests("alice")[0].body["messages"]
    finally:
        jobs.shutdown()
    note = first[2]["content"]
    assert note.startswith(f"<background-results>\n[background job {rec.id} completed, exit code 0 after ")
    assert note.endswith(f"s; full log: .team/jobs/{rec.id}.log]\njob-output\n</background-results>")
    assert jobs.drain("alice") == []


def test_compact_tool_folds_old_turns_into_a_boundary(tmp_path):
    script = {
        "alice": [Reply(tool_calls=[tool_call("glob", {"pattern": "*"})]) for _ in range(5)]
        + [Reply(tool_calls=[tool_call("compact", {})]), Reply(content="done")],
        "*": [Reply(content="Summary: globbed five times.")],
    }
    with ScriptedServer(script) as srv:
        agent = make_agent(tmp_path, srv)
        result = agent.run("Explore.")
        srv.assert_complete()
        last = srv.chat_requests("alice")[-1].body["messages"]
    assert result.status == "completed"
    boundary = [m["content"] for m in last if m["role"] == "user" and m["content"].startswith("[compaction boundary")]
    assert len(boundary) == 1 and "Summary: globbed five times." in boundary[0]
    assert len(last) < 2 + 7 * 2
    assert [x["kind"] for x in transcript_lines(tmp_path)].count("compaction") == 1


# ---------------------------------------------------------------- exactly-once inbox delivery across a kill
MARK = "deploy-freeze-7f3a"
TESTS = Path(__file__).resolve().parent


def _crash_life(root: str, path: str, kill_at: str, calls_file: str) -> None:
    """One life of alice in its own process (run by ``_life``). ``path``: how the message
    reaches her -- ``drain`` (sent before she starts) or ``read_inbox`` (sent during her first
    model call, which then calls read_inbox). ``kill_at``: ``before``/``after`` the transcript
    line carrying the message is written, the process dies (os._exit); empty: no kill."""
    if kill_at:
        append = Transcript._append

        def dying_append(self, record):
            carries = MARK in json.dumps(record.get("msg", ""))
            if carries and kill_at == "before":
                os._exit(9)
            append(self, record)
            if carries and kill_at == "after":
                os._exit(9)

        Transcript._append = dying_append

    def script(messages, n):
        with open(calls_file, "a") as f:
            f.write(json.dumps(messages) + "\n")
        if kill_at and path == "read_inbox" and n == 1:
            Bus(root).send("alice", f"{MARK}: no deploys today", sender="bob")
            return call(("read_inbox", {}))
        return say("done")

    result = make_agent(Path(root), model=FakeModel(script)).run("Go on." if not kill_at else "Start.")
    assert result.status == "completed", result


def _life(root, path, kill_at, calls_file):
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_agent; test_agent._crash_life(*sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, str(root), path, kill_at, str(calls_file)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("path,kill_at,role", [
    ("drain", "before", "user"),
    ("drain", "after", "user"),
    ("read_inbox", "before", "user"),  # never in the transcript: the resumed drain delivers it
    ("read_inbox", "after", "tool"),
])
def test_an_inbox_message_reaches_the_model_exactly_once_across_a_kill(tmp_path, path, kill_at, role):
    calls = tmp_path / "calls.jsonl"
    if path == "drain":
        Team(tmp_path).add("alice", "coder")
        Bus(tmp_path).send("alice", f"{MARK}: no deploys today", sender="bob")
    first = _life(tmp_path, path, kill_at, calls)
    assert first.returncode == 9, first.stderr  # killed at exactly that point
    second = _life(tmp_path, path, "", calls)
    assert second.returncode == 0, second.stderr
    last = json.loads(calls.read_text().splitlines()[-1])
    carrying = [m for m in last if MARK in str(m.get("content"))]
    assert [(m["role"], m["content"]) for m in carrying] == [
        (role, f"<inbox>\n[message from bob (message)]\n{MARK}: no deploys today\n</inbox>")]
    assert Bus(tmp_path).peek("alice") == []  # acked: a third life gets nothing again
