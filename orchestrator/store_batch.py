"""Batched durable writes of task files and their event lines.

Mixed into ``store.TaskStore`` (``BatchWriter``); ``create_many`` and
``commit`` write through ``_write_batch``, always under the store lock.

Cost model: a lone ``atomic_write`` pays two commit waits (file fsync, then
directory fsync) per file. A batch instead fsyncs its temp files in
parallel on a small thread pool (the kernel merges them into one journal
commit), renames each into place, then runs the directory fsync and the
event-log append+fsync side by side: two commit waits per batch, whatever
its size. Each file is still atomic (temp + rename), so a reader never
sees a torn file, and the call returns only once the batch is durable —
except inside ``pipelined()`` (the run scheduler), where the two final syncs
run in the background and are waited for by the next batch.

``on_logged`` lets a caller act once the batch is decided and its
``logged_first`` event lines are written, before any file of the batch is
(see ``TaskStore.commit``).

The pool is built lazily (no threads at import time) and forgotten in a
forked child, which inherits the object but none of its threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from .fsutil import append_line, atomic_write, dumps, fsync_dir
from .models import Task
from .redact import scrub

_POOL = None


def _io_pool():
    """Threads that fsync a batch of files at once (the kernel merges them into one journal commit)."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="team-fsync")
    return _POOL


def _forget_pool_after_fork() -> None:
    # A forked child inherits the pool object but none of its threads: work
    # submitted to it would wait forever. The child builds its own.
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool_after_fork)


class BatchWriter:
    """``_write_batch``: many task files and event lines, durable together."""

    _pipelined = False
    _pending_syncs: list[Future] = []  # the last pipelined batch's syncs (set per instance)
    _sync_lock = threading.Lock()  # guards _pending_syncs; shared by instances, held for a swap only

    @staticmethod
    def _event_lines(records: list[dict[str, Any]]) -> str:
        """Event lines as written: known secrets never reach the log (redact.py)."""
        return scrub("\n".join(dumps(r) for r in records))

    def _events_batch(self, records: list[dict[str, Any]]) -> None:
        if records:
            append_line(self.events_path, self._event_lines(records), durable=self.durable)

    def _write_batch(self, tasks: list[Task], records: list[dict[str, Any]] = (),
                     logged_first: list[dict[str, Any]] = (),
                     on_logged: Callable[[], None] | None = None) -> None:
        """Atomic per file, durable as a batch, then the batch's event lines.

        Temp files are fsynced in parallel (the kernel merges them into one
        journal commit) and renamed; the event lines are appended; then the
        directory fsync and the event-log fsync run side by side: two commit
        waits per batch, whatever its size (one, when ``pipelined``).

        ``logged_first`` lines are appended before any file is written, and
        ``on_logged`` is called right after them (see ``TaskStore.commit``).
        """
        self.flush()  # the previous pipelined batch is durable before this one is written
        if logged_first:
            append_line(self.events_path, self._event_lines(list(logged_first)), durable=False)
        if on_logged is not None:
            on_logged()
        if not tasks:
            self._events_batch(list(records))
            return
        now = self.clock()
        for task in tasks:
            task.updated_at = now
        payloads = [(self.path(t.id), self._serialize(t)) for t in tasks]
        if len(payloads) == 1 or not self.durable:
            for path, data in payloads:
                atomic_write(path, data, durable=self.durable, sync_dir=False)
        else:
            list(_io_pool().map(lambda pd: atomic_write(pd[0], pd[1], sync_dir=False), payloads))
        if not self.durable:
            self._events_batch(list(records))
            return
        if records:
            append_line(self.events_path, self._event_lines(records), durable=False)
        syncs = [_io_pool().submit(fsync_dir, self.events_path)] if records or logged_first else []
        if self._pipelined:
            syncs.append(_io_pool().submit(fsync_dir, self.dir))
            with self._sync_lock:
                self._pending_syncs = syncs
            return
        fsync_dir(self.dir)
        for f in syncs:
            f.result()

    @contextmanager
    def pipelined(self) -> Iterator[None]:
        """Batches written inside do not wait for their final syncs.

        A batch's temp files are fsynced before they are renamed, as always;
        its directory and event-log fsyncs run in the background, overlapping
        the caller's next steps, and are waited for when the next batch
        starts and when the block ends. A batch is therefore durable once the
        next one is written (or the block has ended); a SIGKILL in between
        loses nothing (the page cache survives the process), and a power loss
        can forget only the last batch, whose tasks then run again.
        The run scheduler uses it: a chain step waits for one journal commit
        instead of two.
        """
        self._pipelined = True
        try:
            yield
        finally:
            self._pipelined = False
            self.flush()

    def flush(self) -> None:
        """Wait until the last pipelined batch is durable (re-raises its sync error)."""
        with self._sync_lock:
            syncs, self._pending_syncs = self._pending_syncs, []
        for f in syncs:
            f.result()
