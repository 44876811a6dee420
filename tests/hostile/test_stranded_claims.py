"""A task a teammate claims for itself is never left in progress under a teammate that stopped.

Reproduced on the old main: a teammate created a task during an agent run
and took it with ``claim_task``; the run exited 0 and shut the teammate down
with the task still ``in_progress``, no lease, ``team doctor`` OK, and
``team task blocked`` saying "running by carl" for a stopped teammate.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_team

from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

PLAN = """\
name: strand
team:
  - {name: carl, role: coder}
tasks:
  - id: main
    assignee: carl
    prompt: Split off the docs work into its own task, take it, then finish this one.
"""


def task_file(root: Path, tid: int) -> dict:
    return json.loads((root / ".tasks" / f"task_{tid}.json").read_text())


def test_a_claim_made_during_a_run_carries_a_lease_and_is_released_when_the_run_stops(tmp_path):
    (tmp_path / "plan.yaml").write_text(PLAN)
    seen: dict[str, dict] = {}

    def after_claim(body: dict) -> Reply:
        seen["claimed"] = task_file(tmp_path, 2)  # while carl holds it
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "split"})])

    def create_then_claim(body: dict) -> Reply:
        # a task created during the run (here by a person, from another shell), then taken by carl
        made = run_team(tmp_path, "task", "create", "Write the docs")
        assert made.returncode == 0, made.stderr
        return Reply(tool_calls=[tool_call("claim_task", {"task": 2})])

    script = {"carl": [create_then_claim, after_claim]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY="sk-strand-0123456789",
                     TEAM_MODEL="m", TEAM_AUTOCLAIM="0")
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    held = seen["claimed"]
    assert held["status"] == "in_progress" and held["owner"] == "carl"
    assert held.get("lease_expires"), "a claim made with claim_task has no lease"
    docs = task_file(tmp_path, 2)
    assert docs["status"] == "pending" and not docs.get("owner")
    assert "#2 (Write the docs) was claimed by a teammate during the run and not finished: released" in r.stderr
    events = [json.loads(line) for line in (tmp_path / ".tasks" / "events.jsonl").read_text().splitlines()]
    assert any(e["task"] == 2 and e["event"] == "released" and "carl stopped before finishing it" in e["reason"]
               for e in events)
    assert run_team(tmp_path, "task", "list").stdout.splitlines()[-1] == "[ ] #2: Write the docs"


def test_blocked_says_when_the_runner_of_a_blocker_stopped_renewing_its_lease(tmp_path):
    tasks = tmp_path / ".tasks"
    tasks.mkdir()
    (tasks / "task_1.json").write_text(json.dumps({"id": 1, "subject": "held", "status": "in_progress",
                                                   "owner": "carl", "blockedBy": [], "lease_expires": 1000.0}))
    (tasks / "task_2.json").write_text(json.dumps({"id": 2, "subject": "waits", "status": "pending",
                                                   "owner": "", "blockedBy": [1]}))
    out = run_team(tmp_path, "task", "blocked").stdout
    assert "#1 held: running by carl, but its lease expired" in out and "`team doctor --fix` gives it back" in out
    doctor = run_team(tmp_path, "doctor")
    assert doctor.returncode == 1 and "task #1 is in_progress but the lease of carl expired" in doctor.stdout
