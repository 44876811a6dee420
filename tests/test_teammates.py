"""Teammate threads and the lead-side runtime: lifecycle, waking, exactly-once inbox
delivery across a restart, subagents, and `team spawn` against a running lead."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

from conftest import run_team, team_env
from fake_model import FakeModel, say
from test_e2e_agents import llm_env, tasks_by_name, text_of
from util import wait_until

from orchestrator.agent.transcript import Transcript, transcript_path
from orchestrator.llm.client import LLMClient
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.llm.types import LLMConfig
from orchestrator.roles.roles import get_role
from orchestrator.runtime.runtime import TeamRuntime
from orchestrator.runtime.teammate import Assignment, Teammate, TeamServices
from orchestrator.tasks.store import TaskStore
from orchestrator.team.inbox import Bus
from orchestrator.team.lead import lead_info
from orchestrator.team.roster import Team
from orchestrator.tools import FileTruth, ToolContext
from orchestrator.tools.coordination import agent_registry


def runtime(root, srv: ScriptedServer) -> TeamRuntime:
    client = LLMClient(LLMConfig(model="m", base_url=srv.base_url, api_key="k-local", max_retries=0))
    return TeamRuntime(root, model_for=lambda role: client, heartbeat_every=0.05)


def test_idle_teammate_wakes_on_a_message_from_another_process_and_goes_idle_again(tmp_path):
    with ScriptedServer({"bob": [Reply(content="got it, thanks")]}) as srv:
        rt = runtime(tmp_path, srv)
        rt.spawn("bob", "tester")
        team = Team(tmp_path)
        wait_until(lambda: team.get("bob").status == "idle", 10, what="bob idle")
        assert srv.chat_requests() == []  # idle: no model call without input
        r = run_team(tmp_path, "send", "bob", "please run the tests", "--from", "carol")
        assert r.returncode == 0, r.stderr
        wait_until(lambda: len(srv.chat_requests("bob")) == 1, 10, what="bob's model call")
        wait_until(lambda: team.get("bob").status == "idle" and rt.spend.used("bob").calls == 1, 10)
        assert "[message from carol (message)]\\nplease run the tests" in text_of(srv.chat_requests("bob")[0].body)
        assert team.state(team.get("bob")).liveness == "idle"
        rt.close()
        srv.assert_complete()
    assert team.get("bob").status == "shutdown"
    assert Bus(tmp_path).peek("bob") == []


def test_a_message_persisted_before_a_crash_is_not_delivered_twice(tmp_path):
    Team(tmp_path).add("bob", "tester")
    msg = Bus(tmp_path).send("bob", "only once", sender="lead")
    # bob's previous life wrote the message to its transcript, then died before acking it
    t = Transcript(transcript_path(tmp_path, "bob"))
    t.add({"role": "user", "content": "[message from lead (message)]\nonly once"}, inbox_ids=[msg.id])
    t.add({"role": "assistant", "content": "noted"})
    with ScriptedServer({"bob": []}) as srv:
        rt = runtime(tmp_path, srv)
        rt.spawn("bob", "tester")
        wait_until(lambda: Bus(tmp_path).peek("bob") == [], 10, what="the redelivered message to be acked")
        rt.close()
        srv.assert_complete()  # no model call: nothing new arrived
        assert srv.chat_requests() == []


def test_subagent_runs_in_a_fresh_context_and_cannot_nest(tmp_path):
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    done = threading.Event()
    script = {
        "boss": [
            Reply(tool_calls=[tool_call("subagent", {"prompt": "How many lines are in notes.txt?"})]),
            lambda body: (done.set(), Reply(content="ok"))[1],
        ],
        "sub1-boss": [
            Reply(tool_calls=[tool_call("subagent", {"prompt": "nested"}),
                              tool_call("read_file", {"path": "notes.txt"})]),
            Reply(content="notes.txt has 2 lines"),
        ],
    }
    with ScriptedServer(script) as srv:
        rt = runtime(tmp_path, srv)
        rt.spawn("boss", "lead", prompt="Count the lines of notes.txt with a subagent.")
        wait_until(done.is_set, 15, what="boss to finish")
        rt.close()
        srv.assert_complete()
        sub = srv.chat_requests("sub1-boss")
        boss = srv.chat_requests("boss")
    first = sub[0].body["messages"]
    assert [m["role"] for m in first] == ["system", "user", "user"]  # prompt + state: nothing of boss's
    assert first[1]["content"] == "How many lines are in notes.txt?"
    assert "subagent" not in {t["function"]["name"] for t in sub[0].body["tools"]}
    tool_results = [m["content"] for m in sub[1].body["messages"] if m["role"] == "tool"]
    assert tool_results[0].startswith("unknown tool 'subagent'")
    assert "alpha" in tool_results[1]
    result = [m["content"] for m in boss[1].body["messages"] if m["role"] == "tool"]
    assert result == ["subagent completed after 2 steps:\nnotes.txt has 2 lines"]


SPAWN_PLAN = "name: s\ntasks:\n  - id: wait\n    assignee: alice\n    prompt: Wait for carol.\n"


def test_team_spawn_asks_the_running_lead(tmp_path):
    (tmp_path / "plan.yaml").write_text(SPAWN_PLAN)
    spawned = threading.Event()

    def alice_waits(body: dict) -> Reply:
        assert spawned.wait(30), "team spawn never ran"
        return Reply(tool_calls=[tool_call("idle", {})])

    def alice_done(body: dict) -> Reply:
        assert "[message from carol (message)]\\nhello from carol" in text_of(body)
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "met carol"})])

    script = {"alice": [alice_waits, alice_done],
              "carol": [Reply(tool_calls=[tool_call("send_message", {"to": "alice", "content": "hello from carol"})]),
                        Reply(content="said hello")]}
    with ScriptedServer(script) as srv:
        env = team_env(tmp_path, **llm_env(srv))
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: lead_info(tmp_path) and (tmp_path / ".team" / "control.json").exists(), 20,
                       what="the lead to serve control requests")
            bad = run_team(tmp_path, "spawn", "dave", "--role", "architect")
            assert bad.returncode == 2 and bad.stderr.startswith("UserError: unknown role 'architect'; known roles:")
            r = run_team(tmp_path, "spawn", "carol", "--role", "tester", "--prompt", "Say hello to alice.")
            assert r.returncode == 0, r.stderr
            assert r.stdout == f"spawned carol (tester) in the lead (pid {lead.pid}): working on its prompt\n"
            spawned.set()
            out, err = lead.communicate(timeout=30)
        finally:
            spawned.set()
            if lead.poll() is None:
                lead.kill()
        assert lead.returncode == 0, out + err
        srv.assert_complete()
    assert tasks_by_name(tmp_path)["wait"]["result"] == "met carol"
    roster = {m["name"]: (m["role"], m["status"]) for m in json.loads((tmp_path / ".team/config.json").read_text())["members"]}
    assert roster == {"alice": ("coder", "shutdown"), "carol": ("tester", "shutdown")}
    assert not (tmp_path / ".team" / "control.json").exists()


def test_a_teammate_runs_on_its_services_alone_and_its_queue_drops_and_runs_attempts(tmp_path):
    """No TeamRuntime: a real roster, bus and store, no jobs and nothing to claim."""

    class NoJobs:
        def drain(self, owner: str) -> list:
            return []

    team, store = Team(tmp_path), TaskStore(tmp_path)
    team.add("ada", "coder")
    services = TeamServices(root=tmp_path, team_name="t", roster=team, bus=Bus(tmp_path, team=team),
                            jobs=NoJobs(), store=store, registry=agent_registry(), claim=lambda mate: None,
                            max_steps=5, idle_slice=0.01)
    ctx = ToolContext(workspace=tmp_path, root=tmp_path, agent="ada", truth=FileTruth(), store=store,
                      outputs_dir=tmp_path / "outputs")
    model = FakeModel(lambda messages, n: say(f"answer {n}"))
    mate = Teammate("ada", get_role("coder", tmp_path), model, None, ctx=ctx, services=services)
    one, two, three = (store.claim(store.create(s, kind="agent", prompt=s).id, "lead") for s in ("1", "2", "3"))
    results = {}
    for t in (one, two, three):
        mate.enqueue(Assignment(t, t.epoch, lambda r, i=t.id: results.setdefault(i, r)))
    assert not mate.free  # not started, work queued
    mate.drop("not wanted", two.id)
    assert (results[two.id].status, results[two.id].error) == ("interrupted", "not wanted")
    mate.start()
    wait_until(lambda: len(results) == 3 and mate.free, 10, what="ada runs the other two attempts, then is free")
    assert [results[i].result for i in (one.id, three.id)] == ["answer 1", "answer 2"]
    assert store.get(one.id).owner == "ada" and len(model.calls) == 2  # handed over by the store
    mate.halt()
    mate.join(10)
    assert not mate.alive and team.get("ada").status == "shutdown"
