"""The process side of a job this manager watches: its handle, exit fd, spawner.

* ``WatchedJob`` is the in-memory handle: the record, the process, an fd that
  turns readable when the leader exits, and the kill/timeout state. Its
  group is signalled only until the leader is reaped (after that the pgid
  may be reused); the reap (``reap``, called by the watcher when the exit
  fd turns readable) happens under ``WatchedJob.lock``.
* ``exit_fd_of``: a pidfd, which turns readable when the leader exits but does
  not reap it, so the leader stays a zombie and its pid, hence the group id,
  cannot be reused while we signal the group. Without pidfds a thread
  ``waitid(WNOWAIT)``s and closes a pipe instead.
* ``spawn``: start a job's process in its own session. When the job runs in
  the lead's own working directory (the usual case: a plan's tasks run in
  the plan's directory), it is ``os.posix_spawn`` (glibc: ``clone(CLONE_VM |
  CLONE_VFORK)``), measured 0.13 ms against 0.35 ms for ``subprocess.Popen``
  on the lead's thread; any other ``cwd`` goes through ``Popen`` (posix_spawn
  cannot change directory before Python 3.13). Both give the job stdin from
  ``/dev/null``, stdout and stderr on the log, default SIGPIPE/SIGXFSZ
  handling (Python ignores SIGPIPE; a job must not inherit that), an empty
  signal mask, and no fd of ours (Python opens every fd close-on-exec).
  (glibc's posix_spawn leaves its two internal signals, 32 and 33, ignored
  in the child; programs linked with glibc install their own handlers.)

What a spawn costs in system calls, and what each protects (strace of a
1,000-task run; all of it kept):

* in the child before its exec: ~120 ``rt_sigaction`` -- glibc's
  posix_spawn child shares our memory (``CLONE_VM``), so it sets every
  handler it finds back to the default before anything can run one (a
  get and a set per signal, ~22 µs here); Popen's child does half as many
  and costs 0.2 ms more on our side. ``setsid`` (the job's own group: the
  group kill), ``/dev/null`` on stdin and two ``dup2`` (output on the log),
  the signal mask emptied, ``execve``.
* in the spawner: 5 ``prlimit64`` -- glibc checks each fd of the three file
  actions against ``RLIMIT_NOFILE`` as Python builds them; ``pidfd_open``
  (the exit fd: no reap before we stop signalling the group, so its pgid
  is not reused); a ``getcwd`` (the posix_spawn path runs only in our own
  directory). The PATH search of a plain command (manager.command_argv:
  a ``stat`` per PATH directory, every job, as make's ``execvp`` looks up
  each one) finds a program an earlier task installed or shadowed; it is
  not cached.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import TypeAlias, TypeVar

from ..core import procs
from .records import JobRecord, JobStatus

T = TypeVar("T")


class Child:
    """A process started by ``spawn``: its pid and ``wait()``, as ``subprocess.Popen`` has them."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def wait(self) -> int:
        """Reap the process; its exit code, ``-N`` for death by signal N (as Popen)."""
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


Process: TypeAlias = "Child | subprocess.Popen[bytes]"
"""A job's main process, as ``spawn`` started it."""

_DEFAULT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name))
_FAST = hasattr(os, "posix_spawn")


def spawn(argv: list[str], *, cwd: str | os.PathLike[str] | None, env: dict[str, str], log_fd: int) -> Process:
    """Start ``argv`` (``argv[0]`` an absolute path) in a new session, output on ``log_fd``."""
    if _FAST and (cwd is None or os.fspath(cwd) == os.getcwd()):
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log_fd, 1),
            (os.POSIX_SPAWN_DUP2, log_fd, 2),
        ], setsid=True, setsigdef=_DEFAULT_SIGNALS, setsigmask=())
        return Child(pid)
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                            cwd=cwd, env=env, start_new_session=True)


class WatchedJob:
    """In-memory state of a job this manager watches."""

    __slots__ = ("record", "proc", "exit_fd", "log_fd", "ref", "reason", "deadline", "expires", "escalated", "forced",
                 "done", "lock", "reaped")

    def __init__(self, record: JobRecord, proc: Process, exit_fd: int, log_fd: int, ref: str | None = None):
        self.record = record
        self.ref = ref  # the starter's name for the job, handed back in its notification
        self.proc = proc  # the group leader: its own session, so pgid == pid
        self.exit_fd = exit_fd  # readable once the leader has exited (pidfd or pipe)
        self.log_fd = log_fd  # the log as created (the manager's ``_on_exit`` takes its size, then closes it)
        self.reason: JobStatus | None = None  # "timeout" | "killed" | "lost"
        self.deadline: float | None = None  # monotonic time of the next escalation
        self.expires: float | None = None  # monotonic time its timeout expires
        self.escalated = False  # SIGTERM already sent by the watcher
        self.forced = False  # it outlived SIGTERM by the grace: SIGKILL was sent
        self.done = threading.Event()  # set once its final record is on disk
        self.lock = threading.Lock()
        self.reaped = False

    def signal(self, sig: int) -> None:
        """Signal the job's group unless the leader was reaped (its pgid may be reused)."""
        with self.lock:
            if not self.reaped:
                procs.killpg(self.proc.pid, sig)

    def force(self) -> None:
        """The grace after SIGTERM ran out and the leader still runs: SIGKILL the group."""
        with self.lock:
            if not self.reaped:
                self.forced = True
                procs.killpg(self.proc.pid, signal.SIGKILL)

    def reap(self) -> int:
        """Once the leader has exited: SIGKILL what it left in its group, reap it, close the exit fd.

        The leader is a zombie until reaped, so its pid (== pgid) cannot be
        reused yet: killing the group hits only what the job left behind.
        Returns the exit code (``-N`` for death by signal N)."""
        with self.lock:
            procs.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
            self.reaped = True
            self.deadline = None
        os.close(self.exit_fd)
        return code


def exit_fd_of(proc: Process) -> int:
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
