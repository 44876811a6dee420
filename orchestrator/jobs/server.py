"""Where ``team run``'s shell jobs are started and watched: a job server process, or in-process.

Two backends with one interface (``start(ref, ...)``, ``kill(ref)``,
``close()``; outcomes come back through ``on_note(ref, Notification)`` and
``on_error(ref, message)`` on a background thread). ``ref`` is the caller's
name for one attempt; it travels in the notification, so an outcome is
matched to its attempt even when the job ends before ``start`` returns.

* ``JobServer``: a helper process forked from the lead that runs an
  ordinary ``manager.JobManager``. The lead only writes a request line per
  start (~30 µs); the server spawns, watches the pidfd, reaps and reads the
  tail, on the other core and under its own GIL. Measured on the 2-core VM:
  a job start cost the lead's thread ~0.6 ms in-process, and a layer of 8
  ready tasks started one after another behind it (``bench/sched_bench.py``,
  layers shape).

  The server is one thread: ``JobManager.serve`` runs the manager's watcher
  loop (watcher.py) with the request pipe in it, so a request, an exit and
  a timeout are handled as they come, with no thread hand-off, and a kill
  never blocks (``begin_kill``: TERM now, KILL after the grace, by the
  loop). File work that no one waits for — job records, log files for the
  next starts — is deferred to the loop's quiet moments (files.py: spare
  logs, deferred records), because creating a file costs 0.1-0.8 ms of
  kernel time on this VM while its journal is busy.
* ``LocalJobs``: the same ``JobManager`` in the lead process (``start``
  blocks for the fork). Used when forking is not safe — another thread is
  already running (a fork copies only the calling thread, and locks held by
  the others stay held in the child) — or when ``TEAM_JOB_SERVER=0``.

The server, forked before the lead starts any thread, has the lead's modules
imported already (no interpreter start-up: the fork costs ~3 ms). Its life:

* The server is the *subreaper* of its jobs: whatever a job leaves behind
  outside its process group (``setsid cmd &``, a daemon) is reparented to it
  and killed when its job ends (strays.py), and every such process is
  killed when the server stops; it exits only once none is left.
* A killed lead takes its jobs with it: the server sees end of file on its
  request pipe (the kernel closes a dead process's fds), stops every job it
  runs (TERM, grace, KILL) and records them ``lost``, kills what they left
  behind, then exits. The server
  deliberately has no parent-death signal: one would race with that end of
  file (SIGKILL could land before or after the server began stopping its
  jobs, so the jobs lived or died by chance). Only a server that is itself
  SIGKILLed leaves its jobs running; they carry the lead as their manager
  (``JobManager(manager=...)``), so the next lead's ``reap_orphans`` kills
  them and marks them ``lost``.
* It keeps only its two pipes (everything else it inherited, such as the
  lead lock's fd, is closed; stdin/stdout/stderr become ``/dev/null``), with
  the garbage collector off, so no inherited object is finalised there.
* SIGINT/SIGTERM/SIGHUP are caught and ignored (a Ctrl-C reaches the whole
  foreground group; the lead decides). They are caught, not ignored, so
  jobs it starts get the default handling back at exec.
* ``shutdown`` (the lead's ``close``): the server kills its running jobs
  (TERM, grace, KILL, as ``JobManager.shutdown``), sends their notifications,
  writes their records, removes its spare logs, then ``bye``. End of file on
  its request pipe (the lead exited without ``close``, or was killed) does
  the same, with the jobs recorded ``lost`` (their manager is gone).

Protocol, one JSON object per line::

    lead → server   {"op": "start", "ref", "command", "owner", "cwd", "env", "timeout", "task"}
                    {"op": "kill", "ref"}        {"op": "shutdown"}
    server → lead   {"op": "note", "ref", ...Notification}
                    {"op": "error", "ref", "error"}   the job could not start; nothing runs
                    {"op": "bye", "errors": [records it could not write]}

The lead reads a note (one per job, on its reader thread, under its GIL)
straight into a ``Notification`` with pydantic's JSON parser, in one pass:
the ``op`` key is ignored as extra (``_note_of``).

A request that cannot start (a NUL byte in its command or environment, a
name no environment can hold, a working directory that is gone: refused by
``JobManager.start``, or an ``OSError``/``ValueError`` of the spawn) fails
that one job with an ``error`` reply; the server and every other job go on.

If the server dies unexpectedly (end of file without a ``bye``), the lead
hears it as ``JobServerDied`` (``on_crash``: ``team run`` stops at once,
rather than fail every later start), every attempt still out is reported as
an error, and the lead kills the dead server's jobs from their records and
markers (``JobManager.reap_orphans(mine=True)``, through the executor).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core import procs, threads
from ..core.errors import JobServerDied, TeamError
from ..core.threads import Crash
from .manager import JobManager
from .records import JobStatus, Notification

SPARE_LOGS = 16
"""Log files the server keeps created ahead, so a start creates no file (files.py)."""

OnNote = Callable[[str, Notification], None]
OnError = Callable[[str, str], None]
ENV_SWITCH = "TEAM_JOB_SERVER"


class LocalJobs:
    """The job manager in this process; ``start`` blocks for the fork (~0.6 ms)."""

    blocking = True
    errors: list[str] = []  # job records it could not write: none, it writes them as jobs end
    died = None  # (it cannot die under us: it is us)

    def __init__(self, root: Path, on_note: OnNote, on_error: OnError, on_crash: Crash | None = None):
        self.manager = JobManager(root, on_notify=lambda n: on_note(n.ref or "", n), on_crash=on_crash)
        self._ids: dict[str, str] = {}  # ref -> job id
        self._lock = threading.Lock()

    def start(self, ref: str, command: str, *, owner: str, cwd: Path | None, env: dict[str, str],
              timeout: float | None, task: int | None) -> None:
        record = self.manager.start(command, ref=ref, owner=owner, cwd=cwd, env=env, timeout=timeout, task=task)
        with self._lock:
            self._ids[ref] = record.id

    def kill(self, ref: str) -> None:
        with self._lock:
            job_id = self._ids.get(ref)
        if job_id is not None:
            self.manager.kill(job_id)

    def forget(self, ref: str) -> None:
        with self._lock:
            self._ids.pop(ref, None)

    def close(self) -> None:
        self.manager.shutdown()


_encode = json.JSONEncoder(separators=(",", ":")).encode
"""One JSON line of the protocol, without a new encoder per message (what ``json.dumps`` builds)."""
_NOTE = b'{"op":"note",'
"""How a note line starts (``send`` writes the op first)."""


def _note_of(line: bytes) -> Notification:
    """A note line as its ``Notification``, parsed by pydantic straight from the JSON (the ``op``
    key is ignored as extra); text its parser refuses (a lone surrogate, which ``json`` escapes
    and reads back) goes through ``json.loads`` instead."""
    try:
        return Notification.model_validate_json(line)
    except ValidationError:
        return Notification.model_validate(json.loads(line))


def _lines(fd: int) -> Iterator[bytes]:
    """Yield each complete line read from ``fd`` until end of file."""
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        *lines, buf = buf.split(b"\n")
        yield from lines


class JobServer:
    """Lead side of a forked job server (see the module docstring)."""

    blocking = False

    def __init__(self, pid: int, requests: int, replies: int, on_note: OnNote, on_error: OnError,
                 on_crash: Crash | None = None):
        self.pid = pid
        self.on_crash = on_crash
        self.died: JobServerDied | None = None  # set when the server went away without its bye
        self._requests = requests
        self._on_note, self._on_error = on_note, on_error
        self._write_lock = threading.Lock()
        self._out: set[str] = set()  # refs started and not yet reported
        self._out_lock = threading.Lock()
        self._bye = threading.Event()
        self.errors: list[str] = []  # job records the server could not write (sent with its bye)
        self._closing = False  # close() began (it runs once)
        self._closed = False  # the request pipe is closed
        self._reader = threads.start("team-job-server-reader", lambda: self._read(replies), on_crash=on_crash)

    # -- starting the server --------------------------------------------------
    @classmethod
    def usable(cls) -> bool:
        """Forking is safe here (one thread) and not switched off."""
        return (os.environ.get(ENV_SWITCH, "1") != "0" and hasattr(os, "fork")
                and threading.active_count() == 1 and threading.current_thread() is threading.main_thread())

    @classmethod
    def fork(cls, root: Path, on_note: OnNote, on_error: OnError, on_crash: Crash | None = None) -> JobServer:
        """Fork the server (call only when ``usable()``). ``on_crash``: told when the server dies
        under us (``JobServerDied``) or the reader thread does (``ThreadDied``)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        lead_pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the server: never returns
            code = 1
            try:
                _serve(Path(root), req_r, rep_w, lead_pid)
                code = 0
            finally:
                os._exit(code)
        os.close(req_r)
        os.close(rep_w)
        return cls(pid, req_w, rep_r, on_note, on_error, on_crash)

    # -- requests ---------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> None:
        data = (_encode(msg) + "\n").encode()
        with self._write_lock:
            if self._closed:
                raise TeamError("the job server is closed")
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self._requests, view)
                except BrokenPipeError:
                    raise TeamError("the job server died") from None
                view = view[n:]

    def start(self, ref: str, command: str, *, owner: str, cwd: Path | None, env: dict[str, str],
              timeout: float | None, task: int | None) -> None:
        with self._out_lock:
            self._out.add(ref)
        try:
            self._send({"op": "start", "ref": ref, "command": command, "owner": owner,
                        "cwd": str(cwd) if cwd is not None else None, "env": env, "timeout": timeout,
                        "task": task})
        except TeamError:
            with self._out_lock:
                self._out.discard(ref)
            raise

    def kill(self, ref: str) -> None:
        try:
            self._send({"op": "kill", "ref": ref})
        except TeamError:
            return  # gone: its attempts are reported as errors by the reader

    def forget(self, ref: str) -> None:
        """Nothing to forget here: the server drops a ref when its job ends."""

    def close(self, timeout: float = 30.0) -> None:
        """Kill the running jobs (their notifications arrive first), then stop the server.
        A second call does nothing (an aborting run closes its executors, then the runner does)."""
        with self._write_lock:
            if self._closing:
                return
            self._closing = True
        try:
            self._send({"op": "shutdown"})
        except TeamError:
            pass  # already gone: the reader reports what was out
        self._bye.wait(timeout)
        with self._write_lock:
            self._closed = True
            os.close(self._requests)
        self._reader.join(timeout)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass  # reaped already

    # -- replies ------------------------------------------------------------------
    def _read(self, fd: int) -> None:
        try:
            for line in _lines(fd):
                if line.startswith(_NOTE):  # the common reply: one parse, straight into the model
                    note = _note_of(line)
                    ref = note.ref or ""
                    with self._out_lock:
                        self._out.discard(ref)
                    self._on_note(ref, note)
                    continue
                msg = json.loads(line)
                op = msg.pop("op")
                if op == "bye":
                    self.errors = msg.get("errors") or []
                    self._bye.set()
                    continue
                ref = msg.pop("ref")
                with self._out_lock:
                    self._out.discard(ref)
                self._on_error(ref, msg.get("error") or "the job could not start")
        finally:
            os.close(fd)
            if not self._bye.is_set():  # end of file without a bye: the server died under us
                self.died = JobServerDied(
                    f"the job server (pid {self.pid}) died ({_how_it_ended(self.pid)}); the run stopped, and "
                    "the jobs it ran are killed and recorded lost. Run again to resume")
                if self.on_crash is not None:
                    self.on_crash(self.died)  # first: the run stops before it hears of the lost attempts
            with self._out_lock:
                lost, self._out = sorted(self._out), set()
            for ref in lost:
                self._on_error(ref, "the job server died; the job may still run (the next lead reaps it)")
            self._bye.set()


def _how_it_ended(pid: int) -> str:
    """``killed by signal 9 (SIGKILL)`` or ``exit code 1``: the dead server, reaped here."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "already reaped"
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"killed by signal {-code} ({signal.Signals(-code).name})"
    return f"exit code {code}"


# -- the server process ---------------------------------------------------------------
def _keep_only(fds: set[int]) -> None:
    """Close every inherited fd but ``fds``; stdin, stdout and stderr become /dev/null."""
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    fds = fds | {0, 1, 2}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in fds:
            try:
                os.close(fd)
            except OSError:
                continue  # the listing's own fd, closed already


def _serve(root: Path, requests: int, replies: int, lead_pid: int) -> None:
    gc.disable()
    _keep_only({requests, replies})
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)

    lead_gone = False

    def send(msg: dict[str, Any]) -> None:
        nonlocal lead_gone
        view = memoryview((_encode(msg) + "\n").encode())
        while view and not lead_gone:
            try:
                view = view[os.write(replies, view):]
            except BrokenPipeError:  # the lead is dead: nobody reads; the records still get written
                lead_gone = True

    ids: dict[str, str] = {}  # ref -> job id, while it runs

    def on_notify(n: Notification) -> None:
        ids.pop(n.ref or "", None)
        send({"op": "note", **n.model_dump()})

    manager = JobManager(root, on_notify=on_notify, manager=(lead_pid, procs.start_ticks(lead_pid)),
                         spares=SPARE_LOGS, deferred_records=True, subreaper=True)
    buf = bytearray()

    def on_requests() -> bool:
        """Handle every complete request line; False (stop reading) on shutdown or end of file."""
        chunk = os.read(requests, 65536)
        if not chunk:  # the lead exited without ``shutdown``: it died, or was killed
            return _stop("lost")
        buf.extend(chunk)
        *lines, rest = bytes(buf).split(b"\n")
        buf[:] = rest
        for line in lines:
            msg = json.loads(line)
            op = msg.pop("op")
            if op == "shutdown":
                return _stop("killed")
            ref = msg.pop("ref")
            if op == "kill":
                if ref in ids:
                    manager.begin_kill(ids[ref])
                continue
            cwd = msg.pop("cwd")
            try:
                record = manager.start(msg.pop("command"), ref=ref, cwd=Path(cwd) if cwd else None, **msg)
            except (OSError, ValueError, TeamError) as e:  # this job cannot start; the others go on
                send({"op": "error", "ref": ref, "error": str(e)})
                continue
            ids[ref] = record.id
        return True

    def _stop(reason: JobStatus) -> bool:
        """Kill what runs (TERM, grace, KILL: the loop goes on until every job has ended) and
        every process a job left behind (strays.py: the loop goes on until none is left)."""
        for job_id in list(ids.values()):
            manager.begin_kill(job_id, reason)
        manager.stop_strays()
        return False

    manager.serve(requests, on_requests)  # returns once the requests ended and no job is left
    manager.files.close()
    send({"op": "bye", "errors": manager.files.write_errors})
