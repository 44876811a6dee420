"""Teammates: named agent threads inside the lead process, and the runtime owning them.

``TeamRuntime`` (one per lead) holds the shared services -- roster
(``team.Team``), bus (``inbox.Bus``), store, job manager, tool registry --
and one ``Teammate`` per name. Each teammate is a thread running a full
agent loop (agent.py) over its own conversation and transcript::

    spawn ─► idle ──(assignment | inbox message | job notification)──► working
               ▲                                                        │
               └──────────── run ends (answer / task done / idle) ◄─────┘
    shutdown (runtime closing): the roster says so; the thread exits

* Work arrives three ways: a task assignment from the agent executor (its
  queue), a message in its inbox (``team send``, a teammate, the lead), or a
  notification of a background job it started. An idle teammate blocks in
  ``Bus.wait_unread`` -- woken at once by a send from this process, by a
  cheap stat poll for senders in other processes -- in ``idle_slice``
  pieces between which it checks its queue, its job notifications and the
  stop flag. A woken turn whose messages were all seen before (a resume)
  makes no model call.
* A task attempt: the teammate records ``task`` in its transcript, sets
  ``ctx.task_id`` (so ``task_update`` on it ends the attempt), runs the loop
  with the task prompt, and hands the ``RunResult`` to the assignment's
  ``done``. The idle tool inside a task means "wait for messages": the
  teammate waits, then continues the same attempt within the same step budget.
* Roster (``.team/config.json``): status working/idle/shutdown, current task,
  pid, usage totals (across restarts). A heartbeat thread beats for every
  live teammate every ``heartbeat_every`` seconds, so ``team status`` can tell
  a live idle teammate from a dead one, even during a long model call.
* Choosing a teammate for a task (``assign``): the task's ``assignee``
  (spawned if absent), else an idle teammate of the task's role, else a new
  one named ``<role>-<n>``. A name reused after a crash resumes its transcript.
* Autonomous claiming (autoclaim.py, ``autoclaim=True``): an idle teammate
  with nothing queued claims a ready non-plan task matching its name/role
  (store CAS) and records its end with ``TaskStore.finish`` and the claim's
  epoch; the runtime's heartbeat renews those leases.
* Protocols (protocols.py): ``_protocol`` sees every fetched message before
  the model. An idle teammate approves a ``shutdown_request`` itself and its
  thread ends; a busy one leaves it to the model (``respond_shutdown``). A
  ``plan_approval_response`` approving the pending plan switches a plan-mode
  teammate (``ctx.mode == "plan"``: write/execute tools refused) to normal.
* Worktree isolation: an ``Assignment`` may carry a ``workspace`` (the task's
  worktree); the tools work there for that attempt.
* ``team spawn`` reaches a running lead through control.py (``serve_control``).
* Subagents (``SubagentRunner``): a fresh agent with an empty conversation,
  no inbox, no jobs, no teammates and no subagent tool (no nesting); its
  final answer is the tool result.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import protocols
from .agent import DEFAULT_MAX_STEPS, Agent, RunResult
from .autoclaim import AutoClaimer
from .errors import ConflictError, UserError
from .inbox import Bus
from .jobs import JobManager
from .llm import ChatModel
from .models import Task
from .paths import team_dir
from .pricing import Usage
from .roles import Role, check_tools, get_role
from .store import TaskStore
from .team import LEAD, Team, check_name
from .tools import FileTruth, ToolContext
from .tools.base import ToolError
from .tools.coordination import HARNESS_TOOLS, agent_registry
from .transcript import Transcript, transcript_path

log = logging.getLogger("orchestrator.teammates")

NO_SUBAGENT_TOOLS = frozenset({"subagent", "spawn_teammate", "list_teammates", "idle", "send_message",
                               "broadcast", "read_inbox", "background_run", "check_background"})
Done = Callable[[RunResult], None]


@dataclass
class Assignment:
    task: Task
    epoch: int
    done: Done
    workspace: Path | None = None  # where the attempt works (its worktree), else the runtime's


def task_prompt(task: Task, resumed: bool) -> str:
    """The user message that starts a task attempt."""
    title = f"Task #{task.id}" + (f" ({task.name})" if task.name else "")
    body = (task.prompt or task.description or task.subject).strip()
    lines = [f"{title}, attempt {max(task.attempts, 1)}: {task.subject}", "", body, ""]
    if resumed:
        lines += ["You were working on this task when you were restarted; the conversation above shows how "
                  "far you got. Check the workspace and continue from there.", ""]
    lines.append(f"When it is done, call task_update(task={task.id}, status=\"completed\", result=...) with a "
                 "short result, or answer in plain text. If it cannot be done, set status \"failed\" with the reason.")
    return "\n".join(lines)


class Teammate:
    """One named agent thread. Its state changes only on its own thread, except the queue (locked)."""

    def __init__(self, rt: TeamRuntime, name: str, role: Role, model: ChatModel, prompt: str | None,
                 plan_mode: bool = False):
        self.rt, self.name, self.role, self.first_prompt = rt, name, role, prompt
        self.queue: deque[Assignment] = deque()
        self.current: Assignment | None = None
        self.busy = prompt is not None
        self.stop = threading.Event()
        member = next((m for m in rt.team.members() if m.name == name), None)
        self.base_usage = Usage(**member.usage) if member is not None and member.usage else Usage()
        self.ctx = rt.tool_context(name)
        self.ctx.mode = "plan" if plan_mode else "normal"
        self.ctx.extra["protocol"] = self
        self.plan_request: str | None = None  # id of the plan awaiting the lead's approval
        self.shutdown_requests: dict[str, str] = {}  # request id -> requester, not answered yet
        tools = list(dict.fromkeys([*role.tools, *HARNESS_TOOLS, *(["submit_plan"] if plan_mode else [])]))
        self.agent = Agent(
            name=name, role=role, model=model, tools=rt.registry.only(tools), ctx=self.ctx,
            transcript=Transcript(transcript_path(rt.root, name)), team_name=rt.team_name,
            inbox=self._fetch, jobs=rt.jobs, roster=rt.team.members, max_steps=rt.max_steps,
            on_usage=self._usage)
        self.thread = threading.Thread(target=self._main, name=f"teammate-{name}", daemon=True)

    # -- plumbing -------------------------------------------------------------
    def _fetch(self, seen: set[str]) -> tuple[list[Any], Callable[[], None]]:
        batch = self.rt.bus.fetch(self.name, seen=seen)
        for m in batch.messages:
            self._protocol(m)
        return batch.messages, batch.ack

    # -- protocols (protocols.py): the harness acts before the model reads the message ----------
    def _protocol(self, m: Any) -> None:
        if m.type == "shutdown_request" and m.request_id:
            if self.current is None and not self.queue:  # idle: approve without asking the model
                protocols.respond(self.rt.bus, m.sender, "shutdown_response", m.request_id, True,
                                  "idle: shutting down", sender=self.name)
                self.stop.set()
            else:
                self.shutdown_requests[m.request_id] = m.sender
        elif m.type == "plan_approval_response" and m.request_id and m.request_id == self.plan_request:
            if getattr(m, "approve", False):
                self.ctx.mode = "normal"
                self.plan_request = None

    def respond_shutdown(self, request_id: str, approve: bool, reason: str) -> str:
        """The respond_shutdown tool: answer a pending request; approving ends this teammate."""
        to = self.shutdown_requests.pop(request_id, None)
        if to is None:
            known = ", ".join(self.shutdown_requests) or "none"
            raise ToolError(f"no pending shutdown request {request_id!r} (pending: {known})")
        protocols.respond(self.rt.bus, to, "shutdown_response", request_id, approve, reason, sender=self.name)
        if not approve:
            return f"refused shutdown request {request_id}; carry on with your work"
        self.stop.set()
        self.agent.cancelled.set()
        return "approved: you stop after this step (the current attempt ends as interrupted)"

    def submit_plan(self, plan: str) -> str:
        """The submit_plan tool: send the plan to the lead; write tools stay refused until approved."""
        if self.ctx.mode != "plan":
            raise ToolError("you are not in plan mode: go ahead with the work")
        self.plan_request = protocols.submit_plan(self.rt.bus, plan, sender=self.name)
        return (f"plan sent to the lead for approval (request {self.plan_request}); call idle to wait for "
                "the answer. Write and execute tools stay refused until it is approved.")

    def _usage(self, total: Usage) -> None:
        self.rt.team.update(self.name, usage=(self.base_usage + total).model_dump())

    def _set(self, **fields: Any) -> None:
        self.rt.team.update(self.name, **fields)

    @property
    def free(self) -> bool:
        return not self.busy and not self.queue and self.thread.is_alive() and not self.stop.is_set()

    # -- the thread -------------------------------------------------------------
    def _main(self) -> None:
        try:
            if self.first_prompt:
                self._set(status="working")
                self._turn(self.agent.run(self.first_prompt))
            while True:
                work = self._wait(take_tasks=True)
                if work is None:
                    break
                if isinstance(work, Assignment):
                    self._task(work)
                else:
                    self._set(status="working")
                    if work or self.agent.drain():
                        if self.stop.is_set():  # a shutdown request approved by the harness
                            break
                        self._turn(self.agent.run(notes=work))
        except Exception as e:  # a bug in our code: log it, fail the work, never hang the scheduler
            log.exception("teammate %s crashed", self.name)
            self._fail_all(f"teammate {self.name} crashed: {type(e).__name__}: {e}")
        finally:
            self.rt.team.update(self.name, status="shutdown", task=None)

    def _wait(self, *, take_tasks: bool) -> Assignment | list[Any] | None:
        """Block until work arrives: an assignment, job notes, or unread messages ([])."""
        if take_tasks:
            with self.rt.lock:
                self.busy = False
            self._set(status="idle", task=None)
        else:
            self._set(status="idle")
        while not self.stop.is_set() and (take_tasks or not self.agent.cancelled.is_set()):
            if take_tasks:
                with self.rt.lock:
                    if self.queue:
                        self.busy = True
                        return self.queue.popleft()
                claimed = self.rt.claim_for(self)
                if claimed is not None:
                    return claimed
            notes = self.rt.jobs.drain(self.name)
            if notes or self.rt.bus.wait_unread(self.name, timeout=self.rt.idle_slice):
                with self.rt.lock:
                    self.busy = True
                return notes
        return None

    def _turn(self, result: RunResult) -> None:
        if result.status == "failed":
            log.warning("teammate %s: turn failed: %s", self.name, result.error)
            self._set(last_error=result.error)

    def _task(self, a: Assignment) -> None:
        task, agent = a.task, self.agent
        self.current, self.ctx.task_id = a, task.id
        home = self.ctx.workspace
        if a.workspace is not None:
            self.ctx.workspace = Path(a.workspace).resolve()
        self._set(status="working", task=task.id)
        if task.owner != self.name:
            try:  # the store says who runs it (`team task list`, `task blocked`)
                self.rt.store.hand_over(task.id, a.epoch, self.name)
                task.owner = self.name
            except ConflictError as e:  # reclaimed meanwhile: the attempt's end will be refused too
                log.warning("teammate %s: task #%s was not handed over: %s", self.name, task.id, e)
        resumed = bool(agent.last_task and agent.last_task.get("task") == task.id and agent.resumed)
        agent.transcript.add_task(task.id, a.epoch)
        label = f"#{task.id}" + (f" {task.name}" if task.name else "") + f": {task.subject}"
        prompt: str | None = task_prompt(task, resumed)
        if a.workspace is not None:
            prompt += (f"\n\nYour workspace for this task is {self.ctx.workspace}"
                       + (f", a git worktree on branch {task.branch}" if task.branch else "")
                       + ": your changes are merged back when the task completes.")
        total, steps, notes = Usage(), 0, []
        while True:
            result = agent.run(prompt, task_label=label, notes=notes, max_steps=max(self.rt.max_steps - steps, 0))
            total, steps, prompt = total + result.usage, steps + result.steps, None
            if result.status != "idle":
                break
            waited = self._wait(take_tasks=False)  # idle inside a task: wait for messages, then go on
            if waited is None:
                result = RunResult("interrupted", "", "stopped while waiting for messages")
                break
            self._set(status="working")
            notes = waited
        result.usage, result.steps = total, steps
        result.log = str(agent.transcript.path.relative_to(self.rt.root))
        self.current, self.ctx.task_id, self.ctx.workspace = None, None, home
        agent.cancelled.clear()
        agent.last_task = {"task": task.id, "epoch": a.epoch}
        a.done(result)

    def _fail_all(self, error: str) -> None:
        with self.rt.lock:
            pending = ([self.current] if self.current else []) + list(self.queue)
            self.queue.clear()
            self.current = None
        for a in pending:
            a.done(RunResult("failed", "", error))


class SubagentRunner:
    """``subagent`` tool backend: a fresh, non-nesting agent per call."""

    def __init__(self, rt: TeamRuntime):
        self.rt = rt
        self._n = itertools.count(1)

    def run(self, prompt: str, role: str, *, parent: str) -> RunResult:
        r = get_role(role, self.rt.workspace)
        while True:
            name = f"sub{next(self._n)}-{parent}"
            if not transcript_path(self.rt.root, name).exists():
                break
        ctx = self.rt.tool_context(name, subagent=True)
        tools = self.rt.registry.only([t for t in r.tools if t not in NO_SUBAGENT_TOOLS])
        agent = Agent(name=name, role=r, model=self.rt.model_for(r), tools=tools, ctx=ctx,
                      transcript=Transcript(transcript_path(self.rt.root, name)), team_name=self.rt.team_name,
                      max_steps=self.rt.subagent_steps)
        return agent.run(prompt)


class TeamRuntime:
    """The lead-side owner of every teammate thread (see the module docstring)."""

    def __init__(self, root: Path, *, model_for: Callable[[Role], ChatModel], workspace: Path | None = None,
                 team_name: str = "team", max_steps: int = DEFAULT_MAX_STEPS, subagent_steps: int = 20,
                 idle_slice: float = 0.05, heartbeat_every: float = 2.0, jobs: JobManager | None = None,
                 autoclaim: bool = False, claim_lease: float = 60.0):
        self.root = Path(root).absolute()
        self.workspace = Path(workspace or root).absolute()
        self.model_for, self.team_name = model_for, team_name
        self.max_steps, self.subagent_steps, self.idle_slice = max_steps, subagent_steps, idle_slice
        self.team = Team(self.root)
        self.bus = Bus(self.root, team=self.team, poll_interval=0.01)
        self.store = TaskStore(self.root)
        self._own_jobs = jobs is None
        self.jobs = jobs or JobManager(self.root)
        self.registry = agent_registry()
        self.subagents = SubagentRunner(self)
        self.claimer = AutoClaimer(self.store, lease=claim_lease) if autoclaim else None
        self._claims: dict[int, int] = {}  # auto-claimed task -> epoch (leases renewed by the heartbeat)
        self.mates: dict[str, Teammate] = {}
        self.lock = threading.RLock()
        self._stop = threading.Event()
        self._control: Any = None
        if not self.team.config.exists():
            self.team.set_team_name(team_name)
        self._hb = threading.Thread(target=self._heartbeats, args=(heartbeat_every,), name="team-heartbeats",
                                    daemon=True)
        self._hb.start()

    def tool_context(self, name: str, *, subagent: bool = False) -> ToolContext:
        d = team_dir(self.root)
        return ToolContext(
            workspace=self.workspace, root=self.root, agent=name, truth=FileTruth(), store=self.store,
            outputs_dir=d / "outputs" / name, call_log=d / "calls" / f"{name}.jsonl",
            bus=None if subagent else self.bus, jobs=None if subagent else self.jobs,
            spawner=None if subagent else self, subagents=None if subagent else self.subagents)

    # -- teammates --------------------------------------------------------------
    def spawn(self, name: str, role: str = "coder", prompt: str | None = None, *,
              plan_mode: bool = False) -> Teammate:
        """Start teammate ``name`` (idempotent for a live one: a prompt is sent as a message).

        ``plan_mode``: its write/execute tools are refused until the lead approves its plan."""
        check_name(name)
        if name == LEAD:
            raise UserError("'lead' is the lead's own name; pick another teammate name")
        with self.lock:
            mate = self.mates.get(name)
            if mate is not None and mate.thread.is_alive():
                if mate.role.name != role:
                    raise UserError(f"{name} is already on the team as a {mate.role.name}; pick another name")
                if prompt:
                    self.bus.send(name, prompt, sender=LEAD)
                return mate
            r = get_role(role, self.workspace)
            check_tools(r, self.registry.names())
            plan_mode = plan_mode or r.plan_mode
            self.team.add(name, role, status="working" if prompt else "idle", exist_ok=True, pid=os.getpid(),
                          task=None, plan_mode=plan_mode)
            mate = Teammate(self, name, r, self.model_for(r), prompt, plan_mode)
            self.mates[name] = mate
            self.team.heartbeat(name)
            mate.thread.start()
            return mate

    def assign(self, task: Task, epoch: int, done: Done, *, workspace: Path | None = None) -> None:
        """Queue a task attempt on the right teammate; failures to place it go to ``done``.

        ``workspace``: where this attempt's tools work (its git worktree), else the runtime's."""
        try:
            mate = self._choose(task)
        except UserError as e:
            done(RunResult("failed", "", f"cannot start task #{task.id}: {e}"))
            return
        with self.lock:
            mate.queue.append(Assignment(task, epoch, done, workspace))

    def _choose(self, task: Task) -> Teammate:
        with self.lock:
            if task.assignee:
                mate = self.mates.get(task.assignee)
                if mate is not None and mate.thread.is_alive():
                    return mate
                known = next((m for m in self.team.members() if m.name == task.assignee), None)
                return self.spawn(task.assignee, task.role or (known.role if known else "coder"))
            role = task.role or "coder"
            for mate in self.mates.values():
                if mate.role.name == role and mate.free:
                    return mate
            n = next(i for i in itertools.count(1) if f"{role}-{i}" not in self.mates)
            return self.spawn(f"{role}-{n}", role)

    def claim_for(self, mate: Teammate) -> Assignment | None:
        """Autonomous claiming (autoclaim.py): the next ready task ``mate`` may take, claimed."""
        if self.claimer is None or mate.stop.is_set():
            return None
        task = self.claimer.next_for(mate.name, mate.role.name)
        if task is None:
            return None
        with self.lock:
            mate.busy = True
            self._claims[task.id] = task.epoch

        def done(r: RunResult) -> None:
            with self.lock:
                self._claims.pop(task.id, None)
            try:
                if r.status == "interrupted":
                    self.store.release(task.id, task.epoch, reason=f"{mate.name}: {r.error}", actor=mate.name)
                    return
                ok = r.status == "completed"
                self.store.finish(task.id, task.epoch, "completed" if ok else "failed", result=r.result or None,
                                  error=None if ok else (r.error or f"ended with {r.status}"), actor=mate.name,
                                  log=r.log, **({"usage": r.usage.model_dump()} if r.usage.calls else {}))
            except ConflictError as e:  # the lease expired and someone else has the task now
                log.warning("teammate %s: the end of task #%s was not recorded: %s", mate.name, task.id, e)

        return Assignment(task, task.epoch, done)

    def request_shutdown(self, name: str, *, reason: str = "", timeout: float = 30.0) -> protocols.Response:
        """The shutdown handshake (protocols.py); approved: waits for the thread to end."""
        check_name(name)
        resp = protocols.request_shutdown(self.bus, name, reason=reason, timeout=timeout)
        mate = self.mates.get(name)
        if resp.approve and mate is not None:
            mate.thread.join(timeout)
        return resp

    def cancel(self, task_id: int) -> None:
        dropped = []
        with self.lock:
            for mate in self.mates.values():
                for a in [a for a in mate.queue if a.task.id == task_id]:
                    mate.queue.remove(a)
                    dropped.append(a)
                if mate.current is not None and mate.current.task.id == task_id:
                    mate.agent.cancelled.set()
        for a in dropped:
            a.done(RunResult("interrupted", "", "cancelled before it started"))

    def describe(self) -> str:
        states = self.team.states()
        if not states:
            return "no teammates yet; spawn one with spawn_teammate"
        return "\n".join(f"{s.name} ({s.role}): {s.liveness}" + (f", task #{s.task}" if s.task else "")
                         for s in states)

    # -- control, heartbeats, shutdown ---------------------------------------------
    def serve_control(self) -> None:
        """Take ``team spawn`` requests from other processes (control.py)."""
        from .control import ControlServer

        def handle(op: str, args: dict[str, Any]) -> dict[str, Any]:
            if op != "spawn":
                raise UserError(f"unknown control request {op!r}")
            mate = self.spawn(str(args.get("name", "")), str(args.get("role") or "coder"), args.get("prompt"),
                              plan_mode=bool(args.get("plan_mode")))
            return {"name": mate.name, "role": mate.role.name, "pid": os.getpid()}

        self._control = ControlServer(self.root, handle, ["spawn"]).start()

    def _heartbeats(self, every: float) -> None:
        while not self._stop.wait(every):
            with self.lock:
                live = [m.name for m in self.mates.values() if m.thread.is_alive()]
            for name in live:
                self.team.heartbeat(name)
            with self.lock:
                claims = dict(self._claims)
            if claims and self.claimer is not None:
                self.store.renew_many(claims, self.claimer.lease)

    def close(self, timeout: float = 10.0) -> None:
        """Stop every teammate (running attempts end as interrupted) and the services."""
        self._stop.set()
        if self._control is not None:
            self._control.close()
        with self.lock:
            mates = list(self.mates.values())
            for m in mates:
                m.stop.set()
                m.agent.cancelled.set()
        for m in mates:
            m.thread.join(timeout)
        for m in mates:
            queued = list(m.queue)
            m.queue.clear()
            for a in queued:
                a.done(RunResult("interrupted", "", "the run is shutting down"))
        if self._own_jobs:
            self.jobs.shutdown()
