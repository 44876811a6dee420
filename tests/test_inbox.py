"""The JSONL message bus: send/read/peek/wait, fetch/ack, rotation, bad input."""

from __future__ import annotations

import json
import os
import threading

import pytest

from orchestrator.core.errors import ConflictError, InvalidName, UnknownRef, UserError
from orchestrator.team.inbox import Bus
from orchestrator.team.roster import Team


@pytest.fixture
def bus(tmp_path):
    team = Team(tmp_path)
    team.add("alice")
    team.add("bob", role="tester")
    return Bus(tmp_path)


def inbox_files(root):
    d = root / ".team" / "inbox"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_send_then_read_drains_once(bus, tmp_path):
    sent = bus.send("alice", "hello", sender="lead")
    line = json.loads((tmp_path / ".team" / "inbox" / "alice.jsonl").read_text())
    assert line == {"id": sent.id, "type": "message", "from": "lead", "to": "alice",
                    "content": "hello", "timestamp": sent.timestamp, "seq": 1}
    got = bus.read("alice")
    assert [(m.id, m.sender, m.content) for m in got] == [(sent.id, "lead", "hello")]
    assert bus.read("alice") == []


def test_peek_leaves_messages(bus):
    bus.send("alice", "one", sender="bob")
    assert [m.content for m in bus.peek("alice")] == ["one"]
    assert [m.content for m in bus.peek("alice")] == ["one"]
    assert [m.content for m in bus.read("alice")] == ["one"]
    assert bus.peek("alice") == []


def test_ids_unique_and_per_sender_sequence(bus):
    for i in range(5):
        bus.send("alice", f"b{i}", sender="bob")
        bus.send("alice", f"l{i}", sender="lead")
    got = bus.read("alice")
    assert len({m.id for m in got}) == 10
    assert [(m.content, m.seq) for m in got if m.sender == "bob"] == [(f"b{i}", i + 1) for i in range(5)]
    assert [(m.content, m.seq) for m in got if m.sender == "lead"] == [(f"l{i}", i + 1) for i in range(5)]


def test_lead_is_always_a_recipient(tmp_path):
    bus = Bus(tmp_path)  # no roster at all
    bus.send("lead", "report", sender="alice")
    assert [m.content for m in bus.read("lead")] == ["report"]


def test_unknown_recipient_creates_no_inbox(bus, tmp_path):
    with pytest.raises(UnknownRef, match="unknown recipient 'carol': known are lead, alice, bob"):
        bus.send("carol", "hi", sender="lead")
    with pytest.raises(UnknownRef, match="no inbox 'carol': the inboxes are lead, alice, bob"):
        bus.read("carol")
    assert inbox_files(tmp_path) == []


@pytest.mark.parametrize("name", ["../alice", "a/b", "", ".hidden", "x" * 65, "a b"])
def test_bad_names_are_refused(bus, tmp_path, name):
    with pytest.raises(InvalidName):
        bus.send(name, "hi", sender="lead")
    with pytest.raises(InvalidName):
        bus.send("alice", "hi", sender=name)
    assert inbox_files(tmp_path) == []


def test_message_types(bus):
    with pytest.raises(UserError, match="invalid message type 'gossip'"):
        bus.send("alice", "x", sender="lead", type="gossip")
    with pytest.raises(UserError, match="shutdown_request message needs a request_id"):
        bus.send("alice", "stop", sender="lead", type="shutdown_request")
    bus.send("alice", "stop", sender="lead", type="shutdown_request", request_id="r1")
    bus.send("alice", "plan", sender="lead", type="plan_approval_response", request_id="r2", approve=True)
    got = bus.read("alice")
    assert [(m.type, m.request_id) for m in got] == [("shutdown_request", "r1"), ("plan_approval_response", "r2")]
    assert got[1].approve is True and got[1].model_extra == {}


def test_broadcast_reaches_everyone_but_the_sender(bus):
    sent = bus.broadcast("standup", sender="alice")
    assert [m.to for m in sent] == ["bob"]
    bus.broadcast("all hands", sender="lead")
    assert [(m.type, m.content) for m in bus.read("alice")] == [("broadcast", "all hands")]
    assert [m.content for m in bus.read("bob")] == ["standup", "all hands"]


def test_torn_fragment_does_not_swallow_the_next_message(bus, tmp_path):
    bus.send("alice", "before", sender="lead")
    path = tmp_path / ".team" / "inbox" / "alice.jsonl"
    with open(path, "ab") as f:  # a writer killed mid-line
        f.write(b'{"id":"torn","type":"message","from":"lead","content":"half')
    assert [m.content for m in bus.peek("alice")] == ["before"]
    bus.send("alice", "after", sender="bob")
    assert [m.content for m in bus.read("alice")] == ["before", "after"]


def test_fetch_release_redelivers_and_ack_consumes(bus):
    bus.send("alice", "m1", sender="lead")
    with bus.fetch("alice") as batch:
        assert [m.content for m in batch.messages] == ["m1"]
    # released without ack (a reader that died before acking): delivered again
    batch = bus.fetch("alice")
    assert [m.content for m in batch.messages] == ["m1"]
    batch.ack()
    with pytest.raises(UserError, match="already acknowledged"):
        batch.ack()
    assert bus.read("alice") == []


def test_fetch_filters_messages_the_consumer_already_persisted(bus):
    first = bus.send("alice", "m1", sender="lead")
    bus.send("alice", "m2", sender="lead")
    batch = bus.fetch("alice", seen={first.id})
    assert [m.content for m in batch.messages] == ["m2"]
    batch.ack()
    assert bus.peek("alice") == []


def test_a_second_reader_waits_for_the_first_to_ack(tmp_path, bus):
    bus.send("alice", "m1", sender="lead")
    first = bus.fetch("alice")
    other = Bus(tmp_path, lock_timeout=0.2)
    with pytest.raises(ConflictError, match="another reader holds this inbox"):
        other.fetch("alice")
    first.ack()
    assert other.read("alice") == []  # no duplicate for the second reader


def test_rotation_keeps_order_and_loses_nothing(tmp_path):
    Team(tmp_path).add("alice")
    bus = Bus(tmp_path, rotate_bytes=2000)
    got = []
    for i in range(100):
        bus.send("alice", f"m{i}", sender="lead")
        if i % 7 == 0:
            got += [m.content for m in bus.read("alice")]
    got += [m.content for m in bus.read("alice")]
    assert got == [f"m{i}" for i in range(100)]
    assert (tmp_path / ".team" / "inbox" / "alice.consumed.jsonl").exists()
    # the live file only holds what came after the last rotation
    assert os.path.getsize(tmp_path / ".team" / "inbox" / "alice.jsonl") < 2000 + 200


def test_wait_wakes_on_a_send_from_another_thread(bus):
    got = []
    t = threading.Thread(target=lambda: got.extend(bus.wait("alice", timeout=30)))
    t.start()
    bus.send("alice", "ping", sender="lead")
    t.join(30)
    assert [m.content for m in got] == ["ping"]


def test_wait_times_out_empty(bus):
    assert bus.wait("alice", timeout=0.05) == []


def test_cursor_that_no_longer_matches_the_file_redelivers_instead_of_skipping(bus, tmp_path):
    """A power loss can drop a consumed but unsynced tail; later sends must not be skipped."""
    bus.send("alice", "old-1", sender="lead")
    bus.send("alice", "old-2", sender="lead")
    assert len(bus.read("alice")) == 2
    path = tmp_path / ".team" / "inbox" / "alice.jsonl"
    os.truncate(path, 0)  # same inode, shorter than the cursor's offset
    bus.send("alice", "new-1 " + "x" * 300, sender="bob")
    bus.send("alice", "new-2", sender="bob")
    assert [m.content.split()[0] for m in bus.read("alice")] == ["new-1", "new-2"]


def seed_send(root, sender, to, content, msg_type="message", extra=None, timestamp=1700000000.5):
    """What the seed's ``MessageBus.send`` appends: no ``id``, no ``to``."""
    msg = {"type": msg_type, "from": sender, "content": content, "timestamp": timestamp, **(extra or {})}
    path = root / ".team" / "inbox" / f"{to}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(msg) + "\n")


def test_seed_written_messages_are_delivered_once_with_stable_ids(bus, tmp_path):
    seed_send(tmp_path, "alice", "bob", "hello bob")
    seed_send(tmp_path, "alice", "bob", "hello bob")  # byte-identical: still two messages
    bus.send("bob", "from the bus", sender="lead")
    seed_send(tmp_path, "lead", "bob", "stop", "shutdown_request", {"request_id": "r1"})
    peeked = bus.peek("bob")
    assert [(m.sender, m.type, m.content, m.request_id) for m in peeked] == [
        ("alice", "message", "hello bob", None), ("alice", "message", "hello bob", None),
        ("lead", "message", "from the bus", None), ("lead", "shutdown_request", "stop", "r1")]
    ids = [m.id for m in peeked]
    assert ids[0].startswith("seed-") and ids[3].startswith("seed-") and len(set(ids)) == 4
    assert [m.id for m in Bus(tmp_path).peek("bob")] == ids  # stable across readers (and restarts)
    # A consumer that persisted the first two before a crash gets only the rest.
    with bus.fetch("bob", seen=set(ids[:2])) as batch:
        assert [m.id for m in batch.messages] == ids[2:]
        batch.ack()
    assert bus.read("bob") == []
    # The cursor's check names a seed line: later messages are not re-delivered from the start.
    seed_send(tmp_path, "alice", "bob", "again", timestamp=1700000001.0)
    assert [m.content for m in bus.read("bob")] == ["again"]
    assert bus.read("bob") == []


def test_lines_without_sender_or_content_are_still_skipped(bus, tmp_path):
    path = tmp_path / ".team" / "inbox" / "bob.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"type": "message", "timestamp": 1.0}\n["from", "content"]\nnot json\n')
    bus.send("bob", "real", sender="lead")
    assert [m.content for m in bus.read("bob")] == ["real"]
