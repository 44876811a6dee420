"""Autonomous claiming: idle teammates take ready, unowned, non-plan work by themselves."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from fake_model import FakeModel, say
from util import wait_until

from orchestrator.core.models import Task
from orchestrator.runtime.autoclaim import candidates
from orchestrator.runtime.runtime import TeamRuntime
from orchestrator.tasks.store import TaskStore
from orchestrator.team.roster import Team


def events(root) -> list[dict]:
    return [json.loads(line) for line in (root / ".tasks/events.jsonl").read_text().splitlines()]


def test_which_tasks_a_teammate_may_claim():
    def t(i, **kw):
        return Task(id=i, subject=f"t{i}", **kw)

    tasks = [t(1), t(2, role="tester"), t(3, role="coder"), t(4, assignee="ada"), t(5, assignee="bob"),
             t(6, plan="p", plan_task="x", kind="agent"), t(7, kind="shell", command="true"),
             t(8, blockedBy=[9]), t(9, status="completed"), t(10, owner="cy"), t(11, blockedBy=[12]),
             t(12), t(13, kind="agent", prompt="do it"), t(14, status="failed")]
    assert [x.id for x in candidates(tasks, "ada", "coder")] == [1, 3, 4, 8, 12, 13]
    assert [x.id for x in candidates(tasks, "tess", "tester")] == [1, 2, 8, 12, 13]


def test_eight_teammates_racing_over_a_hundred_tasks_claim_each_exactly_once(tmp_path):
    store = TaskStore(tmp_path)
    work = store.create_many([{"subject": f"job {i}", "kind": "agent", "prompt": f"do job {i}"}
                              for i in range(100)], actor="lead")
    others = store.create_many([
        {"subject": "plan task", "kind": "agent", "prompt": "x", "plan": "p", "plan_task": "x", "name": "p.x"},
        {"subject": "shell task", "kind": "shell", "command": "true"},
        {"subject": "for a tester", "kind": "agent", "prompt": "x", "role": "tester"},
        {"subject": "for someone else", "kind": "agent", "prompt": "x", "assignee": "zed"},
    ], actor="lead")
    model = FakeModel(lambda messages, n: say("done"))
    rt = TeamRuntime(tmp_path, model_for=lambda role: model, autoclaim=True, idle_slice=0.01)
    names = [f"w{i}" for i in range(8)]
    try:
        for name in names:
            rt.spawn(name, "coder")
        wait_until(lambda: all(store.read(t.id).status.value == "completed" for t in work), timeout=60,
                   what="all 100 tasks completed")
    finally:
        rt.close()
    done = {t.id: store.read(t.id) for t in work}
    assert all(t.owner in names and t.attempts == 1 and t.result == "done" for t in done.values())
    evs = events(tmp_path)
    claims = Counter(e["task"] for e in evs if e["event"] == "claimed")
    completions = Counter(e["task"] for e in evs if e.get("to") == "completed")
    assert claims == Counter({t.id: 1 for t in work})  # exactly one owner per task: nobody double-claimed
    assert completions == Counter({t.id: 1 for t in work})
    for e in evs:
        if e["event"] == "claimed":  # the lead sees who claimed what in the event log
            assert e["actor"] == e["owner"] == done[e["task"]].owner
        if e.get("to") == "completed":
            assert e["actor"] == done[e["task"]].owner
    assert [(store.read(t.id).status.value, store.read(t.id).owner) for t in others] == [("pending", "")] * 4
    assert len(model.calls) == 100


def test_a_task_created_while_teammates_idle_is_picked_up_and_dependencies_respected(tmp_path):
    store = TaskStore(tmp_path)
    order: list[str] = []

    def script(messages, n):
        text = next(m["content"] for m in reversed(messages) if m.get("role") == "user"
                    and m["content"].startswith("Task #"))
        order.append(text.split(":")[0])
        return say("ok")

    model = FakeModel(script)
    rt = TeamRuntime(tmp_path, model_for=lambda role: model, autoclaim=True, idle_slice=0.01)
    try:
        rt.spawn("ada", "coder")
        rt.spawn("bob", "coder")
        wait_until(lambda: {m.status for m in rt.team.members()} == {"idle"}, what="both idle")
        first = store.create("first", actor="lead")
        second = store.create("second", blocked_by=[first.id], actor="lead")
        wait_until(lambda: store.read(second.id).status.value == "completed", what="second completed")
    finally:
        rt.close()
    assert [o.split(" (")[0].split(",")[0] for o in order] == [f"Task #{first.id}", f"Task #{second.id}"]
    assert store.read(first.id).finished_at <= store.read(second.id).started_at


def test_a_gone_owners_expired_claim_is_reclaimed_and_taken_by_an_idle_teammate_of_its_role(tmp_path):
    store, team = TaskStore(tmp_path), Team(tmp_path)
    team.add("ghost", "tester")  # claimed work, then its lead was killed: no heartbeat, no process
    team.add("carol", "tester")
    team.heartbeat("carol")  # alive in another lead process (this one): its claim is never stolen
    early = store.create("rerun the flaky test", kind="agent", prompt="rerun it", role="tester", actor="lead")
    late = store.create("check coverage", kind="agent", prompt="check it", role="tester", actor="lead")
    kept = store.create("carol's work", kind="agent", prompt="x", role="tester", actor="lead")
    plan = store.create_many([{"subject": "plan task", "kind": "agent", "prompt": "x", "role": "tester",
                               "plan": "p", "plan_task": "x", "name": "p.x"}], actor="lead")[0]
    leases = [store.claim(early.id, "ghost", lease=0.01).lease_expires,
              store.claim(kept.id, "carol", lease=0.01).lease_expires,
              store.claim(plan.id, "runner-1", lease=0.01).lease_expires]  # a `team run` teammate
    wait_until(lambda: store.clock() > max(leases), what="the leases to expire")
    model = FakeModel(lambda messages, n: say("done"))
    rt = TeamRuntime(tmp_path, model_for=lambda role: model, autoclaim=True, idle_slice=0.01, claim_rescan=0.05)
    try:
        # start-up recovered the expired claim of the gone owner, and nothing else
        assert (store.read(early.id).status.value, store.read(early.id).owner) == ("pending", "")
        assert (store.read(kept.id).status.value, store.read(kept.id).owner) == ("in_progress", "carol")
        assert (store.read(plan.id).status.value, store.read(plan.id).owner) == ("in_progress", "runner-1")
        # a claim that expires while the runtime runs is recovered by the autoclaimer's rescan
        expires = store.claim(late.id, "ghost", lease=0.01).lease_expires
        wait_until(lambda: store.clock() > expires, what="the late lease to expire")
        rt.spawn("cody", "coder")
        rt.spawn("tess", "tester")
        wait_until(lambda: all(store.read(t.id).status.value == "completed" for t in (early, late)), timeout=20,
                   what="both reclaimed tasks completed")
    finally:
        rt.close()
    assert [(store.read(t.id).owner, store.read(t.id).result, store.read(t.id).attempts) for t in (early, late)] \
        == [("tess", "done", 2), ("tess", "done", 2)]
    assert (store.read(kept.id).status.value, store.read(kept.id).owner) == ("in_progress", "carol")
    assert (store.read(plan.id).status.value, store.read(plan.id).owner) == ("in_progress", "runner-1")
    reclaimed = [(e["task"], e["actor"], e["previous_owner"]) for e in events(tmp_path)
                 if e["event"] == "lease_expired"]
    assert reclaimed == [(early.id, "lead", "ghost"), (late.id, "lead", "ghost")]
    assert len(model.calls) == 2


def test_the_runtime_works_on_the_store_it_is_given(tmp_path):
    """`team run` hands the runtime the scheduler's TaskStore: leases, claims and tools go through it."""
    later = TaskStore(tmp_path, clock=lambda: time.time() + 3600)  # an hour on: every lease has expired
    task = later.create("left by a dead lead", kind="agent", prompt="x")
    TaskStore(tmp_path).claim(task.id, "ghost", lease=60, actor="ghost")
    model = FakeModel(lambda messages, n: say("done"))
    rt = TeamRuntime(tmp_path, model_for=lambda role: model, store=later, autoclaim=True, idle_slice=0.01)
    try:
        assert rt.store is later and rt.tool_context("ada").store is later
        assert rt.claimer is not None and rt.claimer.store is later
        assert later.read(task.id).status.value == "pending"  # expired by the given store's clock
    finally:
        rt.close()
    with pytest.raises(ValueError, match="cannot serve a runtime of"):
        TeamRuntime(tmp_path / "elsewhere", model_for=lambda role: model, store=later)
