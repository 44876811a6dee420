"""``HookDispatcher``: the one place hooks run (docs/hooks.md).

    fire(event, teammate=, task=, **extra)    queued; a worker thread runs the event's
                                              commands in order (notifications)
    decide(event, teammate=, task=, **extra)  runs them now, on the caller's thread;
                                              the first that exits 2 vetoes (Verdict)
    tool_call(call, teammate=, task=, limit=) the tool_call hooks whose ``match`` takes the
                                              call, now; exit 2 vetoes, and so does a hook
                                              that fails (fail closed, below)

Each command runs as ``/bin/sh -c RUN`` in its own session (process group),
in the run's workspace, with the allow-listed environment (core/environ.py)
plus ``TEAM_ROOT``, ``TEAM_PLAN`` and ``TEAM_HOOK_EVENT``, and the event's
JSON payload on stdin::

    {"event": "task_completed", "teammate": "alice",
     "task": {...the task record...}, "run": {"plan": ..., "root": ..., "workspace": ..., "pid": ...},
     ...event extras: "outcome", "message", "counts"...}

Exit 0: fine. Exit 2 on a ``VETO_EVENTS`` event: a veto, with the hook's
stderr as the feedback. Any other exit (a crash, a command not found),
exit 2 on an event that cannot be vetoed, a hook that cannot start, and
one still running after its timeout (its whole process group is killed
with SIGKILL) are *reported*: a line through ``report`` (``team run``
prints it) and ``failed`` counts them; none of them stops the run or
changes a task -- except for ``tool_call``: a guard that crashed, timed out or could not
start refuses the call it was asked about (``Verdict.failed``), since letting an unchecked
``rm -rf`` through is worse than a refused call the agent can work around; it is reported
all the same. A ``tool_call`` hook never runs past the task's time left (``limit``). Every
run of a hook is a line of ``.team/hooks.jsonl``
(event, command, status, exit code, seconds, the tails of stdout and
stderr), scrubbed of the credentials of the lead's environment
(core/redact.py) before it is written, like the veto's feedback.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import procs, threads
from ..core.environ import task_environment
from ..core.fsutil import append_line, file_lock
from ..core.hooks import VETO_EVENTS, HookCommand, HookEvent, HooksConfig, ToolCall, Verdict
from ..core.models import Message, Task
from ..core.paths import team_dir
from ..core.redact import Secrets
from ..core.threads import Crash

LEAD = "lead"
"""Who claims a plan's tasks in ``team run`` (the scheduler's owner)."""

TAIL = 4000
"""Characters of a hook's stdout and stderr kept in ``.team/hooks.jsonl`` (the last ones)."""
REAP_GRACE = 5.0
"""Seconds to collect a killed hook's output before giving up on it (a grandchild outside its group)."""


@dataclass(frozen=True)
class HookRun:
    """One run of one hook command."""

    event: str
    command: str
    status: str  # ok | veto | failed | timeout | error
    exit_code: int | None
    seconds: float
    stdout: str
    stderr: str
    task: int | None = None

    def describe(self) -> str:
        where = f"{self.event}" + (f", task #{self.task}" if self.task is not None else "")
        head = f"hook `{self.command}` ({where})"
        last = self.stderr.strip().splitlines()[-1:] or self.stdout.strip().splitlines()[-1:]
        said = f": {last[0][:200]}" if last else ""
        if self.status == "timeout":
            return f"{head} timed out after {self.seconds:.0f}s: its process group was killed"
        if self.status == "error":
            return f"{head} could not start{said}"
        if self.exit_code == 2 and self.event not in VETO_EVENTS:
            return f"{head} exited 2, but {self.event} cannot be vetoed (ignored){said}"
        code = f"was killed by signal {-self.exit_code}" if self.exit_code is not None and self.exit_code < 0 \
            else f"exited {self.exit_code}"
        return f"{head} {code}{said}"


_STOP = object()


class HookDispatcher:
    """Runs a run's hooks (see the module docstring). Thread-safe."""

    def __init__(self, config: HooksConfig, root: Path, *, plan: str = "", workspace: Path | None = None,
                 environ: Mapping[str, str] | None = None, secrets: Secrets | None = None,
                 report: Callable[[str], None] | None = None, on_crash: Crash | None = None):
        self.config, self.root, self.plan = config, Path(root).absolute(), plan
        self.workspace = Path(workspace).absolute() if workspace is not None else self.root
        self.environ = dict(os.environ if environ is None else environ)
        self.secrets = secrets if secrets is not None else Secrets.from_environ(self.environ)
        self.report, self.on_crash = report, on_crash
        self.runs: list[HookRun] = []
        self._lock = threading.Lock()  # guards runs and the worker
        self._queue: queue.Queue[Any] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._closed = False

    @property
    def log_path(self) -> Path:
        return team_dir(self.root) / "hooks.jsonl"

    @property
    def failed(self) -> list[HookRun]:
        """The runs reported: crashed, timed out, could not start."""
        with self._lock:
            return [r for r in self.runs if r.status in ("failed", "timeout", "error")]

    # -- the seams --------------------------------------------------------------
    def wants(self, event: HookEvent) -> bool:
        return bool(self.config.commands(event))

    def fire(self, event: HookEvent, *, teammate: str | None = None, task: Task | None = None,
             **extra: Any) -> None:
        if not self.config.commands(event):
            return
        payload = self.payload(event, teammate=teammate, task=task, **extra)
        with self._lock:
            if self._closed:
                return
            if self._worker is None:
                self._worker = threads.start("team-hooks", self._drain, on_crash=self.on_crash)
        self._queue.put((event, payload, task.id if task is not None else None))

    def decide(self, event: HookEvent, *, teammate: str | None = None, task: Task | None = None,
               **extra: Any) -> Verdict:
        commands = self.config.commands(event)
        if not commands:
            return Verdict()
        payload = self.payload(event, teammate=teammate, task=task, **extra)
        return self._run_all(event, payload, task.id if task is not None else None)

    def tool_call(self, call: ToolCall, *, teammate: str, task: Task | None = None,
                  limit: float | None = None) -> Verdict:
        commands = [c for c in self.config.tool_call if c.matches(call)]
        if not commands:
            return Verdict()
        payload = self.payload("tool_call", teammate=teammate, task=task, tool=call.payload())
        return self._run_all("tool_call", payload, task.id if task is not None else None, commands, limit)

    def task_observer(self, event: HookEvent, task: Task) -> None:
        """The task store's ``TaskObserver``: the task's owner is the teammate.

        The lead's claim of a plan's agent task is not announced: the teammate that takes the
        attempt over announces ``task_claimed`` with its own name (runtime/teammate.py; an agent
        CLI's executor for it, run/command.py)."""
        if event == "task_claimed" and task.kind in ("agent", "command") and task.plan and task.owner == LEAD:
            return
        self.fire(event, teammate=task.owner or None, task=task)

    def message_observer(self, message: Message) -> None:
        """The bus's ``MessageObserver``."""
        self.fire("message_sent", teammate=message.sender, message=message.to_json())

    def flush(self) -> None:
        """Wait until every fired hook has run."""
        self._queue.join()

    def close(self) -> None:
        """Run what was fired, then stop the worker; later fires do nothing."""
        with self._lock:
            self._closed = True
            worker = self._worker
        if worker is not None:
            self._queue.put(_STOP)
            worker.join()

    # -- running ----------------------------------------------------------------
    def payload(self, event: HookEvent, *, teammate: str | None, task: Task | None, **extra: Any) -> dict[str, Any]:
        return {"event": event, "teammate": teammate, "task": task.to_json() if task is not None else None,
                "run": {"plan": self.plan, "root": str(self.root), "workspace": str(self.workspace),
                        "pid": os.getpid()}, **extra}

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                event, payload, task_id = item
                self._run_all(event, payload, task_id)
            finally:
                self._queue.task_done()

    def _run_all(self, event: HookEvent, payload: dict[str, Any], task_id: int | None,
                 commands: list[HookCommand] | None = None, limit: float | None = None) -> Verdict:
        data = self.secrets.scrub(json.dumps(payload)).encode()
        for cmd in self.config.commands(event) if commands is None else commands:
            run = self._run_one(event, cmd, data, task_id, limit)
            if run.status == "veto":
                feedback = run.stderr.strip() or run.stdout.strip() or f"vetoed by hook `{cmd.run}` (no reason given)"
                return Verdict(True, feedback, self.secrets.scrub(cmd.run))
            if event == "tool_call" and run.status != "ok":  # fail closed: see the module docstring
                return Verdict(True, self.secrets.scrub(run.describe()), self.secrets.scrub(cmd.run), failed=True)
        return Verdict()

    def _run_one(self, event: HookEvent, cmd: HookCommand, data: bytes, task_id: int | None,
                 limit: float | None = None) -> HookRun:
        timeout = cmd.timeout if cmd.timeout is not None else self.config.timeout
        if limit is not None:
            timeout = max(min(timeout, limit), 0.001)
        env = task_environment(self.environ, {"TEAM_ROOT": str(self.root), "TEAM_PLAN": self.plan,
                                              "TEAM_HOOK_EVENT": event})
        started = time.monotonic()
        code: int | None = None
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", cmd.run], cwd=self.workspace, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            run = HookRun(event, cmd.run, "error", None, 0.0, "", f"{type(e).__name__}: {e}", task_id)
            return self._record(run)
        try:
            out, err = proc.communicate(data, timeout=timeout)
            code = proc.returncode
            status = "ok" if code == 0 else "veto" if code == 2 and event in VETO_EVENTS else "failed"
        except subprocess.TimeoutExpired:
            procs.killpg(proc.pid, signal.SIGKILL)  # the hook and everything it started
            try:
                out, err = proc.communicate(timeout=REAP_GRACE)
            except subprocess.TimeoutExpired:  # a grandchild that left the group holds the pipes
                proc.kill()
                out, err = b"", b""
                proc.wait()
            status = "timeout"
        run = HookRun(event, cmd.run, status, code, time.monotonic() - started,
                      self._text(out), self._text(err), task_id)
        return self._record(run)

    def _text(self, data: bytes) -> str:
        return self.secrets.scrub(data.decode("utf-8", "replace")[-TAIL:])

    def _record(self, run: HookRun) -> HookRun:
        with self._lock:
            self.runs.append(run)
        line = {"time": time.time(), "event": run.event, "command": self.secrets.scrub(run.command),
                "status": run.status, "exit_code": run.exit_code, "seconds": round(run.seconds, 3),
                "task": run.task, "stdout": run.stdout, "stderr": run.stderr}
        path = self.log_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.with_name("hooks.lock")):
            append_line(path, line, durable=False)
        if run.status in ("failed", "timeout", "error") and self.report is not None:
            self.report(self.secrets.scrub(run.describe()))
        return run
