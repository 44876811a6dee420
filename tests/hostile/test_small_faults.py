"""The smaller faults of issue 16, item 10, each through the real CLI.

Ids are max+1 and never reused; one corrupt task file does not take a whole
listing down; a misspelt key in a task file is reported; a timeout says the
limit and how the attempt ended; and commands that only read create no state.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_team

from orchestrator.tasks.store import TaskStore

SEED = {"id": 7, "subject": "from the seed", "description": "", "status": "pending", "blockedBy": [], "owner": ""}


def state_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name not in ("plan.yaml",))


@pytest.mark.parametrize("counter", [True, False], ids=["with-counter", "no-counter"])
def test_the_next_id_is_past_the_highest_on_disk_and_never_fills_a_gap(tmp_path, counter):
    for i in range(4):
        assert run_team(tmp_path, "task", "create", f"t{i}").returncode == 0
    if not counter:
        (tmp_path / ".tasks" / ".next_id").unlink()
    (tmp_path / ".tasks" / "task_7.json").write_text(json.dumps(SEED))
    r = run_team(tmp_path, "task", "create", "after the seed")
    assert r.stdout == "Created task #8: after the seed\n", r.stdout + r.stderr
    (tmp_path / ".tasks" / "task_8.json").unlink()  # a task removed by hand: its id is not handed out again
    r = run_team(tmp_path, "task", "create", "later")
    assert r.stdout == "Created task #9: later\n", r.stdout + r.stderr


@pytest.mark.parametrize("command", [["task", "list"], ["task", "list", "--json"], ["task", "blocked"],
                                     ["task", "critical"], ["task", "graph"]])
def test_one_corrupt_task_file_leaves_the_rest_listed_and_is_named(tmp_path, command):
    for subject in ("one", "two", "three"):
        run_team(tmp_path, "task", "create", subject)
    run_team(tmp_path, "task", "update", "3", "--add-blocked-by", "1")
    (tmp_path / ".tasks" / "task_2.json").write_text('{"id": 2, "subject": "tw')  # torn by hand
    r = run_team(tmp_path, *command)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith("warning: .tasks/task_2.json cannot be read") and "team doctor" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    if command == ["task", "list"]:
        assert r.stdout == "[ ] #1: one\n[ ] #3: three (blocked by: [1])\n", r.stdout
    if command[-1] == "--json":
        assert [t["id"] for t in json.loads(r.stdout)] == [1, 3]
    if command == ["task", "blocked"]:
        assert "#3" in r.stdout and "#1" in r.stdout, r.stdout


def test_doctor_reports_an_unknown_key_in_a_task_file(tmp_path):
    run_team(tmp_path, "task", "create", "one")
    run_team(tmp_path, "task", "create", "two")
    path = tmp_path / ".tasks" / "task_2.json"
    data = json.loads(path.read_text())
    data["blocked_by"] = [1]  # a typo of blockedBy: the task would not wait for #1
    path.write_text(json.dumps(data))
    r = run_team(tmp_path, "doctor")
    assert r.returncode == 1, r.stdout
    assert ("problem [unknown-key] .tasks/task_2.json: unknown key 'blocked_by' (did you mean 'blockedBy'?); "
            "team ignores it") in r.stdout, r.stdout


@pytest.mark.parametrize(("command", "error"), [
    ("trap '' TERM; sleep 30", "timed out after 1s; it ignored SIGTERM and was killed (SIGKILL) after the 2s grace"),
    ("sleep 30", "timed out after 1s; SIGTERM ended it"),
])
def test_a_timeout_says_the_limit_and_the_escalation(tmp_path, command, error):
    (tmp_path / "plan.yaml").write_text(f"name: slow\ntasks:\n  - id: a\n    run: \"{command}\"\n    timeout: 1\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 1, r.stdout + r.stderr
    task = TaskStore(tmp_path).all()[0]
    assert task.error == error, task.error
    assert f"FAILED #1 a: {error}" in r.stdout, r.stdout


@pytest.mark.parametrize("command", [["inbox", "lead"], ["inbox", "lead", "--peek"], ["status"], ["jobs"],
                                     ["task", "list"], ["task", "blocked"], ["task", "critical"], ["doctor"]])
def test_commands_that_only_read_create_no_state(tmp_path, command):
    r = run_team(tmp_path, *command)
    assert r.returncode == 0, r.stdout + r.stderr
    assert state_files(tmp_path) == [], command


def test_a_failed_update_creates_no_store(tmp_path):
    r = run_team(tmp_path, "task", "update", "5", "--status", "completed")
    assert r.returncode == 2 and r.stderr.startswith("UnknownRef: no task #5"), r.stderr
    assert state_files(tmp_path) == []


@pytest.mark.parametrize("subject,error", [
    ("   ", "UserError: a task needs a subject: a one-line title\n"),
    ("x\x1b[2J", 'UserError: the subject "x\\x1b[2J" holds control characters (\\x1b); remove them\n')])
def test_a_refused_create_creates_no_store(tmp_path, subject, error):
    r = run_team(tmp_path, "task", "create", subject)
    assert (r.returncode, r.stderr) == (2, error)
    assert state_files(tmp_path) == []


def test_a_refused_run_leaves_no_lock_and_no_spare_logs(tmp_path):
    (tmp_path / "plan.yaml").write_text("""name: refused
model: some-model
tasks:
  - {id: build, run: 'true'}
  - {id: review, prompt: 'Review it', needs: [build]}
""")
    r = run_team(tmp_path, "run", "plan.yaml")  # no OPENAI_API_KEY (team_env drops it)
    assert r.returncode == 2 and "OPENAI_API_KEY" in r.stderr, r.stderr
    assert state_files(tmp_path) == []
