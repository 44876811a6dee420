"""The watcher of a ``JobManager``: one epoll loop over job exits, timeouts and deferred file work.

Mixed into ``jobs.JobManager`` (``Watcher``), whose job table (``_jobs``,
``_by_fd``, ``_cond``), ``files`` (``jobfiles``), ``grace`` and ``_finish``
it uses.

* Threaded (the default): the first ``start`` opens the epoll and starts one
  watcher thread; starts from any thread wake it through a pipe when they
  add a deadline or deferred file work.
* ``serve(fd, on_readable)``: the loop runs on the caller's thread with one
  more fd in it — the job server's request pipe — so that process is a
  single thread: requests, exits and timeouts are handled as they come.

Each turn, in order of priority: exits and readable fds, then due
timeouts (SIGTERM the group, SIGKILL after the grace; ``begin_kill`` asks
for the same without waiting), then one piece of deferred file work
(``files.work_once``) if nothing was ready and no job started within
``QUIET_AFTER_START``.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable

QUIET_AFTER_START = 0.001
"""Seconds after a start before deferred file work (``jobfiles``) may run: a job that ends at
once is reported first, and its first record is then superseded by its final one."""


class Watcher:
    """The loop (see the module docstring)."""

    def _open_epoll(self) -> None:
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._epoll.register(self._wake_r, select.EPOLLIN)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: the watcher is waking up anyway

    def serve(self, fd: int, on_readable: Callable[[], bool]) -> None:
        """Run the watcher on this thread, with ``fd`` in its epoll (the job server's loop).

        ``on_readable()`` is called whenever ``fd`` is readable (it may call
        ``start`` and ``begin_kill``); once it returns False the loop ends
        when no job is left. One thread does everything, in this order of
        priority: exits and requests, then timeouts, then the deferred file
        work (``jobfiles``) when nothing else is ready.
        """
        self._serving = True
        self._environ = dict(os.environ)
        with self._cond:
            if self._epoll is None:
                self._open_epoll()
        self._epoll.register(fd, select.EPOLLIN)
        self._extra[fd] = on_readable
        self._watch(serving=True)

    def _watch(self, serving: bool = False) -> None:
        """The one watcher thread: exits, timeouts and escalation, via epoll."""
        while True:
            with self._cond:
                deadlines = [j.deadline for j in self._jobs.values() if j.deadline is not None]
                if serving and not self._extra and not self._jobs:
                    break
            now = time.monotonic()
            wait = -1.0 if not deadlines else max(0.0, min(deadlines) - now)
            idle = self.files.pending()
            if idle:  # deferred file work waits for a quiet moment (jobfiles)
                quiet = max(0.0, self._quiet_until - now)
                wait = quiet if wait < 0 else min(wait, quiet)
            events = self._epoll.poll(wait)
            if not events and idle and time.monotonic() >= self._quiet_until:
                self.files.work_once()
            for fd, _ in events:
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                handler = self._extra.get(fd)
                if handler is not None:
                    if not handler():
                        self._epoll.unregister(fd)
                        del self._extra[fd]
                    continue
                with self._cond:
                    job = self._by_fd.pop(fd, None)
                if job is not None:
                    self._epoll.unregister(fd)
                    self._finish(job)
            now = time.monotonic()
            with self._cond:
                due = [j for j in self._jobs.values() if j.deadline is not None and j.deadline <= now]
            for job in due:
                if not job.escalated:  # timeout
                    self._terminate(job, "timeout")
                else:
                    job.deadline = None
                    job.signal(signal.SIGKILL)

    def _terminate(self, job, reason: str) -> None:
        """SIGTERM the job's group; the loop SIGKILLs it once the grace has passed."""
        job.reason = job.reason or reason
        job.escalated = True
        job.deadline = time.monotonic() + self.grace
        job.signal(signal.SIGTERM)

    def begin_kill(self, job_id: str, reason: str = "killed") -> None:
        """SIGTERM the job's group now and SIGKILL it after the grace (the watcher does); no waiting.

        ``reason`` is the status the job is recorded with (``killed``, or ``lost``
        when its lead died)."""
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or job.escalated:
                return
            self._terminate(job, reason)
        if not self._serving:
            self._wake()
