"""Background shell jobs: ``.team/jobs/<id>.json`` + ``.team/jobs/<id>.log``.

A job is ``/bin/sh -c COMMAND`` in a new session (so its own process group,
``pgid == pid``), stdin from ``/dev/null``, stdout and stderr straight into
the log file descriptor: output never passes through Python, so a job
printing 50 MB costs no memory and leaves the whole log on disk. The
manager keeps that fd until the job ends and takes the log's size from it:
the log is opened once, and an empty one (most short tasks) is never read
for its tail. A job spawned but whose first record cannot be written (a full
disk) is killed and reaped at once: no job runs unrecorded. Like make,
a COMMAND of plain words naming a program on PATH (``pytest -q``) is exec'd
without the shell, one exec less per job (``command_argv``). An agent's job
runs inside its sandbox: ``start(prefix=...)`` puts ``bwrap ... --`` before
``/bin/sh -c COMMAND`` (core/sandbox.py). Every job's environment is the
allow-list of core/environ.py plus what the caller declares (``env``): no
credential of this process reaches a job unless the caller names it.

Lifecycle::

    start() ──► running ──► completed   exit status 0
                       ├──► failed      non-zero exit, or killed by a signal
                       ├──► timeout     ran past ``timeout``
                       ├──► killed      ``kill()`` from this or any process
                       └──► lost        its manager process died (``reap_orphans``)

``JobManager`` starts jobs and keeps the table of those it runs (job id ->
``spawn.WatchedJob``, until the final record is on disk) and the owners'
notification queues, both under one ``threading.Condition``. It holds four
collaborators, each behind its own interface:

    files     JobFiles (files.py): new logs, record writes (at once or deferred)
    records   JobRecords (records.py): get/list/save of the records, from any process
    watcher   Watcher (watcher.py): the epoll loop; reports each exit to ``_on_exit``
    orphans   OrphanReaper (orphans.py): jobs it does not watch (killed elsewhere, orphaned)

``start`` spawns (``spawn.spawn``), saves the first record and hands the job to the watcher;
the watcher calls back ``_on_exit(job, code)`` on its thread, which writes
the final record and notifies.

* One watcher loop per manager waits on every job's pidfd with epoll (no
  polling; no thread start on the ``start()`` path: ~1 ms is fork+exec); it
  runs on its own thread, or on the caller's in ``serve`` (the job server).
  A pidfd turns readable when the leader exits but does not reap it, so the
  leader stays a zombie and its pid, hence the group id, cannot be reused
  while we signal the group; the reap happens under the job's lock.
* Timeout or kill: SIGTERM to the whole group, ``grace`` seconds for the
  leader to exit, then SIGKILL to the group. Exit codes follow subprocess:
  ``-N`` for death by signal N.
* When the job's main process exits, whatever it left running in its group
  (``cmd &`` without ``wait``) is SIGKILLed: a job owns nothing after it ends.
  What left the group (``setsid cmd &``, a daemon) is found by what it
  carries and killed too (strays.py): by the job server, which is their
  subreaper, as they are reparented to it; in-process, by a scan for the
  job's ``TEAM_JOB_ID`` once its notification went out.
* On completion a ``Notification`` carrying a bounded head+tail of the log
  is queued for the owner (or handed to ``on_notify`` before the record is
  rewritten, to save the consumer that rename) and the record is rewritten
  (atomic rename, no fsync: the task store is the durable truth); ``kill``
  and ``shutdown`` return once it is. ``drain`` pops a queue
  under a lock, so each notification is returned exactly once; ``wait``
  sleeps on a ``threading.Condition``.
* Crash safety: ``team run``'s jobs are run by a job server (server.py)
  that stops them when its lead dies. An in-process manager that is
  SIGKILLed leaves its jobs running; ``reap_orphans`` (run by every
  restarted lead) kills them and marks them ``lost`` (see orphans.py).
* On normal interpreter exit (``atexit``) a manager kills its running jobs.
* A timeout holds without the manager, too: a job with a timeout runs as
  ``timeout --signal=KILL T+grace+1s /bin/sh -c COMMAND`` (coreutils, if
  installed), the group leader, which SIGKILLs the whole group at that
  point if the manager did not end it first (a SIGKILLed manager). The
  manager's TERM-grace-KILL at ``T`` stays the normal path; ``timeout``
  passes exit codes through (``-N`` for death by signal N), and a job it
  killed is recorded ``timeout``. No timeout, no extra exec.

Notifications are in-process; another process sees jobs through their
records (``get``/``list``) and can ``kill`` them.
"""

from __future__ import annotations

import atexit
import builtins
import errno
import functools
import math
import os
import re
import shutil
import signal
import threading
import time
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..core import procs
from ..core.environ import task_environment
from ..core.errors import UserError
from ..core.paths import team_dir
from ..core.redact import Secrets
from ..core.threads import Crash
from .files import JobFiles
from .orphans import OrphanReaper, Unrecorded
from .records import (
    JOB_ENV,
    MANAGER_ENV,
    JobRecord,
    JobRecords,
    JobStatus,
    Notification,
    read_tail,
)
from .spawn import Process, WatchedJob, exit_fd_of, spawn
from .strays import Strays
from .watcher import Watcher

TIMEOUT_MARGIN = 1.0
"""Seconds past ``timeout + grace`` before the ``timeout`` wrapper kills an unwatched job."""
MAX_TIMEOUT = 30 * 86_400.0
"""A longer job timeout is clamped to this (30 days): no number reaches epoll or ``timeout(1)`` unchecked."""


@functools.cache
def _timeout_bin() -> str | None:
    """coreutils' ``timeout``, if installed (looked up once)."""
    return shutil.which("timeout")


def _timeout_prefix(seconds: float) -> list[str]:
    """``timeout --signal=KILL SECONDS`` if coreutils' ``timeout`` exists, else nothing."""
    program = _timeout_bin()
    if program is None:
        return []
    return [program, "--signal=KILL", f"{max(seconds, 0.001):.3f}"]


def _shutdown_at_exit(ref: weakref.ref[JobManager]) -> None:
    manager = ref()
    if manager is not None:
        manager.shutdown()


# Like make: a command made only of plain words runs without a shell (one
# exec less per job). Anything a shell would interpret — quotes, $, globs,
# redirections, ;&|, ~, a VAR=value prefix, a builtin — goes to /bin/sh -c.
_PLAIN = re.compile(r"[A-Za-z0-9_./:@%+,-]+( +[A-Za-z0-9_./:@%+,=-]+)*")
_BUILTINS = frozenset(
    "alias bg break cd command continue eval exec exit export fc fg getopts hash jobs local read "
    "readonly return set shift source test times trap type ulimit umask unalias unset wait "
    # built into /bin/sh with behaviour that differs from the binaries of the same name
    "echo printf pwd kill [".split()
)


def command_argv(command: str, path: str) -> list[str]:
    """``argv`` to run ``command``: exec'd directly when it is plain words
    naming a program on ``path``, else through ``/bin/sh -c``."""
    text = command.strip()
    # A relative PATH entry would be resolved from our cwd, not the job's: leave it to the shell.
    if _PLAIN.fullmatch(text) and all(os.path.isabs(d) for d in path.split(os.pathsep)):
        words = text.split()
        if words[0] not in _BUILTINS and "/" not in words[0]:
            program = shutil.which(words[0], path=path)
            if program is not None:
                return [program, *words[1:]]
    return ["/bin/sh", "-c", command]


def _check_os_text(what: str, text: str, recorded: bool = False) -> None:
    """Refuse text that cannot reach the OS (``UserError`` naming ``what``): a NUL byte ends a C
    string, and a lone surrogate has no bytes in the file system encoding. ``recorded``: the text
    also goes into the job's record, which is JSON, so it must be UTF-8 (no undecodable byte
    carried as a surrogate either)."""
    try:
        data = text.encode() if recorded else os.fsencode(text)
    except UnicodeEncodeError:
        where = "it cannot be written to the job's record" if recorded else "it cannot be passed to a process"
        raise UserError(f"{what} is not valid text ({text!r}); {where}") from None
    if b"\0" in data:
        raise UserError(f"{what} contains a NUL byte (\\0), which no command, argument, environment variable "
                        "or path can carry; remove it")


def _abandon(proc: Process, job_id: str) -> None:
    """Kill a job that was spawned but cannot be recorded: its group (the leader is our unreaped
    child, so its pgid is not reused), what it may already have started outside it, and reap it."""
    procs.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    procs.kill_marked(JOB_ENV, job_id)
    # once more a moment later: a child caught in its exec (a `setsid sleep` forked just before the
    # kill) shows no environment to read then, and would run on
    time.sleep(0.05)
    procs.kill_marked(JOB_ENV, job_id)


class JobManager:
    """Start, watch, kill and list background jobs under ``root/.team/jobs`` (see the module docstring)."""

    def __init__(self, root: Path | str, *, tail_bytes: int = 4096, clock: Callable[[], float] = time.time,
                 grace: float = 2.0,
                 on_notify: Callable[[Notification], None] | None = None,
                 manager: tuple[int, int | None] | None = None, spares: int = 0,
                 deferred_records: bool = False, secrets: Secrets | None = None, subreaper: bool = False,
                 on_crash: Crash | None = None):
        """``on_notify``: called on the watcher thread with each notification
        instead of queueing it (for a single consumer that wants no extra hop;
        it must be quick and must not block). ``manager``: the ``(pid, start
        ticks)`` recorded as the jobs' manager (default: this process); a job
        server names the lead it serves, so the lead's death orphans them.
        ``spares``/``deferred_records``: keep log creation and record writes
        off the start path (files.py; the job server uses both). ``secrets``:
        scrubbed from the records, from the logs once their jobs end and from
        the output tails in notifications (default: the credentials in this
        process's environment). ``subreaper``: in ``serve``, make this process
        the subreaper of its jobs' orphans and kill what a job leaves behind as
        it is reparented (strays.py: the job server); otherwise leftovers are
        found by a scan for their marker. ``on_crash``: told if the watcher
        thread dies (core/threads.py); later starts are refused with that error."""
        self.root = Path(root)
        self.on_notify = on_notify
        self.dir = team_dir(self.root) / "jobs"
        self.tail_bytes = tail_bytes
        self.clock = clock
        self.grace = grace
        self.secrets = Secrets.from_environ() if secrets is None else secrets
        self._pid, self._pid_start = manager or (os.getpid(), procs.start_ticks(os.getpid()))
        self.files = JobFiles(self.dir, spares=spares, deferred=deferred_records, secrets=self.secrets)
        self.records = JobRecords(self.dir, self.files)
        self.watcher = Watcher(on_exit=self._on_exit, work=self.files, grace=grace, on_crash=on_crash)
        self.orphans = OrphanReaper(self.records, root=self.root, manager=(self._pid, self._pid_start),
                                    grace=grace, tail_bytes=tail_bytes, clock=clock, secrets=self.secrets)
        self._jobs: dict[str, WatchedJob] = {}  # until the final record is on disk
        self._cond = threading.Condition()  # _jobs and _queues
        self._queues: dict[str, deque[Notification]] = defaultdict(deque)
        self._rel = str(self.dir.relative_to(self.root))
        self._manager_env = f"{self._pid}:{self._pid_start}:{self.dir.absolute()}"  # MANAGER_ENV
        # serve(): the environment, read once (a server's environment does not change;
        # a threaded manager reads os.environ at each start)
        self._environ: dict[str, str] | None = None
        self._subreaper = subreaper
        self.strays: Strays | None = None  # serve() with subreaper=True
        atexit.register(_shutdown_at_exit, weakref.ref(self))

    # -- records --------------------------------------------------------------
    def get(self, job_id: str) -> JobRecord:
        """The job's record as on disk (works from any process)."""
        return self.records.get(job_id)

    def list(self) -> builtins.list[JobRecord]:
        """Every job under the root, oldest first."""
        return self.records.list()

    # -- start --------------------------------------------------------------
    def start(self, command: str, *, owner: str = "lead", cwd: Path | None = None,
              env: Mapping[str, str] | None = None, timeout: float | None = None,
              task: int | None = None, ref: str | None = None, prefix: Sequence[str] = ()) -> JobRecord:
        """Start ``command`` in the background; returns once it has been exec'd.

        The job's environment is the one policy of core/environ.py: the
        allow-listed variables of this process's environment, then ``env``
        (what the plan declares, the ``TEAM_*`` variables of the caller),
        then the job markers. ``ref`` is handed back in the job's
        notification (the caller's name for it). ``prefix`` goes before the
        command's argv (an agent's sandbox, core/sandbox.py): the job is
        then always ``PREFIX /bin/sh -c COMMAND``.
        """
        self.watcher.check()  # a dead watcher would never report this job
        if timeout is not None:
            if not math.isfinite(timeout) or timeout <= 0:
                raise UserError(f"job timeout must be a positive number of seconds, not {timeout!r}")
            timeout = min(timeout, MAX_TIMEOUT)
        _check_os_text("job command", command, recorded=True)
        _check_os_text("job owner", owner, recorded=True)
        for name, value in (env or {}).items():
            _check_os_text(f"job environment variable name {name!r}", name)
            _check_os_text(f"job environment variable {name}", value)
            if not name or "=" in name:
                raise UserError(f"job environment variable name {name!r} is not one: it must be non-empty, "
                                "without '='")
        if cwd is not None:
            _check_os_text("job working directory", str(cwd), recorded=True)
            if not Path(cwd).is_dir():
                raise UserError(f"job working directory {cwd} does not exist; create it or pass another cwd")
        job_id, log_fd = self.files.new_log()
        child_env = task_environment(self._environ if self._environ is not None else os.environ, env or {})
        child_env[JOB_ENV] = job_id
        child_env[MANAGER_ENV] = self._manager_env
        # $PWD names the job's directory, as a shell (or make) would set it.
        child_env["PWD"] = str(Path(cwd).absolute()) if cwd is not None else os.getcwd()
        shell_argv = [*prefix, "/bin/sh", "-c", command]
        argv = shell_argv if prefix else command_argv(command, child_env.get("PATH", ""))
        timeout_prefix = _timeout_prefix(timeout + self.grace + TIMEOUT_MARGIN) if timeout is not None else []

        def spawn_job() -> Process:
            try:
                return spawn([*timeout_prefix, *argv], cwd=cwd, env=child_env, log_fd=log_fd)
            except OSError as e:  # a script without #!, a program gone since: the shell says what it can
                if argv == shell_argv or e.errno not in (errno.ENOEXEC, errno.EACCES, errno.ENOENT):
                    raise
                return spawn([*timeout_prefix, *shell_argv], cwd=cwd, env=child_env, log_fd=log_fd)

        try:
            proc = spawn_job()
        except BaseException:
            os.close(log_fd)
            raise
        record = JobRecord(
            id=job_id, command=command, owner=owner, pid=proc.pid, pgid=proc.pid,
            started_at=self.clock(), log=f"{self._rel}/{job_id}.log",
            cwd=str(cwd) if cwd is not None else None, timeout=timeout, task=task,
            manager_pid=self._pid, manager_start=self._pid_start)
        try:
            self.records.save(record)
        except BaseException:  # e.g. a full disk: a job nobody records or watches must not run on
            _abandon(proc, job_id)
            os.close(log_fd)
            raise
        job = WatchedJob(record, proc, exit_fd_of(proc), log_fd, ref)
        with self._cond:
            self._jobs[job_id] = job  # before the watcher has it: it may end at once
        started = record.model_copy()  # before the watcher has it: its end rewrites ``record``
        self.watcher.watch(job, timeout)
        return started

    def _on_exit(self, job: WatchedJob, code: int) -> None:
        """The watcher's report (on its thread): ``job`` ended with ``code``, its leader reaped."""
        record = job.record
        marker = self.records.kill_marker(record.id)  # left by ``kill`` in another process
        if marker.exists():
            job.reason = job.reason or "killed"
            marker.unlink(missing_ok=True)
        if (job.reason is None and code == -signal.SIGKILL and job.expires is not None
                and time.monotonic() >= job.expires):
            job.reason = "timeout"  # the ``timeout`` wrapper beat a late watcher
        status: JobStatus = job.reason or ("completed" if code == 0 else "failed")
        record.status = status
        record.exit_code = code
        record.finished_at = self.clock()
        size = os.fstat(job.log_fd).st_size  # the log is opened once: an empty one is not read
        os.close(job.log_fd)
        record.tail = read_tail(self.root / record.log, self.tail_bytes, self.secrets, size)
        self.files.scrub_log(self.root / record.log)  # now, or in a quiet moment (the job server)
        note = Notification(
            job_id=record.id, owner=record.owner, status=status, exit_code=code,
            tail=record.tail, log=record.log,
            duration=round(record.finished_at - record.started_at, 3), task=record.task, ref=job.ref,
            forced_after=self.grace if job.forced else None)
        if self.on_notify is not None:
            self.on_notify(note)  # first: the record's rename is off the consumer's critical path
        self._sweep(record.id)  # what the job left outside its group dies with it (strays.py)

        def recorded() -> None:  # the final record is on disk: kill() and shutdown() return with it
            with self._cond:
                self._jobs.pop(record.id, None)
                if self.on_notify is None:
                    self._queues[record.owner].append(note)
                self._cond.notify_all()
            job.done.set()

        self.records.save(record, then=recorded)

    def _sweep(self, job_id: str) -> None:
        if self.strays is not None:
            self.strays.sweep()
        else:
            procs.kill_marked(JOB_ENV, job_id)

    def _running(self) -> tuple[set[int], set[str]]:
        """Pids of the leaders not reaped yet, and their jobs' ids (``Strays.running``)."""
        with self._cond:
            live = [j for j in self._jobs.values() if not j.reaped]
        return {j.proc.pid for j in live}, {j.record.id for j in live}

    def stop_strays(self) -> None:
        """The server is stopping: every stray dies now, marked or not (strays.py)."""
        if self.strays is not None:
            self.strays.stop_all()

    # -- the job server ---------------------------------------------------------
    def serve(self, fd: int, on_readable: Callable[[], bool]) -> None:
        """Run the watcher on this thread, with ``fd`` in its epoll (the job server's loop).

        ``on_readable()`` is called whenever ``fd`` is readable (it may call
        ``start`` and ``begin_kill``); once it returns False the loop ends
        when no job is left (every final record written). One thread does
        everything, in this order of priority: exits and requests, then
        timeouts, then the deferred file work (files.py) when nothing else
        is ready (watcher.py).
        """
        self._environ = dict(os.environ)
        if self._subreaper:
            self.strays = Strays(self.watcher, self._running)
        self.watcher.serve(fd, on_readable, busy=self._busy)

    def _busy(self) -> bool:
        with self._cond:
            return bool(self._jobs)

    def begin_kill(self, job_id: str, reason: JobStatus = "killed") -> None:
        """SIGTERM the job's group now and SIGKILL it after the grace (the watcher does); no waiting.

        ``reason`` is the status the job is recorded with (``killed``, or ``lost``
        when its lead died)."""
        with self._cond:
            job = self._jobs.get(job_id)
        if job is None or job.escalated:
            return
        self.watcher.terminate(job, reason)

    # -- notifications ------------------------------------------------------
    def drain(self, owner: str) -> builtins.list[Notification]:
        """Pop every queued notification for ``owner`` (each is returned once)."""
        with self._cond:
            q = self._queues.get(owner)
            if not q:
                return []
            notes = builtins.list(q)
            q.clear()
            return notes

    def wait(self, owner: str, timeout: float | None = None) -> builtins.list[Notification]:
        """Block until ``owner`` has a notification (or ``timeout``), then drain."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._queues.get(owner)), timeout)
            return self.drain(owner)

    def running(self) -> builtins.list[JobRecord]:
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
                job.force()
            job.done.wait()
            return self.get(job_id)
        record = self.get(job_id)
        if record.status != "running":
            return record
        return self.orphans.kill(record)

    def reap_orphans(self, mine: bool = False) -> builtins.list[JobRecord]:
        """Mark ``lost`` every running job whose manager process is dead, killing its leftovers
        (also jobs that have no record yet; see orphans.py). ``mine``: also the jobs recorded with
        this manager as theirs (a lead whose job server died under it)."""
        return self.orphans.reap(mine)

    def unrecorded_orphans(self) -> builtins.list[Unrecorded]:
        """Live processes of jobs of this root that have no record and a dead manager (reported, not killed)."""
        return self.orphans.unrecorded()

    def shutdown(self) -> None:
        """Kill every job this manager runs (TERM, grace, KILL) and wait for their records."""
        with self._cond:
            jobs = builtins.list(self._jobs.values())
        for job in jobs:
            job.reason = job.reason or "killed"
            job.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        for job in jobs:
            if not job.done.wait(max(0.0, deadline - time.monotonic())):
                job.force()
        for job in jobs:
            job.done.wait(5.0)
        self.files.close()
