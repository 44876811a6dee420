"""Group commit for ``team run``: task files made durable off the scheduler's thread.

A ``Pipeline`` is an object the run owns: ``TaskStore.pipelined()`` attaches
one to that store's files for the block (the scheduler's store, which the
run also hands to its teammates), and every section of that store goes
through it. Other ``TaskStore`` objects, in this process or another, see
only what is on disk and wait for the flock like any other process.

With a pipeline attached, the batches that ``TaskStore.commit`` decides are
not written by the thread that decided them. They are queued for one writer thread, which writes every queued
batch as one group (each file as always: temp file, fsync, rename; then
the directory and the event log fsynced once for the group). The
scheduler goes on handling outcomes and starting jobs while the disk
works, so a slow ``fsync`` (0.5 ms on a quiet disk, several ms under
writeback) costs it nothing.

Claims wait. A claim's event line is durable before its job starts
(``TaskStore.commit``), so its task file is held back up to
``CLAIM_DEFER`` (50 ms) for the task's next version: a task claimed and
finished within that time is written once, not twice (a short task's
files were a third of a run's kernel time). Held-back files count as
queued: the flock stays held, a draining section or a hand-over writes
them first, readers in this process see them (``peek``).

Why this is still a compare-and-set store: this process keeps the store
lock (the flock on ``.tasks/.lock``) from the first queued batch until the
writer has renamed and synced everything, so no other process can read
the files as stale and act on them. Within this process every thread goes
through one mutex, and a read sees the queued version of a task first
(``peek``): decided state is visible at once to this process, and to
others once it is on disk.

State (one ``Pipeline`` per ``.tasks`` directory per process)::

    mutex     one thread at a time inside a section of the store
    lock_fd   the store flock; held while a batch is queued or being written, or while pinned
    pins      ``pinned`` blocks under way (a plan's chunk being created outside the mutex)
    overlay   task file name -> bytes of its newest decided version not yet renamed
    queue     batches waiting for the writer; ``busy`` while it writes one group
    deferred  claim files held back for their task's next version (path -> bytes, when due)
    error     the writer's failure, raised to every later caller (the queue and
              overlay are dropped and the lock let go: the run must stop)

Sections (``exclusive``):

* ``drain=False`` (``commit`` and ``renew_many``, the run's heartbeat): no
  waiting for the disk; its batch is queued (``submit``).
* ``drain=True`` (everything else: release, cancel, create, renew, ...):
  waits until the writer is idle, then works on the files directly and
  synchronously, exactly as without a pipeline.

Other processes wait for the flock as usual. It is released whenever
nothing is queued or being written (at the latest ``GROUP_DELAY`` plus one
group's write after the last batch); under back-to-back batches (a chain of
instant tasks) it is handed over (drain, release, a ``YIELD_PAUSE``, take
again) at the first batch after it has been held ``HOLD_MAX`` seconds while
another process is blocked on it (a waiter holds ``.tasks/.lock-waiting``
shared while it blocks: ``fsutil.file_lock(announce=...)``), so ``team task
update`` from another shell typically waits tens of milliseconds. If a
write fails, the queue is dropped and the lock let go at once.

Crash safety: a batch's claims are in the event log before its jobs start
(``TaskStore.commit``); a SIGKILL before the writer renamed its files (a
held-back claim included) leaves those tasks as the last written state
says (in progress or pending), and the next lead re-runs them (``run.runner.materialise``, ``unfiled_claims``).
A power loss can forget the groups written in the last moments; their
tasks run again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..core.fsutil import file_lock, flock_fd, waiters

HOLD_MAX = 0.05
"""Seconds the flock may be held across batches before it is handed to a waiting process."""
YIELD_PAUSE = 0.002
"""How long the pipeline stays off the flock when it hands it over."""
GROUP_DELAY = 0.003
"""Seconds the writer waits after the first queued batch for more to join its group (unless a
caller is waiting for it)."""
CLAIM_DEFER = 0.05
"""Seconds a claim's task file may wait for its task's next version (its completion, mostly): a task
claimed and finished within that time is written once. A claim is durable before that, in the event
log (``WriteBatch.defer``)."""

class CommitTarget(Protocol):
    """What a pipeline writes to: the store's files (``files.TaskFiles``)."""

    lock_path: Path
    waiting_path: Path

    def ensure(self) -> None: ...

    def write_now(self, files: dict[Path, bytes], lines: str, *, synced_lines: bool = True) -> None: ...


@dataclass
class WriteBatch:
    """One decided batch: the task files to write and the event lines to append after them."""

    files: dict[Path, bytes] = field(default_factory=dict)
    lines: str = ""
    logged: bool = False  # claim lines of this batch were appended before it was queued
    defer: frozenset[Path] = frozenset()
    """Files of this batch whose state is already durable in the event log (claims logged first): the
    writer may hold them back ``CLAIM_DEFER`` seconds, and drops one a newer version replaces."""


class Pipeline:
    """See the module docstring. Built and closed by ``TaskFiles.pipelined``."""

    def __init__(self, store: CommitTarget, on_error: Callable[[BaseException], None] | None = None) -> None:
        self.store = store
        self.on_error = on_error
        self.mutex = threading.Lock()
        self.cond = threading.Condition()
        self.overlay: dict[str, bytes] = {}
        self.queue: list[WriteBatch] = []
        self.deferred: dict[Path, tuple[bytes, float]] = {}  # held-back claim files: bytes, when due
        self.busy = False
        self.error: BaseException | None = None
        self.queueing: int | None = None  # thread id of the drain=False section, while inside
        self._lock_fd = -1
        self._held_since = 0.0
        self._waiting_fd = -1  # .lock-waiting, kept open to ask whether someone waits
        self._writer: threading.Thread | None = None
        self._closing = False
        self._closed = False  # after close(): sections fall back to the plain store lock
        self._draining = 0  # threads waiting for the writer to be idle: no group delay then
        self._pins = 0  # ``pinned`` blocks under way: the flock stays held

    # -- lifecycle ---------------------------------------------------------------
    def close(self, reraise: bool = True) -> None:
        """Write everything queued, stop the writer, let go of the flock; re-raise a writer
        error unless ``reraise`` is False (the caller is raising one already)."""
        with self.mutex:
            try:
                self._wait_idle()
            except BaseException as e:
                if reraise or e is not self.error:
                    raise
            finally:
                with self.cond:
                    self._closing = True
                    self.cond.notify_all()
                if self._writer is not None:
                    self._writer.join()
                self._release_flock()
                if self._waiting_fd >= 0:
                    os.close(self._waiting_fd)
                    self._waiting_fd = -1
                self._closed = True
        if reraise:
            self._raise_error()

    # -- sections ------------------------------------------------------------------
    @contextmanager
    def exclusive(self, *, drain: bool) -> Iterator[None]:
        """Hold the store for this thread (see the module docstring)."""
        with self.mutex:
            if self._closed:  # a thread that found the pipeline just before it closed
                with file_lock(self.store.lock_path, announce=self.store.waiting_path):
                    yield
                return
            try:
                self._raise_error()
                if drain:
                    self._wait_idle()
                elif self._lock_fd >= 0 and time.monotonic() - self._held_since > HOLD_MAX:
                    self._hand_over_if_wanted()
                self._take_flock()
                if not drain:
                    self.queueing = threading.get_ident()
                try:
                    yield
                finally:
                    self.queueing = None
            finally:
                with self.cond:
                    if self._idle():
                        self._release_flock()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Hold the store flock for the block, but not the mutex: other processes wait for the store,
        this process's sections go on. For writes no section touches (a plan's chunk of new tasks at
        reserved ids: ``TaskFiles.holding``); the flock is neither let go nor handed over meanwhile."""
        with self.mutex:
            if self._closed:
                raise RuntimeError(f"{self.store.lock_path}: the pipeline is closed")
            self._raise_error()
            self._take_flock()
            with self.cond:
                self._pins += 1
        try:
            yield
        finally:
            with self.mutex, self.cond:
                self._pins -= 1
                if self._idle():
                    self._release_flock()

    def peek(self, path: Path) -> bytes | None:
        """The queued bytes of ``path`` (a file of this ``.tasks``), newer than the file, if any."""
        with self.cond:
            return self.overlay.get(path.name)

    def submit(self, batch: WriteBatch) -> None:
        """Queue a decided batch (inside ``exclusive(drain=False)``, on its thread)."""
        if self.queueing != threading.get_ident():
            raise RuntimeError("Pipeline.submit outside its commit section")
        with self.cond:
            if self._writer is None:  # started before anything is queued: a failed start queues nothing
                writer = threading.Thread(target=self._write_loop, name="team-store-writer", daemon=True)
                writer.start()
                self._writer = writer
            self.overlay.update((path.name, data) for path, data in batch.files.items())
            self.queue.append(batch)
            self.cond.notify_all()

    def flush(self) -> None:
        """Wait until everything queued so far is durable (re-raises a writer error)."""
        with self.mutex:
            self._wait_idle()
            with self.cond:
                self._release_flock()  # idle: nothing left to protect

    # -- the flock --------------------------------------------------------------------
    def _take_flock(self) -> None:
        if self._lock_fd >= 0:
            return
        self.store.ensure()
        fd = os.open(self.store.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            flock_fd(fd, self.store.lock_path, announce=self.store.waiting_path)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd, self._held_since = fd, time.monotonic()
        if self._waiting_fd < 0:
            self._waiting_fd = os.open(self.store.waiting_path, os.O_RDWR | os.O_CREAT, 0o644)

    def _release_flock(self) -> None:
        if self._lock_fd >= 0 and not self._pins:
            fd, self._lock_fd = self._lock_fd, -1
            os.close(fd)  # closing the only descriptor releases the flock

    def _hand_over_if_wanted(self) -> None:
        """Held for ``HOLD_MAX`` across batches: let a waiting process in (mutex held), unless pinned."""
        if self._pins or not self._someone_waits():
            self._held_since = time.monotonic()
            return
        self._wait_idle()
        with self.cond:
            self._release_flock()
        time.sleep(YIELD_PAUSE)

    def _someone_waits(self) -> bool:
        """Another process is blocked on the store lock: it holds ``.lock-waiting`` shared."""
        return waiters(self._waiting_fd)

    # -- the writer -----------------------------------------------------------------------
    def _wait_idle(self) -> None:
        with self.cond:
            self._draining += 1
            self.cond.notify_all()
            try:
                while not self._idle() and self.error is None:
                    self.cond.wait()
            finally:
                self._draining -= 1
        self._raise_error()

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    def _write_loop(self) -> None:
        try:
            while self._write_group():
                pass
        except BaseException as e:  # kept and raised in every later caller: the run stops loudly
            self._fail(e)

    def _idle(self) -> bool:
        """Everything decided is on disk (``cond`` held)."""
        return not self.queue and not self.busy and not self.deferred

    def _write_group(self) -> bool:
        """Take what is queued (after the group delay) and the held-back claims that are due, and write
        them; False once closing and empty."""
        with self.cond:
            while not self.queue:
                if self.deferred and (self._closing or self._draining):
                    break
                if self._closing:
                    return False
                if not self.deferred:
                    self.cond.wait()
                    continue
                due = min(d for _, d in self.deferred.values()) - time.monotonic()
                if due <= 0:
                    break
                self.cond.wait(due)
            if self.queue and GROUP_DELAY and not self._closing and not self._draining:
                self.cond.wait_for(lambda: self._closing or self._draining, GROUP_DELAY)
            group, self.queue = self.queue, []
            self.busy = True
            everything = bool(self._closing or self._draining)
        now = time.monotonic()
        files: dict[Path, bytes] = {}
        for batch in group:
            for path, data in batch.files.items():
                if path in batch.defer and not everything:
                    self.deferred[path] = (data, now + CLAIM_DEFER)  # the newest version waits
                    continue
                self.deferred.pop(path, None)  # replaced by a newer version before it was written
                files[path] = data
        for path, (data, due) in list(self.deferred.items()):
            if everything or due <= now:
                files[path] = data
                del self.deferred[path]
        lines = "\n".join(b.lines for b in group if b.lines)
        if files or lines:
            self.store.write_now(files, lines, synced_lines=any(b.logged for b in group))
        with self.cond:
            for path, data in files.items():
                if self.overlay.get(path.name) is data:
                    del self.overlay[path.name]
            self.busy = False
            self.cond.notify_all()
            self._release_if_idle()
        return True

    def _release_if_idle(self) -> None:
        """Let go of the flock when nothing is queued and no section runs (``cond`` held)."""
        if self._idle() and self.mutex.acquire(blocking=False):
            try:
                self._release_flock()
            finally:
                self.mutex.release()

    def _fail(self, error: BaseException) -> None:
        """A write failed: drop what is queued (its tasks run again after a restart), free the lock."""
        with self.cond:
            self.error = error
            self.queue.clear()
            self.deferred.clear()
            self.overlay.clear()
            self.busy = False
            self.cond.notify_all()
            self._release_if_idle()
        if self.on_error is not None:
            self.on_error(error)
