"""The task files a process knows (tasks/files.py ``Known``): kept bytes are used only while the file
on disk is the one they came from; whatever changed it (another process's `team task update`, a file
replaced or edited by hand), the next read and the next commit see the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO, run_team

from orchestrator.core.errors import CorruptFile, UnknownRef
from orchestrator.core.fsutil import atomic_write
from orchestrator.core.models import Status
from orchestrator.tasks import files as task_files
from orchestrator.tasks.store import TaskStore


def kept(store: TaskStore, task_id: int) -> bool:
    """This process would use its kept bytes for the task (the file is still the one they came from)."""
    return store.files._known_as_on_disk(store.path(task_id)) is not None


def replace_by_hand(path: Path, old: str, new: str) -> None:
    """Another writer's version of the file: a new file renamed over it (a new inode)."""
    data = path.read_text()
    assert old in data
    tmp = path.with_name(".by-hand")
    tmp.write_text(data.replace(old, new))
    os.replace(tmp, path)


def test_a_commit_sees_what_another_process_changed_since_this_one_wrote(tmp_path):
    store = TaskStore(tmp_path)
    a = store.create("a")
    b = store.create("b", blocked_by=[a.id])
    c = store.create("c")
    with store.pipelined():
        _, (claimed_a, claimed_c) = store.commit([], [a.id, c.id], "lead")
        store.commit([(a.id, claimed_a.epoch, "completed", {})], [], "lead")
        store.flush()  # on disk, the store lock let go: another process may come in
        assert kept(store, a.id) and kept(store, c.id)  # written here: the next reads would use the bytes
        assert store.files.status_of(a.id) == Status.completed
        for args in (("task", "update", str(a.id), "--status", "pending"),
                     ("task", "update", str(c.id), "--status", "cancelled")):
            done = run_team(tmp_path, *args)
            assert done.returncode == 0, done.stderr
        assert not kept(store, a.id) and not kept(store, c.id)
        finished, claimed = store.commit([(c.id, claimed_c.epoch, "completed", {})], [b.id], "lead")
        assert finished == [] and claimed == []  # c's attempt is stale, b's dependency no longer completed
        assert store.read(a.id).status == Status.pending and store.read(c.id).status == Status.cancelled
    assert json.loads(store.path(c.id).read_bytes())["status"] == "cancelled"


def test_a_dependency_check_takes_the_status_of_a_version_queued_here_and_nothing_lingers(tmp_path):
    store = TaskStore(tmp_path)
    a = store.create("a")
    b = store.create("b", blocked_by=[a.id])
    with store.pipelined():
        _, (claimed,) = store.commit([], [a.id], "lead")
        pipe = store.files.pipeline
        assert pipe is not None
        with pipe.cond:  # the writer waits: a's completion stays queued while we look
            store.commit([(a.id, claimed.epoch, "completed", {})], [], "lead")
            queued = pipe.peek(store.path(a.id))
            assert queued is not None and store.files._queued[store.path(a.id).name][0] is queued
            assert store.files.status_of(a.id) == Status.completed
            assert [t.id for t in store.commit([], [b.id], "lead")[1]] == [b.id]
        store.flush()
        assert store.files._queued == {}  # each head went with its bytes to the file's kept entry
        assert kept(store, a.id) and store.files.status_of(a.id) == Status.completed
    assert json.loads(store.path(b.id).read_bytes())["status"] == "in_progress"


def test_a_file_replaced_or_edited_by_hand_is_read_again(tmp_path):
    store = TaskStore(tmp_path)
    a = store.create("a")
    b = store.create("b", blocked_by=[a.id])
    store.update(a.id, status="completed")
    assert kept(store, a.id) and store.files.status_of(a.id) == Status.completed
    # the same size ("completed" and "cancelled" have nine letters): only the inode tells them apart
    size = store.path(a.id).stat().st_size
    replace_by_hand(store.path(a.id), '"status":"completed"', '"status":"cancelled"')
    assert store.path(a.id).stat().st_size == size
    assert store.files.status_of(a.id) == Status.cancelled
    assert store.commit([], [b.id], "lead") == ([], [])
    # edited in place (same inode): its size changed
    path = store.path(a.id)
    with open(path, "r+b") as f:
        f.write(path.read_bytes().replace(b'"status":"cancelled"', b'"status":"completed","result":"by hand"'))
    assert store.read(a.id).result == "by hand"
    assert [t.id for t in store.commit([], [b.id], "lead")[1]] == [b.id]
    # removed: the task is gone, not remembered
    store.path(b.id).unlink()
    try:
        store.files.status_of(b.id)
    except UnknownRef:
        pass
    else:
        raise AssertionError("a removed task file was served from memory")


def test_a_file_holding_another_id_is_refused_from_memory_too(tmp_path):
    store = TaskStore(tmp_path)
    one, _two, three = (store.create(s) for s in ("one", "two", "three"))
    os.replace(store.path(one.id), store.path(three.id))  # a copied/renamed file: holds id 1
    assert store.files.load_file(store.path(three.id)).id == one.id  # read and kept as it is
    for call in (lambda: store.read(three.id), lambda: store.files.status_of(three.id)):
        try:
            call()
        except CorruptFile as e:
            assert f"holds id {one.id}" in str(e)
        else:
            raise AssertionError("a file holding another id was accepted")


CHURN = textwrap.dedent("""
    import sys
    from orchestrator.tasks.store import TaskStore
    store = TaskStore(sys.argv[1])
    for k in range(int(sys.argv[2])):
        store.update(1, subject=f"v{k:05d}")  # the same size each time: a reused inode would look alike
""")


def test_reads_under_the_lock_match_the_file_while_another_process_rewrites_it(tmp_path):
    store = TaskStore(tmp_path)
    store.create("v-----")
    store.create("w", blocked_by=[1])
    child = subprocess.Popen([sys.executable, "-c", CHURN, str(tmp_path), "300"],
                             env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    rounds = 0
    while child.poll() is None or rounds < 50:
        with store.locked():
            on_disk = json.loads(store.path(1).read_bytes())
            task = store.read(1)
            assert (task.subject, task.status.value) == (on_disk["subject"], on_disk["status"])
            assert store.files.status_of(1).value == on_disk["status"]
            if rounds % 7 == 0:  # a version of our own now and then: kept, then replaced by the child's
                status = Status.pending if task.status == Status.completed else Status.completed
                store.files.save(task.model_copy(update={"status": status}), "status", "test", task.status)
                assert kept(store, 1) and store.files.status_of(1) == status
        seen.add(on_disk["subject"])
        rounds += 1
    _, err = child.communicate()
    assert child.returncode == 0, err
    assert len(seen) > 2  # the reads did interleave with the child's writes
    assert store.read(1).subject == "v00299"


def test_what_is_kept_is_bounded_and_a_plans_first_tasks_are_not_pushed_out_by_its_last(tmp_path, monkeypatch):
    monkeypatch.setattr(task_files, "KNOWN_MAX", 5)
    store = TaskStore(tmp_path, durable=False)  # one file after the other (durable: in parallel, any order)
    first = store.reserve(12)
    ids = [t.id for t in store.create_reserved([{"subject": f"t{i}"} for i in range(12)],
                                               list(range(first, first + 12)))]
    known = store.files._known
    assert list(known) == [store.path(i).name for i in ids[:5]]  # kept while there was room
    store.read(ids[0])  # the most recently used now
    store.read(ids[8])  # not kept: read from the file, kept, and the least recently used (ids[1]) dropped
    assert list(known) == [store.path(i).name for i in (ids[2], ids[3], ids[4], ids[0], ids[8])]
    store.create("one more")  # a write of a run drops the least recently used as well
    assert len(known) == 5 and store.path(ids[2]).name not in known
    assert [t.subject for t in store.all()] == [f"t{i}" for i in range(12)] + ["one more"]


def test_atomic_write_and_create_new_return_the_identity_the_file_keeps(tmp_path):
    from orchestrator.core.fsutil import create_new

    for put in (lambda p: atomic_write(p, b"x" * 10), lambda p: create_new(p, b"y" * 7)):
        path = tmp_path / f"f{len(list(tmp_path.iterdir()))}"
        st = put(path)
        assert task_files.ident_of(st) == task_files.ident_of(os.stat(path))


def test_an_edit_in_place_at_the_same_size_with_the_old_mtime_put_back_is_seen(tmp_path):
    store = TaskStore(tmp_path)
    tid = store.create("edited").id
    assert store.read(tid).status.value == "pending"  # kept by this process
    path = store.path(tid)
    before = path.stat()
    raw = path.read_bytes()
    edited = raw.replace(b'"status":"pending"', b'"status":"failed" ')
    assert len(edited) == len(raw) and edited != raw
    with open(path, "r+b") as f:  # same inode, same size
        f.write(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the mtime put back: only the ctime moved
    assert store.read(tid).status.value == "failed"
    assert store.files.status_of(tid).value == "failed"
