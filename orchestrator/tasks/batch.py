"""Batched durable writes of task files and their event lines.

Mixed into ``store.TaskStore`` (``BatchWriter``); ``create_many``, ``update``,
``renew_many`` and ``commit`` write through ``_write_batch``, always under
the store lock.

Cost model: a lone ``atomic_write`` pays two commit waits (file fsync, then
directory fsync) per file. A batch instead fsyncs its temp files in
parallel on a small thread pool (the kernel merges them into one journal
commit), renames each into place, then runs the directory fsync and the
event-log append+fsync side by side: two commit waits per batch, whatever
its size (``_write_files``). Each file is still atomic (temp + rename), so a
reader never sees a torn file, and the call returns once the batch is
durable — except in ``commit`` inside ``pipelined()`` (the run scheduler),
where the batch is queued for the group-commit writer (``store_pipeline``)
and made durable together with its neighbours, off the caller's thread.

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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.fsutil import append_line, atomic_write, fsync_dir
from ..core.jsonutil import dumps
from ..core.models import Task
from ..core.redact import scrub
from .pipeline import Batch, Pipeline, active

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

_APPEND_LOCK = threading.Lock()
"""Event-log appends from this process's threads (the scheduler's claims, the writer's lines) one at a time."""


class BatchWriter:
    """``_write_batch``: many task files and event lines, durable together."""

    @staticmethod
    def _event_lines(records: list[dict[str, Any]]) -> str:
        """Event lines as written: known secrets never reach the log (redact.py)."""
        return scrub("\n".join(dumps(r) for r in records))

    def _append_events(self, lines: str) -> None:
        with _APPEND_LOCK:
            append_line(self.events_path, lines, durable=False)

    def _write_batch(self, tasks: list[Task], records: list[dict[str, Any]] = (),
                     logged_first: list[dict[str, Any]] = (),
                     on_logged: Callable[[], None] | None = None) -> None:
        """Atomic per file, durable as a batch, then the batch's event lines.

        ``logged_first`` lines are appended before any file is written, and
        ``on_logged`` is called right after them (see ``TaskStore.commit``).
        Inside ``commit`` in a pipelined run the files and ``records`` are
        queued for the group-commit writer instead of written here.
        """
        if logged_first:
            self._append_events(self._event_lines(list(logged_first)))
        if on_logged is not None:
            on_logged()
        if not tasks and not records and not logged_first:
            return
        now = self.clock()
        for task in tasks:
            task.updated_at = now
        files = {self.path(t.id): self._serialize(t).encode() for t in tasks}
        lines = self._event_lines(list(records)) if records else ""
        pipe = active(self.key)
        if pipe is not None and pipe.queueing == threading.get_ident():
            pipe.submit(Batch(files, lines, logged=bool(logged_first)))
            return
        self._write_files(files, lines, synced_lines=bool(logged_first))

    def _write_files(self, files: dict[Path, bytes], lines: str, *, synced_lines: bool = True) -> None:
        """Write ``files`` (each atomically), then append ``lines``; durable together on return.

        Temp files are fsynced in parallel and renamed; the event lines are
        appended; then the directory fsync and the event-log fsync run side
        by side: two commit waits, whatever the number of files.
        ``synced_lines``: the event log has lines of this batch to fsync even
        when ``lines`` is empty (the claims appended first).
        """
        if len(files) <= 1 or not self.durable:
            for path, data in files.items():
                atomic_write(path, data, durable=self.durable, sync_dir=False)
        else:
            list(_io_pool().map(lambda pd: atomic_write(pd[0], pd[1], sync_dir=False), files.items()))
        if lines:
            self._append_events(lines)
        if not self.durable:
            return
        log_sync = _io_pool().submit(fsync_dir, self.events_path) if (lines or synced_lines) else None
        if files:
            fsync_dir(self.dir)
        if log_sync is not None:
            log_sync.result()

    @contextmanager
    def pipelined(self, on_error: Callable[[BaseException], None] | None = None) -> Iterator[None]:
        """``commit`` batches made in the block go to a group-commit writer (``store_pipeline``).

        This process then holds the store lock while it has batches not yet
        on disk, and every read in this process sees them at once; the block
        ends once everything is durable. The run scheduler uses it, so it
        never waits for the disk between outcomes and job starts.
        ``on_error(exc)``: called from the writer thread when a write fails.
        """
        with Pipeline.running(self, on_error):
            yield

    def flush(self) -> None:
        """Wait until every batch queued by this process's pipeline is durable."""
        pipe = active(self.key)
        if pipe is not None:
            pipe.flush()
