"""What a background job leaves on disk: its record, and its completion notice.

``.team/jobs/<id>.json`` holds a ``JobRecord`` (written by ``jobs.JobManager``
with an atomic rename, no fsync: the task store is the durable truth);
``.team/jobs/<id>.log`` holds the job's whole output. When a job ends its
record gets a bounded head+tail of that log (``read_tail``) and the owner
is queued a ``Notification`` carrying the same.

A job's processes carry ``TEAM_JOB_ID=<id>`` (``JOB_ENV``) in their
environment, so ``job_leader_alive`` can tell the job's own leader from an
unrelated process that reused its pid, and ``TEAM_JOB_MANAGER=<pid>:<start
ticks>:<jobs dir>`` (``MANAGER_ENV``), so a job whose manager died before
writing its record is still found, and known to be this root's, and reaped
(``joborphans``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ..core import procs
from ..core.redact import scrub

JobStatus = Literal["running", "completed", "failed", "timeout", "killed", "lost"]
FINAL = frozenset({"completed", "failed", "timeout", "killed", "lost"})
JOB_ENV = "TEAM_JOB_ID"
MANAGER_ENV = "TEAM_JOB_MANAGER"


class JobRecord(BaseModel):
    """``.team/jobs/<id>.json``: one background job."""

    id: str = Field(description="Job id, unique under the root.")
    command: str = Field(description="The command (plain words exec'd directly, else /bin/sh -c).")
    owner: str = Field("lead", description="Who gets the completion notification.")
    pid: int | None = Field(None, description="Pid of the job's main process.")
    pgid: int | None = Field(None, description="Process group (== pid: own session).")
    status: JobStatus = Field("running", description="running|completed|failed|timeout|killed|lost.")
    exit_code: int | None = Field(None, description="Exit status; -N when ended by signal N.")
    started_at: float = Field(description="Unix time the job started.")
    finished_at: float | None = Field(None, description="Unix time the job ended.")
    log: str = Field(description="Full output log, relative to the state root.")
    cwd: str | None = Field(None, description="Working directory of the command.")
    timeout: float | None = Field(None, description="Seconds before the group is killed.")
    task: int | None = Field(None, description="Task this job runs, if any.")
    manager_pid: int = Field(description="Process whose JobManager watches the job.")
    manager_start: int | None = Field(None, description="Manager's /proc start time (pid reuse guard).")
    tail: str | None = Field(None, description="Bounded head+tail of the output, once finished.")


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
    ref: str | None = Field(None, description="The starter's name for this attempt (JobManager.start(ref=...)).")


def job_leader_alive(record: JobRecord) -> bool:
    """The job's main process still runs and is really this job's (not a reused pid)."""
    return procs.alive(record.pid) and procs.has_env(record.pid, JOB_ENV, record.id)


def job_orphaned(record: JobRecord) -> bool:
    """The record says ``running`` but the manager that watched the job is gone."""
    return record.status == "running" and not procs.alive(record.manager_pid, record.manager_start)


def shown_status(record: JobRecord) -> str:
    """``running``, ``orphaned (manager pid N is gone)``, or the final status."""
    if job_orphaned(record):
        return f"orphaned (manager pid {record.manager_pid} is gone)"
    return record.status


def read_tail(path: Path, limit: int) -> str:
    """The whole file if it fits in ``limit`` bytes, else its head and tail;
    known secrets scrubbed (it goes into notifications, records and task results)."""
    return scrub(_read_tail(path, limit))


def _read_tail(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size <= limit:
                return f.read().decode(errors="replace")
            head_n = limit // 4
            head = f.read(head_n)
            f.seek(size - (limit - head_n))
            tail = f.read()
    except FileNotFoundError:
        return ""
    omitted = size - len(head) - len(tail)
    return (
        head.decode(errors="replace")
        + f"\n... [{omitted} bytes omitted; full log: {path.name}] ...\n"
        + tail.decode(errors="replace")
    )
