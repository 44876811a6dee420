"""The process side of a job this manager watches: its handle, exit fd, spawner.

* ``WatchedJob`` is the in-memory handle: the record, the ``Popen``, an fd that
  turns readable when the leader exits, and the kill/timeout state. Its
  group is signalled only until the leader is reaped (after that the pgid
  may be reused); the reap happens under ``WatchedJob.lock``.
* ``exit_fd_of``: a pidfd, which turns readable when the leader exits but does
  not reap it, so the leader stays a zombie and its pid, hence the group id,
  cannot be reused while we signal the group. Without pidfds a thread
  ``waitid(WNOWAIT)``s and closes a pipe instead.
* ``in_spawner``: ``PR_SET_PDEATHSIG`` (via ``setpriv``, ``SETPRIV``) fires
  when the *thread* that forked exits, so with ``pdeathsig`` a job is forked
  on the main thread or on one long-lived spawner thread, never on a
  short-lived worker.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future

from . import procs
from .jobrecords import JobRecord


class WatchedJob:
    """In-memory state of a job this manager watches."""

    __slots__ = ("record", "proc", "exit_fd", "reason", "deadline", "escalated", "done", "lock", "reaped")

    def __init__(self, record: JobRecord, proc: subprocess.Popen, exit_fd: int):
        self.record = record
        self.proc = proc
        self.exit_fd = exit_fd  # readable once the leader has exited (pidfd or pipe)
        self.reason: str | None = None  # "timeout" | "killed"
        self.deadline: float | None = None  # monotonic time of the next escalation
        self.escalated = False  # SIGTERM already sent by the watcher
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.reaped = False

    def signal(self, sig: int) -> None:
        """Signal the job's group unless the leader was reaped (its pgid may be reused)."""
        with self.lock:
            if not self.reaped:
                procs.killpg(self.record.pgid, sig)


def exit_fd_of(proc: subprocess.Popen) -> int:
    """An fd that becomes readable when ``proc`` exits, without reaping it."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        pass
    r, w = os.pipe()

    def waiter() -> None:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        os.close(w)

    threading.Thread(target=waiter, name=f"team-job-wait-{proc.pid}", daemon=True).start()
    return r


_spawn_queue: queue.SimpleQueue | None = None
_spawn_lock = threading.Lock()
SETPRIV = shutil.which("setpriv")


def _spawn_loop(q: queue.SimpleQueue) -> None:
    while True:
        fn, future = q.get()
        try:
            future.set_result(fn())
        except BaseException as e:  # handed back to the caller, re-raised there
            future.set_exception(e)


def in_spawner(fn: Callable):
    """Run ``fn`` (a fork) on the main thread or on one long-lived spawner thread.

    The parent-death signal fires when the *thread* that forked exits, so a
    job must never be forked by a short-lived worker thread.
    """
    global _spawn_queue
    if threading.current_thread() is threading.main_thread():
        return fn()
    with _spawn_lock:
        if _spawn_queue is None:
            _spawn_queue = queue.SimpleQueue()
            threading.Thread(target=_spawn_loop, args=(_spawn_queue,), name="team-job-spawner",
                             daemon=True).start()
    future: Future = Future()
    _spawn_queue.put((fn, future))
    return future.result()
