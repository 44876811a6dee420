"""The Python API (docs/api.md), through its public names only: ``import orchestrator`` and the
names in its ``__all__`` (``test_this_file_uses_only_public_names`` holds this file to it)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO, team_env
from util import wait_until

import orchestrator as team

DOC = REPO / "docs" / "api.md"


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=team_env(cwd), capture_output=True,
                          text=True, timeout=120)


def test_this_file_uses_only_public_names():
    tree = ast.parse(Path(__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("orchestrator"), f"private import: from {node.module}"
        elif isinstance(node, ast.Import):
            assert all(a.name == "orchestrator" for a in node.names if a.name.startswith("orchestrator"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "team":
            assert node.attr in {*team.__all__, "__all__"}, f"team.{node.attr} is not in orchestrator.__all__"


def test_the_docs_example_runs_from_an_empty_directory(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    example = max(blocks, key=len)
    assert "team.open_root" in example and "root.run(" in example
    r = _python(example, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "refused: dependency cycle: #1 → #2 → #1",
        "[('started', 'greet'), ('completed', 'greet'), ('started', 'check'), ('completed', 'check')]",
        "False [('alice', 'waiting', 1)]",
    ]
    assert list(tmp_path.iterdir()) == [], "the example works in its own temporary directory"


def test_import_is_cheap_and_help_shows_the_public_api(tmp_path):
    r = _python("import sys, orchestrator\n"
                "print(sorted(m for m in sys.modules if m.startswith('orchestrator.')))", tmp_path)
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr
    r = _python("import orchestrator; help(orchestrator)", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "The Python API (docs/api.md) is the names in ``__all__``" in r.stdout
    assert "everything else in\n    the package is private" in r.stdout
    for name in team.__all__:
        if name != "__version__":
            assert re.search(rf"^\s+(class {name}\b|{name} = class |{name}\()", r.stdout, re.M), f"help() lacks {name}"
    assert "class Root" in r.stdout and "create_task(self, subject: 'str'" in r.stdout


def test_every_public_name_resolves_and_nothing_else_does():
    for name in team.__all__:
        assert getattr(team, name) is not None
    assert set(team.__all__) <= set(dir(team))
    with pytest.raises(AttributeError, match="has no attribute 'TaskStore'"):
        getattr(team, "TaskStore")  # noqa: B009  (a literal attribute would fail this file's own check)
    assert issubclass(team.CycleError, team.UserError) and issubclass(team.UserError, team.TeamError)


def test_tasks_refusals_are_the_package_errors(tmp_path):
    root = team.open_root(tmp_path)
    assert root.tasks() == [] and not (tmp_path / ".tasks").exists()
    a = root.create_task("a", name="a")
    with pytest.raises(team.UnknownRef, match="nope"):
        root.create_task("b", blocked_by=["nope"])
    with pytest.raises(team.UserError, match="status"):
        root.tasks(status="done-ish")
    b = root.create_task("b", blocked_by=[a.id], owner="x")
    assert [t.id for t in root.tasks(blocked=True)] == [b.id]
    assert [t.id for t in root.tasks(owner="x")] == [b.id]
    assert root.update_task(b.id, subject="b2", remove_blocked_by=[a.id]).blockedBy == []
    assert [t.subject for t in root.tasks(ready=True)] == ["a", "b2"]
    assert root.task(f"#{b.id}").subject == "b2"
    events = [line for line in (tmp_path / ".tasks" / "events.jsonl").read_text().splitlines() if '"actor"' in line]
    assert events and all('"actor": "api"' in e or '"actor":"api"' in e for e in events)
    with pytest.raises(team.UnknownRef, match="no inbox 'ghost'"):
        root.inbox("ghost")


PLAN = """\
name: p
workers: 2
tasks:
  - id: one
    run: echo one
  - id: slow
    run: sleep 30
  - id: after
    run: echo after
    needs: [one, slow]
"""


def test_a_callback_that_raises_stops_the_run_and_the_next_run_resumes(tmp_path):
    (tmp_path / "plan.yaml").write_text(PLAN)
    root = team.open_root(tmp_path)
    notes: list[str] = []

    def on_event(e: team.RunEvent) -> None:
        if e.kind == "started" and e.name == "slow":
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        root.run(tmp_path / "plan.yaml", on_event=on_event, on_note=notes.append)
    by_name = {t.name: t for t in root.tasks()}
    assert by_name["p.slow"].status == team.TaskStatus.pending, "given back, not left in_progress"
    assert by_name["p.after"].status == team.TaskStatus.pending
    assert root.status().lead_running is False
    (tmp_path / "plan.yaml").write_text(PLAN.replace("sleep 30", "echo slow"))
    seen: list[team.RunEvent] = []
    result = root.run(tmp_path / "plan.yaml", on_event=seen.append)
    assert isinstance(result, team.RunResult) and result.ok
    assert {e.name for e in seen if e.kind == "completed"} >= {"slow", "after"}
    assert all(isinstance(e.task, int) for e in seen if e.kind in ("started", "completed"))


def test_a_failed_task_and_a_bad_plan(tmp_path):
    root = team.open_root(tmp_path)
    (tmp_path / "bad.yaml").write_text("name: b\ntasks:\n  - id: x\n    run: echo\n    needs: [y]\n")
    with pytest.raises(team.PlanError, match="bad.yaml:5"):
        root.run(tmp_path / "bad.yaml")
    assert not (tmp_path / ".tasks").exists()
    (tmp_path / "fail.yaml").write_text("name: f\ntasks:\n  - id: x\n    run: exit 3\n")
    result = root.run(tmp_path / "fail.yaml")
    assert not result.ok and result.counts["failed"] == 1
    run = next(iter(result.runs.values()))
    assert isinstance(run, team.TaskRun) and run.status == "failed" and "exit" in (run.error or "")


def test_with_a_lead_running_the_api_sees_it_and_is_refused_where_the_cli_is(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: busy\ntasks:\n  - id: wait\n    run: sleep 60\n")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        root = team.open_root(tmp_path)
        wait_until(lambda: root.status().lead_running and root.tasks(status="in_progress"), 30,
                   what="the lead to start its task")
        status = root.status()
        assert status.lead_pid == lead.pid and status.tasks["in_progress"] == 1
        with pytest.raises(team.LeadRunning, match=f"pid {lead.pid}"):
            root.run(tmp_path / "plan.yaml")
        with pytest.raises(team.UserError, match="does not take `spawn` requests"):
            root.spawn("alice")
    finally:
        lead.terminate()
        lead.wait(30)
    assert lead.returncode == 143


def test_spawn_without_a_lead_enrols_and_messages_wait(tmp_path):
    root = team.open_root(tmp_path)
    with pytest.raises(team.UserError, match="unknown role 'architect'"):
        root.spawn("dave", role="architect")
    with pytest.raises(team.InvalidName):
        root.spawn("../x")
    done = root.spawn("carol", role="tester", prompt="Say hello.")
    assert isinstance(done, team.Spawned) and (done.name, done.role, done.started) == ("carol", "tester", False)
    sent = root.broadcast("standup", sender="lead")
    assert [m.to for m in sent] == ["carol"]
    assert [m.content for m in root.inbox("carol")] == ["Say hello.", "standup"]
    assert root.inbox("carol") == []
    [carol] = root.status().members
    assert (carol.liveness, carol.reason, carol.unread) == ("waiting", "the next lead starts it", 0)


def test_callbacks_run_on_the_run_s_threads_not_the_caller_s(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: t\ntasks:\n  - id: a\n    run: 'true'\n")
    threads: set[str] = set()
    team.open_root(tmp_path).run(tmp_path / "plan.yaml",
                                 on_event=lambda e: threads.add(threading.current_thread().name))
    assert threads, "events arrived"
