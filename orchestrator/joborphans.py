"""Jobs this manager does not watch: killed from another process, or orphaned.

Mixed into ``jobs.JobManager`` (``UnwatchedJobs``), whose ``get``, ``list``
and ``_save`` it uses.

* Crash safety: like ``make``, a SIGKILLed manager's jobs run on to their
  end by default; ``reap_orphans`` (run by every restarted lead) finds
  records still ``running`` whose manager is gone, kills what is left of
  their group and marks them ``lost``; ``team doctor --fix`` calls it too.
  Until then ``jobrecords.job_orphaned`` tells such records apart (``team
  jobs`` shows ``orphaned``), and a job with a timeout still dies on time
  (the ``timeout`` wrapper, see jobs.py). A manager is identified by pid +
  ``/proc`` start time, a job's processes by the ``TEAM_JOB_ID`` variable
  they inherit (procs.py), never by a bare pid that may have been reused.
  A job whose manager died before writing its first record (the job server
  writes records off its start path, ``jobfiles``) has no record to find:
  its processes are found by ``TEAM_JOB_ID`` (with a log under this root)
  and ``TEAM_JOB_MANAGER`` (naming a dead manager), killed, and recorded
  ``lost``. (A command that wipes its environment, ``env -i``, cannot be
  found either way.)
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

from . import procs
from .fsutil import file_lock
from .jobrecords import JOB_ENV, MANAGER_ENV, JobRecord, job_leader_alive, read_tail
from .models import NAME_RE


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

    def _reap_unrecorded(self) -> list[JobRecord]:
        found: dict[str, list[tuple[int, dict[str, str]]]] = {}
        for pid in procs.pids():
            env = procs.environ(pid)
            job_id, manager = env.get(JOB_ENV), env.get(MANAGER_ENV, "")
            if job_id is None or not NAME_RE.match(job_id) or not (self.dir / f"{job_id}.log").exists():
                continue  # not a job, or a job of another root
            mpid, _, ticks = manager.partition(":")
            if mpid.isdigit() and procs.alive(int(mpid), int(ticks) if ticks.isdigit() else None):
                continue  # its manager runs: it writes the record
            found.setdefault(job_id, []).append((pid, env))
        lost = []
        for job_id, members in found.items():
            with file_lock(self.dir / ".lock"):
                if (self.dir / f"{job_id}.json").exists():
                    continue  # recorded meanwhile: the record pass handles it
                states = {pid: procs.stat(pid) for pid, _ in members}
                for pid, _ in members:
                    procs.kill(pid, signal.SIGKILL)
                leader = next((pid for pid, st in states.items() if st and st[1] == pid), min(states))
                mpid, _, ticks = members[0][1].get(MANAGER_ENV, "").partition(":")
                record = JobRecord(
                    id=job_id, command=procs.cmdline(leader) or "?", owner="?", pid=leader, pgid=leader,
                    status="lost", started_at=self.clock(), finished_at=self.clock(),
                    log=str((self.dir / f"{job_id}.log").relative_to(self.root)),
                    manager_pid=int(mpid) if mpid.isdigit() else 0,
                    manager_start=int(ticks) if ticks.isdigit() else None,
                    tail=read_tail(self.dir / f"{job_id}.log", self.tail_bytes))
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
