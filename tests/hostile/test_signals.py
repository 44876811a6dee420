"""Ctrl-C, SIGTERM and a closed stdout during a real ``team run`` (issue 16, item 2).

Every test drives the real CLI in a subprocess and sends it real signals or
closes the real pipe it writes to: no traceback, exit 130 / 143, the jobs
stopped, the tasks given back (pending), and an interrupted attempt counted
as interrupted, never as a failure (it consumes no retry).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_team, team_env
from util import wait_until

from orchestrator.core import procs
from orchestrator.jobs.manager import JobManager
from orchestrator.tasks.store import TaskStore

SERVERS = pytest.mark.parametrize("server", ["1", "0"], ids=["job-server", "in-process"])


def start(root: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    # PYTHONFAULTHANDLER: a lead that does not stop is sent SIGABRT by ``finish``, and prints every
    # thread's stack (a lead once hung after SIGTERM in a flaky run, and said nothing)
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "run", *args], cwd=root,
                            env=team_env(root, PYTHONFAULTHANDLER="1", **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def running_jobs(root: Path, n: int) -> list:
    """Wait until ``n`` jobs run (their records carry a pid) and return them."""
    def ready():
        recs = [r for r in JobManager(root).list() if r.status == "running" and r.pid]
        return recs if len(recs) == n and all(procs.alive(r.pid) for r in recs) else None
    return wait_until(ready, what=f"{n} running jobs")


def finish(lead: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return lead.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        lead.send_signal(signal.SIGABRT)  # the stacks of every thread, on stderr
        out, err = lead.communicate(timeout=30)
        raise AssertionError(f"the lead did not stop within 30 s of the signal\n{out}\n{err}") from None
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.wait()


@SERVERS
@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGINT, 130, "Interrupted."),
                                                     (signal.SIGTERM, 143, "Terminated.")], ids=["INT", "TERM"])
def test_a_signal_stops_the_run_with_a_word_and_its_exit_code_and_gives_the_tasks_back(
        tmp_path, server, sig, code, word):
    (tmp_path / "plan.yaml").write_text("""name: sig
tasks:
  - {id: a, run: 'sleep 300'}
  - {id: b, run: 'sh -c "sleep 300 & wait"'}
  - {id: c, run: 'true', needs: [a]}
""")
    lead = start(tmp_path, "plan.yaml", TEAM_JOB_SERVER=server)
    jobs = running_jobs(tmp_path, 2)
    lead.send_signal(sig)
    out, err = finish(lead)
    assert lead.returncode == code, err
    assert err.strip().splitlines()[-1] == word and "Traceback" not in err, err
    for rec in jobs:
        assert not procs.alive(rec.pid)
        assert JobManager(tmp_path).get(rec.id).status == "killed"
    tasks = {t.plan_task: t for t in TaskStore(tmp_path).all()}
    assert {k: t.status.value for k, t in tasks.items()} == {"a": "pending", "b": "pending", "c": "pending"}
    assert [(t.attempts, t.interrupted, t.failures, t.owner) for t in (tasks["a"], tasks["b"])] == [(1, 1, 0, "")] * 2


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_the_kernel_hands_to_another_thread_of_the_lead_stops_the_run(tmp_path, sig):
    """The kernel gives a process's signal to any of its threads; Python runs the handler on the main
    thread only, and a main thread asleep on the scheduler's queue was not woken: the lead ran on until a
    job ended (here: never). tgkill aims the signal at a thread other than the main one every time."""
    import ctypes
    import os

    (tmp_path / "plan.yaml").write_text("name: thread\ntasks:\n  - {id: a, run: 'sleep 300'}\n")
    lead = start(tmp_path, "plan.yaml", TEAM_JOB_SERVER="0")
    running_jobs(tmp_path, 1)
    others = sorted(int(t) for t in os.listdir(f"/proc/{lead.pid}/task") if int(t) != lead.pid)
    assert others, "the lead runs threads besides its main one"
    sys_tgkill = {"x86_64": 234, "aarch64": 131}.get(os.uname().machine)
    if sys_tgkill is None:
        lead.kill()
        pytest.skip(f"tgkill's number on {os.uname().machine} is not known here")
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(sys_tgkill, lead.pid, others[0], int(sig)) == 0, ctypes.get_errno()
    out, err = finish(lead)
    assert lead.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[sig], err
    assert "Traceback" not in err, err
    assert TaskStore(tmp_path).all()[0].status.value == "pending"


def test_three_interruptions_are_no_failures_and_consume_no_retry(tmp_path):
    # Waits until ``go`` exists; then fails once (its one retry) and completes.
    (tmp_path / "plan.yaml").write_text("""name: again
tasks:
  - id: a
    run: 'test -f go || exec sleep 300; test -f failed-once || { touch failed-once; exit 1; }'
    retries: 1
    retry_delay: 0.05
""")
    for n in range(1, 4):
        lead = start(tmp_path, "plan.yaml", *(["--fresh"] if n == 1 else []))
        running_jobs(tmp_path, 1)
        lead.send_signal(signal.SIGINT if n % 2 else signal.SIGTERM)
        out, err = finish(lead)
        assert lead.returncode in (130, 143) and "Traceback" not in err, err
        task = TaskStore(tmp_path).all()[0]
        assert (task.status.value, task.attempts, task.interrupted, task.failures) == ("pending", n, n, 0)
    (tmp_path / "go").touch()
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    task = TaskStore(tmp_path).all()[0]
    assert (task.status.value, task.attempts, task.interrupted, task.failures) == ("completed", 5, 3, 1)
    assert "(after 1 failed and 3 interrupted attempts)" in r.stdout, r.stdout
    summary = run_team(tmp_path, "task", "show", "again.a")
    assert "attempts:    5 (1 failed, 3 interrupted)" in summary.stdout, summary.stdout


@SERVERS
def test_a_closed_stdout_neither_crashes_nor_stops_the_run(tmp_path, server):
    tasks = "\n".join(f"  - {{id: t{i}, run: 'sleep 0.2'}}" for i in range(9))
    (tmp_path / "plan.yaml").write_text(f"name: pipe\nworkers: 2\ntasks:\n{tasks}\n")
    lead = start(tmp_path, "plan.yaml", "--json", TEAM_JOB_SERVER=server)
    assert lead.stdout is not None
    first = [json.loads(lead.stdout.readline()) for _ in range(3)]  # like `| head -3`
    assert first[0]["event"] == "run_started"
    lead.stdout.close()
    err = lead.stderr.read() if lead.stderr else ""
    lead.wait(timeout=60)
    assert lead.returncode == 0, err
    assert err == "", err
    assert {t.status.value for t in TaskStore(tmp_path).all()} == {"completed"}
    assert len(TaskStore(tmp_path).all()) == 9


def test_a_closed_stdout_does_not_hide_the_runs_result(tmp_path):
    (tmp_path / "plan.yaml").write_text("""name: pipefail
tasks:
  - {id: a, run: 'sleep 0.3'}
  - {id: b, run: 'exit 3', needs: [a]}
""")
    lead = start(tmp_path, "plan.yaml")
    assert lead.stdout is not None
    lead.stdout.readline()
    lead.stdout.close()
    err = lead.stderr.read() if lead.stderr else ""
    lead.wait(timeout=60)
    assert (lead.returncode, err) == (1, "")
