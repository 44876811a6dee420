"""What a background job leaves on disk: its record, and its completion notice.

``.team/jobs/<id>.json`` holds a ``JobRecord`` (written with an atomic
rename, no fsync: the task store is the durable truth); ``.team/jobs/<id>.log``
holds the job's whole output. When a job ends its record gets a bounded
head+tail of that log, scrubbed of secrets (``read_tail``), and the owner is
queued a ``Notification`` carrying the same. The log itself, which the job
wrote directly, is scrubbed once the job is done with it, and records as
they are written (files.py).

``JobRecords`` is the one way to the records of a jobs directory: ``get``
and ``list`` read them from any process, ``save`` hands a record to a
``RecordWriter`` (``files.JobFiles``: written at once, or deferred off the
start path). The manager and the orphan reaper (``orphans.py``) share one.
Next to a record may lie ``<id>.kill`` (``kill_marker``), left by ``kill``
in another process so the watching manager records ``killed``.

A job's processes carry ``TEAM_JOB_ID=<id>`` (``JOB_ENV``) in their
environment, so ``job_leader_alive`` can tell the job's own leader from an
unrelated process that reused its pid, and ``TEAM_JOB_MANAGER=<pid>:<start
ticks>:<jobs dir>`` (``MANAGER_ENV``), so a job whose manager died before
writing its record is still found, and known to be this root's, and reaped
(``orphans.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from ..core import procs
from ..core.errors import CorruptFile, UnknownRef
from ..core.models import NAME_RE
from ..core.redact import Secrets

JobStatus = Literal["running", "completed", "failed", "timeout", "killed", "lost"]
FINAL = frozenset({"completed", "failed", "timeout", "killed", "lost"})
JOB_ENV = "TEAM_JOB_ID"
MANAGER_ENV = "TEAM_JOB_MANAGER"


class JobRecord(BaseModel):
    """``.team/jobs/<id>.json``: one background job."""

    id: str = Field(description="Job id, unique under the root.")
    command: str = Field(description="The command (plain words exec'd directly, else /bin/sh -c).")
    owner: str = Field(default="lead", description="Who gets the completion notification.")
    pid: int | None = Field(default=None, description="Pid of the job's main process.")
    pgid: int | None = Field(default=None, description="Process group (== pid: own session).")
    status: JobStatus = Field(default="running", description="running|completed|failed|timeout|killed|lost.")
    exit_code: int | None = Field(default=None, description="Exit status; -N when ended by signal N.")
    started_at: float = Field(description="Unix time the job started.")
    finished_at: float | None = Field(default=None, description="Unix time the job ended.")
    log: str = Field(description="Full output log, relative to the state root.")
    cwd: str | None = Field(default=None, description="Working directory of the command.")
    timeout: float | None = Field(default=None, description="Seconds before the group is killed.")
    task: int | None = Field(default=None, description="Task this job runs, if any.")
    manager_pid: int = Field(description="Process whose JobManager watches the job.")
    manager_start: int | None = Field(default=None, description="Manager's /proc start time (pid reuse guard).")
    tail: str | None = Field(default=None, description="Bounded head+tail of the output, once finished.")


class Notification(BaseModel):
    """Queued for ``owner`` when a job ends."""

    job_id: str
    owner: str
    status: str
    exit_code: int | None
    tail: str = Field(description="Bounded head+tail of the output.")
    log: str = Field(description="Full output log, relative to the state root.")
    duration: float
    task: int | None = None
    ref: str | None = Field(default=None, description="The starter's name for this attempt (JobManager.start(ref=...)).")
    forced_after: float | None = Field(default=None, description="Set when the job outlived SIGTERM (a timeout or a "
                                       "kill): it was SIGKILLed this many seconds later (the grace).")


class RecordWriter(Protocol):
    """How records reach the disk (``files.JobFiles``)."""

    def save(self, record: JobRecord, then: Callable[[], None] | None = None) -> None:
        """Write ``record`` (now, or queued); ``then`` runs once it is on disk."""


class JobRecords:
    """The job records under ``dir`` (``.team/jobs``): read from any process, written by ``writer``."""

    def __init__(self, dir: Path, writer: RecordWriter):
        self.dir = dir
        self.writer = writer

    def path(self, job_id: str) -> Path:
        """``<id>.json``; an id that is not a job id is an ``UnknownRef``."""
        if not NAME_RE.match(job_id):
            raise UnknownRef(f"no job {job_id!r}: job ids look like j1a2b3c; see `team jobs`")
        return self.dir / f"{job_id}.json"

    def kill_marker(self, job_id: str) -> Path:
        """``<id>.kill``: left by ``kill`` in another process, so the watching manager records ``killed``."""
        return self.dir / f"{job_id}.kill"

    def exists(self, job_id: str) -> bool:
        """The job has a record on disk."""
        return self.path(job_id).exists()

    def get(self, job_id: str) -> JobRecord:
        """The job's record as on disk."""
        path = self.path(job_id)
        try:
            return JobRecord.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise UnknownRef(f"no job {job_id!r}; see `team jobs` for the list") from None
        except ValidationError as e:
            raise CorruptFile(path, str(e).splitlines()[0]) from None

    def list(self) -> list[JobRecord]:
        """Every record, oldest first."""
        if not self.dir.is_dir():
            return []
        records = []
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                try:
                    records.append(self.get(entry.name[:-5]))
                except UnknownRef:
                    continue  # removed while we listed
        return sorted(records, key=lambda r: (r.started_at, r.id))

    def save(self, record: JobRecord, then: Callable[[], None] | None = None) -> None:
        """Atomic (rename) but not fsync'd: the task store is the durable truth. ``then`` runs once
        it is on disk (at once, unless the writer defers records)."""
        self.writer.save(record, then)


def job_leader_alive(record: JobRecord) -> bool:
    """The job's main process still runs and is really this job's (not a reused pid)."""
    return record.pid is not None and procs.alive(record.pid) and procs.has_env(record.pid, JOB_ENV, record.id)


def job_orphaned(record: JobRecord) -> bool:
    """The record says ``running`` but the manager that watched the job is gone."""
    return record.status == "running" and not procs.alive(record.manager_pid, record.manager_start)


def shown_status(record: JobRecord) -> str:
    """``running``, ``orphaned (manager pid N is gone)``, or the final status."""
    if job_orphaned(record):
        return f"orphaned (manager pid {record.manager_pid} is gone)"
    return record.status


def read_tail(path: Path, limit: int, secrets: Secrets, size: int | None = None) -> str:
    """The whole file if it fits in ``limit`` bytes, else its head and tail;
    ``secrets`` scrubbed (it goes into notifications, records and task results).
    ``size``: the file's size, when the caller knows it (the manager, from the
    job's own log fd): an empty log is not opened at all."""
    if size == 0:
        return ""
    return secrets.scrub(_read_tail(path, limit))


def _read_tail(path: Path, limit: int) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    try:
        size = os.fstat(fd).st_size
        if size <= limit:
            return _read_all(fd).decode(errors="replace")
        head_n = limit // 4
        head = os.pread(fd, head_n, 0)
        tail = os.pread(fd, limit - head_n, size - (limit - head_n))
    finally:
        os.close(fd)
    omitted = size - len(head) - len(tail)
    return (
        head.decode(errors="replace")
        + f"\n... [{omitted} bytes omitted; full log: {path.name}] ...\n"
        + tail.decode(errors="replace")
    )


def _read_all(fd: int) -> bytes:
    """Read ``fd`` to its end (a log may still grow while we read: what is there now)."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
