"""TaskStore on real files: formats, refs, cycles, compare-and-set, leases, repairs."""

from __future__ import annotations

import json

import pytest
from util import wait_until

from orchestrator.core.errors import (
    ConflictError,
    CorruptFile,
    CycleError,
    InvalidName,
    UnknownRef,
    UserError,
)
from orchestrator.core.models import Status
from orchestrator.tasks import pipeline
from orchestrator.tasks.store import TaskStore


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path):
    return TaskStore(tmp_path)


def snapshot(store: TaskStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.dir.iterdir()) if p.is_file() and p.name != ".lock"}


def test_a_seed_written_store_opens_as_is(tmp_path):
    (tmp_path / ".tasks").mkdir()
    seed = {"id": 1, "subject": "Write spec", "description": "", "status": "completed", "blockedBy": [], "owner": ""}
    (tmp_path / ".tasks" / "task_1.json").write_text(json.dumps(seed, indent=2))
    (tmp_path / ".tasks" / "task_2.json").write_text(
        json.dumps({**seed, "id": 2, "subject": "Build", "status": "pending", "blockedBy": [1]})
    )
    store = TaskStore(tmp_path)
    assert [(t.id, t.subject, t.status, t.blockedBy) for t in store.all()] == [
        (1, "Write spec", Status.completed, []),
        (2, "Build", Status.pending, [1]),
    ]
    t3 = store.create("Ship", blocked_by=[2])  # no .next_id yet: the counter comes from the files
    assert t3.id == 3
    assert store.claim(2, "w").owner == "w"


def test_create_writes_seed_keys_first_and_resolves_names(store):
    a = store.create("Set up", name="setup")
    b = store.create("Build", "compile it", blocked_by=["setup"], owner="bob")
    data = json.loads(store.path(b.id).read_text())
    assert list(data)[:6] == ["id", "subject", "description", "status", "blockedBy", "owner"]
    assert (data["blockedBy"], data["owner"]) == ([a.id], "bob")
    assert store.resolve("setup") == store.resolve("#1") == store.resolve("1") == 1
    with pytest.raises(UnknownRef, match="no task named 'nope'"):
        store.resolve("nope")
    with pytest.raises(UnknownRef, match="no task #9"):
        store.create("x", blocked_by=[9])
    with pytest.raises(UserError, match="already exists"):
        store.create("again", name="setup")
    with pytest.raises(InvalidName):
        store.create("bad", name="a/b")
    assert store.ids() == [1, 2]


def test_cycle_is_refused_with_the_cycle_and_nothing_written(store):
    for i in range(1, 5):
        store.create(f"t{i}", blocked_by=[i - 1] if i > 1 else [])
    before = snapshot(store)
    with pytest.raises(CycleError) as e:
        store.update(1, add_blocked_by=[4], status="completed")
    assert str(e.value) == "dependency cycle: #1 → #4 → #3 → #2 → #1"
    assert e.value.cycle == [1, 4, 3, 2, 1]
    with pytest.raises(CycleError, match="#2 cannot depend on itself: #2 → #2"):
        store.update(2, add_blocked_by=["2"])
    with pytest.raises(UserError, match="invalid status 'done'"):
        store.update(2, status="done")
    assert snapshot(store) == before


def test_completion_rewrites_no_other_file(store):
    store.create("a")
    store.create("b", blocked_by=[1])
    store.create("c", blocked_by=[1])
    b_before, c_before = store.path(2).read_bytes(), store.path(3).read_bytes()
    t = store.claim(1, "w")
    store.finish(1, t.epoch, "completed", result="ok")
    assert (store.path(2).read_bytes(), store.path(3).read_bytes()) == (b_before, c_before)
    assert [x.id for x in store.claim_many([2, 3], "v")] == [2, 3]


def test_claim_is_compare_and_set_and_epochs_guard_finish(tmp_path):
    clock = Clock()
    store = TaskStore(tmp_path, clock=clock)
    store.create("dep")
    store.create("main", blocked_by=[1])
    with pytest.raises(ConflictError, match=r"#2 is blocked by \[1\]"):
        store.claim(2, "a")
    first = store.claim(1, "a", lease=10)
    assert store.try_claim(1, "b") is None
    with pytest.raises(ConflictError, match="in_progress, not pending"):
        store.claim(1, "b")
    clock.now += 11
    assert [t.id for t in store.reclaim_expired()] == [1]
    again = store.claim(1, "b", lease=10)
    assert (again.epoch, again.attempts, again.owner) == (2, 2, "b")
    with pytest.raises(ConflictError, match="attempt 1 is stale"):
        store.finish(1, first.epoch, "completed")
    store.finish(1, again.epoch, "completed")
    assert store.get(1).status == Status.completed
    assert store.claim(2, "a").status == Status.in_progress
    events = [(e["task"], e["event"], e.get("from"), e.get("to")) for e in store.events()[0]]
    assert events == [
        (1, "created", None, "pending"),
        (2, "created", None, "pending"),
        (1, "claimed", "pending", "in_progress"),
        (1, "lease_expired", "in_progress", "pending"),
        (1, "claimed", "pending", "in_progress"),
        (1, "status", "in_progress", "completed"),
        (2, "claimed", "pending", "in_progress"),
    ]


def test_reclaim_skips_a_corrupt_file_and_all_names_it(tmp_path):
    clock = Clock()
    store = TaskStore(tmp_path, clock=clock)
    store.create("a")
    store.create("b")
    store.claim(1, "w", lease=5)
    store.path(2).write_text("{not json")
    clock.now += 6
    assert [t.id for t in store.reclaim_expired()] == [1]
    with pytest.raises(CorruptFile, match=r"task_2\.json: .*team doctor"):
        store.all()


def test_a_dependency_on_a_deleted_task_can_be_removed(store):
    store.create("a")
    store.create("b", blocked_by=[1])
    store.path(1).unlink()
    with pytest.raises(UnknownRef):
        store.update(2, remove_blocked_by=["7"])
    assert store.update(2, remove_blocked_by=["#1"]).blockedBy == []


def test_lost_name_index_is_rebuilt_before_a_new_name_is_checked(store):
    store.create("a", name="alpha")
    store.files.names_path.unlink()
    with pytest.raises(UserError, match="'alpha' already exists"):
        store.create("b", name="alpha")
    assert store.resolve("alpha") == 1


def test_stale_counter_never_reuses_an_id(store):
    for i in range(3):
        store.create(f"t{i}")
    store.files.counter_path.write_text("2")
    assert store.create("next").id == 4
    store.files.counter_path.write_text("garbage")
    assert store.create("after").id == 5
    assert store.repair_counter() == 6


def test_unwritable_root_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    from orchestrator.core.errors import NotWritable

    with pytest.raises(NotWritable, match="pass a writable --root"):
        TaskStore(blocker).create("x")


def test_commit_logs_its_claims_before_writing_any_file_of_the_batch(store, tmp_path):
    a = store.create("build")
    b = store.create("test", blocked_by=[a.id])
    c = store.create("lint")
    a = store.claim(a.id, "lead")
    seen: list = []

    def on_logged(claimed):  # what another process sees at this moment
        other = TaskStore(tmp_path)
        seen.append(([t.id for t in claimed], other.get(a.id).status, other.get(b.id).status,
                     [e["event"] for e in other.events()[0]][-2:]))

    stale = (c.id, 99, "completed", {})  # c was never claimed at epoch 99: skipped
    finished, claimed = store.commit([(a.id, a.epoch, "completed", {"result": "ok"}), stale], [b.id, c.id],
                                     "lead", lease=30, on_logged=on_logged)
    assert [t.id for t in finished] == [a.id]
    assert [t.id for t in claimed] == [b.id, c.id]  # b counts a as completed: it finished in this batch
    # Decided and logged, not yet filed: the claims' lines are there, the files unchanged.
    assert seen == [([b.id, c.id], Status.in_progress, Status.pending, ["claimed", "claimed"])]
    assert store.get(a.id).result == "ok" and store.get(b.id).owner == "lead"
    assert store.get(c.id).epoch == claimed[1].epoch
    assert [e["event"] for e in store.events()[0]][-3:] == ["claimed", "claimed", "status"]


def test_a_claim_logged_but_never_filed_is_counted_and_released_once(store, tmp_path):
    t = store.create("build")
    crashed = TaskStore(tmp_path)

    def die(claimed):  # the lead is killed after logging its claim, before writing the file
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        crashed.commit([], [t.id], "lead", on_logged=die)
    on_disk = store.get(t.id)
    assert on_disk.status == Status.pending and on_disk.attempts == 0
    unfiled = store.unfiled_claims(store.all())
    assert unfiled == {t.id: (on_disk.epoch + 1, 1)}
    released = store.release_unfiled(t.id, *unfiled[t.id], reason="the previous lead died", actor="lead")
    assert released.attempts == 1 and released.status == Status.pending
    assert store.unfiled_claims(store.all()) == {}  # repaired once
    again = store.claim(t.id, "lead")
    assert again.attempts == 2 and again.epoch > unfiled[t.id][0]
    # A reused id does not inherit an old claim.
    store.delete_many([t.id], actor="lead", reason="fresh")
    fresh = store.create("build again")
    assert store.unfiled_claims(store.all()) == {}, fresh


def test_pipelined_batches_are_visible_at_once_here_and_on_disk_once_flushed(store, tmp_path):
    ids = [store.create(f"t{i}").id for i in range(3)]
    with store.pipelined():
        _, claimed = store.commit([], ids, "lead")
        # This process sees its decided batch at once, whatever the writer has done yet.
        assert {store.read(i).status for i in ids} == {Status.in_progress}
        done, _ = store.commit([(t.id, t.epoch, "completed", {}) for t in claimed], [], "lead")
        assert [t.id for t in done] == ids  # the CAS read the queued claims (epochs match)
        store.flush()
        on_disk = {json.loads(store.path(i).read_bytes())["status"] for i in ids}
        assert on_disk == {"completed"}
        assert lock_is_free(store)  # nothing queued: another process may take the store lock
    completed = [e for e in store.events()[0] if e.get("to") == "completed"]
    assert sorted(e["task"] for e in completed) == ids
    claims = [e for e in store.events()[0] if e.get("event") == "claimed"]
    assert sorted(e["task"] for e in claims) == ids


def test_a_task_claimed_and_finished_within_the_claim_delay_is_written_once(store, monkeypatch):
    """A claim's file waits (pipeline.CLAIM_DEFER) for the task's next version: a short task's claim
    and completion are one file write, not two; its claim is in the event log all along."""
    ids = [store.create(f"t{i}").id for i in range(3)]
    written: list[str] = []
    real = store.files.write_now

    def recording(files, lines, **kw):
        written.extend(sorted(path.name for path in files))
        return real(files, lines, **kw)

    monkeypatch.setattr(store.files, "write_now", recording)
    monkeypatch.setattr(pipeline, "CLAIM_DEFER", 60.0)  # however slow this machine is today
    with store.pipelined():
        _, claimed = store.commit([], ids, "lead")
        assert [e["task"] for e in store.events()[0] if e["event"] == "claimed"] == ids  # durable already
        pipe = store.files.pipeline
        assert pipe is not None
        wait_until(lambda: not pipe.queue and not pipe.busy, timeout=10, what="the writer took the claims")
        store.commit([(t.id, t.epoch, "completed", {}) for t in claimed], [], "lead")
        store.flush()
    assert sorted(written) == sorted(store.path(i).name for i in ids)  # once each: the completed version
    assert {json.loads(store.path(i).read_bytes())["status"] for i in ids} == {"completed"}


def test_a_held_back_claim_reaches_the_disk_on_its_own_and_then_the_lock_is_let_go(store):
    """A task still running after the claim delay has its claim written without anyone flushing,
    and the store lock is let go once nothing is held back."""
    t = store.create("long")
    with store.pipelined():
        store.commit([], [t.id], "lead")
        assert not lock_is_free(store)  # held back: other processes must not read the stale file
        wait_until(lambda: json.loads(store.path(t.id).read_bytes())["status"] == "in_progress", timeout=10,
                   what="the held-back claim written by the writer")
        wait_until(lambda: lock_is_free(store), timeout=10, what="the lock let go once nothing is held back")


def test_a_pipelined_lease_renewal_is_a_queued_batch_like_a_commit(store, tmp_path):
    """The run's heartbeat renews its in-flight leases through the group commit: decided and seen at
    once in this process, on disk once flushed, a stale epoch skipped, the store lock held meanwhile."""
    ids = [store.create(f"t{i}").id for i in range(3)]
    with store.pipelined():
        _, claimed = store.commit([], ids, "lead", lease=5.0)
        store.flush()
        before = {i: json.loads(store.path(i).read_bytes())["lease_expires"] for i in ids}
        leases = {t.id: t.epoch for t in claimed}
        leases[ids[2]] += 1  # not the attempt in flight: skipped
        pipe = store.files.pipeline
        assert pipe is not None
        with pipe.cond:  # the writer waits: the renewal's batch stays queued while we look
            renewed = store.renew_many(leases, 3600.0)
            assert sorted(renewed) == ids[:2]
            assert all(store.read(i).lease_expires > before[i] + 1000 for i in ids[:2])
            assert store.read(ids[2]).lease_expires == before[ids[2]]
            assert pipe.queue and not lock_is_free(store)
        store.flush()
        on_disk = {i: json.loads(store.path(i).read_bytes())["lease_expires"] for i in ids}
        assert all(on_disk[i] > before[i] + 1000 for i in ids[:2]) and on_disk[ids[2]] == before[ids[2]]


def test_the_pipeline_belongs_to_its_store_object_others_see_the_disk(store, tmp_path, monkeypatch):
    """A run's pipeline is attached to the store object it was given, not to the root: another
    store object (another process, or a thread that built its own) reads what is on disk and
    takes the lock like any other process, once the pipeline has written and let go of it."""
    ids = [store.create(f"t{i}").id for i in range(2)]
    monkeypatch.chdir(tmp_path)
    other = TaskStore(".")  # the same root spelled another way
    with store.pipelined():
        store.commit([], [ids[0]], "lead")
        assert store.read(ids[0]).status == Status.in_progress  # the run sees its queued claim at once
        other.update(ids[1], subject="renamed")  # waits for the writer to drain and hand over the lock
        assert other.read(ids[0]).status == Status.in_progress  # by then the claim is on disk
        assert json.loads(store.path(ids[0]).read_bytes())["status"] == "in_progress"
        assert store.read(ids[1]).subject == "renamed"
        assert store.files.pipeline is not None and other.files.pipeline is None
    assert store.files.pipeline is None


def lock_is_free(store: TaskStore) -> bool:
    import fcntl
    import os

    fd = os.open(store.files.lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_pipeline_write_failure_stops_the_next_caller_loudly(store, monkeypatch):
    ids = [store.create(f"t{i}").id for i in range(2)]
    told = []

    def disk_full(files, lines, **kw):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        with store.pipelined(on_error=told.append):
            monkeypatch.setattr(store.files, "write_now", disk_full)
            store.commit([], [ids[0]], "lead")
            wait_until(lambda: told, timeout=10, what="the writer reports its failure")
            assert lock_is_free(store)  # other processes are not locked out by a failed run
            assert store.read(ids[0]).status == Status.pending  # the unwritten claim is not served
            with pytest.raises(OSError, match="No space left"):  # the writer failed in the background
                store.flush()
            with pytest.raises(OSError, match="No space left"):  # and every later caller hears of it
                store.commit([], [ids[1]], "lead")
