"""Jobs this manager does not watch: killed from another process, or orphaned.

``OrphanReaper`` works from the records on disk (``records.JobRecords``,
shared with its ``JobManager``) and from ``/proc``; it holds no job of its
own, so it can run in any process (``team jobs kill``, ``team doctor``,
a restarted lead). The manager hands it what it does not watch:
``JobManager.kill`` of a job it does not run (``kill``), ``reap_orphans``
(``reap``) and ``unrecorded_orphans`` (``unrecorded``).

* Crash safety: like ``make``, a SIGKILLed manager's jobs run on to their
  end by default; ``reap`` (run by every restarted lead) finds
  records still ``running`` whose manager is gone, kills what is left of
  their group and marks them ``lost``; ``team doctor --fix`` calls it too.
  Until then ``records.job_orphaned`` tells such records apart (``team
  jobs`` shows ``orphaned``), and a job with a timeout still dies on time
  (the ``timeout`` wrapper, see manager.py). A manager is identified by pid +
  ``/proc`` start time, a job's processes by the ``TEAM_JOB_ID`` variable
  they inherit (core/procs.py), never by a bare pid that may have been reused.
  Finalising kills, with the group, every process still carrying the job's
  ``TEAM_JOB_ID`` (what left the group: ``setsid``, daemons).
  A job whose manager died before writing its first record (the job server
  writes records off its start path, ``files.py``) has no record to find:
  its processes are found by ``TEAM_JOB_ID`` and ``TEAM_JOB_MANAGER``
  (naming a dead manager and this root's jobs directory), each checked
  again just before it is killed, with their groups; the job is recorded
  ``lost`` (``unrecorded`` lists them for ``team doctor``). (A
  command that wipes its environment, ``env -i``, cannot be found either
  way.)
* ``kill`` of a job another live manager watches leaves a ``<id>.kill``
  marker (so that manager records ``killed``), signals the group
  (TERM, grace, KILL) and waits for the final record; if nobody writes it,
  the manager is gone and the job is finalised here.
* Finalising an orphan runs under ``.team/jobs/.lock`` and re-reads the
  record first, so two processes never both finalise one job.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core import procs
from ..core.fsutil import file_lock
from ..core.models import NAME_RE
from ..core.redact import Secrets
from .records import (
    JOB_ENV,
    MANAGER_ENV,
    JobRecord,
    JobRecords,
    JobStatus,
    job_leader_alive,
    read_tail,
)


def parse_manager(value: str) -> tuple[int, int | None, str] | None:
    """``MANAGER_ENV``'s ``<pid>:<start ticks>:<jobs dir>`` -> its parts (None if malformed)."""
    pid, _, rest = value.partition(":")
    ticks, _, jobs_dir = rest.partition(":")
    if not pid.isdigit() or not jobs_dir:
        return None
    return int(pid), int(ticks) if ticks.isdigit() else None, jobs_dir


@dataclass
class Unrecorded:
    """A job with live processes, no record, and a dead manager."""

    job_id: str
    manager_pid: int
    manager_start: int | None
    pids: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, process group, start ticks)


def _kill_job(orphan: Unrecorded) -> None:
    """SIGKILL the job's processes, each checked again to still be this job's (no reused pid),
    their groups, and whatever of the job is found alive afterwards."""
    def ours(pid: int, ticks: int | None = None) -> bool:
        return procs.alive(pid, ticks) and procs.has_env(pid, JOB_ENV, orphan.job_id)

    for pid, pgrp, ticks in orphan.pids:
        if ours(pid, ticks):
            procs.killpg(pid, signal.SIGKILL) if pid == pgrp else procs.kill(pid, signal.SIGKILL)
    for pgrp in {pgrp for _, pgrp, _ in orphan.pids}:
        for pid in procs.group_members(pgrp, JOB_ENV, orphan.job_id):
            procs.kill(pid, signal.SIGKILL)
    for pid in procs.pids():  # children started after the scan, in a group of their own
        if ours(pid):
            procs.kill(pid, signal.SIGKILL)


class OrphanReaper:
    """Kill and finalise jobs whose manager is another process, alive or dead (see the module docstring).

    ``records``: the jobs directory's records; ``root``: the state root
    (record ``log`` paths are relative to it); ``manager``: the ``(pid, start
    ticks)`` of the manager this reaper serves, whose own jobs are never
    orphans; ``grace``: seconds between SIGTERM and SIGKILL; ``tail_bytes``
    and ``clock`` as for the final records the manager writes.
    """

    def __init__(self, records: JobRecords, *, root: Path, manager: tuple[int, int | None], grace: float,
                 tail_bytes: int, clock: Callable[[], float], secrets: Secrets):
        self.records = records
        self.root = root
        self.manager = manager
        self.grace = grace
        self.tail_bytes = tail_bytes
        self.secrets = secrets
        self.clock = clock

    def kill(self, record: JobRecord) -> JobRecord:
        """Kill a running job this manager does not watch; its final record."""
        if not procs.alive(record.manager_pid, record.manager_start):
            return self._finalise(record, "killed")
        self.records.kill_marker(record.id).touch()  # tells the watching manager why it died
        if record.pgid is not None and job_leader_alive(record):
            procs.killpg(record.pgid, signal.SIGTERM)
            if not self._wait_final(record.id, self.grace) and job_leader_alive(record):
                procs.killpg(record.pgid, signal.SIGKILL)
        if self._wait_final(record.id, self.grace + 1.0):
            return self.records.get(record.id)
        # Nobody finalised it: the manager is gone. Do it ourselves.
        return self._finalise(record, "killed")

    def _wait_final(self, job_id: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.records.get(job_id).status == "running":
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def unrecorded(self, mine: bool = False) -> list[Unrecorded]:
        """Live processes of jobs of this root that have no record and a dead manager (reported, not
        killed); ``mine``: also those whose manager is the one this reaper serves (its job server died)."""
        here = str(self.records.dir.absolute())
        found: dict[str, Unrecorded] = {}
        for pid in procs.pids():
            env = procs.environ(pid)
            job_id, manager = env.get(JOB_ENV), parse_manager(env.get(MANAGER_ENV, ""))
            if not job_id or not NAME_RE.match(job_id) or manager is None or manager[2] != here:
                continue  # not a job, or a job of another root
            mpid, ticks, _ = manager
            st = procs.stat(pid)
            if st is None or st[0] in ("Z", "X") or (procs.alive(mpid, ticks)
                                                     and not (mine and (mpid, ticks) == self.manager)):
                continue  # gone, or its manager runs (and writes its record)
            if job_id not in found:
                if self.records.exists(job_id):
                    continue  # recorded: reap's record pass handles it
                found[job_id] = Unrecorded(job_id, mpid, ticks)
            found[job_id].pids.append((pid, st[1], st[2]))
        return list(found.values())

    def _reap_unrecorded(self, mine: bool) -> list[JobRecord]:
        lost = []
        for orphan in self.unrecorded(mine):
            with file_lock(self.records.dir / ".lock"):
                if self.records.exists(orphan.job_id):
                    continue  # recorded meanwhile: the record pass handles it
                leader = next((pid for pid, pgrp, _ in orphan.pids if pid == pgrp), min(orphan.pids)[0])
                command = procs.cmdline(leader) or "?"
                _kill_job(orphan)
                log = self.records.dir / f"{orphan.job_id}.log"
                self.secrets.scrub_file(log)  # its job is dead: nothing writes the log any more
                record = JobRecord(
                    id=orphan.job_id, command=command, owner="?", pid=leader, pgid=leader, status="lost",
                    started_at=self.clock(), finished_at=self.clock(), log=str(log.relative_to(self.root)),
                    manager_pid=orphan.manager_pid, manager_start=orphan.manager_start,
                    tail=read_tail(log, self.tail_bytes, self.secrets))
                self.records.save(record)
                lost.append(record)
        return lost

    def _finalise(self, record: JobRecord, status: JobStatus) -> JobRecord:
        """Kill what is left of an unwatched job's group and write its final record."""
        with file_lock(self.records.dir / ".lock"):
            current = self.records.get(record.id)
            if current.status != "running":
                return current
            if current.pgid is not None:
                if job_leader_alive(current):
                    procs.killpg(current.pgid, signal.SIGKILL)
                for pid in procs.group_members(current.pgid, JOB_ENV, current.id):
                    procs.kill(pid, signal.SIGKILL)
            procs.kill_marked(JOB_ENV, current.id)  # what left its group (setsid, daemons)
            current.status = status
            current.finished_at = self.clock()
            self.secrets.scrub_file(self.root / current.log)  # its job is dead: nothing writes the log any more
            current.tail = read_tail(self.root / current.log, self.tail_bytes, self.secrets)
            self.records.save(current)
            return current

    def reap(self, mine: bool = False) -> list[JobRecord]:
        """Mark ``lost`` every running job whose manager process is dead, killing its leftovers.

        Also jobs of this root that have no record yet (their manager died
        between the start and the record): found by their ``TEAM_JOB_ID`` and
        ``TEAM_JOB_MANAGER`` variables, killed, and given a ``lost`` record.
        ``mine``: also the jobs recorded with this reaper's own manager (a lead
        whose job server died: nobody watches them any more).
        """
        lost = self._reap_unrecorded(mine)
        for record in self.records.list():
            if record.status != "running":
                continue
            if (record.manager_pid, record.manager_start) == self.manager:
                if mine:
                    final = self._finalise(record, "lost")
                    if final.status == "lost":
                        lost.append(final)
                continue
            if procs.alive(record.manager_pid, record.manager_start):
                continue
            final = self._finalise(record, "lost")
            if final.status == "lost":
                lost.append(final)
        return lost
