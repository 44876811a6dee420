"""``team board`` without a browser: the layout, the views, the feed following the disk, and the HTTP surface.

The browser tests (test_board_browser.py) drive the page; these pin what the
page is sent and who may ask for it, against real files and a real server
process on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from boardkit import board_process, request, split
from conftest import run_team, team_env
from util import wait_until

from orchestrator.board.details import task_details
from orchestrator.board.feed import Feed
from orchestrator.board.layout import Place, layout
from orchestrator.board.views import Shown
from orchestrator.board.watch import lead_holder
from orchestrator.core.models import Status
from orchestrator.core.redact import Secrets
from orchestrator.jobs.manager import JobManager
from orchestrator.llm.ledger import Ledger
from orchestrator.llm.pricing import Usage
from orchestrator.tasks.store import TaskStore
from orchestrator.team.inbox import Bus
from orchestrator.team.lead import LeadLock
from orchestrator.team.roster import Team

SECRET = "sk-board-test-0123456789abcdef"


def diamond(root: Path) -> TaskStore:
    """#1 setup → #2 a, #3 b → #4 join → #5 notes; #1 done, #2 running (alice), #3 failed."""
    store = TaskStore(root)
    store.create("Set up the venv", name="setup")
    store.create("Port module a", blocked_by=["setup"], name="port-a")
    store.create("Port module b", blocked_by=["setup"], name="port-b")
    store.create("Integrate", blocked_by=["port-a", "port-b"], name="integrate")
    store.create("Release notes", blocked_by=["integrate"])
    store.update(1, status=Status.completed)
    store.update(2, status=Status.in_progress, owner="alice")
    store.update(3, status=Status.failed, error="exit 1")
    return store


# ---------------------------------------------------------------------- layout
def test_layout_puts_each_task_one_wave_after_its_deepest_dependency(tmp_path):
    store = diamond(tmp_path)
    store.create("Side task")  # no dependency: wave 0, below setup
    places = layout(store.all())
    assert {tid: p.col for tid, p in places.items()} == {1: 0, 2: 1, 3: 1, 4: 2, 5: 3, 6: 0}
    assert places[1] == Place(0, 0) and places[6] == Place(0, 1)
    assert sorted(places[i].row for i in (2, 3)) == [0, 1]


def test_layout_orders_a_wave_by_its_dependencies_rows_and_parks_cycles_last(tmp_path):
    store = TaskStore(tmp_path)
    for subject in ("a", "b", "c"):
        store.create(subject)
    store.create("needs c", blocked_by=[3])
    store.create("needs a", blocked_by=[1])
    places = layout(store.all())
    assert places[5].row < places[4].row  # barycenter: #5 hangs off row 0, #4 off row 2
    # a hand-made cycle (the store refuses one): its tasks go to one wave after the deepest
    for tid, deps in ((1, [2]), (2, [1])):
        path = store.path(tid)
        data = json.loads(path.read_text())
        data["blockedBy"] = deps
        path.write_text(json.dumps(data))
    places = layout(store.all())
    assert places[1].col == places[2].col == places[5].col == max(p.col for p in places.values())


# ---------------------------------------------------------------------- the feed
def test_the_feed_sends_a_snapshot_then_only_what_changed(tmp_path):
    store = diamond(tmp_path)
    feed = Feed(tmp_path, secrets=Secrets())
    assert feed.tick() is not None  # the first look
    snap = feed.snapshot()
    states = {t["id"]: t["state"] for t in snap["tasks"]}
    assert states == {1: "completed", 2: "running", 3: "failed", 4: "blocked", 5: "blocked"}
    assert snap["progress"]["critical"] == [2, 4, 5] and snap["progress"]["critical_kind"] == "remaining"
    assert [t["crit"] for t in snap["tasks"]] == [False, True, False, True, True]
    time.sleep(0.02)  # let the slow refresh pass
    feed.watcher.slow_every = 3600
    assert feed.tick() is None  # nothing changed on disk: nothing to send

    store.update(3, status=Status.pending)
    delta = feed.tick()
    assert delta is not None and delta["version"] == snap["version"] + 1
    assert {t["id"]: t["state"] for t in delta["tasks"]} == {3: "ready"}
    assert [a["task"] for a in delta["activity"]] == [3] and delta["progress"]["counts"]["failed"] == 0

    store.create("Late addition", blocked_by=[5])
    Team(tmp_path).add("alice", "coder")
    Bus(tmp_path).send("alice", "please look at #4", sender="lead")
    delta = feed.tick()
    assert [t["id"] for t in delta["tasks"]] == [6] and delta["tasks"][0]["col"] == 4
    assert [(m["sender"], m["to"], m["content"]) for m in delta["messages"]] == [("lead", "alice", "please look at #4")]
    store.delete_many([6])
    assert feed.tick()["removed"] == [6]


def test_hostile_text_reaches_the_page_escaped_and_without_secrets(tmp_path):
    store = TaskStore(tmp_path, secrets=Secrets())  # written unscrubbed, as a foreign writer might
    store.create("placeholder", description=f"key {SECRET}\n<script>alert(1)</script>")
    store.update(1, status=Status.failed, error=f"curl -H 'Authorization: {SECRET}' failed\x1b[2J")
    data = json.loads(store.path(1).read_text())
    data["subject"] = "fix \u202edraw\u202c it"  # the store refuses it; a hand edit does not ask
    store.path(1).write_text(json.dumps(data))
    Team(tmp_path).add("bob", "coder")
    Bus(tmp_path).send("bob", f"token is {SECRET}\x1b]0;pwned\x07", sender="lead")
    feed = Feed(tmp_path, secrets=Secrets([SECRET]))
    feed.tick()
    text = json.dumps(feed.snapshot(), ensure_ascii=False)
    assert SECRET not in text and "\u202e" not in text and "\x1b" not in text
    assert "fix \\u202edraw\\u202c it" in feed.snapshot()["tasks"][0]["subject"]
    assert feed.snapshot()["messages"][0]["content"] == "token is [REDACTED]\\x1b]0;pwned\\x07"
    details = task_details(tmp_path, feed.tasks(), feed.jobs(), 1, time.time(), feed.show)
    shown = details.model_dump_json()
    assert SECRET not in shown and "\\x1b[2J" in dict(details.rows)["error"]
    assert details.description == "key [REDACTED]\n<script>alert(1)</script>"  # text, for textContent


def test_the_blocked_chain_is_the_text_of_team_task_blocked(tmp_path):
    diamond(tmp_path)
    feed = Feed(tmp_path, secrets=Secrets())
    feed.tick()
    for tid in (5, 4, 2):
        cli = run_team(tmp_path, "task", "blocked", str(tid))
        assert cli.returncode == 0, cli.stderr
        details = task_details(tmp_path, feed.tasks(), feed.jobs(), tid, time.time(), feed.show)
        assert details.chain + "\n" == cli.stdout
    assert "#5 → #4 → #3   #3 Port module b: failed → blocked until #3 is retried" in details_chain(feed, 5)


def details_chain(feed: Feed, tid: int) -> str:
    return task_details(feed.root, feed.tasks(), feed.jobs(), tid, time.time(), feed.show).chain


def test_spend_roster_and_an_agent_tasks_transcript_summary(tmp_path):
    store = TaskStore(tmp_path)
    store.create("Port module a", kind="agent", prompt="port it", assignee="alice")
    store.update(1, status=Status.completed, owner="alice",
                 usage={"prompt_tokens": 1200, "completion_tokens": 300, "cached_tokens": 0, "cost": 0.25, "calls": 3})
    team = Team(tmp_path)
    team.add("alice", "coder", status="working")
    team.heartbeat("alice")
    ledger = Ledger(tmp_path)  # what alice spent: on task #1, and in a turn outside any task
    ledger.add(run="r1", agent="alice", task=1, model="gpt-4o",
               usage=Usage(prompt_tokens=1200, completion_tokens=300, cost=0.25, calls=3))
    ledger.add(run="r1", agent="alice", model="gpt-4o",
               usage=Usage(prompt_tokens=800, completion_tokens=200, cost=0.25, calls=2))
    transcript = tmp_path / ".team" / "transcripts" / "alice.jsonl"
    transcript.parent.mkdir(parents=True)
    lines = [{"kind": "task", "task": 7, "epoch": 1}, {"kind": "message", "msg": {"role": "assistant", "content": "old"}},
             {"kind": "task", "task": 1, "epoch": 1},
             {"kind": "message", "msg": {"role": "user", "content": "port it"}},
             {"kind": "message", "msg": {"role": "assistant", "content": None, "tool_calls": [
                 {"id": "c1", "type": "function", "function": {"name": "edit_file", "arguments": "{}"}},
                 {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}},
             {"kind": "message", "msg": {"role": "tool", "tool_call_id": "c1", "content": "ok"}},
             {"kind": "message", "msg": {"role": "assistant", "content": f"done; key was {SECRET}"}}]
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    feed = Feed(tmp_path, secrets=Secrets([SECRET]), budget=2.0)
    feed.tick()
    snap = feed.snapshot()
    assert snap["spend"] == {"prompt_tokens": 2000, "completion_tokens": 500, "calls": 5, "cost": 0.5, "budget": 2.0}
    (alice,) = snap["members"]
    assert (alice["name"], alice["liveness"], alice["tokens"], alice["cost"]) == ("alice", "working", 2500, 0.5)
    assert snap["tasks"][0]["cost"] == 0.25 and snap["tasks"][0]["tokens"] == 1500
    details = task_details(tmp_path, feed.tasks(), feed.jobs(), 1, time.time(), feed.show)
    assert details.transcript is not None
    assert details.transcript.model_dump() == {"member": "alice", "messages": 4, "tools": {"edit_file": 1, "bash": 1},
                                               "last": "done; key was [REDACTED]"}
    assert ("cost", "$0.25") in details.rows


def test_commands_other_than_board_do_not_load_the_web_stack(tmp_path):
    code = ("import sys; from orchestrator.cli import main; main(['task', 'list']); "
            "print(sorted(m for m in ('starlette', 'uvicorn', 'orchestrator.board') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=team_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]"


def test_a_log_path_outside_the_state_root_is_not_read(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "private.txt").write_text("the neighbour's diary")
    store = TaskStore(root)
    store.create("hand-edited", log="../private.txt")
    (root / "out.log").write_text(f"line one\n{SECRET}\n")
    store.create("fine", log="out.log")
    show = Shown(Secrets([SECRET]))
    outside = task_details(root, store.all(), [], 1, time.time(), show)
    assert outside.log is not None and "diary" not in outside.log.text and "outside the state root" in outside.log.text
    inside = task_details(root, store.all(), [], 2, time.time(), show)
    assert inside.log is not None and inside.log.text == "line one\n[REDACTED]\n"


def test_lead_holder_reads_the_lock_without_taking_it(tmp_path):
    assert lead_holder(tmp_path) is None
    with LeadLock(tmp_path, plan="demo"):
        lead = lead_holder(tmp_path)
        assert lead is not None and lead.pid == os.getpid() and lead.info["plan"] == "demo"
    assert lead_holder(tmp_path) is None  # lock file left behind, nobody holds it


# ---------------------------------------------------------------------- the HTTP surface
def test_every_read_needs_the_session_token_and_a_loopback_host(tmp_path):
    diamond(tmp_path)
    with board_process(tmp_path) as url:
        base, token = split(url)
        assert request(f"{base}/api/snapshot")[0] == 403
        status, body = request(f"{base}/?token=wrong{token}")
        assert status == 403 and "?token=" in body
        status, snap = request(f"{base}/api/snapshot?token={token}")
        assert status == 200 and len(snap["tasks"]) == 5 and snap["actions"] is False
        status, page = request(url)
        assert status == 200 and "board.js" in page
        assert request(f"{base}/api/task/4?token={token}")[1]["state"] == "blocked"
        assert request(f"{base}/api/task/99?token={token}")[0] == 404
        # DNS rebinding: a page of evil.example resolving to 127.0.0.1 sends its own Host
        assert request(f"{base}/api/snapshot?token={token}", headers={"Host": "evil.example"})[0] == 400
        with urllib.request.urlopen(f"{base}/static/board.js") as r:
            assert "script-src 'self'" in r.headers["Content-Security-Policy"]
            assert r.headers["Referrer-Policy"] == "no-referrer"
        # read-only by default, even with the token
        status, body = request(f"{base}/api/task/3/retry", method="POST", headers={"X-Board-Token": token})
        assert status == 403 and "--allow-actions" in body["error"]
    assert TaskStore(tmp_path).read(3).status == Status.failed


def test_actions_need_allow_actions_and_the_token_header(tmp_path):
    diamond(tmp_path)
    Team(tmp_path).add("alice", "coder")
    with board_process(tmp_path, "--allow-actions") as url:
        base, token = split(url)
        retry = f"{base}/api/task/3/retry"
        status, body = request(retry, method="POST")
        assert status == 403 and "token" in body["error"]
        assert request(retry, method="POST", headers={"X-Board-Token": "nope"})[0] == 403
        assert request(f"{retry}?token={token}", method="POST")[0] == 403  # a link or a form cannot carry it
        assert TaskStore(tmp_path).read(3).status == Status.failed
        status, body = request(retry, method="POST", headers={"X-Board-Token": token})
        assert status == 200 and body["said"].startswith("#3 is pending again")
        assert TaskStore(tmp_path).read(3).status == Status.pending
        status, body = request(retry, method="POST", headers={"X-Board-Token": token})
        assert status == 409 and "only a failed or cancelled task" in body["error"]
        status, body = request(f"{base}/api/task/5/cancel", method="POST", headers={"X-Board-Token": token})
        assert status == 200 and TaskStore(tmp_path).read(5).status == Status.cancelled
        send = f"{base}/api/send"
        status, body = request(send, method="POST", headers={"X-Board-Token": token},
                               body={"to": "alice", "content": "retrying #3", "from": "lead"})
        assert status == 200 and body["said"].startswith("sent ")
        assert [m.content for m in Bus(tmp_path).peek("alice")] == ["retrying #3"]
        status, body = request(send, method="POST", headers={"X-Board-Token": token},
                               body={"to": "mallory", "content": "hi"})
        assert status == 404 and "unknown recipient" in body["error"]
    events = [e for e in TaskStore(tmp_path).events()[0] if e.get("actor") == "board" and e["event"] == "status"]
    assert [(e["task"], e["to"]) for e in events] == [(3, "pending"), (5, "cancelled")]


def test_the_event_stream_carries_a_change_within_a_tick(tmp_path):
    store = diamond(tmp_path)
    with board_process(tmp_path) as url:
        base, token = split(url)
        with urllib.request.urlopen(f"{base}/api/events?token={token}", timeout=10) as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            event, snap = read_event(stream)
            assert event == "snapshot" and {t["id"]: t["state"] for t in snap["tasks"]}[2] == "running"
            t0 = time.monotonic()
            store.update(2, status=Status.completed)
            while True:
                event, data = read_event(stream)
                if event == "delta" and any(t["id"] == 2 for t in data.get("tasks", [])):
                    break
            assert time.monotonic() - t0 < 5
            assert {t["id"]: t["state"] for t in data["tasks"]}[2] == "completed"
            assert data["version"] > snap["version"]


def read_event(stream) -> tuple[str, dict]:
    event, data = "", ""
    while True:
        line = stream.readline().decode()
        if line.startswith("event: "):
            event = line[7:].strip()
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "\n" and event:
            return event, json.loads(data)


def test_a_port_in_use_is_a_clear_error_not_a_traceback(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = run_team(tmp_path, "board", "--port", str(port))
    assert r.returncode == 2
    assert r.stderr == (f"UserError: port {port} on 127.0.0.1 is in use (another board or server?): pick another "
                        "with --port N, or leave --port out to get a free one\n")


def test_ctrl_c_stops_the_board_with_a_message(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "board"], cwd=tmp_path, env=team_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("board: http://127.0.0.1:")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=15) == 130
    assert proc.stderr.read() == "board stopped (SIGINT)\n"
    assert "no tasks there yet" in proc.stdout.read()


SLOW_PLAN = """\
name: slow
workers: 2
tasks:
  - id: wait
    run: while [ ! -e {gate} ]; do sleep 0.02; done
  - id: after
    run: "true"
    needs: [wait]
"""


def test_team_run_board_serves_the_run_and_stops_with_it(tmp_path):
    gate = tmp_path / "gate"
    (tmp_path / "plan.yaml").write_text(SLOW_PLAN.format(gate=gate))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--board"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("board: http://127.0.0.1:"), line
        base, token = split(line.split()[1])
        snap = wait_until(lambda: _running(base, token), timeout=20, what="the board to show #1 running")
        assert snap["lead"]["alive"] and snap["lead"]["plan"] == "slow"
        child = _board_child(proc.pid)
        assert child is not None
        gate.touch()
        out, err = proc.communicate(timeout=30)
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    wait_until(lambda: not Path(f"/proc/{child}").exists(), timeout=10, what="the board to stop with the run")
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/api/snapshot?token={token}", timeout=2)


def test_a_killed_run_leaves_no_board_behind(tmp_path):
    gate = tmp_path / "gate"
    (tmp_path / "plan.yaml").write_text(SLOW_PLAN.format(gate=gate))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--board"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base, token = split(proc.stderr.readline().split()[1])
        wait_until(lambda: _running(base, token), timeout=20, what="the run to start")
        child = _board_child(proc.pid)
        assert child is not None
        proc.kill()
        proc.wait()
        wait_until(lambda: not Path(f"/proc/{child}").exists() or _zombie(child), timeout=10,
                   what="the board to notice its parent is gone")
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()


def _running(base: str, token: str) -> dict | None:
    try:
        status, snap = request(f"{base}/api/snapshot?token={token}", timeout=2)
    except OSError:
        return None
    states = {t["id"]: t["state"] for t in snap.get("tasks", [])} if status == 200 else {}
    return snap if states.get(1) == "running" and snap["lead"]["alive"] else None


def _board_child(parent: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if b"board" in cmd and b"--parent" in cmd and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            return int(entry.name)
    return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_cancel_from_the_board_stops_a_running_task_of_a_run(tmp_path):
    """The attempt is fenced in the store, its job killed; the run ends instead of waiting on it."""
    gate = tmp_path / "gate"
    (tmp_path / "plan.yaml").write_text(SLOW_PLAN.format(gate=gate))
    run = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                           env=team_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with board_process(tmp_path, "--allow-actions") as url:
            base, token = split(url)
            wait_until(lambda: _running(base, token), timeout=20, what="the run to start #1")
            status, body = request(f"{base}/api/task/1/cancel", method="POST", headers={"X-Board-Token": token})
            assert status == 200 and "is cancelled: its running attempt is fenced" in body["said"]
            assert "killed job" in body["said"]
            assert run.wait(timeout=30) == 1
    finally:
        gate.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    assert TaskStore(tmp_path).read(1).status == Status.cancelled
    assert "stale completion of #1" in run.stdout.read()
    assert [(j.task, j.status) for j in JobManager(tmp_path).list()] == [(1, "killed")]
