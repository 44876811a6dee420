"""``team send|broadcast|inbox|status|jobs`` through the real entry point."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from conftest import REPO
from util import wait_until

from orchestrator.core import procs
from orchestrator.jobs.manager import JobManager
from orchestrator.tasks.store import TaskStore
from orchestrator.team.lead import LeadLock
from orchestrator.team.roster import Team


@pytest.fixture
def crew(team):
    t = Team(team.root)
    t.add("alice", role="coder")
    t.add("bob", role="tester")
    return team


def test_send_peek_and_drain(crew):
    r = crew("send", "alice", "please review #3", "--from", "bob")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("sent ") and r.stdout.endswith(" to alice\n")
    peek = crew("inbox", "alice", "--peek", "--json")
    msgs = json.loads(peek.stdout)
    assert [(m["from"], m["to"], m["type"], m["content"], m["seq"]) for m in msgs] == [
        ("bob", "alice", "message", "please review #3", 1)]
    drained = crew("inbox", "alice")
    assert drained.returncode == 0
    assert drained.stdout.split(" ", 1)[1] == "bob: please review #3\n"
    assert crew("inbox", "alice").stdout == "no unread messages for alice\n"


def test_protocol_message_needs_request_id(crew):
    bad = crew("send", "alice", "stop", "--type", "shutdown_request")
    assert (bad.returncode, bad.stderr) == (2, "UserError: a shutdown_request message needs a request_id\n")
    ok = crew("send", "alice", "stop", "--type", "shutdown_request", "--request-id", "r1")
    assert ok.returncode == 0, ok.stderr
    assert crew("inbox", "alice").stdout.split(" ", 1)[1] == "lead [shutdown_request r1]: stop\n"


def test_unknown_recipient_and_bad_names_exit_2_without_files(crew):
    r = crew("send", "carol", "hi")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("UnknownRef: unknown recipient 'carol': known are lead, alice, bob; "
                        "add a member with `team spawn carol --role ROLE`\n")
    r = crew("send", "../alice", "hi")
    assert r.returncode == 2 and r.stderr.startswith("InvalidName: invalid recipient '../alice'")
    assert len(r.stderr.splitlines()) == 1
    r = crew("inbox", "carol")
    assert (r.returncode, r.stderr) == (2, "UnknownRef: no inbox 'carol': the inboxes are lead, alice, bob; "
                                           "add a member with `team spawn carol --role ROLE`\n")
    assert not (crew.root / ".team" / "inbox").exists()
    r = crew("send", "alice", "x", "--type", "gossip")
    assert r.returncode == 2 and r.stderr.startswith("UserError: invalid message type 'gossip'")


def test_broadcast(crew):
    r = crew("broadcast", "standup in 5", "--from", "alice")
    assert (r.returncode, r.stdout) == (0, "broadcast to bob\n")
    assert crew("inbox", "bob").stdout.split(" ", 1)[1] == "alice [broadcast]: standup in 5\n"
    assert crew("inbox", "alice").stdout == "no unread messages for alice\n"


BEATER = """
import sys, time
from orchestrator.team.roster import Team
Team(sys.argv[1]).heartbeat(sys.argv[2])
print("beat", flush=True)
time.sleep(600)
"""


def test_status_tells_idle_from_dead(crew):
    root = crew.root
    Team(root).add("carol", model="gpt-4.1-mini")
    Team(root).update("carol", status="shutdown")
    procs = {}
    for name in ("alice", "bob"):
        procs[name] = subprocess.Popen([sys.executable, "-c", BEATER, str(root), name], cwd=REPO,
                                       stdout=subprocess.PIPE, text=True)
        assert procs[name].stdout.readline() == "beat\n"
    try:
        procs["bob"].send_signal(signal.SIGKILL)
        procs["bob"].wait()
        store = TaskStore(root)
        a = store.create("design")
        store.create("build", blocked_by=[a.id])
        store.update(a.id, status="completed")
        store.create("docs")
        with LeadLock(root):
            data = json.loads(crew("status", "--json").stdout)
            plain = crew("status").stdout.splitlines()
        live = {m["name"]: (m["liveness"], m["reason"]) for m in data["members"]}
        assert live == {"alice": ("idle", ""), "bob": ("dead", f"process {procs['bob'].pid} is gone"),
                        "carol": ("shutdown", "")}
        assert data["lead"]["alive"] is True
        assert data["tasks"] == {"total": 3, "pending": 2, "in_progress": 0, "completed": 1, "failed": 0,
                                 "cancelled": 0, "ready": 2, "unreadable": 0}
        assert plain[0] == f"team: team   lead: running (pid {data['lead']['pid']})"
        assert plain[1] == "members:"
        assert plain[2].split()[:3] == ["alice", "coder", "idle"]
        assert plain[3].split()[:3] == ["bob", "tester", "dead"]
        assert plain[3].endswith(f"process {procs['bob'].pid} is gone")
        # each member's kind and model (docs/agents.md)
        assert plain[4].split() == ["carol", "coder", "shutdown", "llm", "gpt-4.1-mini", "no", "heartbeat"]
        assert plain[2].split()[3:5] == ["llm", "-"]  # never started by a lead: no model yet
        assert plain[5:] == ["tasks: 2 pending · 1 completed (2 ready)", "jobs: 0 running, 0 in total"]
    finally:
        procs["alice"].kill()
        procs["alice"].wait()
    assert crew("status").stdout.splitlines()[0] == "team: team   lead: not running"


def test_jobs_list_show_and_kill_from_the_cli(team):
    mgr = JobManager(team.root, grace=0.5)
    try:
        done = mgr.start("echo finished")
        assert mgr.wait("lead", timeout=30)[0].status == "completed"
        slow = mgr.start("sleep 300", owner="alice", task=4)
        listing = json.loads(team("jobs", "--json").stdout)
        assert [(j["id"], j["status"], j.get("exit_code")) for j in listing] == [
            (done.id, "completed", 0), (slow.id, "running", None)]
        plain = team("jobs").stdout.splitlines()
        assert plain[0].split()[:4] == [done.id, "completed", "(exit", "0)"]
        assert plain[1].split()[:3] == [slow.id, "running", "alice"]
        assert plain[1].endswith("task #4  sleep 300")
        show = team("jobs", "show", done.id).stdout.splitlines()
        assert show[-2:] == ["--- output (tail) ---", "finished"]
        status = team("status").stdout
        assert f"jobs: 1 running, 2 in total\n  {slow.id}  alice  " in status
        killed = team("jobs", "kill", slow.id)
        assert (killed.returncode, killed.stdout) == (0, f"{slow.id} killed\n")
        note = mgr.wait("alice", timeout=30)
        assert [(n.job_id, n.status) for n in note] == [(slow.id, "killed")]
        assert team("jobs", "kill", slow.id).stdout == f"{slow.id} already killed (exit -15)\n"
        wait_until(lambda: not procs.alive(slow.pid), what="job gone")
    finally:
        mgr.shutdown()
    r = team("jobs", "show", "nope")
    assert (r.returncode, r.stderr) == (2, "UnknownRef: no job 'nope'; see `team jobs` for the list\n")


def test_seed_written_inbox_is_read_through_the_cli(crew):
    """Lines appended by the seed's MessageBus.send (no id) are shown and drained once."""
    path = crew.root / ".team" / "inbox" / "bob.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for content, ts in (("hello bob", 1700000000.5), ("are you there?", 1700000001.5)):
            f.write(json.dumps({"type": "message", "from": "alice", "content": content, "timestamp": ts}) + "\n")
    peek = crew("inbox", "bob", "--peek")
    assert [line.split(" ", 1)[1] for line in peek.stdout.splitlines()] == [
        "alice: hello bob", "alice: are you there?"]
    drained = crew("inbox", "bob", "--json")
    assert [(m["from"], m["content"], m["id"][:5]) for m in json.loads(drained.stdout)] == [
        ("alice", "hello bob", "seed-"), ("alice", "are you there?", "seed-")]
    assert crew("inbox", "bob").stdout == "no unread messages for bob\n"


ORPHANING_MANAGER = """
import os, signal, sys
from orchestrator.jobs.manager import JobManager
r = JobManager(sys.argv[1]).start("sleep 300 & echo $! > " + sys.argv[1] + "/child.pid; wait", owner="alice")
print(r.id, os.getpid(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_jobs_of_a_killed_manager_show_as_orphaned(team):
    proc = subprocess.Popen([sys.executable, "-c", ORPHANING_MANAGER, str(team.root)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    job_id, manager = proc.stdout.readline().split()
    assert proc.wait() == -signal.SIGKILL
    try:
        state = f"orphaned (manager pid {manager} is gone)"
        plain = team("jobs").stdout.splitlines()
        assert len(plain) == 1 and plain[0].startswith(f"{job_id}  {state} alice ")
        assert plain[0].endswith("  sleep 300 & echo $! > " + str(team.root) + "/child.pid; wait")
        listing = json.loads(team("jobs", "--json").stdout)
        assert [(j["id"], j["status"], j["orphaned"]) for j in listing] == [(job_id, "running", True)]
        assert team("jobs", "show", job_id).stdout.splitlines()[0].startswith(f"{job_id}  {state} alice ")
        status = team("status").stdout
        assert f"jobs: 1 running (1 orphaned), 1 in total\n  {job_id}  alice  {state}  " in status
        data = json.loads(team("status", "--json").stdout)
        assert [(j["id"], j["orphaned"]) for j in data["jobs"]["running"]] == [(job_id, True)]
    finally:
        JobManager(team.root).reap_orphans()
