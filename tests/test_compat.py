"""On-disk formats survive the code: a state root written by an older ``team`` reads the same.

tests/fixtures/state-9ed1408 was written by commit 9ed1408 (the flat layout,
before the package became subpackages); its ``expected/`` holds what that
version printed. The current code must read every file of it and print the
same, and must be able to go on working on it (write, claim, read the inbox).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_team

FIXTURE = Path(__file__).parent / "fixtures" / "state-9ed1408"


@pytest.fixture
def old_root(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURE / "dot-tasks", tmp_path / ".tasks")
    shutil.copytree(FIXTURE / "dot-team", tmp_path / ".team")
    return tmp_path


def expected(name: str) -> str:
    return (FIXTURE / "expected" / name).read_text()


@pytest.mark.parametrize("args, name", [
    (["task", "list"], "task_list.txt"),
    (["task", "blocked"], "task_blocked.txt"),
    (["task", "critical"], "task_critical.txt"),
    (["task", "graph", "--format", "mermaid"], "task_graph.mmd"),
])
def test_an_old_store_prints_the_same(old_root, args, name):
    r = run_team(old_root, *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected(name)


@pytest.mark.parametrize("args, name", [
    (["task", "list", "--json"], "task_list.json"),
    (["task", "show", "6", "--json"], "task_show_6.json"),
    (["inbox", "lead", "--peek", "--json"], "inbox_lead.json"),
])
def test_an_old_store_reads_as_the_same_data(old_root, args, name):
    r = run_team(old_root, *args)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads(expected(name))


def test_old_job_records_read_as_the_same_jobs(old_root):
    r = run_team(old_root, "jobs", "--json")
    assert r.returncode == 0, r.stderr
    keep = ("id", "command", "status", "exit_code", "task", "log", "tail")
    assert [{k: j.get(k) for k in keep} for j in json.loads(r.stdout)] == \
        [{k: j.get(k) for k in keep} for j in json.loads(expected("jobs.json"))]


def test_an_old_root_is_healthy_and_work_goes_on(old_root):
    doctor = run_team(old_root, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert run_team(old_root, "task", "update", "setup", "--status", "completed").returncode == 0
    created = run_team(old_root, "task", "create", "new work", "--blocked-by", "port-a")
    assert created.stdout == "Created task #8: new work (blocked by: [6])\n"
    inbox = run_team(old_root, "inbox", "lead", "--json")
    assert [m["content"] for m in json.loads(inbox.stdout)] == ["unread one"]  # the consumed two stay consumed
    assert run_team(old_root, "inbox", "lead", "--json").stdout.strip() == "[]"
