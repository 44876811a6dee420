"""No process a plan shell task starts outlives its task or the run (issue 16, item 4).

Each test runs real plans whose tasks escape their process group
(``setsid cmd &``, a daemon that double-forks, a wiped environment) and
then looks for the escapees in ``/proc``: they are gone when their job
ends, when the run ends, and when the lead is SIGKILLed (through its job
server, or, in-process, through the next lead).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import run_team, team_env
from util import wait_until

from orchestrator.core import procs
from orchestrator.jobs.manager import JobManager

SERVERS = pytest.mark.parametrize("server", ["1", "0"], ids=["job-server", "in-process"])


def secs(n: int) -> str:
    """``sleep``'s argument for escapee ``n``: unique to this test and this pytest process (two suites
    running at once on one machine, or two workers, must not find, wait for or kill each other's)."""
    return f"{n}.{os.getpid()}"


def sleeping(seconds: str) -> list[int]:
    """Live processes running ``sleep SECONDS`` (``secs(n)``: unique to each test and suite)."""
    out = []
    for pid in procs.pids():
        st = procs.stat(pid)
        words = procs.cmdline(pid).split()
        if st is not None and st[0] not in ("Z", "X") and words[1:] == [seconds] and words[0].endswith("sleep"):
            out.append(pid)
    return out


HOLD = "while [ ! -e gate ]; do sleep 0.01; done"  # a task that runs until the test opens the gate


def escape(seconds: str, how: str = "setsid") -> str:
    """A command that leaves ``sleep SECONDS`` running outside its group, and ends only once it runs
    (so a test cannot pass because the escapee never started)."""
    up = f"up-{seconds}"
    return (f"{how} sh -c 'touch {up}; exec sleep {seconds}' > /dev/null 2>&1 & "
            f"while [ ! -e {up} ]; do sleep 0.01; done")


@pytest.fixture
def cleanup():
    """Kill what a failing test leaves behind, so it does not outlive the test either."""
    marks: list[str] = []
    yield marks
    for mark in marks:
        for pid in sleeping(mark):
            procs.kill(pid, signal.SIGKILL)


@SERVERS
def test_a_setsid_child_dies_with_its_job_while_the_run_goes_on(tmp_path, server, cleanup):
    cleanup += [secs(1002), secs(1003), secs(1004)]
    (tmp_path / "plan.yaml").write_text(f"""name: escape
tasks:
  - {{id: setsid, run: "{escape(secs(1002))}"}}
  - id: daemon
    run: "setsid sh -c 'sleep {secs(1003)} & touch up-1004; exec sleep {secs(1004)}' & while [ ! -e up-1004 ]; do sleep 0.01; done"
  - {{id: slow, run: '{HOLD}'}}
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path, TEAM_JOB_SERVER=server), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        def escapes_ended():
            recs = JobManager(tmp_path).list()
            return len(recs) == 3 and all(r.status == "completed" for r in recs if r.command != HOLD)
        wait_until(escapes_ended, timeout=20, what="the two escaping jobs to end")
        wait_until(lambda: not any(sleeping(secs(n)) for n in (1002, 1003, 1004)), timeout=5,
                   what="what they left behind to be killed with their jobs")
        assert lead.poll() is None, "the run should still be going (slow waits for the gate)"
        (tmp_path / "gate").touch()
        _, err = lead.communicate(timeout=30)
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.wait()
    assert lead.returncode == 0, err


@SERVERS
def test_nothing_escapes_a_finished_run(tmp_path, server, cleanup):
    cleanup += [secs(1005), secs(1006)]
    (tmp_path / "plan.yaml").write_text(f"""name: done
tasks:
  - {{id: a, run: "{escape(secs(1005))}"}}
  - {{id: b, run: "{escape(secs(1006), 'nohup setsid')}", needs: [a]}}
""")
    r = run_team(tmp_path, "run", "plan.yaml", TEAM_JOB_SERVER=server)
    assert r.returncode == 0, r.stderr
    wait_until(lambda: not sleeping(secs(1005)) and not sleeping(secs(1006)), timeout=5, what="no escapee left")


def test_an_unmarked_escapee_dies_when_the_run_ends(tmp_path, cleanup):
    cleanup.append(secs(1007))
    wiped = (f"env -i \"$(command -v setsid)\" /bin/sh -c \"$(command -v touch) up; exec $(command -v sleep) {secs(1007)}\" "
             "> /dev/null 2>&1 & while [ ! -e up ]; do sleep 0.01; done")
    (tmp_path / "plan.yaml").write_text(f"name: wiped\ntasks:\n  - id: a\n    run: '{wiped}'\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stderr
    wait_until(lambda: not sleeping(secs(1007)), timeout=5, what="the run's end to kill it")


@SERVERS
def test_a_killed_lead_leaves_nothing_running(tmp_path, server, cleanup):
    cleanup += [secs(1008), secs(1009)]
    (tmp_path / "plan.yaml").write_text(f"""name: dead
tasks:
  - {{id: a, run: 'setsid sleep {secs(1008)} & exec sleep {secs(1009)}'}}
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path, TEAM_JOB_SERVER=server), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sleeping(secs(1008)) and sleeping(secs(1009)), timeout=20, what="the job and its escapee")
    finally:
        lead.send_signal(signal.SIGKILL)
        lead.wait()
    if server == "0":  # no job server outlives an in-process lead: the next lead kills them
        assert sleeping(secs(1008)) and sleeping(secs(1009))
        (tmp_path / "plan.yaml").write_text("name: dead\ntasks:\n  - {id: a, run: 'true'}\n")
        r = run_team(tmp_path, "run", "plan.yaml")
        assert r.returncode == 0, r.stderr
    wait_until(lambda: not sleeping(secs(1008)) and not sleeping(secs(1009)), timeout=10, what="nothing left running")


def test_the_job_server_reaps_what_it_inherits(tmp_path, cleanup):
    """A guard of the mechanism above (not an attack): a subreaper must reap the orphans it
    adopts, or they pile up as zombies under the job server for the whole run."""
    (tmp_path / "plan.yaml").write_text("""name: zombies
workers: 4
tasks:
""" + "".join(f"  - {{id: t{i}, run: 'sh -c \"sleep 0.1 &\" & true'}}\n" for i in range(8)) + """  - id: last
    run: 'sleep 1'
    needs: [t0, t1, t2, t3, t4, t5, t6, t7]
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        server = wait_until(lambda: next((c for c in procs.children(lead.pid)), None), timeout=20,
                            what="the job server")
        wait_until(lambda: any(r.command == "sleep 1" for r in JobManager(tmp_path).list()), timeout=20,
                   what="the last task")
        def zombies() -> list[int]:
            return [pid for pid in procs.children(server) if (procs.stat(pid) or ("?",))[0] == "Z"]
        wait_until(lambda: not zombies(), timeout=5, what="the job server to reap what it adopted")
        assert lead.wait(timeout=30) == 0
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.wait()


ADOPTER = r"""
import json, os, subprocess, sys, threading
from orchestrator.core import procs
assert procs.become_subreaper()
seconds = sys.argv[1]
spawned = threading.Event()
done = threading.Event()
out = {}

def loop():  # the job server's loop thread, which spawns the job leaders
    out["loop"] = threading.get_native_id()
    out["leader"] = subprocess.Popen(["sleep", seconds]).pid
    shell = subprocess.Popen(["/bin/sh", "-c", f"setsid sleep {seconds} > /dev/null 2>&1 & echo $!"],
                             stdout=subprocess.PIPE)
    out["stray"] = int(shell.stdout.readline())
    shell.wait()  # the shell is gone: its setsid'd child was reparented to this subreaper
    spawned.set()
    done.wait()

t = threading.Thread(target=loop)
t.start()
spawned.wait()
out["both"] = sorted(procs.children(tids={os.getpid(), out["loop"]}))
out["loop_only"] = sorted(procs.children(tids={out["loop"]}))
out["main_only"] = sorted(procs.children(tids={os.getpid()}))
out["all"] = sorted(procs.children())
for pid in (out["leader"], out["stray"]):
    procs.kill(pid)
done.set()
t.join()
print(json.dumps(out))
"""


def test_a_subreaper_adopts_orphans_on_its_main_thread(tmp_path, cleanup):
    """What ``Strays.sweep`` relies on to read two threads' children instead of listing
    ``/proc/self/task``: a leader is the child of the thread that spawned it, and an orphan is
    reparented to the subreaper's main thread (its first live thread), whichever thread spawned
    the orphan's parent."""
    cleanup.append(secs(3717))
    done = subprocess.run([sys.executable, "-c", ADOPTER, secs(3717)], cwd=tmp_path, env=team_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    leader, stray = out["leader"], out["stray"]
    assert out["loop_only"] == [leader]
    assert out["main_only"] == [stray]
    assert out["both"] == out["all"] == sorted([leader, stray])
