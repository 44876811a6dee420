"""Roster (.team/config.json) and heartbeat liveness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import REPO
from util import wait_until

from orchestrator.core.errors import CorruptFile, InvalidName, UnknownRef, UserError
from orchestrator.team.roster import Team


def config(root):
    return root / ".team" / "config.json"


def test_seed_roster_loads_and_round_trips_unknown_keys(tmp_path):
    config(tmp_path).parent.mkdir(parents=True)
    seed = {"team_name": "demo", "members": [{"name": "alice", "role": "coder", "status": "working"}],
            "extra_top": 1}
    config(tmp_path).write_text(json.dumps(seed))
    team = Team(tmp_path)
    assert [(m.name, m.role, m.status) for m in team.members()] == [("alice", "coder", "working")]
    team.add("bob", role="tester", color="blue")
    data = json.loads(config(tmp_path).read_text())
    assert data == {"team_name": "demo", "members": [
        {"name": "alice", "role": "coder", "status": "working"},
        {"name": "bob", "role": "tester", "status": "idle", "color": "blue"},
    ], "extra_top": 1}


def test_add_get_update_remove(tmp_path):
    team = Team(tmp_path)
    assert team.members() == []
    team.add("alice", role="coder")
    assert team.get("alice").status == "idle"
    team.update("alice", status="working", task=3)
    got = team.get("alice")
    assert (got.status, got.task) == ("working", 3)
    with pytest.raises(UserError, match="member 'alice' already exists"):
        team.add("alice")
    team.add("alice", role="reviewer", exist_ok=True)
    assert (team.get("alice").role, team.get("alice").task) == ("reviewer", 3)
    team.remove("alice")
    assert team.names() == []


def test_bad_input(tmp_path):
    team = Team(tmp_path)
    with pytest.raises(InvalidName, match="no path separators"):
        team.add("../evil")
    with pytest.raises(InvalidName, match="'lead' is reserved"):
        team.add("lead")
    team.add("alice")
    with pytest.raises(UserError, match="invalid member status 'sleeping': use one of working, idle, shutdown"):
        team.update("alice", status="sleeping")
    with pytest.raises(UnknownRef, match="no team member 'bob'"):
        team.update("bob", status="idle")
    with pytest.raises(UnknownRef, match="no team member 'bob'; members: alice"):
        team.get("bob")


def test_corrupt_roster_is_reported(tmp_path):
    config(tmp_path).parent.mkdir(parents=True)
    config(tmp_path).write_text('{"members": [{"role": "x"}]}')
    with pytest.raises(CorruptFile, match="config.json"):
        Team(tmp_path).members()


ADDER = """
import sys
from orchestrator.team.roster import Team
t = Team(sys.argv[1])
for i in range(15):
    t.add(f"{sys.argv[2]}-{i}")
"""


def test_concurrent_adds_from_processes_lose_nothing(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(tmp_path), f"p{n}"], cwd=REPO)
             for n in range(4)]
    assert [p.wait(60) for p in procs] == [0, 0, 0, 0]
    assert sorted(Team(tmp_path).names()) == sorted(f"p{n}-{i}" for n in range(4) for i in range(15))


def test_liveness_idle_working_shutdown_and_dead(tmp_path):
    now = [1000.0]
    team = Team(tmp_path, clock=lambda: now[0], stale_after=30)
    for name in ("idler", "worker", "gone", "silent"):
        team.add(name)
    team.update("worker", status="working")
    team.update("gone", status="shutdown")
    team.heartbeat("idler")
    team.heartbeat("worker")
    states = {s.name: (s.liveness, s.reason) for s in team.states()}
    assert states == {"idler": ("idle", ""), "worker": ("working", ""), "gone": ("shutdown", ""),
                      "silent": ("dead", "no heartbeat")}
    now[0] += 31
    team.heartbeat("worker")
    states = {s.name: (s.liveness, s.reason) for s in team.states()}
    assert states["idler"] == ("dead", "heartbeat 31s old")
    assert states["worker"] == ("working", "")


def test_heartbeats_do_not_rewrite_the_roster(tmp_path):
    team = Team(tmp_path)
    team.add("alice")
    before = config(tmp_path).stat()
    for _ in range(20):
        team.heartbeat("alice")
    after = config(tmp_path).stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert team.last_heartbeat("alice")["pid"] == os.getpid()


BEATER = """
import sys, time
from orchestrator.team.roster import Team
Team(sys.argv[1]).heartbeat("alice")
print("beat", flush=True)
time.sleep(600)
"""


def test_member_whose_process_was_sigkilled_is_dead(tmp_path):
    team = Team(tmp_path)
    team.add("alice")
    proc = subprocess.Popen([sys.executable, "-c", BEATER, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "beat\n"
    assert team.state(team.get("alice")).liveness == "idle"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = wait_until(lambda: (s := team.state(team.get("alice"))).liveness == "dead" and s, what="dead")
    assert state.reason == f"process {proc.pid} is gone"
