"""Background shell jobs: ``.team/jobs/<id>.json`` + ``.team/jobs/<id>.log``.

A job is ``/bin/sh -c COMMAND`` in a new session (so its own process group,
``pgid == pid``), stdin from ``/dev/null``, stdout and stderr straight into
the log file descriptor: output never passes through Python, so a job
printing 50 MB costs no memory and leaves the whole log on disk.

Lifecycle::

    start() ──► running ──► completed   exit status 0
                       ├──► failed      non-zero exit, or killed by a signal
                       ├──► timeout     ran past ``timeout``
                       ├──► killed      ``kill()`` from this or any process
                       └──► lost        its manager process died (``reap_orphans``)

* One watcher thread per manager waits on every job's pidfd with epoll (no
  polling; no thread start on the ``start()`` path: ~1 ms is fork+exec).
  A pidfd turns readable when the leader exits but does not reap it, so the
  leader stays a zombie and its pid, hence the group id, cannot be reused
  while we signal the group; the reap happens under the job's lock.
* Timeout or kill: SIGTERM to the whole group, ``grace`` seconds for the
  leader to exit, then SIGKILL to the group. Exit codes follow subprocess:
  ``-N`` for death by signal N.
* When the job's main process exits, whatever it left running in its group
  (``cmd &`` without ``wait``) is SIGKILLed: a job owns nothing after it ends.
* On completion the record is rewritten (atomic rename, no fsync: the task
  store is the durable truth) and a ``Notification`` carrying a bounded
  head+tail of the log is queued for the owner. ``drain`` pops a queue
  under a lock, so each notification is returned exactly once; ``wait``
  sleeps on a ``threading.Condition``.
* Crash safety: like ``make``, a SIGKILLed manager's jobs run on to their
  end by default; ``reap_orphans`` (run by every restarted lead)
  finds records still ``running`` whose manager is gone, kills what is left
  of their group and marks them ``lost``. A manager is identified by pid +
  ``/proc`` start time, a job's processes by the ``TEAM_JOB_ID`` variable
  they inherit (procs.py), never by a bare pid that may have been reused.
  (A command that wipes its environment, ``env -i``, cannot be found that
  way.) ``JobManager(pdeathsig=True)`` also gives the direct child
  ``PR_SET_PDEATHSIG=SIGKILL`` via ``setpriv`` so it dies with a killed
  manager; it costs an extra exec (~0.9 ms a job) and a hop to one
  long-lived spawner thread, because the signal follows the *thread* that
  forked.
* On normal interpreter exit (``atexit``) a manager kills its running jobs.

Notifications are in-process; another process sees jobs through their
records (``get``/``list``) and can ``kill`` them.
"""

from __future__ import annotations

import atexit
import os
import queue
import secrets
import select
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from . import procs
from .errors import CorruptFile, UnknownRef, UserError
from .fsutil import file_lock
from .models import NAME_RE
from .paths import team_dir

JobStatus = Literal["running", "completed", "failed", "timeout", "killed", "lost"]
FINAL = frozenset({"completed", "failed", "timeout", "killed", "lost"})
JOB_ENV = "TEAM_JOB_ID"


class JobRecord(BaseModel):
    """``.team/jobs/<id>.json``: one background job."""

    id: str = Field(description="Job id, unique under the root.")
    command: str = Field(description="The shell command (run by /bin/sh -c).")
    owner: str = Field("lead", description="Who gets the completion notification.")
    pid: int | None = Field(None, description="Pid of the job's main process (/bin/sh).")
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


def job_leader_alive(record: JobRecord) -> bool:
    """The job's main process still runs and is really this job's (not a reused pid)."""
    return procs.alive(record.pid) and procs.has_env(record.pid, JOB_ENV, record.id)


def read_tail(path: Path, limit: int) -> str:
    """The whole file if it fits in ``limit`` bytes, else its head and tail."""
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


class _Job:
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


def _exit_fd(proc: subprocess.Popen) -> int:
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
_SETPRIV = shutil.which("setpriv")


def _spawn_loop(q: queue.SimpleQueue) -> None:
    while True:
        fn, future = q.get()
        try:
            future.set_result(fn())
        except BaseException as e:  # handed back to the caller, re-raised there
            future.set_exception(e)


def _in_spawner(fn: Callable):
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


def _shutdown_at_exit(ref: weakref.ref) -> None:
    manager = ref()
    if manager is not None:
        manager.shutdown()


class JobManager:
    """Start, watch, kill and list background jobs under ``root/.team/jobs``."""

    def __init__(self, root: Path, *, tail_bytes: int = 4096, clock: Callable[[], float] = time.time,
                 grace: float = 2.0, pdeathsig: bool = False):
        self.root = Path(root)
        self.dir = team_dir(self.root) / "jobs"
        self.tail_bytes = tail_bytes
        self.clock = clock
        self.grace = grace
        self.pdeathsig = pdeathsig
        self._jobs: dict[str, _Job] = {}
        self._cond = threading.Condition()
        self._queues: dict[str, deque[Notification]] = defaultdict(deque)
        self._pid = os.getpid()
        self._pid_start = procs.start_ticks(self._pid)
        self._rel = str(self.dir.relative_to(self.root))
        self._by_fd: dict[int, _Job] = {}
        self._epoll: select.epoll | None = None
        self._wake_r = self._wake_w = -1
        self._ready = False
        atexit.register(_shutdown_at_exit, weakref.ref(self))

    # -- paths and records -------------------------------------------------
    def _record_path(self, job_id: str) -> Path:
        if not NAME_RE.match(job_id):
            raise UnknownRef(f"no job {job_id!r}: job ids look like j1a2b3c; see `team jobs`")
        return self.dir / f"{job_id}.json"

    def _save(self, record: JobRecord) -> None:
        """Atomic (rename) but not fsync'd: the task store is the durable truth."""
        tmp = self.dir / f".{record.id}.{threading.get_ident()}.tmp"
        tmp.write_bytes(record.model_dump_json(exclude_none=True).encode())
        os.replace(tmp, self.dir / f"{record.id}.json")

    def get(self, job_id: str) -> JobRecord:
        """The job's record as on disk (works from any process)."""
        path = self._record_path(job_id)
        try:
            return JobRecord.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise UnknownRef(f"no job {job_id!r}; see `team jobs` for the list") from None
        except ValidationError as e:
            raise CorruptFile(path, str(e).splitlines()[0]) from None

    def list(self) -> list[JobRecord]:
        """Every job under the root, oldest first."""
        if not self.dir.is_dir():
            return []
        records = []
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                try:
                    records.append(self.get(entry.name[:-5]))
                except UnknownRef:
                    continue  # removed while we listed
        return sorted(records, key=lambda r: (r.started_at, r.id))

    # -- start --------------------------------------------------------------
    def start(self, command: str, *, owner: str = "lead", cwd: Path | None = None,
              env: dict[str, str] | None = None, timeout: float | None = None,
              task: int | None = None, unset: Iterable[str] = ()) -> JobRecord:
        """Start ``command`` in the background; returns once it has been exec'd.

        ``env`` entries are added to the inherited environment; names in
        ``unset`` are removed from it (secrets a job must not see).
        """
        if cwd is not None and not Path(cwd).is_dir():
            raise UserError(f"job working directory {cwd} does not exist; create it or pass another cwd")
        if not self._ready:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._ready = True
        while True:
            job_id = "j" + secrets.token_hex(3)
            log_path = self.dir / f"{job_id}.log"
            try:
                log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
                break
            except FileExistsError:
                continue
        child_env = dict(os.environ)
        for name in unset:
            child_env.pop(name, None)
        if env:
            child_env.update(env)
        child_env[JOB_ENV] = job_id
        argv = ["/bin/sh", "-c", command]
        def spawn() -> subprocess.Popen:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
                                    cwd=cwd, env=child_env, start_new_session=True)

        try:
            if self.pdeathsig and _SETPRIV:
                argv = [_SETPRIV, "--pdeathsig", "KILL", *argv]
                proc = _in_spawner(spawn)
            else:
                proc = spawn()
        finally:
            os.close(log_fd)
        record = JobRecord(
            id=job_id, command=command, owner=owner, pid=proc.pid, pgid=proc.pid,
            started_at=self.clock(), log=f"{self._rel}/{job_id}.log",
            cwd=str(cwd) if cwd is not None else None, timeout=timeout, task=task,
            manager_pid=self._pid, manager_start=self._pid_start)
        self._save(record)
        job = _Job(record, proc, _exit_fd(proc))
        if timeout is not None:
            job.deadline = time.monotonic() + timeout
        with self._cond:
            self._jobs[job_id] = job
            self._by_fd[job.exit_fd] = job
            if self._epoll is None:
                self._epoll = select.epoll()
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_w, False)
                self._epoll.register(self._wake_r, select.EPOLLIN)
                threading.Thread(target=self._watch, name="team-job-watcher", daemon=True).start()
            self._epoll.register(job.exit_fd, select.EPOLLIN)
        if timeout is not None:
            self._wake()
        return record.model_copy()

    # -- watching -----------------------------------------------------------
    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: the watcher is waking up anyway

    def _watch(self) -> None:
        """The one watcher thread: exits, timeouts and escalation, via epoll."""
        while True:
            with self._cond:
                deadlines = [j.deadline for j in self._jobs.values() if j.deadline is not None]
            wait = -1.0 if not deadlines else max(0.0, min(deadlines) - time.monotonic())
            for fd, _ in self._epoll.poll(wait):
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
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
                if not job.escalated:  # timeout: SIGTERM the group, SIGKILL after the grace
                    job.reason = job.reason or "timeout"
                    job.escalated = True
                    job.deadline = now + self.grace
                    job.signal(signal.SIGTERM)
                else:
                    job.deadline = None
                    job.signal(signal.SIGKILL)

    def _finish(self, job: _Job) -> None:
        # The leader is a zombie: its pid (== pgid) cannot be reused yet, so
        # killing the group hits only what the job left behind.
        with job.lock:
            procs.killpg(job.record.pgid, signal.SIGKILL)
            code = job.proc.wait()
            job.reaped = True
        os.close(job.exit_fd)
        record = job.record
        marker = self.dir / f"{record.id}.kill"  # left by ``kill`` in another process
        if marker.exists():
            job.reason = job.reason or "killed"
            marker.unlink(missing_ok=True)
        status = job.reason or ("completed" if code == 0 else "failed")
        record.status = status
        record.exit_code = code
        record.finished_at = self.clock()
        record.tail = read_tail(self.root / record.log, self.tail_bytes)
        self._save(record)
        note = Notification(
            job_id=record.id, owner=record.owner, status=status, exit_code=code,
            tail=record.tail, log=record.log,
            duration=round(record.finished_at - record.started_at, 3), task=record.task)
        with self._cond:
            self._jobs.pop(record.id, None)
            self._queues[record.owner].append(note)
            self._cond.notify_all()
        job.done.set()

    # -- notifications ------------------------------------------------------
    def drain(self, owner: str) -> list[Notification]:
        """Pop every queued notification for ``owner`` (each is returned once)."""
        with self._cond:
            q = self._queues.get(owner)
            if not q:
                return []
            notes = list(q)
            q.clear()
            return notes

    def wait(self, owner: str, timeout: float | None = None) -> list[Notification]:
        """Block until ``owner`` has a notification (or ``timeout``), then drain."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._queues.get(owner)), timeout)
            return self.drain(owner)

    def running(self) -> list[JobRecord]:
        """Jobs this manager is watching."""
        with self._cond:
            return [j.record.model_copy() for j in self._jobs.values()]

    # -- killing ------------------------------------------------------------
    def kill(self, job_id: str) -> JobRecord:
        """Kill the job's whole process group, from this or any other process.

        Returns the final record; a job that already ended is returned as is.
        """
        with self._cond:
            job = self._jobs.get(job_id)
        if job is not None:
            job.reason = job.reason or "killed"
            job.signal(signal.SIGTERM)
            if not job.done.wait(self.grace):
                job.signal(signal.SIGKILL)
            job.done.wait()
            return self.get(job_id)
        record = self.get(job_id)
        if record.status != "running":
            return record
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

    def shutdown(self) -> None:
        """Kill every job this manager runs (TERM, grace, KILL) and wait for their records."""
        with self._cond:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.reason = job.reason or "killed"
            job.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for job in jobs:
            if not job.done.wait(max(0.0, deadline - time.monotonic())):
                job.signal(signal.SIGKILL)
        for job in jobs:
            job.done.wait(5.0)

    def reap_orphans(self) -> list[JobRecord]:
        """Mark ``lost`` every running job whose manager process is dead, killing its leftovers."""
        lost = []
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
