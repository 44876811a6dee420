"""Jobs this manager does not watch: killed from another process, or orphaned.

Mixed into ``jobs.JobManager`` (``UnwatchedJobs``), whose ``get``, ``list``
and ``_save`` it uses.

* Crash safety: like ``make``, a SIGKILLed manager's jobs run on to their
  end by default; ``reap_orphans`` (run by every restarted lead) finds
  records still ``running`` whose manager is gone, kills what is left of
  their group and marks them ``lost``; ``team doctor --fix`` calls it too.
  Until then ``jobrecords.job_orphaned`` tells such records apart (``team
  jobs`` shows ``orphaned``), and a job with a timeout still dies on time
  (the ``timeout`` wrapper, see manager.py). A manager is identified by pid +
  ``/proc`` start time, a job's processes by the ``TEAM_JOB_ID`` variable
  they inherit (core/procs.py), never by a bare pid that may have been reused.
  A job whose manager died before writing its first record (the job server
  writes records off its start path, ``jobfiles``) has no record to find:
  its processes are found by ``TEAM_JOB_ID`` and ``TEAM_JOB_MANAGER``
  (naming a dead manager and this root's jobs directory), each checked
  again just before it is killed, with their groups; the job is recorded
  ``lost`` (``unrecorded_orphans`` lists them for ``team doctor``). (A
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
from dataclasses import dataclass, field

from ..core import procs
from ..core.fsutil import file_lock
from ..core.models import NAME_RE
from .records import JOB_ENV, MANAGER_ENV, JobRecord, job_leader_alive, read_tail


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


class UnwatchedJobs:
    """Kill and reap jobs whose manager is another process, alive or dead."""

    def _kill_unwatched(self, job_id: str, record: JobRecord) -> JobRecord:
        """``kill`` for a running job this manager does not watch."""
        if not procs.alive(record.manager_pid, record.manager_start):
            return self._finalise_orphan(record, "killed")
        (self.dir / f"{job_id}.kill").touch()  # tells the watching manager why it died
        if job_leader_alive(record):
            procs.killpg(record.pgid, signal.SIGTERM)
            if not self._wait_final(job_id, self.grace) and job_leader_alive(record):
                procs.killpg(record.pgid, signal.SIGKILL)
        if self._wait_final(job_id, self.grace + 1.0):
            return self.get(job_id)
        # Nobody finalised it: the manager is gone. Do it ourselves.
        return self._finalise_orphan(record, "killed")

    def _wait_final(self, job_id: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.get(job_id).status == "running":
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def unrecorded_orphans(self) -> list[Unrecorded]:
        """Live processes of jobs of this root that have no record and a dead manager (reported, not killed)."""
        here = str(self.dir.absolute())
        found: dict[str, Unrecorded] = {}
        for pid in procs.pids():
            env = procs.environ(pid)
            job_id, manager = env.get(JOB_ENV), parse_manager(env.get(MANAGER_ENV, ""))
            if not job_id or not NAME_RE.match(job_id) or manager is None or manager[2] != here:
                continue  # not a job, or a job of another root
            mpid, ticks, _ = manager
            st = procs.stat(pid)
            if st is None or st[0] in ("Z", "X") or procs.alive(mpid, ticks):
                continue  # gone, or its manager runs (and writes its record)
            if job_id not in found:
                if (self.dir / f"{job_id}.json").exists():
                    continue  # recorded: reap_orphans' record pass handles it
                found[job_id] = Unrecorded(job_id, mpid, ticks)
            found[job_id].pids.append((pid, st[1], st[2]))
        return list(found.values())

    def _reap_unrecorded(self) -> list[JobRecord]:
        lost = []
        for orphan in self.unrecorded_orphans():
            with file_lock(self.dir / ".lock"):
                if (self.dir / f"{orphan.job_id}.json").exists():
                    continue  # recorded meanwhile: the record pass handles it
                leader = next((pid for pid, pgrp, _ in orphan.pids if pid == pgrp), min(orphan.pids)[0])
                command = procs.cmdline(leader) or "?"
                _kill_job(orphan)
                log = self.dir / f"{orphan.job_id}.log"
                record = JobRecord(
                    id=orphan.job_id, command=command, owner="?", pid=leader, pgid=leader, status="lost",
                    started_at=self.clock(), finished_at=self.clock(), log=str(log.relative_to(self.root)),
                    manager_pid=orphan.manager_pid, manager_start=orphan.manager_start,
                    tail=read_tail(log, self.tail_bytes))
                self._save(record)
                lost.append(record)
        return lost

    def _finalise_orphan(self, record: JobRecord, status: str) -> JobRecord:
        """Kill what is left of an unwatched job's group and write its final record."""
        with file_lock(self.dir / ".lock"):
            current = self.get(record.id)
            if current.status != "running":
                return current
            if job_leader_alive(current):
                procs.killpg(current.pgid, signal.SIGKILL)
            for pid in procs.group_members(current.pgid, JOB_ENV, current.id):
                procs.kill(pid, signal.SIGKILL)
            current.status = status
            current.finished_at = self.clock()
            current.tail = read_tail(self.root / current.log, self.tail_bytes)
            self._save(current)
            return current

    def reap_orphans(self) -> list[JobRecord]:
        """Mark ``lost`` every running job whose manager process is dead, killing its leftovers.

        Also jobs of this root that have no record yet (their manager died
        between the start and the record): found by their ``TEAM_JOB_ID`` and
        ``TEAM_JOB_MANAGER`` variables, killed, and given a ``lost`` record.
        """
        lost = self._reap_unrecorded()
        for record in self.list():
            if record.status != "running":
                continue
            if record.manager_pid == self._pid and record.manager_start == self._pid_start:
                continue
            if procs.alive(record.manager_pid, record.manager_start):
                continue
            final = self._finalise_orphan(record, "lost")
            if final.status == "lost":
                lost.append(final)
        return lost
