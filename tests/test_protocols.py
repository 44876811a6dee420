"""Shutdown handshake and plan approval between the lead and teammate threads.

Teammates run the real agent loop, tool pipeline and bus; only the model is
a fake ``ChatModel`` whose next answer depends on what the teammate saw.
"""

from __future__ import annotations

import json
import re
import threading

import pytest
from fake_model import FakeModel, call, say, tool_results
from util import wait_until

from orchestrator.agent.loop import LoopResult
from orchestrator.core.errors import UserError
from orchestrator.runtime.runtime import TeamRuntime
from orchestrator.tasks.store import TaskStore
from orchestrator.team import protocols
from orchestrator.team.protocols import ProtocolTimeout


def runtime(root, model) -> TeamRuntime:
    return TeamRuntime(root, model_for=lambda role: model, idle_slice=0.01)


def member(rt: TeamRuntime, name: str):
    return next(m for m in rt.team.members() if m.name == name)


def request_id(messages: list[dict]) -> str:
    """The id of the last shutdown request the teammate was shown."""
    found = re.findall(r"shutdown_request, request (\w+)", "\n".join(str(m.get("content")) for m in messages))
    return found[-1]


def busy_in_a_task(rt: TeamRuntime, model: FakeModel, results: list[LoopResult]):
    """Spawn ada and give her an agent task; return once she idles inside it."""
    store = TaskStore(rt.root)
    task = store.claim(store.create("long job", kind="agent", prompt="work").id, "lead")
    mate = rt.spawn("ada", "coder")
    rt.assign(task, task.epoch, results.append)
    wait_until(lambda: len(model.calls) == 1 and member(rt, "ada").status == "idle", what="ada waits in task")
    return mate


def test_idle_teammate_approves_shutdown_without_a_model_call_and_its_thread_ends(tmp_path):
    model = FakeModel(lambda m, n: pytest.fail("an idle teammate needs no model call to shut down"))
    rt = runtime(tmp_path, model)
    try:
        mate = rt.spawn("ada", "coder")
        wait_until(lambda: member(rt, "ada").status == "idle", what="ada idle")
        r = rt.request_shutdown("ada", reason="plan finished", timeout=10)
        assert (r.approve, r.sender, r.text) == (True, "ada", "idle: shutting down")
        assert not mate.thread.is_alive()
        assert member(rt, "ada").status == "shutdown"
        (resp,) = [m for m in rt.bus.peek("lead") if m.type == "shutdown_response"]
        assert (resp.request_id, resp.approve) == (r.request_id, True)
    finally:
        rt.close()
    assert model.calls == []


def test_busy_teammate_refuses_with_a_reason_and_keeps_working(tmp_path):
    def script(messages, n):
        if n == 1:
            return call(("idle", {}))  # inside its task: wait for messages
        if n == 2:
            rid = request_id(messages)
            return call(("respond_shutdown", {"request_id": rid, "approve": False, "reason": "busy with task #1"}))
        return say("task finished")

    model = FakeModel(script)
    rt = runtime(tmp_path, model)
    results: list[LoopResult] = []
    try:
        mate = busy_in_a_task(rt, model, results)
        r = rt.request_shutdown("ada", reason="wrapping up", timeout=10)
        assert (r.approve, r.text) == (False, "busy with task #1")
        wait_until(lambda: results, what="the task to end")
        assert results[0].status == "completed" and results[0].result == "task finished"
        assert mate.thread.is_alive() and member(rt, "ada").status != "shutdown"
    finally:
        rt.close()


def test_busy_teammate_may_approve_its_attempt_ends_and_it_shuts_down(tmp_path):
    def script(messages, n):
        if n == 1:
            return call(("idle", {}))
        return call(("respond_shutdown", {"request_id": request_id(messages), "approve": True}))

    model = FakeModel(script)
    rt = runtime(tmp_path, model)
    results: list[LoopResult] = []
    try:
        mate = busy_in_a_task(rt, model, results)
        assert rt.request_shutdown("ada", timeout=10).approve is True
        assert not mate.thread.is_alive() and member(rt, "ada").status == "shutdown"
        assert [(x.status, x.error) for x in results] == [("interrupted", "stopped by the lead")]
    finally:
        rt.close()


def test_no_answer_times_out_naming_the_teammate(tmp_path):
    release = threading.Event()

    def script(messages, n):
        release.wait(30)  # a long model call: the request is not read meanwhile
        return say("done")

    model = FakeModel(script)
    rt = runtime(tmp_path, model)
    try:
        mate = rt.spawn("ada", "coder", prompt="think hard")
        wait_until(lambda: model.calls, what="the long call to start")
        with pytest.raises(ProtocolTimeout) as e:
            rt.request_shutdown("ada", timeout=0.2)
        assert re.fullmatch(r"ada did not answer shutdown request \w+ within 0.2s \(busy in a long step, or not "
                            r"running: see `team status`\); it was not shut down", str(e.value))
        assert mate.thread.is_alive()
    finally:
        release.set()
        rt.close()


def test_plan_mode_refuses_writes_until_the_lead_approves_through_the_tool_pipeline(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    write = ("write_file", {"path": "notes.txt", "content": "the plan, done\n"})

    def script(messages, n):
        if n in (1, 3):  # try to write, then (seeing the refusal) submit the plan and wait
            return call(write) if n == 1 else call(write, ("submit_plan", {"plan": "v2: write notes.txt"}),
                                                   ("idle", {}))
        if n == 2:
            return call(("submit_plan", {"plan": "write notes.txt"}), ("idle", {}))
        if n == 4:
            return call(write)  # approved now
        return say("wrote notes.txt")

    model = FakeModel(script)
    rt = TeamRuntime(tmp_path, model_for=lambda role: model, workspace=ws, idle_slice=0.01)
    lead = rt.tool_context("lead")
    try:
        mate = rt.spawn("pam", "coder", prompt="Write notes.txt", plan_mode=True)
        assert mate.ctx.mode == "plan" and member(rt, "pam").plan_mode is True

        def plan_request(after: set[str]):
            return next((m for m in rt.bus.peek("lead") if m.type == "plan_approval_request"
                         and m.request_id not in after), None)

        first = wait_until(lambda: plan_request(set()), what="the first plan")
        assert (first.sender, first.content) == ("pam", "write notes.txt")
        obs = rt.registry.call("review_plan", json.dumps({"teammate": "pam", "request_id": first.request_id,
                                                          "approve": False, "feedback": "say v2"}), lead, "c1")
        assert (obs.is_error, obs.content) == (False, f"plan {first.request_id} of pam rejected")
        second = wait_until(lambda: plan_request({first.request_id}), what="the revised plan")
        assert second.content == "v2: write notes.txt" and mate.ctx.mode == "plan"
        assert not (ws / "notes.txt").exists()
        obs = rt.registry.call("review_plan", {"teammate": "pam", "request_id": second.request_id,
                                               "approve": True}, lead, "c2")
        assert obs.content == f"plan {second.request_id} of pam approved"
        wait_until(lambda: len(model.calls) == 5, what="the final answer")
        assert (ws / "notes.txt").read_text() == "the plan, done\n"
        assert mate.ctx.mode == "normal"
    finally:
        rt.close()
    results = tool_results(model.calls[4])
    refused = [r for r in results if r.startswith("plan mode: write_file (write) is not allowed")]
    assert len(refused) == 2  # before approval: the first try and the one after the rejection
    assert results[-1].startswith("wrote") or "notes.txt" in results[-1]
    feedback = [m["content"] for m in model.calls[2] if m.get("role") == "user" and "say v2" in m["content"]]
    assert feedback == [f"<inbox>\n[message from lead (plan_approval_response, request {first.request_id})]\nsay v2\n"
                        "</inbox>"]


def test_shutdown_request_and_review_tools_need_a_request_id_on_the_wire(tmp_path):
    rt = runtime(tmp_path, FakeModel(lambda m, n: say("x")))
    try:
        rt.team.add("ada", "coder")
        rid = protocols.submit_plan(rt.bus, "my plan", sender="ada")
        (m,) = rt.bus.peek("lead")
        assert (m.type, m.request_id, m.sender) == ("plan_approval_request", rid, "ada")
        protocols.review_plan(rt.bus, "ada", rid, False, "no")
        (r,) = rt.bus.peek("ada")
        assert (r.type, r.request_id, r.approve, r.content) == ("plan_approval_response", rid, False, "no")
    finally:
        rt.close()


def test_a_role_can_put_its_teammates_in_plan_mode(tmp_path):
    ws = tmp_path / "ws"
    (ws / "agents").mkdir(parents=True)
    (ws / "agents" / "architect.md").write_text(
        "---\nname: architect\ndescription: plans before it writes\n"
        "tools: [read_file, write_file]\nplan_mode: true\n---\nPlan first.\n")
    (ws / "agents" / "sloppy.md").write_text(
        "---\nname: sloppy\ndescription: bad flag\ntools: [read_file]\nplan_mode: sometimes\n---\nHi.\n")
    model = FakeModel(lambda messages, n: say("ok"))
    rt = TeamRuntime(tmp_path, model_for=lambda role: model, workspace=ws, idle_slice=0.01)
    try:
        mate = rt.spawn("ari", "architect")
        assert mate.ctx.mode == "plan" and member(rt, "ari").plan_mode is True
        obs = rt.registry.call("write_file", json.dumps({"path": "x.txt", "content": "x"}), mate.ctx, "c1")
        assert obs.is_error and "plan mode" in obs.content and not (ws / "x.txt").exists()
        with pytest.raises(UserError, match=r"sloppy\.md: 'plan_mode' must be true or false"):
            rt.spawn("sam", "sloppy")
    finally:
        rt.close()
