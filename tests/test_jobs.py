"""Background jobs: real shell processes, real process groups, real signals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import REPO
from util import wait_until

from orchestrator.core.errors import UnknownRef, UserError
from orchestrator.jobs.manager import JobManager
from orchestrator.jobs.records import JobRecord, job_orphaned


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def read_pid(path: Path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text().strip(), what=f"{path}"))


@pytest.fixture
def mgr(tmp_path):
    m = JobManager(tmp_path, grace=0.5)
    yield m
    m.shutdown()


def one(mgr: JobManager, owner: str = "lead"):
    notes = mgr.wait(owner, timeout=30)
    assert len(notes) == 1, notes
    return notes[0]


def test_completed_job_record_log_and_notification(mgr, tmp_path):
    rec = mgr.start("echo out; echo err >&2", task=7)
    assert rec.status == "running" and rec.pgid == rec.pid
    note = one(mgr)
    assert (note.job_id, note.status, note.exit_code, note.task) == (rec.id, "completed", 0, 7)
    assert note.tail == "out\nerr\n"
    assert (tmp_path / note.log).read_text() == "out\nerr\n"
    on_disk = json.loads((tmp_path / ".team" / "jobs" / f"{rec.id}.json").read_text())
    assert on_disk["status"] == "completed" and on_disk["exit_code"] == 0
    assert on_disk["command"] == "echo out; echo err >&2"
    assert mgr.get(rec.id).finished_at >= rec.started_at
    assert mgr.drain("lead") == []  # returned exactly once


def test_failed_job_exit_code_env_and_cwd(mgr, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    mgr.start('pwd; echo "$GREETING $TEAM_JOB_ID"; exit 3', cwd=work, env={"GREETING": "hi"})
    note = one(mgr)
    assert (note.status, note.exit_code) == ("failed", 3)
    assert note.tail == f"{work}\nhi {note.job_id}\n"


def test_missing_cwd_is_a_user_error(mgr, tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        mgr.start("true", cwd=tmp_path / "nope")


def test_a_job_holds_its_log_open_until_it_ends_and_no_fd_is_left_behind(mgr, tmp_path):
    """The manager keeps each job's log fd (the size of an empty log is read from it, so that log
    is never opened again) and closes it when the job ends, or when the job could not start."""
    mgr.start("true")
    one(mgr)  # the watcher's own fds (epoll, wake-up pipe) exist from here on
    fds = set(os.listdir("/proc/self/fd"))
    quiet = [mgr.start("true").id for _ in range(10)]
    loud = [mgr.start(f"echo job {i}").id for i in range(10)]
    with pytest.raises(FileNotFoundError):
        mgr.start("true", prefix=[str(tmp_path / "no-such-sandbox")])  # the spawn fails: its log fd too is closed
    notes = {}
    while len(notes) < 20:
        notes.update((n.job_id, n) for n in mgr.wait("lead", timeout=30))
    assert all(notes[i].tail == "" and notes[i].status == "completed" for i in quiet)
    assert sorted(notes[i].tail for i in loud) == sorted(f"job {i}\n" for i in range(10))
    assert set(os.listdir("/proc/self/fd")) == fds


def test_notifications_go_to_their_owner(mgr):
    a = mgr.start("echo a", owner="alice")
    b = mgr.start("echo b", owner="bob")
    assert [n.job_id for n in mgr.wait("alice", timeout=30)] == [a.id]
    assert [n.job_id for n in mgr.wait("bob", timeout=30)] == [b.id]
    assert mgr.drain("lead") == []


def test_concurrent_drains_return_each_notification_once(mgr):
    ids = {mgr.start("true").id for _ in range(30)}
    got: list[str] = []
    lock = threading.Lock()

    def drainer():
        while True:
            with lock:
                if len(got) >= len(ids):
                    return
            notes = mgr.wait("lead", timeout=0.05)
            with lock:
                got.extend(n.job_id for n in notes)

    threads = [threading.Thread(target=drainer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got) == sorted(ids)


def test_timeout_kills_the_whole_process_group(mgr, tmp_path):
    # A background child that ignores SIGTERM forces the SIGKILL escalation.
    cmd = f"(trap '' TERM; sleep 300) & echo $! > {tmp_path}/child.pid; sleep 300"
    rec = mgr.start(cmd, timeout=0.3)
    child = read_pid(tmp_path / "child.pid")
    note = one(mgr)
    assert note.status == "timeout"
    assert note.exit_code in (-signal.SIGTERM, -signal.SIGKILL)
    assert mgr.get(rec.id).status == "timeout"
    wait_until(lambda: not pid_alive(child), timeout=10, what="background child killed")
    assert not pid_alive(rec.pid)


def test_children_left_behind_by_a_finished_job_are_killed(mgr, tmp_path):
    rec = mgr.start(f"sleep 300 & echo $! > {tmp_path}/child.pid")
    child = read_pid(tmp_path / "child.pid")
    assert one(mgr).status == "completed"
    wait_until(lambda: not pid_alive(child), timeout=10, what="leftover child killed")
    assert mgr.get(rec.id).status == "completed"


def test_50mb_of_output_leaves_a_bounded_tail_and_the_full_log(mgr, tmp_path):
    size = 50 * 1024 * 1024
    mgr.start(f"yes 0123456789 | head -c {size}; echo; echo THE-END")
    note = one(mgr)
    assert note.status == "completed"
    assert (tmp_path / note.log).stat().st_size == size + len("\nTHE-END\n")
    assert len(note.tail.encode()) <= mgr.tail_bytes + 200
    assert note.tail.startswith("0123456789\n0123")
    assert note.tail.endswith("THE-END\n")
    assert "bytes omitted" in note.tail


def test_kill_in_process(mgr, tmp_path):
    rec = mgr.start(f"sleep 300 & echo $! > {tmp_path}/child.pid; wait")
    child = read_pid(tmp_path / "child.pid")
    final = mgr.kill(rec.id)
    assert final.status == "killed"
    assert one(mgr).status == "killed"
    wait_until(lambda: not pid_alive(child), timeout=10, what="child killed")
    assert mgr.kill(rec.id).status == "killed"  # idempotent


def test_kill_from_another_process(mgr, tmp_path):
    rec = mgr.start(f"sleep 300 & echo $! > {tmp_path}/child.pid; wait")
    child = read_pid(tmp_path / "child.pid")
    code = f"from orchestrator.jobs.manager import JobManager; print(JobManager({str(tmp_path)!r}).kill({rec.id!r}).status)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "killed"
    note = one(mgr)
    assert (note.job_id, note.status) == (rec.id, "killed")
    wait_until(lambda: not pid_alive(child), timeout=10, what="child killed")


def test_job_started_from_a_short_lived_thread_outlives_it(mgr):
    box = []
    t = threading.Thread(target=lambda: box.append(mgr.start("sleep 0.3; echo survived")))
    t.start()
    t.join()
    note = one(mgr)
    assert (note.status, note.tail) == ("completed", "survived\n")


def test_shutdown_kills_running_jobs(tmp_path):
    m = JobManager(tmp_path, grace=0.5)
    rec = m.start("sleep 300")
    m.shutdown()
    assert m.get(rec.id).status == "killed"
    assert not pid_alive(rec.pid)


def test_unknown_and_malformed_job_ids(mgr):
    with pytest.raises(UnknownRef, match="no job 'j000000'"):
        mgr.get("j000000")
    with pytest.raises(UnknownRef):
        mgr.kill("../config")


def test_list_shows_jobs_from_disk(mgr, tmp_path):
    a = mgr.start("true")
    one(mgr)
    b = mgr.start("sleep 300")
    other = JobManager(tmp_path)  # a second manager sees the same records
    assert [(r.id, r.status) for r in other.list()] == [(a.id, "completed"), (b.id, "running")]


MANAGER_SCRIPT = """
import sys, time
from orchestrator.jobs.manager import JobManager
m = JobManager(sys.argv[1])
r = m.start("sleep 300 & echo $! > " + sys.argv[1] + "/child.pid; wait")
print(r.id, flush=True)
time.sleep(600)
"""


def test_reap_orphans_after_the_manager_is_sigkilled(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", MANAGER_SCRIPT, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    job_id = proc.stdout.readline().strip()
    child = read_pid(tmp_path / "child.pid")
    lead = JobManager(tmp_path)
    assert lead.reap_orphans() == []  # the manager is alive: nothing to reap
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rec = lead.get(job_id)
    assert rec.status == "running"  # the record still says running: only a reaper can know
    reaped = lead.reap_orphans()
    assert [(r.id, r.status) for r in reaped] == [(job_id, "lost")]
    assert lead.get(job_id).status == "lost"
    wait_until(lambda: not pid_alive(child), timeout=10, what="orphaned child killed")
    assert lead.reap_orphans() == []


def test_a_job_whose_manager_died_before_its_record_is_found_and_reaped(tmp_path):
    """The job server writes a job's record off its start path; a lead killed in between leaves
    a running job with no record: it is found by its environment and reaped all the same."""
    proc = subprocess.Popen([sys.executable, "-c", MANAGER_SCRIPT, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    job_id = proc.stdout.readline().strip()
    child = read_pid(tmp_path / "child.pid")
    lead = JobManager(tmp_path)
    leader = lead.get(job_id).pid
    (tmp_path / ".team" / "jobs" / f"{job_id}.json").unlink()  # as if it had never been written
    assert lead.reap_orphans() == [] and pid_alive(leader)  # its manager is alive: left alone
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reaped = lead.reap_orphans()
    assert [(r.id, r.status, r.pid) for r in reaped] == [(job_id, "lost", leader)]
    assert lead.get(job_id).log == f".team/jobs/{job_id}.log"
    wait_until(lambda: not pid_alive(leader) and not pid_alive(child), timeout=10, what="job killed")
    assert lead.reap_orphans() == []


TIMED_MANAGER = """
import os, signal, sys
from orchestrator.jobs.manager import JobManager
m = JobManager(sys.argv[1], grace=0.2)
r = m.start("(trap '' TERM; sleep 300) & echo $! > " + sys.argv[1] + "/child.pid; wait", timeout=1.0)
print(r.id, r.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # well before its own timeout handling could act
"""


def test_timeout_is_enforced_after_the_manager_is_sigkilled(tmp_path):
    """Nobody watches the job any more, yet its whole group dies shortly after the deadline."""
    proc = subprocess.Popen([sys.executable, "-c", TIMED_MANAGER, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    job_id, leader = proc.stdout.readline().split()
    assert proc.wait() == -signal.SIGKILL
    child = read_pid(tmp_path / "child.pid")
    lead = JobManager(tmp_path)
    rec = lead.get(job_id)
    assert (rec.status, rec.timeout, rec.pid) == ("running", 1.0, int(leader))
    # The background child ignores SIGTERM: only a SIGKILL of the group ends it.
    wait_until(lambda: not pid_alive(child) and not pid_alive(int(leader)), timeout=30,
               what="the job's group killed at its deadline")
    assert job_orphaned(rec)
    assert [(r.id, r.status) for r in lead.reap_orphans()] == [(job_id, "lost")]
    assert not job_orphaned(lead.get(job_id))


def test_timeout_wrapper_keeps_exit_codes_and_the_managers_timeout(mgr, tmp_path):
    ok = mgr.start("exit 3", timeout=30)
    assert (one(mgr).status, mgr.get(ok.id).exit_code) == ("failed", 3)
    sig = mgr.start("kill -USR1 $$", timeout=30)
    assert (one(mgr).exit_code, mgr.get(sig.id).status) == (-signal.SIGUSR1, "failed")
    slow = mgr.start("sleep 300", timeout=0.2)
    note = one(mgr)
    assert (note.job_id, note.status, note.exit_code) == (slow.id, "timeout", -signal.SIGTERM)
    # Without a timeout nothing is put in front of the shell (no extra exec).
    # (/proc shows an empty command line for an instant during an exec: wait until it names a program.)
    plain = mgr.start("sleep 300")
    argv = wait_until(lambda: [a for a in Path(f"/proc/{plain.pid}/cmdline").read_bytes().split(b"\0") if a],
                      what="the job's command line")
    assert argv == [shutil.which("sleep").encode(), b"300"]  # a plain command: not even a shell


def test_record_round_trips_through_json(tmp_path):
    rec = JobRecord(id="j1", command="true", owner="lead", pid=1, pgid=1, status="running",
                    exit_code=None, started_at=1.0, finished_at=None, log=".team/jobs/j1.log",
                    cwd=None, timeout=None, task=None, manager_pid=os.getpid())
    assert JobRecord.model_validate_json(rec.model_dump_json()) == rec


def test_plain_commands_skip_the_shell_and_everything_else_keeps_it():
    from orchestrator.jobs.manager import command_argv

    path = os.environ["PATH"]
    sleep = shutil.which("sleep", path=path)
    assert command_argv("sleep 0.05", path) == [sleep, "0.05"]
    for shelly in ("echo $HOME", "ls *.py", "a && b", "echo hi > out", "FOO=1 env", "cd sub", "./run.sh",
                   "echo 'quoted'", "echo ~", "no-such-program-xyz", "exit 3"):
        assert command_argv(shelly, path) == ["/bin/sh", "-c", shelly], shelly
    assert command_argv("sleep 1", "relative/bin:" + path)[0] == "/bin/sh"


def test_a_plain_command_runs_with_the_job_environment_and_exit_code(mgr, tmp_path):
    (tmp_path / "tool").mkdir()
    script = tmp_path / "tool" / "mytool"
    script.write_text("#!/bin/sh\necho \"job=$TEAM_JOB_ID arg=$1\"\nexit 4\n")
    script.chmod(0o755)
    rec = mgr.start("mytool one", env={"PATH": f"{tmp_path / 'tool'}:{os.environ['PATH']}"})
    note = one(mgr)
    assert (note.status, note.exit_code) == ("failed", 4)
    assert (tmp_path / rec.log).read_text() == f"job={rec.id} arg=one\n"


def test_direct_exec_keeps_what_a_shell_would_give_the_job(mgr, tmp_path):
    work = tmp_path / "work"
    (work / "bin").mkdir(parents=True)
    noshebang = work / "bin" / "noshebang"
    noshebang.write_text("echo \"hello from $PWD\"\n")  # no #! line: only a shell runs it
    noshebang.chmod(0o755)
    env = {"PATH": f"{work / 'bin'}:{os.environ['PATH']}"}
    rec = mgr.start("printenv PWD", cwd=work, env=env)
    assert one(mgr).status == "completed" and (tmp_path / rec.log).read_text() == f"{work}\n"
    rec = mgr.start("noshebang", cwd=work, env=env)
    assert one(mgr).status == "completed" and (tmp_path / rec.log).read_text() == f"hello from {work}\n"
    rec = mgr.start("echo -n x", cwd=work)  # echo is the shell's builtin, as before
    assert one(mgr).status == "completed" and (tmp_path / rec.log).read_text() in ("x", "-n x\n")


def _started(marker: str) -> subprocess.Popen:
    """A process carrying ``TEAM_JOB_ID=marker``, as ``Popen`` returns it: its ``execve`` may be
    under way (Popen returns once the close-on-exec pipe closes, before the kernel lays out the new
    program's environment: ``/proc/<pid>/environ`` reads empty for that moment)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, "TEAM_JOB_ID": marker})


def test_a_job_process_caught_in_its_execve_is_seen_and_killed_by_its_marker():
    """A job's process read while it execs is still the job's: job_leader_alive keeps it and
    kill_marked kills it. Without waiting out the execve, 4 of 5 such reads on a loaded machine saw
    no marker (the jobfiles test of a stale-looking log then took a running job's log for a spare)."""
    from orchestrator.core import procs

    for n in range(20):
        marker = f"jexec{n}x{os.getpid()}"
        started = [_started(marker)]
        try:
            assert procs.has_env(started[0].pid, "TEAM_JOB_ID", marker)
            started.append(_started(marker + "k"))
            assert procs.kill_marked("TEAM_JOB_ID", marker + "k", passes=1) == [started[1].pid]
            assert started[1].wait(timeout=30) == -signal.SIGKILL
        finally:
            for p in started:
                p.kill()
                p.wait()
