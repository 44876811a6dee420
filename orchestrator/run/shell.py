"""``kind: shell``: each attempt of a shell task is a background job.

``ShellExecutor`` starts jobs through a forked job server (``jobs.server``)
when this process has a single thread, else through a job manager in this
process; a finished job comes back on a background thread and becomes an
``Outcome``. The job's environment is the one policy of core/environ.py:
the allow-listed variables of the lead's environment, what the plan
declares for the task (``$NAME`` in a plan's ``env`` value is expanded from
the lead's environment when the job starts, so a secret is passed without
being stored in the task) and the ``TEAM_*`` variables set here. Nothing
else of the lead's environment, credentials included, reaches a shell task.
Shell tasks do not run in the agents' sandbox (core/sandbox.py): they are
the plan author's own commands, and there may be thousands of them.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
from pathlib import Path

from ..core import threads
from ..core.environ import expand_env
from ..core.errors import TeamError
from ..core.models import Task
from ..core.text import plural
from ..jobs.manager import JobManager
from ..jobs.records import JobRecord, Notification
from ..jobs.server import JobServer, LocalJobs
from .executor import DoneCallback, ExecutorContext, Outcome


def timed_out(timeout: float, n: Notification) -> str:
    """What a timed-out attempt says: the limit, and how it ended (TERM, or KILL after the grace)."""
    if n.forced_after is not None:
        return (f"timed out after {timeout:g}s; it ignored SIGTERM and was killed (SIGKILL) after the "
                f"{n.forced_after:g}s grace")
    if n.exit_code == -signal.SIGKILL:
        return f"timed out after {timeout:g}s; killed (SIGKILL)"
    return f"timed out after {timeout:g}s; SIGTERM ended it"


class ShellExecutor:
    """``kind: shell``: each attempt is a background job in its own process group.

    Jobs are started and watched by a forked job server when this process
    has a single thread (``team run`` builds its executors first), else by a
    job manager in this process (``jobserver``). With the server a start is
    one request line, done on the caller's thread. In-process, ``STARTERS``
    threads start queued attempts (forks overlap the lead's store I/O; more
    than one measured no faster: a start is mostly GIL-bound work) and
    ``start_now`` starts one on the caller's thread (the scheduler does that
    for a lone claim, saving a hop). Either way a finished job comes back
    on a background thread, matched to its attempt by ``ref``.
    """

    kind = "shell"
    inline_start = True  # start() only enqueues or sends: safe inside store.commit's on_logged
    STARTERS = 1

    def __init__(self, ctx: ExecutorContext):
        self.ctx = ctx
        self.records = JobManager(ctx.root)  # reap_orphans: records only, starts nothing
        self.owner = f"{ctx.owner}:{os.getpid()}"
        self._lock = threading.Lock()
        # ref -> (task, epoch, done, timeout), while the attempt is out
        self._running: dict[str, tuple[int, int, DoneCallback, float | None]] = {}
        self._by_task: dict[int, str] = {}
        self._stop = threading.Event()
        # A thread of ours, or the job server, that dies stops the run (run/stop.py), never leaves it deaf.
        if JobServer.usable():
            self.backend: JobServer | LocalJobs = JobServer.fork(ctx.root, self._on_note, self._on_error,
                                                                 on_crash=ctx.stop.fail)
        else:
            self.backend = LocalJobs(ctx.root, self._on_note, self._on_error, on_crash=ctx.stop.fail)
        self._starts: queue.SimpleQueue[tuple[Task, int, DoneCallback] | None] = queue.SimpleQueue()
        self._starters = [threads.start(f"team-shell-starter-{i}", self._starter, on_crash=ctx.stop.fail)
                          for i in range(self.STARTERS if self.backend.blocking else 0)]

    def reap_orphans(self) -> list[JobRecord]:
        """Kill and mark ``lost`` jobs left by a dead lead (called before re-running)."""
        return self.records.reap_orphans()

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        """Start the attempt: a request to the job server, or queued for a starter thread."""
        if self._starters:
            self._starts.put((task, epoch, done))
        else:
            self.start_now(task, epoch, done)

    def _starter(self) -> None:
        while True:
            item = self._starts.get()
            if item is None:
                return
            self.start_now(*item)

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        """Start the attempt on the calling thread (the scheduler's, for a lone claim)."""
        if self._stop.is_set():
            done(Outcome(task.id, epoch, "killed", error="the run is shutting down"))
            return
        # ``$NAME`` in a value is taken from the lead's environment when the job
        # starts, so a plan can pass a secret without it being stored in the task.
        env = {k: expand_env(v) for k, v in task.env.items()}
        env.update(TEAM_TASK_ID=str(task.id), TEAM_PLAN=task.plan or "", TEAM_PLAN_TASK=task.plan_task or "",
                   TEAM_ATTEMPT=str(task.attempts), TEAM_ROOT=str(self.ctx.root))
        cwd = Path(task.cwd) if task.cwd else None
        ref = f"t{task.id}e{epoch}"
        with self._lock:
            self._running[ref] = (task.id, epoch, done, task.timeout)
            self._by_task[task.id] = ref
        try:
            self.backend.start(ref, task.command or "", owner=self.owner, cwd=cwd, env=env,
                               timeout=task.timeout, task=task.id)
        except (OSError, TeamError) as e:  # e.g. its cwd vanished: the attempt fails, the run goes on
            self._on_error(ref, str(e))
            return
        if self._stop.is_set():  # close() may have killed the others before this one existed
            self.backend.kill(ref)

    def _take(self, ref: str) -> tuple[int, int, DoneCallback, float | None] | None:
        with self._lock:
            entry = self._running.pop(ref, None)
            if entry is not None and self._by_task.get(entry[0]) == ref:
                del self._by_task[entry[0]]
        self.backend.forget(ref)
        return entry

    def _on_note(self, ref: str, n: Notification) -> None:
        """A finished job (from the backend's thread)."""
        entry = self._take(ref)
        if entry is None:
            return  # not an attempt of ours (cannot happen: refs are ours)
        task_id, epoch, done, timeout = entry
        error = timed_out(timeout, n) if n.status == "timeout" and timeout else None
        done(Outcome(task_id, epoch, n.status, n.exit_code, n.duration, n.log, n.tail, error=error))

    def _on_error(self, ref: str, error: str) -> None:
        """The attempt could not start (or its job server died)."""
        entry = self._take(ref)
        if entry is not None:
            entry[2](Outcome(entry[0], entry[1], "failed", error=f"cannot start: {error}"))

    def cancel(self, task_id: int) -> None:
        with self._lock:
            ref = self._by_task.get(task_id)
        if ref is not None:
            self.backend.kill(ref)

    def close(self) -> None:
        """Stop every job (TERM, grace, KILL) and the backend; a second call does nothing."""
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
        for _ in self._starters:
            self._starts.put(None)
        for t in self._starters:  # a start in flight registers (and is killed) before we shut down
            t.join(timeout=10)
        self.backend.close()
        if self.backend.died is not None:  # its jobs run on, watched by nobody: kill them, record them lost
            self.records.reap_orphans(mine=True)
        errors = self.backend.errors
        # A run stopped by a failed write (a full disk) says so in one line; lost records are part of it.
        if errors and self.ctx.note is not None and not isinstance(self.ctx.stop.error, OSError):
            self.ctx.note(f"warning: {plural(len(errors), 'job record')} in .team/jobs could not be written "
                          f"(first: {errors[0]}); the tasks' results are in the task store")

