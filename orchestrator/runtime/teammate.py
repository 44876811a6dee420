"""One teammate: a named agent thread inside the lead process, and its work queue.

Each teammate is a thread running a full agent loop (agent/loop.py) over its
own conversation and transcript::

    spawn ─► idle ──(assignment | claim | inbox message | job notification)──► working
               ▲                                                               │
               └────────────── run ends (answer / task done / idle) ◄──────────┘
    shutdown (halted, or a shutdown request approved): the roster says so; the thread exits

* What a teammate uses from outside is named here: ``TeamServices``, built
  once by the owner of the teammates (runtime.py) and handed to each, holds
  the state root, the roster (``Roster``), the bus (``TeammateBus``), job
  notifications (``JobNotes``), the store's ``hand_over`` (``HandOver``),
  the tool registry, the step budget, the idle slice and ``claim`` (an
  autonomous claim for an idle teammate). Its ``ToolContext`` comes with it.
* Work arrives four ways: a task assignment (``enqueue``, from the agent
  executor through the runtime), an autonomous claim
  (``TeamServices.claim``), a message in its inbox (``team send``, a
  teammate, the lead), or a notification of a background job it started.
  An idle teammate blocks in ``Bus.wait_unread`` -- woken at once by a send
  from this process, by a cheap stat poll for senders in other processes --
  in ``idle_slice`` pieces between which it checks its queue, a claim, its
  job notifications and the stop flag. A woken turn whose messages were
  all seen before (a resume) makes no model call.
* The work queue, from any thread: ``enqueue`` an attempt, ``drop`` queued
  attempts (of one task, or all: each ends as interrupted without
  starting), ``interrupt`` the running attempt of a task, ``free`` (idle,
  nothing queued, running), ``halt`` and ``join`` the thread. The queue,
  the busy flag and the current attempt are guarded by the teammate's own
  lock; everything else changes only on its own thread (the stop and
  cancel flags are events, set from anywhere).
* A task attempt: the teammate records ``task`` in its transcript, sets
  ``ctx.task_id`` (so ``task_update`` on it ends the attempt), runs the loop
  with the task prompt, and hands the ``LoopResult`` to the assignment's
  ``done``. An assignment with a ``deadline`` (the task's ``timeout``) ends
  there as ``timeout``: the loop stops at it, its model calls give up at it,
  and waiting for messages inside the task does too. The idle tool inside a task means "wait for messages": the
  teammate waits, then continues the same attempt within the same step budget.
* Worktree isolation: an ``Assignment`` may carry a ``workspace`` (the task's
  worktree); the tools work there for that attempt.
* Protocols (team/protocols.py): the teammate's ``handshakes.TeammateHandshakes``
  sees every fetched message before the model. An idle teammate approves a
  ``shutdown_request`` itself and its thread ends; a busy one leaves it to
  the model (``respond_shutdown``). A ``plan_approval_response`` approving
  the pending plan switches a plan-mode teammate (``ctx.mode == "plan"``:
  write/execute tools refused) to normal.
* Roster (``.team/config.json``): status working/idle/shutdown, current
  task, its model and budget. What it spends goes to ``TeamServices.spend``
  call by call (the ledger every report reads: llm/ledger.py), with the task
  the call worked on, None for a turn woken by messages.
* Hooks (``TeamServices.hooks``, docs/hooks.md): before an attempt's
  completion is reported, ``task_completed`` hooks decide; a veto (exit 2)
  hands the hook's stderr to the agent as a message (``hook_feedback``) and
  the same attempt goes on, so nothing was recorded and the agent finishes on
  a later try. About to go idle, ``teammate_idle`` hooks decide the same way
  (between tasks at most ``MAX_IDLE_VETOES`` in a row; hooks still refusing
  then are kept as ``idle_refused``). Until a teammate that finished an
  attempt has passed those hooks it is not *settled* (``settle``): the end of
  a run waits for that, so a veto of the run's last task is worked on, not
  dropped. ``teammate_stopped`` is fired when the thread ends.
* Budgets (``TeamServices.spend``, budgets.py): the agent loop asks
  ``_limit`` before each model call; a reached cap ends the attempt as failed
  with "budget reached: ...", or with ``--ask`` first asks the lead
  (team/protocols.py ``ask_budget``) and, approved, goes on (the grant covers
  the call that asked; the next call over the raised cap asks again).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..agent.loop import Agent, LoopResult
from ..agent.transcript import Transcript, transcript_path
from ..core import threads
from ..core.errors import ConflictError, UserError
from ..core.hooks import Hooks, NoHooks
from ..core.models import Member, Message, Task
from ..core.redact import Secrets
from ..core.text import plural
from ..core.threads import Crash
from ..jobs.records import Notification
from ..llm.pricing import Usage
from ..llm.types import ChatModel
from ..roles.roles import Role
from ..team import protocols
from ..team.protocols import Mailbox
from ..team.requests import Request, Requests
from ..tools import Tool, ToolContext, ToolRegistry
from ..tools.coordination import HARNESS_TOOLS
from .budgets import Spend
from .handshakes import TeammateHandshakes

log = logging.getLogger("orchestrator.teammates")

Done = Callable[[LoopResult], None]
"""Hears how an attempt ended, exactly once."""


@dataclass
class Assignment:
    """One task attempt placed on a teammate."""

    task: Task
    epoch: int
    done: Done
    workspace: Path | None = None
    """Where the attempt works (its worktree), else the teammate's workspace."""
    deadline: float | None = None
    """``time.monotonic()`` at which the attempt's time (its task's ``timeout``) runs out."""


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


MAX_IDLE_VETOES = 3
"""``teammate_idle`` vetoes in a row after which a teammate between tasks goes idle anyway."""


def hook_feedback(event: str, feedback: str, task: Task | None = None) -> str:
    """The message an agent reads when a hook vetoed (docs/hooks.md)."""
    if event == "task_completed" and task is not None:
        head = (f"[hook task_completed] Task #{task.id} is not done yet: a hook refused to record it "
                "completed. Its feedback:")
        tail = (f"Fix what it says, then call task_update(task={task.id}, status=\"completed\", result=...) "
                "again.")
    else:
        head = "[hook teammate_idle] A hook asked you to keep working before going idle. Its feedback:"
        tail = "Act on it, then finish as before."
    return f"{head}\n{feedback.strip()}\n\n{tail}"


# -- what a teammate needs from outside ------------------------------------------------
class Roster(Protocol):
    """The team's roster, as a teammate keeps its own entry (``team.roster.Team``)."""

    def members(self) -> list[Member]: ...

    def update(self, name: str, **fields: Any) -> Member: ...


class Fetched(Protocol):
    """Messages fetched from an inbox and not yet acknowledged (``team.inbox.InboxBatch``)."""

    messages: list[Message]

    def ack(self) -> None: ...

    def release(self) -> None: ...


class TeammateBus(Mailbox, Protocol):
    """The message bus, as a teammate reads its inbox and answers protocols (``team.inbox.Bus``)."""

    def fetch(self, name: str, *, seen: Container[str] = (), limit: int | None = None) -> Fetched: ...

    def wait_unread(self, name: str, timeout: float | None = None) -> bool: ...


class JobNotes(Protocol):
    """Background jobs, as a teammate hears that its own ended (``jobs.manager.JobManager``)."""

    def drain(self, owner: str) -> list[Notification]: ...


class HandOver(Protocol):
    """The task store, as a teammate takes over an attempt the lead claimed (``tasks.store.TaskStore``)."""

    def hand_over(self, ref: int | str, epoch: int, owner: str, *, actor: str | None = None) -> Task: ...


@dataclass(frozen=True)
class TeamServices:
    """What the teammates of one runtime share: built once by their owner, handed to each."""

    root: Path
    """The state root: transcripts live under it; an attempt's log is relative to it."""
    team_name: str
    roster: Roster
    bus: TeammateBus
    jobs: JobNotes
    store: HandOver
    registry: ToolRegistry
    """Every tool; a teammate gets its role's, plus the harness tools."""
    claim: Callable[[Teammate], Assignment | None]
    """An autonomous claim for an idle teammate with nothing queued; None: nothing to claim."""
    max_steps: int
    """Model calls per task attempt."""
    idle_slice: float
    """Seconds an idle teammate waits on its inbox between looks at its queue and claims."""
    hooks: Hooks = field(default_factory=NoHooks)
    """The run's hook dispatcher (hooks/dispatch.py): ``task_completed`` and ``teammate_idle`` may veto."""
    spend: Spend = field(default_factory=Spend)
    """Usage against budgets (budgets.py): asked before each model call."""
    requests: Requests | None = None
    """The approval requests (team/requests.py): a submitted plan is recorded there for people."""
    on_request: Callable[[Request], None] | None = None
    """Told of each plan recorded there (the lead's user hears of it)."""
    secrets: Secrets | None = None
    """Scrubbed from the transcript (None: this process's environment's; a teammate on a Ray node
    gets the lead's)."""


class Teammate:
    """One named agent thread (see the module docstring); its work queue is safe from any thread."""

    def __init__(self, name: str, role: Role, model: ChatModel, prompt: str | None, *, ctx: ToolContext,
                 services: TeamServices, plan_mode: bool = False, on_crash: Crash | None = None,
                 extra_tools: Sequence[Tool] = ()):
        """``extra_tools``: tools beyond the registry's, for this teammate only (its MCP servers')."""
        self.name, self.role, self.ctx, self.services, self.first_prompt = name, role, ctx, services, prompt
        self._lock = threading.Lock()  # guards _queue, _busy, _current
        self._queue: deque[Assignment] = deque()
        self._current: Assignment | None = None
        self._busy = prompt is not None
        self._stop = threading.Event()
        self.stop_reason: str | None = None
        """Why the teammate was halted, if someone said (``team shutdown --force``)."""
        self._settled = threading.Event()
        self._settled.set()
        self.idle_refused: str | None = None
        """The feedback of ``teammate_idle`` hooks that vetoed ``MAX_IDLE_VETOES`` times in a row the
        last time this teammate went idle (None: they consented)."""
        ctx.mode = "plan" if plan_mode else "normal"
        tools = list(dict.fromkeys([*role.tools, *HARNESS_TOOLS, *(["submit_plan"] if plan_mode else [])]))
        self.agent = Agent(
            name=name, role=role, model=model, tools=services.registry.only(tools).add(*extra_tools), ctx=ctx,
            transcript=Transcript(transcript_path(services.root, name), secrets=services.secrets), team_name=services.team_name,
            inbox=self._fetch, jobs=services.jobs, roster=services.roster.members, max_steps=services.max_steps,
            on_call=self._spent, limit=self._limit)
        self.handshakes = TeammateHandshakes(services.bus, name, ctx, idle=self._idle, stop=self._stop,
                                             cancelled=self.agent.cancelled, requests=services.requests,
                                             on_request=services.on_request)
        ctx.handshakes = self.handshakes
        self.thread = threading.Thread(target=threads.guarded(f"teammate-{name}", self._main, on_crash),
                                       name=f"teammate-{name}", daemon=True)

    # -- the work queue and the thread, from any thread ------------------------------
    def start(self) -> None:
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    @property
    def stopping(self) -> bool:
        """Halted, or a shutdown request was approved: it takes no more work."""
        return self._stop.is_set()

    @property
    def free(self) -> bool:
        """Idle with nothing queued, and running: an attempt queued now starts at once."""
        with self._lock:
            idle = not self._busy and not self._queue
        return idle and self.alive and not self.stopping

    def enqueue(self, a: Assignment) -> None:
        """Queue a task attempt; it runs when the teammate is next idle."""
        with self._lock:
            self._queue.append(a)

    def drop(self, reason: str, task_id: int | None = None) -> None:
        """End the queued attempts of ``task_id`` (None: all), unstarted, as interrupted with ``reason``."""
        with self._lock:
            dropped = [a for a in self._queue if task_id is None or a.task.id == task_id]
            self._queue = deque(a for a in self._queue if not (task_id is None or a.task.id == task_id))
        for a in dropped:
            a.done(LoopResult("interrupted", "", reason))

    def interrupt(self, task_id: int) -> None:
        """End the running attempt as interrupted, if it is one of ``task_id``."""
        with self._lock:
            if self._current is not None and self._current.task.id == task_id:
                self.agent.cancelled.set()

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the teammate has passed its ``teammate_idle`` hooks
        after its last attempt (the run's end waits for it: runtime.py ``settle``); True when it has."""
        return self._settled.wait(timeout) or not self.alive

    def halt(self, reason: str | None = None) -> None:
        """Stop the thread soon: a running attempt ends as interrupted (with ``reason``, when
        given, as its error); queued ones stay (``drop``)."""
        if reason is not None:
            self.stop_reason = reason
        self._stop.set()
        self.agent.cancelled.set()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    # -- plumbing -------------------------------------------------------------
    def _fetch(self, seen: set[str]) -> tuple[list[Message], Callable[[], None]]:
        batch = self.services.bus.fetch(self.name, seen=seen)
        for m in batch.messages:
            self.handshakes.see(m)
        return batch.messages, batch.ack

    def _spent(self, usage: Usage, model: str) -> None:
        """One model call: to the run's spend and the ledger (budgets.py), with the task it worked on."""
        self.services.spend.add(self.name, usage, task=self.ctx.task_id, model=model)

    def _limit(self) -> str | None:
        """Before each model call: the budget this teammate (or the run) reached, else None.

        With ``--ask`` (``Spend.ask``) the lead is asked first (team/protocols.py ``ask_budget``):
        approved, the caps that were reached are raised to cover the call that asked (budgets.py
        ``grant``) and the teammate goes on; a later call that reaches them asks again."""
        spend = self.services.spend
        while (reached := spend.check(self.name)) is not None:
            if not spend.ask:
                return reached
            answer = self._ask_budget(reached, spend.ask_timeout, spend.on_ask)
            if answer is None:
                return f"{reached} (no answer from the lead)"
            if not answer.approve:
                return f"{reached} (the lead said no: {answer.text.strip()[:200]})"
            spend.grant(self.name)
        return None

    def _ask_budget(self, reached: str, timeout: float,
                    on_ask: Callable[[str], None] | None) -> protocols.Response | None:
        """Ask for more budget: a ``budget_request`` to the lead and, with a request store, a
        ``budget`` request there too, so ``team approve ID`` answers it like any other (and a
        ``budget_response`` message still does); the answer, or None."""
        requests, rid = self.services.requests, protocols.new_request_id()
        if requests is not None:
            requests.create("budget", self.name, f"more budget: {reached}", rid=rid, task=self.ctx.task_id,
                            timeout=timeout)

        def decided() -> protocols.Response | None:
            r = requests.answered(rid) if requests is not None else None
            if r is None:
                return None
            return protocols.Response(rid, r.decided_by or "timeout", r.approved, r.reason or r.status)

        answer = protocols.ask_budget(self.services.bus, self.name, reached, timeout=timeout, on_ask=on_ask,
                                      gone=lambda: self.stopping or self.agent.cancelled.is_set(), request_id=rid,
                                      decided=decided if requests is not None else None)
        if requests is not None:
            try:  # the answer that came by message, or none: on record too
                if answer is None:
                    requests.expire(rid, "nobody answered in time")
                elif requests.answered(rid) is None:
                    requests.decide(rid, answer.approve, by=answer.sender, reason=answer.text)
            except UserError as e:
                log.warning("teammate %s: budget request %s: %s", self.name, rid, e)
        return answer

    def _set(self, **fields: Any) -> None:
        self.services.roster.update(self.name, **fields)

    def _idle(self) -> bool:
        with self._lock:
            return self._current is None and not self._queue

    def _mark_busy(self, busy: bool) -> None:
        with self._lock:
            self._busy = busy

    def _take(self) -> Assignment | None:
        with self._lock:
            if not self._queue:
                return None
            self._busy = True
            return self._queue.popleft()

    # -- the thread -------------------------------------------------------------
    def _main(self) -> None:
        why = "stopped"
        try:
            if self.first_prompt:
                self._set(status="working")
                self._turn(self.agent.run(self.first_prompt))
                self._idle_hook()
            while True:
                work = self._next_work()
                if work is None:
                    break
                if isinstance(work, Assignment):
                    self._task(work)
                    self._idle_hook()
                else:
                    self._set(status="working")
                    if work or self.agent.drain():
                        if self.stopping:  # a shutdown request approved by the harness
                            break
                        self._turn(self.agent.run(notes=work))
                        self._idle_hook()
        except Exception as e:  # a bug in our code: log it, fail the work, never hang the scheduler
            log.exception("teammate %s crashed", self.name)
            why = f"crashed: {type(e).__name__}: {e}"
            self._fail_all(f"teammate {self.name} crashed: {type(e).__name__}: {e}")
        finally:
            self._settled.set()
            self._set(status="shutdown", task=None)
            self.services.hooks.fire("teammate_stopped", teammate=self.name, reason=why,
                                     usage=self.services.spend.used(self.name).model_dump())

    def _idle_hook(self, task: Task | None = None) -> None:
        """About to go idle: a ``teammate_idle`` hook that exits 2 keeps it working with the hook's
        stderr as a message, up to ``MAX_IDLE_VETOES`` times in a row."""
        try:
            for _ in range(MAX_IDLE_VETOES):
                if self.stopping or not self._idle():  # more work queued: not idle
                    return
                verdict = self.services.hooks.decide("teammate_idle", teammate=self.name, task=task)
                if not verdict.vetoed:
                    self.idle_refused = None
                    return
                self._set(status="working")
                self._turn(self.agent.run(hook_feedback("teammate_idle", verdict.feedback)))
            if self.stopping:  # the last veto's turn was cut short: nothing was refused
                return
            self.idle_refused = verdict.feedback.strip()
            log.warning("teammate %s: teammate_idle hooks vetoed %d times in a row; going idle", self.name,
                        MAX_IDLE_VETOES)
        finally:
            self._settled.set()

    def _next_work(self) -> Assignment | list[Notification] | None:
        """Idle between runs: block until an attempt (queued or claimed), job notes, or unread
        messages (``[]``); None once stopped."""
        self._mark_busy(False)
        self._set(status="idle", task=None)
        while not self.stopping:
            queued = self._take()
            if queued is not None:
                return queued
            claimed = self.services.claim(self)
            if claimed is not None:
                self._mark_busy(True)
                return claimed
            notes = self._poll()
            if notes is not None:
                return notes
        return None

    def _wait_for_messages(self, deadline: float | None = None) -> list[Notification] | None:
        """Idle inside a task: block until job notes or unread messages (``[]``); None once
        stopped, the attempt is cancelled or its ``deadline`` passed."""
        self._set(status="idle")
        while (not self.stopping and not self.agent.cancelled.is_set()
               and (deadline is None or time.monotonic() < deadline)):
            notes = self._poll()
            if notes is not None:
                return notes
        return None

    def _poll(self) -> list[Notification] | None:
        """One idle slice: job notes, or ``[]`` when unread messages arrived (the teammate is busy
        from then on); None when nothing came."""
        notes = self.services.jobs.drain(self.name)
        if notes or self.services.bus.wait_unread(self.name, timeout=self.services.idle_slice):
            self._mark_busy(True)
            return notes
        return None

    def _turn(self, result: LoopResult) -> None:
        if result.status == "failed":
            log.warning("teammate %s: turn failed: %s", self.name, result.error)
            self._set(last_error=result.error)

    def _task(self, a: Assignment) -> None:
        task, agent = a.task, self.agent
        with self._lock:
            self._current = a
        self.ctx.task_id = task.id
        home, home_cwd = self.ctx.workspace, self.ctx.cwd
        if a.workspace is not None:
            self.ctx.move_to(Path(a.workspace))
        self._set(status="working", task=task.id)
        if task.owner != self.name:
            try:  # the store says who runs it (`team task list`, `task blocked`)
                taken = self.services.store.hand_over(task.id, a.epoch, self.name)
                task.owner = self.name
                # the scheduler's claim of an agent task is announced here, naming who runs it (docs/hooks.md)
                self.services.hooks.fire("task_claimed", teammate=self.name, task=taken)
            except ConflictError as e:  # reclaimed meanwhile: the attempt's end will be refused too
                log.warning("teammate %s: task #%s was not handed over: %s", self.name, task.id, e)
        resumed = bool(agent.last_task and agent.last_task.get("task") == task.id and agent.resumed)
        agent.transcript.add_task(task.id, a.epoch)
        label = f"#{task.id}" + (f" {task.name}" if task.name else "") + f": {task.subject}"
        first = task_prompt(task, resumed)
        if a.workspace is not None:
            first += (f"\n\nYour workspace for this task is {self.ctx.workspace}"
                      + (f", a git worktree on branch {task.branch}" if task.branch else "")
                      + ": your changes are merged back when the task completes.")
        prompt: str | None = first
        notes: list[Notification] = []
        total, steps = Usage(), 0
        while True:
            result = agent.run(prompt, task_label=label, notes=notes,
                               max_steps=max(self.services.max_steps - steps, 0), deadline=a.deadline)
            total, steps, prompt = total + result.usage, steps + result.steps, None
            if result.status == "completed":
                # decided before the completion is recorded: a veto keeps the attempt going
                verdict = self.services.hooks.decide("task_completed", teammate=self.name, task=task,
                                                     outcome={"status": "completed", "result": result.result})
                if verdict.vetoed:
                    prompt, notes = hook_feedback("task_completed", verdict.feedback, task), []
                    continue
            if result.status != "idle":
                break
            verdict = self.services.hooks.decide("teammate_idle", teammate=self.name, task=task)
            if verdict.vetoed:  # idle inside a task, refused: go on at once with the feedback
                prompt, notes = hook_feedback("teammate_idle", verdict.feedback, task), []
                continue
            waited = self._wait_for_messages(a.deadline)  # idle inside a task: wait for messages, then go on
            if waited is None:
                if a.deadline is not None and time.monotonic() >= a.deadline:
                    result = LoopResult("timeout", "", f"while waiting for messages, after {plural(steps, 'model call')}")
                else:
                    result = LoopResult("interrupted", "", "stopped while waiting for messages")
                break
            self._set(status="working")
            notes = waited
        result.usage, result.steps = total, steps
        if result.status == "interrupted" and self.stop_reason:
            result.error = self.stop_reason
        result.log = str(agent.transcript.path.relative_to(self.services.root))
        with self._lock:
            self._current = None
        self.ctx.task_id = None
        self.ctx.leave_worktree()  # one it entered during the attempt
        if self.ctx.workspace != home:
            self.ctx.move_to(home)
            self.ctx.cwd = home_cwd
        agent.cancelled.clear()
        agent.last_task = {"task": task.id, "epoch": a.epoch}
        if self.services.hooks.wants("teammate_idle"):
            self._settled.clear()  # before the scheduler hears of it: the run's end waits for the idle hooks
        a.done(result)

    def _fail_all(self, error: str) -> None:
        with self._lock:
            pending = ([self._current] if self._current else []) + list(self._queue)
            self._queue.clear()
            self._current = None
        for a in pending:
            a.done(LoopResult("failed", "", error))
