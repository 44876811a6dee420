"""Task tools over the real TaskStore, including claim conflicts between agents."""

from __future__ import annotations

import json
import threading

import pytest
from tools_harness import Harness

from orchestrator.core.fsutil import read_jsonl


@pytest.fixture
def alice(tmp_path):
    return Harness(tmp_path, agent="alice")


@pytest.fixture
def bob(alice):
    return Harness(alice.root, agent="bob", store=alice.store)


def test_create_list_get_update(alice):
    assert alice.ok("task_create", {"subject": "write parser"}) == "created task #1: write parser"
    assert alice.ok("task_create", {"subject": "test parser", "blocked_by": [1]}) == (
        "created task #2: test parser (blocked by [1])"
    )
    assert alice.ok("task_create", {"subject": "ship", "blocked_by": ["#1", 2], "owner": "carol"}) == (
        "created task #3: ship (blocked by [1, 2])"
    )
    assert alice.ok("task_list", {}) == (
        "[ ] #1: write parser\n"
        "[ ] #2: test parser (blocked by: [1])\n"
        "[ ] #3: ship (carol) (blocked by: [1, 2])"
    )
    assert alice.ok("task_list", {"ready": True}) == "[ ] #1: write parser"
    assert alice.ok("task_update", {"task": 1, "status": "completed", "result": "parser.py written"}) == (
        "updated: [x] #1: write parser"
    )
    assert alice.ok("task_list", {"status": "pending"}) == (
        "[ ] #2: test parser\n[ ] #3: ship (carol) (blocked by: [2])"
    )
    assert alice.ok("task_list", {"owner": "carol"}) == "[ ] #3: ship (carol) (blocked by: [2])"
    got = json.loads(alice.ok("task_get", {"task": "1"}))
    assert (got["status"], got["result"], got["subject"]) == ("completed", "parser.py written", "write parser")
    events = read_jsonl(alice.store.events_path)
    assert {e["actor"] for e in events} == {"alice"}


def test_claims_conflict_and_blocked_claims_are_observations(alice, bob):
    alice.ok("task_create", {"subject": "a"})
    alice.ok("task_create", {"subject": "b", "blocked_by": [1]})
    assert alice.ok("claim_task", {"task": 1}) == "claimed task #1: a (attempt 1); it is yours, in progress"
    obs = bob.call("claim_task", {"task": 1})
    assert (obs.is_error, obs.stage, obs.content) == (
        True,
        "execute",
        "could not claim: task #1 is in_progress, not pending; task_list with ready=true shows claimable tasks",
    )
    assert bob.call("claim_task", {"task": 2}).content.startswith("could not claim: task #2 is blocked by [1]")
    assert alice.ok("task_list", {}) == "[>] #1: a (alice)\n[ ] #2: b (blocked by: [1])"


def test_concurrent_claims_have_exactly_one_winner(alice, bob):
    alice.ok("task_create", {"subject": "contested"})
    results = {}

    def claim(h):
        results[h.ctx.agent] = h.call("claim_task", {"task": 1})

    threads = [threading.Thread(target=claim, args=(x,)) for x in (alice, bob)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [name for name, obs in results.items() if not obs.is_error]
    assert len(winners) == 1
    assert alice.store.read(1).owner == winners[0]


def test_store_errors_come_back_as_observations(alice):
    alice.ok("task_create", {"subject": "a"})
    alice.ok("task_create", {"subject": "b", "blocked_by": [1]})
    obs = alice.call("task_update", {"task": 1, "add_blocked_by": [2]})
    assert (obs.is_error, obs.content) == (True, "dependency cycle: #1 → #2 → #1")
    assert alice.call("task_get", {"task": 9}).content == "no task #9; `team task list` shows the tasks"
    assert alice.call("task_create", {"subject": "c", "blocked_by": [7]}).is_error
    obs = alice.call("task_update", {"task": 1, "status": "done"})
    assert obs.stage == "validate" and obs.content.startswith(
        "invalid arguments for task_update: status: Input should be 'pending', 'in_progress', 'completed', "
        "'failed' or 'cancelled' (got 'done')."
    )
    assert alice.call("task_update", {"task": 1}).content.startswith("nothing to update")
    assert alice.call("task_list", {"status": "done"}).stage == "validate"
    assert alice.call("task_create", {"subject": ""}).stage == "validate"
    assert alice.store.read(1).blockedBy == []


def test_the_tool_and_the_cli_list_tasks_alike(alice):
    """One filter and one line format: `task_list` shows what `team task list` shows."""
    from conftest import run_team

    alice.store.create("done", owner="carol")
    alice.store.create("assigned and ready", owner="dave")
    alice.store.create("waits", blocked_by=[2])
    alice.store.create("free")
    alice.store.update(1, status="completed")
    for args, flags in (({}, []), ({"ready": True}, ["--ready"]), ({"owner": "dave"}, ["--owner", "dave"]),
                        ({"status": "completed"}, ["--status", "completed"])):
        cli = run_team(alice.root, "task", "list", *flags)
        assert cli.returncode == 0, cli.stderr
        assert alice.ok("task_list", args) == cli.stdout.rstrip("\n")
    assert alice.ok("task_list", {"ready": True}) == "[ ] #2: assigned and ready (dave)\n[ ] #4: free"
