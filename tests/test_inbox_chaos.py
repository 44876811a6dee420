"""Crash tests for the inbox: SIGKILLed readers and writers, real processes.

The reader here is the pattern an agent uses: fetch, persist what it got
(skipping ids it persisted before a crash), then ack.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from util import wait_until

from orchestrator.core.fsutil import parse_jsonl
from orchestrator.team.roster import Team

WRITER = """
import sys
from orchestrator.team.inbox import Bus
root, name, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
start = int(sys.argv[5]) if len(sys.argv) > 5 else 0
bus = Bus(root, durable=len(sys.argv) <= 6 or sys.argv[6] == "1")
pad = "x" * size
for i in range(start, start + count):
    bus.send("reader", f"{name}:{i}:" + pad, sender=name)
    print(i, flush=True)  # acknowledged
"""

READER = """
import sys
from pathlib import Path
from orchestrator.core.fsutil import append_line, read_jsonl
from orchestrator.team.inbox import Bus
import time
root, total = sys.argv[1], int(sys.argv[2])
out = Path(root) / "received.jsonl"
seen = {r["id"] for r in read_jsonl(out)}
bus = Bus(root, rotate_bytes=int(sys.argv[3]) if len(sys.argv) > 3 else 64 * 1024)
while len(seen) < total if total else bus.wait_unread("reader", 0.5):  # total 0: drain until empty
    batch = bus.fetch("reader", seen=seen, limit=20)
    time.sleep(0.001)                   # an agent's work on the batch
    for m in batch.messages:            # persist first ...
        append_line(out, {"id": m.id, "from": m.sender, "content": m.content[:40]}, durable=False)
        seen.add(m.id)
    batch.ack()                         # ... then acknowledge
    if not batch.messages:
        bus.wait_unread("reader", 0.05)
"""


def spawn(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def received_count(root: Path) -> int:
    path = root / "received.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def received(root: Path) -> list[dict]:
    return list(parse_jsonl((root / "received.jsonl").read_bytes())) if (root / "received.jsonl").exists() else []


def check_exactly_once_in_order(rows: list[dict], writers: dict[str, list[int]]) -> None:
    """Every acknowledged message once, per-sender order kept, nothing invented."""
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a message was delivered twice"
    per_sender: dict[str, list[int]] = {}
    for r in rows:
        name, idx, _ = r["content"].split(":", 2)
        assert name == r["from"]
        per_sender.setdefault(name, []).append(int(idx))
    for name, acked in writers.items():
        got = per_sender.get(name, [])
        assert got == sorted(got), f"{name}: out of order"
        assert set(acked) <= set(got), f"{name}: acknowledged messages lost: {sorted(set(acked) - set(got))[:5]}"


def run_reader_chaos(root: Path, n_writers: int, per_writer: int, kills: int, seed: int) -> int:
    rng = random.Random(seed)
    team = Team(root)
    team.add("reader")
    total = n_writers * per_writer
    writers = {f"w{i}": spawn(WRITER, root, f"w{i}", per_writer, 0) for i in range(n_writers)}
    reader = spawn(READER, root, total)
    # kill at random points of the stream: after random fractions of it, plus a random delay
    marks = sorted(rng.sample(range(5, 90), kills))
    killed = 0
    for mark in marks:
        goal = total * mark // 100
        wait_until(lambda g=goal, r=reader: received_count(root) >= g or r.poll() is not None, timeout=120,
                   what=f"reader past {goal} messages")
        time.sleep(rng.uniform(0, 0.02))  # the random instant of the kill, not a wait for state
        assert reader.poll() is None, "the reader finished before it could be killed"
        reader.send_signal(signal.SIGKILL)
        reader.wait()
        killed += 1
        reader = spawn(READER, root, total)
    acked = {}
    for name, w in writers.items():
        out, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        acked[name] = [int(x) for x in out.split()]
        assert acked[name] == list(range(per_writer))
    try:
        reader.communicate(timeout=60)
    except subprocess.TimeoutExpired:  # it never got everything: the check below says what is missing
        reader.kill()
        reader.communicate()
    rows = received(root)
    check_exactly_once_in_order(rows, acked)
    assert len(rows) == total
    return killed


def test_reader_sigkilled_repeatedly_while_8_writers_send(tmp_path):
    killed = run_reader_chaos(tmp_path, n_writers=8, per_writer=2000, kills=5, seed=1)
    assert killed >= 5


@pytest.mark.chaos
@pytest.mark.parametrize("seed", range(5))
def test_reader_chaos_long(tmp_path, seed):
    assert run_reader_chaos(tmp_path, n_writers=8, per_writer=5000, kills=25, seed=seed) >= 25


def run_writer_chaos(root: Path, rounds: int, seed: int) -> int:
    """Writers sending big messages are SIGKILLed mid-stream; every acknowledged one arrives intact.

    Big lines without fsync keep the writers inside write(2) most of the
    time, so a kill often leaves a torn fragment. Returns how many there were.
    """
    rng = random.Random(seed)
    Team(root).add("reader")
    acked: dict[str, list[int]] = {}
    next_index: dict[str, int] = {}
    for _ in range(rounds):
        procs = {}
        for i in range(4):
            name = f"w{i}"
            size, durable = rng.choice([(100, 1), (64_000, 0), (256_000, 0), (256_000, 1)])
            procs[name] = spawn(WRITER, root, name, 10_000, size, next_index.get(name, 0), durable)
        first = {name: p.stdout.readline() for name, p in procs.items()}  # each is sending now
        time.sleep(rng.uniform(0, 0.03))  # the random instant of the kill
        for name, p in procs.items():
            p.send_signal(signal.SIGKILL)
            p.wait()
            # Read the rest through the same file object readline() used: communicate() reads the
            # raw fd when stderr is a pipe too, dropping what readline() had buffered (and cutting
            # a number at the buffer's edge into a fake index).
            out = p.stdout.read()
            p.stdout.close()
            p.stderr.close()
            done = [int(x) for x in (first[name] + out).split()]
            acked.setdefault(name, []).extend(done)
            # the next incarnation uses fresh indices, past whatever may have half-landed
            next_index[name] = (done[-1] if done else next_index.get(name, 0)) + 100_000
    # a final writer per name sends after all the carnage: nothing may swallow it
    for i in range(4):
        name = f"w{i}"
        p = spawn(WRITER, root, name, 3, 10, next_index.get(name, 0))
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        acked[name].extend(int(x) for x in out.split())
    reader = spawn(READER, root, 0, 1 << 40)  # no rotation: the raw file is inspected below
    _, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    check_exactly_once_in_order(received(root), acked)
    raw = (root / ".team" / "inbox" / "reader.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    return sum(1 for line in raw.split(b"\n") if line and not line.endswith(b"}"))


def test_writers_sigkilled_mid_append_lose_no_acknowledged_message(tmp_path):
    run_writer_chaos(tmp_path, rounds=4, seed=7)


@pytest.mark.chaos
@pytest.mark.parametrize("seed", range(5))
def test_writer_chaos_long(tmp_path, seed):
    run_writer_chaos(tmp_path, rounds=20, seed=seed)


def test_reader_dedupes_after_a_crash_between_persist_and_ack(tmp_path):
    """The exact crash window: persisted but not acked -> delivered again, filtered by id."""
    Team(tmp_path).add("reader")
    from orchestrator.team.inbox import Bus

    bus = Bus(tmp_path)
    first = [bus.send("reader", f"w0:{i}:", sender="w0") for i in range(3)]
    code = READER.replace("    batch.ack()", "    os._exit(9)").replace("import sys", "import os, sys")
    crashed = spawn(code, tmp_path, 3)
    crashed.communicate(timeout=60)
    assert crashed.returncode == 9
    assert [r["id"] for r in received(tmp_path)] == [m.id for m in first]
    assert len(bus.peek("reader")) == 3  # not acknowledged: still there
    bus.send("reader", "w0:3:", sender="w0")
    ok = spawn(READER, tmp_path, 4)
    _, err = ok.communicate(timeout=60)
    assert ok.returncode == 0, err
    check_exactly_once_in_order(received(tmp_path), {"w0": [0, 1, 2, 3]})
    assert json.loads((tmp_path / ".team" / "inbox" / "reader.cursor").read_text())["offset"] == os.path.getsize(
        tmp_path / ".team" / "inbox" / "reader.jsonl")
