"""`team run` end to end: real plans, real shell jobs, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_team, team_env
from util import wait_until

from orchestrator.core.fsutil import read_jsonl
from orchestrator.tasks.store import TaskStore


def plan(root: Path, text: str, name: str = "plan.yaml") -> Path:
    path = root / name
    path.write_text(text)
    return path


def tasks_by_name(root: Path) -> dict:
    return {t.plan_task: t for t in TaskStore(root).all()}


def events(root: Path) -> list[dict]:
    return read_jsonl(root / ".tasks" / "events.jsonl")


def test_runs_in_dependency_order_then_resumes_without_duplicates(tmp_path):
    plan(tmp_path, """name: order
workers: 3
tasks:
  - {id: a, run: 'echo a >> "$TEAM_ROOT/ledger"'}
  - {id: b, run: 'echo b >> "$TEAM_ROOT/ledger"', needs: [a]}
  - {id: c, run: 'echo c >> "$TEAM_ROOT/ledger"', needs: [a]}
  - {id: d, run: 'echo d >> "$TEAM_ROOT/ledger"', needs: [b, c]}
""")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    ledger = (tmp_path / "ledger").read_text().split()
    assert ledger[0] == "a" and ledger[3] == "d" and sorted(ledger[1:3]) == ["b", "c"]
    tasks = tasks_by_name(tmp_path)
    assert {k: t.status.value for k, t in tasks.items()} == dict.fromkeys("abcd", "completed")
    assert tasks["d"].name == "order.d" and tasks["d"].blockedBy == sorted([tasks["b"].id, tasks["c"].id])
    assert "plan order: 4 completed (of 4)" in r.stdout

    again = run_team(tmp_path, "run", "plan.yaml")
    assert again.returncode == 0
    assert "nothing to run, all 4 tasks already completed" in again.stdout
    assert len(TaskStore(tmp_path).all()) == 4
    assert (tmp_path / "ledger").read_text().split() == ledger

    fresh = run_team(tmp_path, "run", "plan.yaml", "--fresh")
    assert fresh.returncode == 0
    assert sorted(t.plan_task for t in TaskStore(tmp_path).all()) == ["a", "b", "c", "d"]
    assert len((tmp_path / "ledger").read_text().split()) == 8


def test_retries_with_backoff_until_success(tmp_path):
    plan(tmp_path, """name: flaky
tasks:
  - id: flaky
    run: 'n=$(cat count 2>/dev/null || echo 0); echo $((n+1)) > count; [ $n -ge 2 ]'
    retries: 3
    retry_delay: 0.01
""")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    task = tasks_by_name(tmp_path)["flaky"]
    assert (task.status.value, task.attempts) == ("completed", 3)
    released = [e for e in events(tmp_path) if e["event"] == "released"]
    assert [e["reason"] for e in released] == [
        "attempt 1 failed: exit code 1; retrying", "attempt 2 failed: exit code 1; retrying"]
    assert r.stdout.count("retry #1 flaky: failed: exit code 1; again in") == 2


def test_retries_exhausted_fail_the_run(tmp_path):
    plan(tmp_path, "name: nope\ntasks:\n  - {id: x, run: 'echo boom; exit 7', retries: 1, retry_delay: 0}\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 1
    task = tasks_by_name(tmp_path)["x"]
    assert (task.status.value, task.attempts, task.error) == ("failed", 2, "failed: exit code 7")
    log = tmp_path / task.log
    assert log.read_text() == "boom\n"
    assert f"FAILED #{task.id} x: failed: exit code 7\n  log: {task.log}" in r.stdout


def test_timeout_kills_the_whole_process_group(tmp_path):
    plan(tmp_path, """name: slow
tasks:
  - id: slow
    run: 'sleep 300 & echo $! > child.pid; wait'
    timeout: 0.5
""")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 1
    task = tasks_by_name(tmp_path)["slow"]
    assert task.status.value == "failed"
    assert task.error == "timed out after 0.5s; SIGTERM ended it"
    child = int((tmp_path / "child.pid").read_text())
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] not in "ZX"
    except FileNotFoundError:
        return False


FAILFAST = """name: ff
workers: 2
tasks:
  - {id: bad, run: 'exit 1'}
  - id: running
    run: 'until grep -q "\\"to\\":\\"failed\\"" "$TEAM_ROOT/.tasks/events.jsonl"; do sleep 0.01; done'
  - {id: after-bad, run: 'true', needs: [bad]}
  - {id: after-after, run: 'true', needs: [after-bad]}
  - {id: independent, run: 'true', needs: [running]}
"""


def test_fail_fast_lets_running_tasks_finish_and_starts_nothing_new(tmp_path):
    plan(tmp_path, FAILFAST)
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 1
    t = tasks_by_name(tmp_path)
    status = {k: v.status.value for k, v in t.items()}
    assert status == {"bad": "failed", "running": "completed", "after-bad": "cancelled",
                      "after-after": "cancelled", "independent": "pending"}
    assert t["after-bad"].error == f"needs #{t['bad'].id} (bad), which failed"
    assert t["after-after"].error == (
        f"needs #{t['after-bad'].id} (after-bad), which was cancelled after #{t['bad'].id} (bad) failed")
    assert f"stopped starting new work: #{t['bad'].id} (bad) failed; 1 task not run." in r.stdout

    # The next run retries the failed and cancelled tasks (the failure is fixed here).
    plan(tmp_path, FAILFAST.replace("'exit 1'", "'true'"))
    again = run_team(tmp_path, "run", "plan.yaml")
    assert again.returncode == 0, again.stdout
    t2 = tasks_by_name(tmp_path)
    assert all(v.status.value == "completed" for v in t2.values())
    assert t2["bad"].attempts == 2 and t2["running"].attempts == 1


def test_keep_going_runs_every_branch_not_downstream_of_a_failure(tmp_path):
    plan(tmp_path, FAILFAST)
    r = run_team(tmp_path, "run", "plan.yaml", "--keep-going")
    assert r.returncode == 1
    status = {k: v.status.value for k, v in tasks_by_name(tmp_path).items()}
    assert status == {"bad": "failed", "running": "completed", "after-bad": "cancelled",
                      "after-after": "cancelled", "independent": "completed"}


def test_never_more_than_workers_at_once(tmp_path):
    body = "\n".join(f"  - {{id: t{i}, run: 'sleep 0.05'}}" for i in range(8))
    plan(tmp_path, f"name: w\nworkers: 3\ntasks:\n{body}\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0
    # Jobs that ran at once, from their records (a job's life: started_at to finished_at).
    from orchestrator.jobs.manager import JobManager

    edges = sorted(e for rec in JobManager(tmp_path).list()
                   for e in ((rec.started_at, 1), (rec.finished_at, -1)))
    running, peak = 0, 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak == 3
    # The event log agrees when read by time (a batch logs its claims before it files its completions).
    running, peak = 0, 0
    for e in sorted(events(tmp_path), key=lambda e: e["ts"]):
        if e["event"] == "claimed":
            running += 1
        elif e.get("to") == "completed":
            running -= 1
        peak = max(peak, running)
    assert peak == 3


def test_env_cwd_relative_to_the_plan_and_task_variables(tmp_path):
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    plan(proj, """name: envs
defaults:
  env: {GREETING: hello, LEVEL: 1}
tasks:
  - id: where
    cwd: sub
    env: {LEVEL: 2}
    run: 'echo "$(pwd) $GREETING $LEVEL $TEAM_PLAN $TEAM_PLAN_TASK $TEAM_ATTEMPT" > "$TEAM_ROOT/out"'
""")
    state = tmp_path / "state"
    r = run_team(tmp_path, "run", str(proj / "plan.yaml"), "--root", str(state))
    assert r.returncode == 0, r.stderr
    assert (state / "out").read_text() == f"{proj / 'sub'} hello 2 envs where 1\n"


def test_json_streams_one_event_per_line(tmp_path):
    plan(tmp_path, "name: js\ntasks:\n  - {id: a, run: 'true'}\n  - {id: b, run: 'true', needs: [a]}\n")
    r = run_team(tmp_path, "run", "plan.yaml", "--json")
    assert r.returncode == 0
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["event"] for e in lines] == ["run_started", "started", "completed", "started", "completed", "summary"]
    summary = lines[-1]
    assert summary["ok"] is True and summary["counts"] == {"completed": 2}
    assert [c["name"] for c in summary["critical_path"]] == ["a", "b"]


def test_second_lead_on_the_same_root_exits_2_naming_the_pid(tmp_path):
    plan(tmp_path, "name: lock\ntasks:\n  - {id: wait, run: 'until [ -f go ]; do sleep 0.01; done'}\n")
    first = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                             env=team_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: any(e["event"] == "claimed" for e in events(tmp_path)), what="first lead running")
        second = run_team(tmp_path, "run", "plan.yaml")
        assert second.returncode == 2
        assert second.stderr == (f"LeadRunning: another lead (pid {first.pid}) is running on {tmp_path}; "
                                 f"wait for it, or stop it with `kill {first.pid}`\n")
        (tmp_path / "go").touch()
        assert first.wait(timeout=30) == 0
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_deadlock_is_reported_not_waited_on(tmp_path):
    plan(tmp_path, "name: dl\nworkers: 1\ntasks:\n  - {id: a, run: 'test -f ok'}\n"
                   "  - {id: b, run: 'true', needs: [a]}\n  - {id: c, run: 'true', needs: [b]}\n")
    assert run_team(tmp_path, "run", "plan.yaml").returncode == 1
    # Someone else takes b by hand; the plan can no longer finish on its own.
    assert run_team(tmp_path, "task", "update", "dl.b", "--status", "pending", "--owner", "alice").returncode == 0
    (tmp_path / "ok").touch()
    r = run_team(tmp_path, "run", "plan.yaml", timeout=30)
    assert r.returncode == 1
    t = tasks_by_name(tmp_path)
    assert f"deadlock: nothing is running or ready, but work is left:\n  #{t['b'].id} (b) could not be claimed: " \
           f"it is pending, owned by alice\n  #{t['c'].id} (c) waits on #{t['b'].id} (b, pending)" in r.stdout


def test_quickstart_example_runs_offline(tmp_path):
    r = run_team(tmp_path, "run", str(REPO / "examples" / "quickstart.yaml"), "--root", str(tmp_path / "demo"))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = (tmp_path / "demo" / "quickstart-out" / "summary.md").read_text()
    assert summary == (
        "| document | lines | words | distinct | top word |\n|---|---:|---:|---:|---|\n"
        "| crash | 3 | 29 | 23 | task |\n| unix | 3 | 27 | 20 | programs |\n| zen | 7 | 32 | 16 | better |\n"
        "\n3 documents, 88 words in total.\n")
    assert not any(p.suffix == ".pyc" or p.name == "__pycache__"
                   for p in (REPO / "examples" / "quickstart").rglob("*"))
    assert os.path.exists(tmp_path / "demo" / ".tasks")


def test_a_task_whose_cwd_vanished_fails_instead_of_hanging_the_run(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "plan.yaml").write_text(
        "name: gone\ntasks:\n"
        "  - id: a\n    run: rmdir sub\n"
        "  - id: b\n    run: 'true'\n    cwd: sub\n    needs: [a]\n"
        "  - id: c\n    run: 'true'\n    needs: [b]\n"
        "  - id: d\n    run: 'true'\n    needs: [a]\n"
    )
    r = run_team(tmp_path, "run", "plan.yaml", "--keep-going", timeout=30)
    assert r.returncode == 1, r.stdout + r.stderr
    tasks = {t.plan_task: t for t in TaskStore(tmp_path).all()}
    assert tasks["b"].status.value == "failed"
    assert tasks["b"].error.startswith("cannot start: job working directory") and "does not exist" in tasks["b"].error
    assert (tasks["c"].status.value, tasks["c"].error) == ("cancelled", "needs #2 (b), which failed")
    assert tasks["d"].status.value == "completed"  # the executor kept working after the failure


def test_a_task_store_that_cannot_be_written_stops_the_run_at_once(tmp_path, monkeypatch):
    """The group-commit writer fails (disk full) while a long job runs: the run stops with that
    error instead of waiting for the job, and the job is killed."""
    import threading

    from orchestrator.core.errors import WriteFailed
    from orchestrator.plan.load import load_plan
    from orchestrator.run.runner import run_plan

    plan(tmp_path, """name: full
tasks:
  - {id: long, run: 'sleep 600'}
""")
    from orchestrator.tasks.files import TaskFiles

    real = TaskFiles.write_now

    def disk_full(self, files, lines, **kw):
        if threading.current_thread().name == "team-store-writer":
            raise OSError(28, "No space left on device")
        return real(self, files, lines, **kw)

    monkeypatch.setattr(TaskFiles, "write_now", disk_full)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            run_plan(load_plan(tmp_path / "plan.yaml"), tmp_path, emit=lambda e: None, note=lambda s: None)
        except WriteFailed as e:  # the OSError, as the one line the CLI prints (path, errno, what to do)
            outcome.append(e)

    runner = threading.Thread(target=run)
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "the run waited for its job after the store failed"
    assert [str(e.__cause__) for e in outcome] == ["[Errno 28] No space left on device"]
    assert "No space left on device [ENOSPC]; free space on that filesystem" in str(outcome[0])
    from orchestrator.core import procs

    def job_processes() -> list[int]:
        return [pid for pid in procs.pids() if procs.alive(pid)
                and procs.environ(pid).get("TEAM_ROOT") == str(tmp_path)]

    wait_until(lambda: not job_processes(), timeout=15, what="the job killed")


@pytest.mark.parametrize("ends", ["fails with retries left", "fails", "completes"])
def test_a_task_cancelled_from_another_shell_while_it_runs_is_cancelled_in_the_run(tmp_path, ends):
    """`team task update slow --status cancelled` from a second shell while the run's attempt of `slow`
    runs: the old scheduler crashed on its retry (`ConflictError: task #1 attempt 1 is stale`, exit 2,
    no summary), and said "completion refused: epoch 1 is stale" otherwise (a deadlock when it
    completed). Now the run ends with the task cancelled, says so, and cancels what needs it."""
    started, go = tmp_path / "started", tmp_path / "go"
    code = "exit 0" if ends == "completes" else "exit 1"
    retries = 2 if ends == "fails with retries left" else 0
    plan(tmp_path, f"""name: c
tasks:
  - id: slow
    run: "touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; {code}"
    retries: {retries}
  - id: after
    needs: [slow]
    run: "true"
  - id: other
    run: "true"
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(started.exists, timeout=60, what="slow's attempt running")
        upd = run_team(tmp_path, "task", "update", "slow", "--status", "cancelled")
        assert upd.returncode == 0, upd.stderr
        go.touch()
        out, err = lead.communicate(timeout=60)
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.communicate()
    assert lead.returncode == 1, out + err
    assert err == "", err  # no traceback, no ConflictError
    said = ("#1 slow: cancelled by another process while attempt 1 ran; its end ("
            + ("completed" if ends == "completes" else "failed: exit code 1") + ") was not recorded")
    assert f"skip  {said}" in out and f"cancelled {said}" in out
    assert "cancelled #2 after: needs #1 (slow), which was cancelled" in out
    assert "stale" not in out and "deadlock" not in out
    status = {n: t.status.value for n, t in tasks_by_name(tmp_path).items()}
    assert status == {"slow": "cancelled", "after": "cancelled", "other": "completed"}
