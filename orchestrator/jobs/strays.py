"""What a job leaves behind when it ends: killed, however it got away.

A job runs in its own session, and when its main process exits the watcher
SIGKILLs whatever is left in its process group (spawn.py). A process that
left the group -- ``setsid cmd &``, a daemon that double-forks -- is not in
it, and used to outlive its task and the run. Two ways to find it, both by
what the job's processes carry (``TEAM_JOB_ID``, records.py):

* ``Strays`` (the job server): the server is a *subreaper*
  (``PR_SET_CHILD_SUBREAPER``), so every descendant of its jobs that is
  orphaned is reparented to it rather than to init. When a job's leader is
  reaped, its orphaned children already are the server's (the kernel
  reparents before the exit is reported), and ``sweep`` reads the server's
  children (one small ``/proc`` read: the cost on the path of every job's
  end): any child that is not the leader of a running job is a *stray*.
  Only two threads can have children, so only theirs are read (no listing
  of ``/proc/self/task``): the loop's, which spawned the leaders, and the
  main thread, to which the kernel reparents orphans (a subreaper's first
  live thread, ``find_alive_thread``); in the job server they are one.
  Each stray gets a pidfd in the watcher's loop; one that belongs to a job
  that has ended (by its ``TEAM_JOB_ID``) is SIGKILLed with its group. When
  a stray dies it is reaped and the sweep runs again, since its own
  children have just been reparented to the server; so a whole escaped tree
  is taken down, level by level, however deep. Strays of a job that still
  runs are left alone until it ends; a stray without a marker (its
  environment wiped, ``env -i``) cannot be told apart and is killed when the
  server stops. Zombies among the children are reaped at once.
  ``stop_all`` (the server shutting down, or its lead gone) kills every
  stray; the server exits only once none is left.
* ``procs.kill_marked`` (an in-process ``JobManager``, which does not make
  the lead a subreaper: it would then inherit, and have to reap, every
  orphan of every subprocess it runs): when a job ends, every process still
  carrying its ``TEAM_JOB_ID`` is SIGKILLed (a scan of ``/proc``, a few ms,
  after the job's notification went out).

Either way, what a job left behind dies with the job, and a lead that is
SIGKILLed takes them with it through its job server (server.py), or,
without one, the next lead's ``reap_orphans`` kills them (orphans.py).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Container
from typing import Protocol

from ..core import procs
from .records import JOB_ENV


class FdLoop(Protocol):
    """The loop the strays' pidfds wait in (``watcher.Watcher``)."""

    def add_fd(self, fd: int, on_readable: Callable[[], bool]) -> None: ...

    def remove_fd(self, fd: int) -> None: ...


Running = Callable[[], tuple[Container[int], Container[str]]]
"""The owner's running jobs: (pids of their unreaped leaders, their ids)."""


class Strays:
    """The escaped processes of one subreaper's jobs (see the module docstring). Loop thread only."""

    def __init__(self, loop: FdLoop, running: Running):
        self.loop = loop
        self.running = running
        self.enabled = procs.become_subreaper()
        self._tracked: dict[int, tuple[int, str | None]] = {}  # pid -> (pidfd, job id or None)
        self._stopping = False
        self._pid = os.getpid()
        self._parents = {self._pid, threading.get_native_id()}  # main and loop threads (built on the loop's)

    @property
    def alive(self) -> bool:
        """Some stray is still tracked (the server waits for them before it exits)."""
        return bool(self._tracked)

    def sweep(self) -> None:
        """Find the strays among this process's children; kill those whose job has ended (all of
        them once stopping). Called when a job's leader was reaped and when a stray died."""
        if not self.enabled:
            return
        leaders, running = self.running()
        for pid in procs.children(self._pid, tids=self._parents):
            if pid in leaders:
                continue
            entry = self._tracked.get(pid) or self._track(pid)
            if entry is None:
                continue
            job_id = entry[1]
            if self._stopping or (job_id is not None and job_id not in running):
                _kill(pid)

    def stop_all(self) -> None:
        """From now on every stray is killed, marked or not (the server is stopping)."""
        self._stopping = True
        self.sweep()

    def _track(self, pid: int) -> tuple[int, str | None] | None:
        st = procs.stat(pid)
        if st is None:
            return None
        if st[0] in ("Z", "X"):  # already dead: reap it (what it left was reparented to us too)
            _reap(pid)
            return None
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return None  # gone meanwhile
        entry = (fd, procs.environ(pid).get(JOB_ENV))
        self._tracked[pid] = entry
        self.loop.add_fd(fd, lambda: self._ended(pid))
        return entry

    def _ended(self, pid: int) -> bool:
        """A stray's pidfd turned readable: it exited. Reap it; what it left is ours now."""
        fd, _ = self._tracked.pop(pid)
        self.loop.remove_fd(fd)
        os.close(fd)  # (out of the loop first: a new pidfd may get its number in the sweep below)
        _reap(pid)
        self.sweep()
        return True  # already out of the loop


def _kill(pid: int) -> None:
    """SIGKILL a stray (our unreaped child: its pid cannot have been reused) and its group if it leads one."""
    st = procs.stat(pid)
    if st is not None and st[1] == pid:
        procs.killpg(pid, signal.SIGKILL)
    procs.kill(pid, signal.SIGKILL)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # reaped already
