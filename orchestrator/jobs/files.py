"""Where a job's files come from: its log file and its record, for one ``JobManager``.

Creating a file and renaming one are metadata changes: ~0.1 ms each on a
quiet ext4, more while the journal is busy with the task store's fsyncs,
and a rename over an existing file also starts the new file's writeback.
A job start needs a new log and a record, and its end a second record, so
``team run``'s job server keeps that work off the path from "start this"
to the job running and from its exit to the notification:

* **Spare logs** (``spares=N``): N log files are kept created ahead, each
  ``<id>.log`` opened ``O_EXCL`` under a fresh job id; a start takes one
  (or creates one itself when none is left). Unused spares are removed on
  ``close``. A manager killed with spares left leaves empty logs without a
  record; the next job server deletes those older than ``STALE_AFTER``
  seconds that no running process names as its ``TEAM_JOB_ID``
  (``remove_stale_spares``): a live manager writes a record within
  milliseconds of taking a log, and a dead one's jobs are still running.
* **Deferred records** (``deferred=True``): ``save`` serialises the record
  at once and queues the bytes; they are written in order (temp file +
  rename, no fsync: the task store is the durable truth). A record
  superseded by a newer one of the same job before its turn is not
  written at all (a short job gets one write, its final record).

The owner drives the deferred work: ``pending()`` says there is some and
``work_once()`` does one piece (a record first, else a spare). The
manager's watcher loop (watcher.py, which sees a ``JobFiles`` as its
``DeferredWork``) calls it when nothing else is ready (in the job server
that loop is the whole server), so this work never delays a start or a
notification. Without either option every call writes on the caller's
thread and nothing is ever pending. Safe across threads.

* **Scrubbing logs** (``scrub_log``): a job writes its log itself, so the
  secrets it printed are taken out once it has ended (``Secrets.scrub_file``:
  one read, and a scrubbed copy renamed over the log only when it holds a
  secret). Deferred, this waits for a quiet moment too (after the records,
  before the spares): a 50 MB log takes ~0.2 s to read, which must not delay
  the next start or notification. The tail in the record and the
  notification is scrubbed at once (records.read_tail).

Records are read through ``records.JobRecords``, which writes them through
``save`` here (a ``JobFiles`` is its ``RecordWriter``). ``save`` scrubs the
serialised record of the manager's secrets (a command may quote one).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

from ..core import procs
from ..core.redact import Secrets
from .records import JOB_ENV, JobRecord

STALE_AFTER = 10.0
"""Seconds after which an empty log without a record is a dead manager's spare."""


class JobFiles:
    """Log files and records of one manager's jobs under ``dir`` (see the module docstring)."""

    def __init__(self, dir: Path, *, spares: int = 0, deferred: bool = False, secrets: Secrets | None = None):
        """``secrets``: scrubbed from every record written (a command may quote one)."""
        self.dir = dir
        self.secrets = Secrets() if secrets is None else secrets
        self.spares = spares
        self.deferred = deferred
        self._ready = False
        self._swept = spares == 0  # stale spares of a dead manager removed (only spare users sweep)
        self._spare: deque[tuple[str, int]] = deque()
        self._records: deque[tuple[str, bytes, Callable[[], None] | None]] = deque()
        self._scrubs: deque[Path] = deque()  # logs of ended jobs still to scrub (deferred)
        self._queued: Counter[str] = Counter()  # job id -> records of it in the queue
        self.fill_error: OSError | None = None  # why spares stopped being made, if they did
        self.write_errors: list[str] = []  # deferred records that could not be written
        self._lock = threading.Lock()  # the queues (a threaded manager saves on the caller's thread)

    def _ensure_dir(self) -> None:
        if not self._ready:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._ready = True

    # -- logs --------------------------------------------------------------------
    def _create_log(self) -> tuple[str, int]:
        self._ensure_dir()
        while True:
            job_id = "j" + secrets.token_hex(3)
            try:
                fd = os.open(self.dir / f"{job_id}.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
                return job_id, fd
            except FileExistsError:
                continue

    def new_log(self) -> tuple[str, int]:
        """A fresh job id and its log, open for appending (the caller closes the fd)."""
        with self._lock:
            if self._spare:
                return self._spare.popleft()
        return self._create_log()

    def remove_stale_spares(self) -> int:
        """Delete empty logs that have no record, are older than ``STALE_AFTER`` and belong to no
        running process (a job of a killed lead may not have printed anything yet)."""
        self._ensure_dir()
        now = time.time()
        with os.scandir(self.dir) as it:
            entries = {e.name: e for e in it}
        stale = []
        for name, entry in entries.items():
            if not name.endswith(".log") or f"{name[:-4]}.json" in entries:
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            if st.st_size == 0 and now - st.st_mtime > STALE_AFTER:
                stale.append(entry)
        if stale:
            running = {procs.environ(pid).get(JOB_ENV) for pid in procs.pids()}
            stale = [e for e in stale if e.name[:-4] not in running]
        for entry in stale:
            Path(entry.path).unlink(missing_ok=True)
        return len(stale)

    # -- records -------------------------------------------------------------------
    def save(self, record: JobRecord, then: Callable[[], None] | None = None) -> None:
        """Write ``record`` now, or queue it when deferred; ``then`` runs once it is on disk."""
        data = self.secrets.scrub_bytes(record.model_dump_json(exclude_none=True).encode())
        if not self.deferred:
            self._write(record.id, data)
            if then is not None:
                then()
            return
        with self._lock:
            self._records.append((record.id, data, then))
            self._queued[record.id] += 1

    def _write(self, job_id: str, data: bytes) -> None:
        """Atomic (rename) but not fsync'd: the task store is the durable truth."""
        self._ensure_dir()
        tmp = f"{self.dir}/.{job_id}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, f"{self.dir}/{job_id}.json")

    # -- logs ----------------------------------------------------------------------------
    def scrub_log(self, path: Path) -> None:
        """Take the secrets out of the log of a job that has ended: now, or queued when deferred."""
        if not self.secrets:
            return
        if not self.deferred:
            self._scrub(path)
            return
        with self._lock:
            self._scrubs.append(path)

    def _scrub(self, path: Path) -> None:
        try:
            self.secrets.scrub_file(path)
        except OSError as e:  # e.g. the disk is full: the log keeps what the job wrote
            self.write_errors.append(f"{path.name}: not scrubbed: {e}")

    # -- deferred work ----------------------------------------------------------------
    def pending(self) -> bool:
        """There is deferred work to do (``work_once``)."""
        return bool(self._records) or bool(self._scrubs) or not self._swept or (
            len(self._spare) < self.spares and self.fill_error is None)

    def work_once(self) -> None:
        """Do one piece of deferred work: write the oldest record, else scrub a log, else sweep or
        make a spare."""
        with self._lock:
            entry = self._records.popleft() if self._records else None
            latest = False
            if entry is not None:
                self._queued[entry[0]] -= 1
                latest = not self._queued[entry[0]]  # else a newer record of this job is queued
                if latest:
                    del self._queued[entry[0]]
        if entry is not None:
            job_id, data, then = entry
            try:
                if latest:
                    self._write(job_id, data)
            except OSError as e:  # the job ran and was reported; only its record is missing
                self.write_errors.append(f"{job_id}: {e}")
            if then is not None:
                then()
            return
        with self._lock:
            log = self._scrubs.popleft() if self._scrubs else None
        if log is not None:
            self._scrub(log)
            return
        try:
            if not self._swept:
                self._swept = True
                self.remove_stale_spares()
            elif len(self._spare) < self.spares:
                spare = self._create_log()
                with self._lock:
                    self._spare.append(spare)
        except OSError as e:  # e.g. the disk is full: starts create their logs themselves (and fail there)
            self.fill_error = e

    def close(self) -> None:
        """Write every queued record, scrub every queued log and remove the unused spare logs."""
        while self._records or self._scrubs:
            self.work_once()
        with self._lock:
            spares, self._spare = list(self._spare), deque()
        for job_id, fd in spares:
            os.close(fd)
            (self.dir / f"{job_id}.log").unlink(missing_ok=True)
