"""``kind: command`` tasks: any agent CLI as a teammate (docs/agents.md, "Agent CLIs as teammates").

A plan's ``team:`` member of kind ``command`` names a command line::

    team:
      - {name: codex, kind: command, command: "codex exec --full-auto",
         env: {OPENAI_API_KEY: $OPENAI_API_KEY}}

and every ``prompt:`` task assigned to it (``assignee: codex``) is run by that program instead of an
LLM teammate thread (plan/model.py gives such a task kind ``command``). ``CommandExecutor`` runs them:

1. **One at a time per member**: the member is one identity (one inbox, one ``team mcp --as NAME``),
   so its attempts queue; other members' run in parallel.
2. **The attempt becomes the member's**: ``TaskStore.hand_over`` passes it from the scheduler's
   claim to NAME with ``cli_member`` set, so over MCP the task is its own to update (the roster's
   ``update-own``); ``task_claimed`` fires naming it, as for an LLM teammate.
3. **What it is given**, under ``.team/agentcli/NAME/`` (``CliFiles``): ``mcp.json``, the team's
   MCP server in the format Claude Code, Codex and Cursor read (``{"mcpServers": {"team":
   {"command", "args", "env"}}}``: ``team mcp --root ROOT --as NAME``), and ``task-N.prompt``,
   the task's prompt (``cli_prompt``: the task, its workspace, how to reach the team and how to
   finish), fed to the program on stdin.
4. **The process** is a background job of the run's shell executor (run/shell.py): ``/bin/sh -c``
   of ``exec < PROMPT`` and the member's ``command``, in the task's ``cwd`` (its worktree under
   ``isolation: worktree``, whose commit and merge follow as for any task), in its own process
   group, with the task's ``timeout`` (TERM, grace, KILL), its output in the job's log, reaped by
   the next lead if this one dies, and nothing it starts outliving it. Its environment is the
   allow-list of core/environ.py, then the member's ``env`` (``$NAME`` from the lead's: no API
   key reaches it unless named there), the task's ``env``, the run's ``TEAM_*`` and::

       TEAM_AGENT=NAME  TEAM_MCP_CONFIG=<mcp.json>  TEAM_MCP_COMMAND=<the server's command line>

5. **Its end.** Over MCP the agent claims, messages and updates tasks like any client; its own
   ``completed``/``failed`` of its running task is *reported*, not recorded (tasks/edits.py
   ``_reported``), and recorded here when the process ends, after its work is merged, with the
   claim's epoch, as an LLM teammate's ``task_update`` is::

       reported completed        completed, with the result it gave (whatever its exit code)
       reported failed           failed, its result the error (retries apply)
       exit 0, nothing reported  completed, the tail of its output the result
       exit N, killed, timeout   failed, killed, timeout, as a shell task's

   A lead killed in between leaves the attempt in progress: the next run re-runs it (at least
   once), and the task is completed exactly once, never without its work.

The roster (``.team/config.json``) has each member with kind ``command``: ``working`` with its task
while a process runs, ``idle`` between, ``shutdown`` when the run ends; its heartbeat beats here.
``team shutdown NAME`` (``shutdown``, through the lead's control channel: the agent executor's
runtime forwards it here, else this executor serves it) stops its running process and drops its
queued attempts (each ends ``killed``: retries apply); there is no handshake with a program that
speaks no inbox protocol. A later task assigned to it starts it again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

from ..core import threads
from ..core.errors import ConflictError, TeamError, UnknownRef, UserError
from ..core.fsutil import atomic_write
from ..core.models import Status, Task
from ..core.paths import team_dir
from ..jobs.records import JobRecord
from ..plan.model import TeamMember
from ..tasks.store import TaskStore
from ..team.control import ControlServer
from ..team.roster import Team
from .executor import DoneCallback, Executor, ExecutorContext, Outcome

HEARTBEAT_EVERY = 2.0
"""Seconds between the heartbeats of the run's command members (``Team.stale_after`` is 30)."""
CLEARED = {"cli_member": None, "reported": None}
"""Fields an attempt's end clears: the next attempt is handed over afresh."""


def mcp_server(root: Path, name: str) -> tuple[str, list[str], dict[str, str]]:
    """``(command, args, env)`` that start ``team mcp --root ROOT --as NAME`` with this ``team``: its
    console script next to this interpreter, else ``python -m orchestrator`` with this package on
    ``PYTHONPATH``."""
    args = ["mcp", "--root", str(root), "--as", name]
    script = Path(sys.executable).parent / "team"
    if script.is_file() and os.access(script, os.X_OK):
        return str(script), args, {}
    package = Path(__file__).resolve().parents[2]
    return sys.executable, ["-m", "orchestrator", *args], {"PYTHONPATH": str(package)}


def mcp_command_line(root: Path, name: str) -> str:
    """``mcp_server`` as one shell command line (``TEAM_MCP_COMMAND``)."""
    command, args, env = mcp_server(root, name)
    prefix = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
    return shlex.join([*prefix, command, *args])


@dataclasses.dataclass(frozen=True)
class CliFiles:
    """What a command member is given, under ``.team/agentcli/NAME/``."""

    root: Path
    name: str

    @property
    def dir(self) -> Path:
        return team_dir(self.root) / "agentcli" / self.name

    @property
    def mcp_config(self) -> Path:
        return self.dir / "mcp.json"

    def prompt(self, task_id: int) -> Path:
        return self.dir / f"task-{task_id}.prompt"

    def write_config(self) -> Path:
        command, args, env = mcp_server(self.root, self.name)
        self.dir.mkdir(parents=True, exist_ok=True)
        config = {"mcpServers": {"team": {"command": command, "args": args, "env": env}}}
        atomic_write(self.mcp_config, json.dumps(config, indent=2) + "\n", durable=False)
        return self.mcp_config


def cli_prompt(task: Task, member: str, team: str, workspace: Path, mcp_config: Path, mcp_command: str) -> str:
    """What the agent CLI reads on stdin for one attempt (``workspace``: where it runs)."""
    title = f"Task #{task.id}" + (f" ({task.name})" if task.name else "")
    body = (task.prompt or task.description or task.subject).strip()
    where = f"Your workspace is {workspace}"
    if task.worktree:
        where += f", a git worktree on branch {task.branch}: what you change there is committed and merged when " \
                 "the task is done"
    return "\n".join([
        f"You are {member}, a member of team {team}, started for one task.", "",
        f"{title}, attempt {max(task.attempts, 1)}: {task.subject}", "", body, "",
        where + ".",
        f"The team's task graph and inboxes are an MCP server, `team` in {mcp_config} (the mcpServers "
        f"format Claude Code, Codex and Cursor read), or start it yourself: {mcp_command}. You are {member} "
        f"there: task #{task.id} is yours; read your inbox, message the lead or teammates, create tasks.",
        f"When it is done, call task_update(task={task.id}, status=\"completed\", result=...) with a short result "
        "(the run records it when you exit), or just exit 0: the end of your output becomes the result. If it "
        "cannot be done, set status \"failed\" with the reason, or exit non-zero.", ""])


def ended(out: Outcome, task: Task | None, epoch: int) -> Outcome:
    """The attempt's outcome from the process's end and what the agent reported (module docstring)."""
    reported = task.reported if task is not None and task.status == Status.in_progress else None
    if not reported or reported.get("epoch") != epoch:
        return out
    result = reported.get("result")
    if reported.get("status") == "completed":
        return dataclasses.replace(out, status="completed", error=None, result=result or "(no result given)")
    why = f"{reported.get('by')} reported it failed" + (f": {result}" if result else "")
    return dataclasses.replace(out, status="failed", error=why, result=result)


@dataclasses.dataclass
class _Attempt:
    task: Task
    epoch: int
    done: DoneCallback


class CommandExecutor:
    """``kind: command``: each attempt is the member's agent CLI, a job of ``shell`` (module docstring)."""

    kind = "command"
    inline_start = False  # start() hands the attempt over in the store: not inside its commit

    def __init__(self, ctx: ExecutorContext, shell: Executor, members: list[TeamMember]):
        self.ctx, self.shell = ctx, shell
        self.members = {m.name: m for m in members}
        self.store = ctx.store if ctx.store is not None else TaskStore(ctx.root)
        self.team = Team(ctx.root)
        self._lock = threading.Lock()  # guards _running, _queued
        self._running: dict[str, _Attempt] = {}  # member -> its attempt whose process runs
        self._queued: dict[str, deque[_Attempt]] = {name: deque() for name in self.members}
        self._shut: set[str] = set()  # shut down by a person: the roster says so until its next task
        self._stop = threading.Event()
        self._control: ControlServer | None = None
        for m in members:
            CliFiles(ctx.root, m.name).write_config()
            self.team.add(m.name, m.role, status="idle", exist_ok=True, kind="command", pid=os.getpid(), task=None,
                          command=m.command)
            self.team.heartbeat(m.name)
        self._beats = threads.start("team-cli-heartbeats", self._heartbeats, on_crash=ctx.stop.fail)

    # -- the executor ---------------------------------------------------------------
    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        if self._stop.is_set():
            done(Outcome(task.id, epoch, "killed", error="the run is shutting down"))
            return
        name = task.assignee or ""
        if name not in self.members:
            done(Outcome(task.id, epoch, "failed", error=f"cannot start task #{task.id}: {name!r} is not a kind: "
                                                         "command member of the plan"))
            return
        a = _Attempt(task, epoch, done)
        with self._lock:
            if name in self._running:
                self._queued[name].append(a)
                return
            self._running[name] = a
        self._launch(name, a)

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.start(task, epoch, done)

    def _launch(self, name: str, a: _Attempt) -> None:
        task, member, files = a.task, self.members[name], CliFiles(self.ctx.root, name)
        try:
            taken = self.store.hand_over(task.id, a.epoch, name, cli_member=name, reported=None)
        except (ConflictError, UnknownRef) as e:  # reclaimed or gone meanwhile: its end would be refused too
            self._end(name, a, Outcome(task.id, a.epoch, "failed", error=f"cannot start: {e}"))
            return
        self.ctx.hooks.fire("task_claimed", teammate=name, task=taken)
        with self._lock:
            self._shut.discard(name)
        self.team.update(name, status="working", task=task.id)
        try:
            prompt = files.prompt(task.id)
            command = mcp_command_line(self.ctx.root, name)
            workspace = Path(task.cwd) if task.cwd else (self.ctx.workspace or self.ctx.root)
            atomic_write(prompt, cli_prompt(task, name, self.ctx.plan, workspace, files.mcp_config, command),
                         durable=False)
        except OSError as e:
            self._end(name, a, Outcome(task.id, a.epoch, "failed", error=f"cannot start: {e}"))
            return
        env = {**member.env, **task.env, "TEAM_AGENT": name, "TEAM_MCP_CONFIG": str(files.mcp_config),
               "TEAM_MCP_COMMAND": command}
        script = f"exec < {shlex.quote(str(prompt))}\n{member.command}"
        job = task.model_copy(update={"command": script, "env": env})
        self.shell.start(job, a.epoch, lambda out: self._finished(name, a, out))

    def _finished(self, name: str, a: _Attempt, out: Outcome) -> None:
        """The process ended (a thread of the shell executor): decide the outcome, start the next."""
        try:
            task: Task | None = self.store.read(a.task.id)
        except (TeamError, OSError):
            task = None
        self._end(name, a, ended(out, task, a.epoch))

    def _end(self, name: str, a: _Attempt, out: Outcome) -> None:
        with self._lock:
            nxt = self._queued[name].popleft() if self._queued[name] and not self._stop.is_set() else None
            if nxt is None:
                self._running.pop(name, None)
            else:
                self._running[name] = nxt
            shut = name in self._shut
        if nxt is None and not self._stop.is_set() and not shut:
            self.team.update(name, status="idle", task=None)
        a.done(dataclasses.replace(out, fields={**(out.fields or {}), **CLEARED}))
        if nxt is not None:
            self._launch(name, nxt)

    def cancel(self, task_id: int) -> None:
        dropped = []
        with self._lock:
            for q in self._queued.values():
                dropped += [a for a in q if a.task.id == task_id]
                kept = [a for a in q if a.task.id != task_id]
                q.clear()
                q.extend(kept)
        for a in dropped:
            a.done(Outcome(a.task.id, a.epoch, "killed", error="cancelled before it started"))
        self.shell.cancel(task_id)

    def reap_orphans(self) -> list[JobRecord]:
        return self.shell.reap_orphans()

    def close(self) -> None:
        """Stop every process (their attempts end ``killed``), the control server and the heartbeats."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._control is not None:
            self._control.close()
        with self._lock:
            queued = [a for q in self._queued.values() for a in q]
            for q in self._queued.values():
                q.clear()
        for a in queued:
            a.done(Outcome(a.task.id, a.epoch, "killed", error="the run is shutting down"))
        self.shell.close()  # running processes end (TERM, grace, KILL); their outcomes come back first
        self._beats.join(timeout=10)
        for name in self.members:
            self.team.update(name, status="shutdown", task=None)

    # -- people's controls -------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self.members)

    def shutdown(self, name: str, reason: str = "") -> dict[str, Any]:
        """``team shutdown NAME``: stop its running process and drop its queued attempts (module docstring)."""
        if name not in self.members:
            raise UserError(f"{name} is not a kind: command member of this run; its command members: "
                            f"{', '.join(self.names()) or 'none'}")
        with self._lock:
            running = self._running.get(name)
            queued = list(self._queued[name])
            self._queued[name].clear()
            self._shut.add(name)
        for a in queued:
            a.done(Outcome(a.task.id, a.epoch, "killed", error=f"{name} was shut down before it started"))
        if running is not None:
            self.shell.cancel(running.task.id)
        self.team.update(name, status="shutdown", task=None)
        what = f"its process for task #{running.task.id} was stopped" if running is not None else "it was not running"
        return {"name": name, "kind": "command", "approved": True, "stopped": True, "forced": False,
                "timed_out": False, "request_id": None,
                "text": f"{what} (an agent CLI teammate has no shutdown handshake)" + (f"; {reason}" if reason else "")}

    def serve_control(self) -> None:
        """Take ``team shutdown`` requests when no teammate runtime does (a plan without LLM teammates)."""
        def handle(op: str, args: dict[str, Any]) -> dict[str, Any]:
            if op != "shutdown":
                raise UserError(f"the running lead takes no `{op}` requests: its plan has no LLM teammates")
            return self.shutdown(str(args.get("name", "")), str(args.get("reason") or ""))

        self._control = ControlServer(self.ctx.root, handle, ["shutdown"], on_crash=self.ctx.stop.fail).start()

    def _heartbeats(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY):
            for name in self.members:
                self.team.heartbeat(name)

