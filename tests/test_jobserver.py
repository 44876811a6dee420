"""`team run`'s shell jobs: the forked job server and the in-process fallback behave alike.

Both backends (``TEAM_JOB_SERVER=1``, the default, and ``=0``) run the same
plans through the real CLI; the server's life is checked against a
SIGKILLed lead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_team, team_env
from util import wait_until

from orchestrator.core import procs
from orchestrator.jobs.manager import JobManager
from orchestrator.jobs.records import JobRecord
from orchestrator.tasks.store import TaskStore

BACKENDS = pytest.mark.parametrize("server", ["1", "0"], ids=["job-server", "in-process"])


def ppid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except FileNotFoundError:
        return None
    return None


def records(root: Path) -> list[JobRecord]:
    return JobManager(root).list()


@BACKENDS
def test_outcomes_timeouts_retries_and_cwd_are_the_same_on_both_backends(tmp_path, server):
    (tmp_path / "sub").mkdir()
    (tmp_path / "plan.yaml").write_text("""name: both
workers: 4
tasks:
  - {id: status, run: 'cat /proc/self/status'}
  - {id: elsewhere, run: 'cat /proc/self/status', cwd: sub}
  - {id: where, run: 'pwd', cwd: sub}
  - {id: flaky, run: 'test -e once || { touch once; exit 3; }', retries: 1}
  - {id: slow, run: 'sleep 300 & echo $! > slow.pid; wait', timeout: 0.5}
  - {id: missing, run: 'no-such-program-here --flag'}
""")
    r = run_team(tmp_path, "run", "plan.yaml", "--keep-going", TEAM_JOB_SERVER=server)
    assert r.returncode == 1, r.stderr
    tasks = {t.plan_task: t for t in TaskStore(tmp_path).all()}
    state = {name: t.status.value for name, t in tasks.items()}
    assert state == {"status": "completed", "elsewhere": "completed", "where": "completed",
                     "flaky": "completed", "slow": "failed", "missing": "failed"}
    assert tasks["flaky"].attempts == 2
    assert tasks["slow"].error == "timed out after 0.5s; SIGTERM ended it"
    assert not procs.alive(int((tmp_path / "slow.pid").read_text()))
    assert "exit code 127" in tasks["missing"].error
    assert (tmp_path / tasks["where"].log).read_text().strip() == str((tmp_path / "sub").resolve())
    # Jobs get default signal handling whichever way they were started (posix_spawn in the
    # lead's directory, Popen elsewhere): no standard signal (1-31) ignored or blocked.
    # (glibc's posix_spawn leaves its two internal signals, 32 and 33, ignored.)
    standard = (1 << 31) - 1
    for name in ("status", "elsewhere"):
        lines = dict(line.split(":\t", 1) for line in (tmp_path / tasks[name].log).read_text().splitlines()
                     if ":\t" in line)
        assert int(lines["SigIgn"], 16) & standard == 0, name
        assert int(lines["SigBlk"], 16) & standard == 0, name
    # Every job has a final record naming the lead (not the server) as its manager.
    recs = records(tmp_path)
    assert recs and all(rec.status != "running" for rec in recs)
    assert len({rec.manager_pid for rec in recs}) == 1


def test_a_killed_leads_jobs_die_with_it_and_the_next_run_reruns_the_task(tmp_path):
    """No process a task starts outlives the run, even a SIGKILLed one: the
    job server sees its lead's end of file, stops the jobs and records them lost."""
    (tmp_path / "plan.yaml").write_text("""name: orphan
tasks:
  - id: long
    run: 'if [ "$TEAM_ATTEMPT" = 1 ]; then sleep 300; fi; echo done'
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        job = wait_until(lambda: next((r for r in records(tmp_path) if r.pid), None), what="the job's record")
        server = ppid(job.pid)
        assert server is not None and server != lead.pid, "the job was not started by a job server"
        assert ppid(server) == lead.pid
        assert job.manager_pid == lead.pid
        lead.send_signal(signal.SIGKILL)
        lead.wait()
        wait_until(lambda: not procs.alive(job.pid), timeout=10, what="the job to die with its lead")
        wait_until(lambda: not procs.alive(server), timeout=10, what="the job server to exit")
        final = wait_until(lambda: (r := JobManager(tmp_path).get(job.id)).status != "running" and r,
                           timeout=10, what="the job's final record")
        assert final.status == "lost"
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.wait()
        lead.stderr.close()
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stderr
    assert JobManager(tmp_path).get(job.id).status == "lost"
    task = TaskStore(tmp_path).all()[0]
    assert task.status.value == "completed" and task.attempts == 2


def test_jobs_of_a_killed_lead_and_job_server_are_reaped_by_the_next_run(tmp_path):
    """When the job server is SIGKILLed too, its jobs are orphans: the next lead kills them."""
    (tmp_path / "plan.yaml").write_text("""name: orphan
tasks:
  - id: long
    run: 'if [ "$TEAM_ATTEMPT" = 1 ]; then sleep 300; fi; echo done'
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        job = wait_until(lambda: next((r for r in records(tmp_path) if r.pid), None), what="the job's record")
        server = ppid(job.pid)
        os.kill(server, signal.SIGSTOP)  # it must not see its lead's end of file before it dies
        lead.send_signal(signal.SIGKILL)
        lead.wait()
        os.kill(server, signal.SIGKILL)
        wait_until(lambda: not procs.alive(server), timeout=10, what="the job server to die")
        assert procs.alive(job.pid), "a SIGKILLed job server cannot stop its jobs"
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.wait()
        lead.stderr.close()
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stderr
    assert not procs.alive(job.pid)
    assert JobManager(tmp_path).get(job.id).status == "lost"
    task = TaskStore(tmp_path).all()[0]
    assert task.status.value == "completed" and task.attempts == 2


@BACKENDS
def test_ctrl_c_kills_running_jobs_and_gives_their_tasks_back(tmp_path, server):
    (tmp_path / "plan.yaml").write_text("""name: intr
tasks:
  - {id: a, run: 'sleep 300'}
  - {id: b, run: 'sleep 300'}
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--json"], cwd=tmp_path,
                            env=team_env(tmp_path, TEAM_JOB_SERVER=server), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        jobs = wait_until(lambda: [r for r in records(tmp_path) if r.pid] if len(records(tmp_path)) == 2 else None,
                          what="both jobs to start")
        wait_until(lambda: all(r.pid for r in records(tmp_path)), what="both records")
        jobs = records(tmp_path)
        lead.send_signal(signal.SIGINT)
        out, err = lead.communicate(timeout=30)
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.wait()
    assert lead.returncode != 0
    for rec in jobs:
        assert not procs.alive(rec.pid)
        assert JobManager(tmp_path).get(rec.id).status == "killed"
    assert {t.status.value for t in TaskStore(tmp_path).all()} == {"pending"}
    assert not any(json.loads(line).get("event") == "completed" for line in out.splitlines() if line.startswith("{"))


NOTES = r"""
import json, sys, threading
from pathlib import Path
from orchestrator.jobs.server import JobServer
assert JobServer.usable()
got, errors, done = {}, [], threading.Event()

def on_note(ref, note):
    got[ref] = note
    if len(got) == 2:
        done.set()

server = JobServer.fork(Path("."), on_note, lambda ref, error: errors.append(error) or done.set())
server.start("plain", "echo hi", owner="lead", cwd=None, env={}, timeout=None, task=1)
server.start("odd-\udcff", "echo 'hé'; exit 4", owner="lead", cwd=None, env={}, timeout=None, task=2)
done.wait(30)
server.close()
print(json.dumps({"errors": errors, "died": str(server.died) if server.died else None,
                  "notes": {ref.encode("utf-8", "surrogateescape").hex(): [n.ref == ref, n.status, n.exit_code, n.tail,
                                                                          n.task] for ref, n in got.items()}}))
"""


def test_notes_reach_the_lead_whole_whatever_text_they_carry(tmp_path):
    """The lead reads a note straight into its model (pydantic's JSON parser), and text that
    parser refuses -- a lone surrogate, which json escapes -- still arrives (through json)."""
    done = subprocess.run([sys.executable, "-c", NOTES], cwd=tmp_path, env=team_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["errors"] == [] and out["died"] is None
    assert out["notes"] == {b"plain".hex(): [True, "completed", 0, "hi\n", 1],
                            b"odd-\xff".hex(): [True, "failed", 4, "hé\n", 2]}
