"""The watcher of a ``JobManager``: one epoll loop over job exits, timeouts and deferred file work.

``Watcher`` owns the loop and everything only the loop needs: the epoll,
the wake-up pipe, the table of exit fds (``spawn.WatchedJob.exit_fd``), the
jobs with a deadline, and the fds ``serve`` adds. Its owner (the manager)
hands it jobs with ``watch(job, timeout)`` and asks for a kill with
``terminate(job, reason)``; the watcher reports each job that ended
through the ``on_exit(job, exit code)`` callback it was built with, once
the job's leftovers are killed and its leader reaped
(``WatchedJob.reap``). Deferred file work comes from a ``DeferredWork``
(``files.JobFiles``).

* Threaded (the default): the first ``watch`` opens the epoll and starts
  one watcher thread; watches from any thread wake it through a pipe when
  they add a deadline or deferred file work. If that thread dies of an
  exception (a bug), its owner hears it (``on_crash``: ``team run`` stops)
  and every later ``watch`` raises that ``ThreadDied`` instead of starting
  a job nobody would report.
* ``serve(fd, on_readable, busy)``: the loop runs on the caller's thread
  with one more fd in it — the job server's request pipe — so that process
  is a single thread: requests, exits and timeouts are handled as they
  come. It ends once ``on_readable`` has returned False and ``busy()``
  does (the manager: no job left whose final record is not yet written).

Each turn, in order of priority: exits and readable fds, then due
timeouts (SIGTERM the group, SIGKILL after the grace; ``terminate`` asks
for the same without waiting), then one piece of deferred file work
(``work_once``) if nothing was ready and no job started within
``QUIET_AFTER_START``.

Threads: the loop's tables are touched by the loop alone, except two
hand-offs that take no lock on the start path: ``watch`` sets the job's
exit fd entry before registering the fd (so its event finds it; only the
loop removes entries), and a job given a deadline from another thread is
appended to a deque (thread-safe) the loop drains each turn.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from ..core import threads
from ..core.errors import TeamError, ThreadDied
from ..core.threads import Crash
from .records import JobStatus
from .spawn import WatchedJob

MAX_WAIT = 3600.0
"""The loop never asks epoll to wait longer than this (it wakes and looks again): a deadline
however far (or absurd) cannot overflow ``epoll.poll``."""
QUIET_AFTER_START = 0.001
"""Seconds after a start before deferred file work (``files.py``) may run: a job that ends at
once is reported first, and its first record is then superseded by its final one."""


class DeferredWork(Protocol):
    """File work that waits for the loop's quiet moments (``files.JobFiles``)."""

    def pending(self) -> bool:
        """There is work to do."""

    def work_once(self) -> None:
        """Do one piece of it."""


class Watcher:
    """The loop (see the module docstring).

    ``on_exit(job, code)``: called on the loop's thread for each job that
    ended, with its exit code (``-N`` for death by signal N); it must not
    block. ``grace``: seconds between SIGTERM and SIGKILL.
    """

    def __init__(self, *, on_exit: Callable[[WatchedJob, int], None], work: DeferredWork, grace: float,
                 on_crash: Crash | None = None):
        """``on_crash``: told if the watcher thread dies of an exception (core/threads.py); from
        then on ``watch`` refuses new jobs with that error rather than leave them unwatched."""
        self.on_exit = on_exit
        self.work = work
        self.grace = grace
        self.on_crash = on_crash
        self.dead: ThreadDied | None = None  # why the watcher thread died, if it did
        self._epoll: select.epoll | None = None
        self._wake_r = self._wake_w = -1
        self._open_lock = threading.Lock()  # the first watch opens the epoll, once
        self._serving = False  # serve() runs the loop on the caller's thread
        self._by_fd: dict[int, WatchedJob] = {}  # exit fd -> job, until it exits
        self._timing: deque[WatchedJob] = deque()  # jobs given a deadline, for the loop to take
        self._timed: dict[str, WatchedJob] = {}  # job id -> job with a deadline (the loop's own)
        self._handlers: dict[int, Callable[[], bool]] = {}  # serve(): fd -> on_readable
        self._quiet_until = 0.0  # no deferred file work before then (a job just started may end at once)

    # -- what the owner calls -------------------------------------------------------
    def watch(self, job: WatchedJob, timeout: float | None) -> None:
        """Watch ``job``'s exit fd; with a ``timeout``, terminate it after that many seconds."""
        self.check()
        now = time.monotonic()
        self._quiet_until = now + QUIET_AFTER_START
        if timeout is not None:
            job.deadline = job.expires = now + timeout
            self._timing.append(job)
        self._by_fd[job.exit_fd] = job
        epoll = self._epoll or self._open()
        epoll.register(job.exit_fd, select.EPOLLIN)
        if (timeout is not None or self.work.pending()) and not self._serving:
            self._wake()  # a new deadline, or deferred file work for the watcher thread

    def check(self) -> None:
        """Raise ``ThreadDied`` if the watcher thread died: a job started now would never be reported."""
        if self.dead is not None:
            raise ThreadDied(self.dead.thread, self.dead.error)

    def terminate(self, job: WatchedJob, reason: JobStatus) -> None:
        """SIGTERM the job's group now and SIGKILL it after the grace (the loop does); no waiting.

        ``reason`` is the status the job is recorded with unless it has one already."""
        self._escalate(job, reason)
        self._timing.append(job)
        if not self._serving and self._epoll is not None:
            self._wake()

    def serve(self, fd: int, on_readable: Callable[[], bool], busy: Callable[[], bool]) -> None:
        """Run the loop on this thread with ``fd`` in it, until ``on_readable`` and ``busy`` return False.

        ``on_readable()`` is called whenever ``fd`` is readable (it may
        ``watch`` and ``terminate`` jobs); once it returns False the fd
        leaves the loop, which ends as soon as ``busy()`` is False.
        """
        self._serving = True
        epoll = self._epoll or self._open()
        epoll.register(fd, select.EPOLLIN)
        self._handlers[fd] = on_readable
        self._loop(epoll, busy)

    def add_fd(self, fd: int, on_readable: Callable[[], bool]) -> None:
        """Put ``fd`` in the loop: ``on_readable()`` runs when it is readable, and once it returns
        False the fd leaves the loop (on the loop's thread, or before ``serve``)."""
        epoll = self._epoll or self._open()
        self._handlers[fd] = on_readable
        epoll.register(fd, select.EPOLLIN)

    def remove_fd(self, fd: int) -> None:
        """Take ``fd`` out of the loop (its handler may do so, and return True, before closing it)."""
        if self._handlers.pop(fd, None) is not None and self._epoll is not None:
            self._epoll.unregister(fd)

    # -- the loop -------------------------------------------------------------------
    def _open(self) -> select.epoll:
        with self._open_lock:
            if self._epoll is None:
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_w, False)
                epoll = select.epoll()
                epoll.register(self._wake_r, select.EPOLLIN)
                self._epoll = epoll
                if not self._serving:
                    threads.start("team-job-watcher", lambda: self._loop(epoll, None), on_crash=self._died)
            return self._epoll

    def _died(self, error: TeamError) -> None:
        assert isinstance(error, ThreadDied)  # (core.threads hands a thread's death over as one)
        self.dead = error
        if self.on_crash is not None:
            self.on_crash(error)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: the watcher is waking up anyway

    def _take_timing(self) -> None:
        while self._timing:
            job = self._timing.popleft()
            if not job.reaped:  # else it ended since: nothing left to escalate
                self._timed[job.record.id] = job

    def _loop(self, epoll: select.epoll, busy: Callable[[], bool] | None) -> None:
        """Exits, timeouts and escalation, readable fds, deferred file work (``busy``: serve's end)."""
        while True:
            self._take_timing()
            if busy is not None and not self._handlers and not busy():
                break
            now = time.monotonic()
            deadlines = [j.deadline for j in self._timed.values() if j.deadline is not None]
            wait = -1.0 if not deadlines else min(max(0.0, min(deadlines) - now), MAX_WAIT)
            idle = self.work.pending()
            if idle:  # deferred file work waits for a quiet moment (files.py)
                quiet = max(0.0, self._quiet_until - now)
                wait = quiet if wait < 0 else min(wait, quiet)
            events = epoll.poll(wait)
            if not events and idle and time.monotonic() >= self._quiet_until:
                self.work.work_once()
            for fd, _ in events:
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                handler = self._handlers.get(fd)
                if handler is not None:
                    if not handler():
                        epoll.unregister(fd)
                        del self._handlers[fd]
                    continue
                job = self._by_fd.pop(fd, None)
                if job is not None:
                    epoll.unregister(fd)
                    self._timed.pop(job.record.id, None)
                    self.on_exit(job, job.reap())
            self._take_timing()
            now = time.monotonic()
            for job in [j for j in self._timed.values() if j.deadline is not None and j.deadline <= now]:
                if not job.escalated:  # timeout
                    self._escalate(job, "timeout")
                else:
                    job.deadline = None
                    del self._timed[job.record.id]
                    job.force()

    def _escalate(self, job: WatchedJob, reason: JobStatus) -> None:
        """SIGTERM the job's group; the loop SIGKILLs it once the grace has passed."""
        job.reason = job.reason or reason
        job.escalated = True
        job.deadline = time.monotonic() + self.grace
        job.signal(signal.SIGTERM)
