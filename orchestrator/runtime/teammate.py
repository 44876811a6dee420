"""One teammate: a named agent thread inside the lead process (owned by teammates.TeamRuntime).

Each teammate is a thread running a full agent loop (agent.py) over its own
conversation and transcript::

    spawn ─► idle ──(assignment | inbox message | job notification)──► working
               ▲                                                        │
               └──────────── run ends (answer / task done / idle) ◄─────┘
    shutdown (runtime closing, or a shutdown request approved): the roster says so; the thread exits

* Work arrives three ways: a task assignment from the agent executor (its
  queue), a message in its inbox (``team send``, a teammate, the lead), or a
  notification of a background job it started. An idle teammate blocks in
  ``Bus.wait_unread`` -- woken at once by a send from this process, by a
  cheap stat poll for senders in other processes -- in ``idle_slice``
  pieces between which it checks its queue, an autonomous claim
  (``TeamRuntime.claim_for``), its job notifications and the stop flag. A
  woken turn whose messages were all seen before (a resume) makes no model call.
* A task attempt: the teammate records ``task`` in its transcript, sets
  ``ctx.task_id`` (so ``task_update`` on it ends the attempt), runs the loop
  with the task prompt, and hands the ``LoopResult`` to the assignment's
  ``done``. The idle tool inside a task means "wait for messages": the
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
  task, usage totals (carried across restarts). Its state changes only on
  its own thread, except the queue and ``busy`` (under the runtime's lock).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent.loop import Agent, LoopResult
from ..agent.transcript import Transcript, transcript_path
from ..core.errors import ConflictError
from ..core.models import Task
from ..llm.pricing import Usage
from ..llm.types import ChatModel
from ..roles.roles import Role
from ..tools.coordination import HARNESS_TOOLS
from .handshakes import TeammateHandshakes

if TYPE_CHECKING:
    from .runtime import TeamRuntime

log = logging.getLogger("orchestrator.teammates")

Done = Callable[[LoopResult], None]


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
        tools = list(dict.fromkeys([*role.tools, *HARNESS_TOOLS, *(["submit_plan"] if plan_mode else [])]))
        self.agent = Agent(
            name=name, role=role, model=model, tools=rt.registry.only(tools), ctx=self.ctx,
            transcript=Transcript(transcript_path(rt.root, name)), team_name=rt.team_name,
            inbox=self._fetch, jobs=rt.jobs, roster=rt.team.members, max_steps=rt.max_steps,
            on_usage=self._usage)
        self.handshakes = TeammateHandshakes(
            rt.bus, name, self.ctx, idle=lambda: self.current is None and not self.queue, stop=self.stop,
            cancelled=self.agent.cancelled)
        self.ctx.handshakes = self.handshakes
        self.thread = threading.Thread(target=self._main, name=f"teammate-{name}", daemon=True)

    # -- plumbing -------------------------------------------------------------
    def _fetch(self, seen: set[str]) -> tuple[list[Any], Callable[[], None]]:
        batch = self.rt.bus.fetch(self.name, seen=seen)
        for m in batch.messages:
            self.handshakes.see(m)
        return batch.messages, batch.ack

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

    def _turn(self, result: LoopResult) -> None:
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
                result = LoopResult("interrupted", "", "stopped while waiting for messages")
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
            a.done(LoopResult("failed", "", error))
