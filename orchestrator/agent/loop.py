"""The agent loop: one conversation, a model, a tool registry.

The loop sees two small seams (mini-swe-agent style): a ``ChatModel``
(``complete(messages, tools) -> Completion``) and a ``ToolRegistry``
(``call(name, raw_args, ctx, call_id) -> Observation``). One *run* (a task
attempt, or a turn woken by messages) is::

    for step in 1..max_steps:
        cancelled?                      -> Interrupted
        past the deadline?              -> TimedOut
        limit() names a budget reached  -> BudgetReached (failed, "budget reached: ...")
        drain inbox + job notes         -> one user message: <inbox>…</inbox>, then
                                           <background-results>…</background-results>
                                           (transcript, then ack)
        ContextWindow.prepare           -> projected request (maybe compacted)
        model.complete (stream)         -> assistant message (transcript first)
        no tool calls                   -> final answer: the run ends, "completed"
        each tool call -> registry.call -> tool message (transcript first)
        a tool raised a signal          -> TaskDone (task_update on the current task)
                                           or idle (the idle tool): the run ends
    -> LimitsExceeded

Control flow uses exceptions carrying messages: ``TaskDone`` (the agent
marked its current task completed/failed through ``task_update``; the loop
reports it, the *executor* writes the store with the claim's epoch),
``LimitsExceeded`` (step limit), ``BudgetReached`` (the ``limit`` callable,
asked before each model call, named a spending cap it reached: the run ends
as failed with "budget reached: ..."; it may block while the lead is asked
for more, runtime/teammate.py), ``Interrupted`` (cancelled by the lead),
``TimedOut`` (the task's ``timeout``: a run given a ``deadline`` stops at the
first step past it, its model calls give up at it, and no tool call waits
past it, ``ToolContext.deadline``).
``ModelError`` from the client (retries exhausted) ends the run as failed,
or as timed out when the deadline has passed.
Model mistakes never end a run: bad JSON, unknown tools and refused actions
come back from the registry as error observations.

The system prompt (identity, role, AGENTS.md, skills index, tool rules) is
built once per agent and is byte-identical on every call; what changes
(task, roster, files changed) goes in the state block at the end of each
request (prompt.py / projection.py).

Durability: every message is appended to the agent's transcript *before*
it is acted on. Inbox messages reach the conversation exactly once, even if
the process is killed at any instant: fetch -> ONE transcript line holding
the text and the messages' bus ids -> ack. A kill before that line leaves
them unacked (delivered again); a kill after it leaves their ids in the
transcript (``Transcript.load`` returns them; ``fetch(seen=)`` skips them
and the next ack passes over them). Both ways in follow this order:

* ``drain`` (before each model call): the user message carries the ids.
* the ``read_inbox`` tool: the handler only fetches (``drain_inbox_text``
  parks the ids and the ack in ``_inbox_pending``); the loop writes the tool
  message carrying the text with the ids, then acks. A tool error drops
  the batch unacked (``InboxBatch`` releases its lock when dropped), so the
  messages come again with the next drain.

A restarted agent resumes with the conversation it had.

Usage: each call's ``Usage`` (a compaction's summary call too) is summed per
run (stored on the task by the executor) and per agent (``usage``), and told to
``on_call`` with the model that answered, once per call, which is how it reaches
the ledger of spend (llm/ledger.py, through runtime/budgets.py ``Spend``);
``on_usage`` hears the agent's running total.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import ModelError
from ..core.models import Member, Message
from ..core.text import plural
from ..jobs.records import Notification
from ..llm.pricing import Usage
from ..llm.types import ChatModel, Completion, ToolCall
from ..roles.roles import Role
from ..roles.skills import discover_skills
from ..tools import ToolContext, ToolRegistry
from .compaction import ContextWindow, summary_request
from .prompt import AgentState, build_system_prompt
from .transcript import Transcript

DEFAULT_MAX_STEPS = 40
DEFAULT_BUDGET = 100_000  # tokens of context before auto-compaction (x threshold)


class AgentStop(Exception):
    """Base of the loop's control-flow exceptions; ``str(e)`` is the reason."""


class TaskDone(AgentStop):
    """The agent marked its current task ``completed`` or ``failed``."""

    def __init__(self, status: str, result: str):
        super().__init__(f"task marked {status}")
        self.status, self.result = status, result


class LimitsExceeded(AgentStop):
    """The run used its step budget without finishing."""


class Interrupted(AgentStop):
    """The run was cancelled from outside (the lead stopped it)."""


class TimedOut(AgentStop):
    """The run reached its deadline (the task's ``timeout``)."""


class BudgetReached(AgentStop):
    """The agent's ``limit`` said a budget was reached (runtime/budgets.py); ``str(e)`` says which."""


@dataclass
class Signals:
    """What the tools asked of the loop during a step (through ``ToolContext.loop``: ``Agent``)."""

    finish: tuple[str, str] | None = None
    """(status, result) set by task_update on the agent's current task."""
    idle: bool = False
    """Set by the idle tool: end this run after the current tool calls."""
    compact: bool = False
    """Set by the compact tool: compact before the next model call."""


@dataclass
class LoopResult:
    """How one run of the agent loop ended (a task attempt or a turn woken by messages)."""

    status: str  # completed | failed | idle | interrupted | timeout
    result: str = ""
    error: str | None = None
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    log: str | None = None
    """The agent's transcript, relative to the state root (set by the teammate)."""


Inbox = Callable[[set[str]], tuple[list[Message], Callable[[], None]]]
"""``fetch(seen) -> (messages, ack)``: the agent's inbox (None: no inbox)."""


class JobNotes(Protocol):
    """Where the agent's background-job notifications wait (``jobs.manager.JobManager``)."""

    def drain(self, owner: str) -> list[Notification]: ...


def format_message(m: Message) -> str:
    """One inbox message as the agent reads it."""
    extra = f", request {m.request_id}" if m.request_id else ""
    return f"[message from {m.sender} ({m.type}{extra})]\n{m.content}"


def inbox_block(texts: Sequence[str]) -> str:
    """Inbox messages as the model reads them: in the seed's ``<inbox>…</inbox>`` (see docs/agents.md)."""
    return "<inbox>\n" + "\n\n".join(texts) + "\n</inbox>"


def background_block(texts: Sequence[str]) -> str:
    """Job notifications as the model reads them: in the seed's ``<background-results>…</background-results>``."""
    return "<background-results>\n" + "\n\n".join(texts) + "\n</background-results>"


def format_note(n: Notification) -> str:
    """One background-job notification as the agent reads it."""
    code = "" if n.exit_code is None else f", exit code {n.exit_code}"
    return (f"[background job {n.job_id} {n.status}{code} after {n.duration:.1f}s; full log: {n.log}]\n"
            f"{n.tail.strip() or '(no output)'}")


class Agent:
    """One agent's conversation and loop. Not thread-safe: one thread runs it."""

    def __init__(
        self,
        *,
        name: str,
        role: Role,
        model: ChatModel,
        tools: ToolRegistry,
        ctx: ToolContext,
        transcript: Transcript,
        team_name: str = "team",
        inbox: Inbox | None = None,
        jobs: JobNotes | None = None,
        roster: Callable[[], list[Member]] = list,
        max_steps: int = DEFAULT_MAX_STEPS,
        budget: int = DEFAULT_BUDGET,
        on_usage: Callable[[Usage], None] | None = None,
        on_step: Callable[[], None] | None = None,
        limit: Callable[[], str | None] | None = None,
        on_call: Callable[[Usage, str], None] | None = None,
    ):
        self.name, self.role, self.model, self.tools, self.ctx = name, role, model, tools, ctx
        self.tool_schemas = tools.schemas()  # the tool set is fixed per agent: built once
        self.transcript, self.team_name, self.inbox, self.jobs = transcript, team_name, inbox, jobs
        self.roster, self.max_steps, self.on_usage, self.on_step = roster, max_steps, on_usage, on_step
        self.limit, self.on_call = limit, on_call
        self.signals = Signals()
        ctx.loop = self  # the tools' LoopControl (tools.services)
        self.cancelled = threading.Event()
        self.deadline: float | None = None  # of the current run (its task's timeout), time.monotonic()
        self.usage = Usage()
        self._run_usage = Usage()  # of the current run (a task attempt or a turn)
        self.task_label: str | None = None
        self.system = {"role": "system", "content": build_system_prompt(
            name=name, role=role, team=team_name, workspace=ctx.workspace,
            skills=discover_skills(ctx.workspace))}
        rel = transcript.path.relative_to(ctx.root) if transcript.path.is_relative_to(ctx.root) else transcript.path
        self.window = ContextWindow(budget=budget, transcripts_dir=transcript.path.parent / f"{name}.compactions",
                                    summarize=self._summarize, transcript_ref=str(rel), display_root=ctx.root)
        loaded, self.seen, self.last_task = transcript.load()
        self.messages: list[dict[str, Any]] = [self.system, *loaded]
        self._inbox_pending: tuple[list[str], Callable[[], None] | None] | None = None

    # ------------------------------------------------------------------ state
    @property
    def resumed(self) -> bool:
        return len(self.messages) > 1

    def add(self, msg: dict[str, Any], inbox_ids: list[str] | tuple[str, ...] = ()) -> None:
        """Record ``msg`` durably (with the ids of the inbox messages it carries, same
        line), then make it part of the conversation."""
        self.transcript.add(msg, inbox_ids=inbox_ids)
        self.seen.update(inbox_ids)
        self.messages.append(msg)

    def state(self) -> AgentState:
        written = sorted(self.ctx.rel(Path(p)) for p in self.ctx.truth.written())
        return AgentState(name=self.name, role=self.role.name, team=self.team_name, task=self.task_label,
                          roster=self.roster(), changed_files=written)

    # ------------------------------------------------------------------ LoopControl (for the tools)
    def finish(self, status: str, result: str) -> None:
        """``task_update`` on the current task: end the attempt after this step."""
        self.signals.finish = (status, result)

    def go_idle(self) -> None:
        self.signals.idle = True

    def request_compaction(self) -> None:
        self.signals.compact = True

    def inbox_text(self) -> str:
        return self.drain_inbox_text()

    # ------------------------------------------------------------------ inbox
    def _fetch(self) -> tuple[list[str], list[str], Callable[[], None] | None]:
        """(texts, ids, ack) of unread inbox messages; ``ack`` None when nothing to ack."""
        if self.inbox is None:
            return [], [], None
        messages, ack = self.inbox(self.seen)
        texts = [format_message(m) for m in messages]
        return texts, [m.id for m in messages], ack

    def drain_inbox_text(self) -> str:
        """For the read_inbox tool: unread messages as text. Not acked here: the ids and
        the ack wait in ``_inbox_pending`` until ``_run_tools`` has written the tool
        message carrying this text (see the module docstring)."""
        self._inbox_pending = None  # a batch nobody settled (no loop around the call): unacked
        texts, ids, ack = self._fetch()
        if not texts:
            if ack is not None:
                ack()  # passes over messages already in the transcript
            return "no new messages"
        self._inbox_pending = (ids, ack)
        return inbox_block(texts)

    def drain(self, extra_notes: Sequence[Notification] = ()) -> int:
        """Fold unread inbox messages and job notifications into the conversation:
        one transcript line with the text and the inbox ids, then the ack."""
        self._inbox_pending = None
        texts, ids, ack = self._fetch()
        notes = list(extra_notes) + (list(self.jobs.drain(self.name)) if self.jobs is not None else [])
        blocks = ([inbox_block(texts)] if texts else []) + ([background_block([format_note(n) for n in notes])]
                                                            if notes else [])
        if blocks:
            self.add({"role": "user", "content": "\n\n".join(blocks), "_kind": "inbox"}, inbox_ids=ids)
        if ack is not None:
            ack()
        return len(texts) + len(notes)

    # ------------------------------------------------------------------ the loop
    def run(self, prompt: str | None = None, *, task_label: str | None = None,
            notes: Sequence[Notification] = (), max_steps: int | None = None,
            deadline: float | None = None) -> LoopResult:
        """Run until a final answer, a finished task, idle, a limit, the ``deadline``
        (``time.monotonic()``) or an error."""
        limit = max_steps if max_steps is not None else self.max_steps
        self.task_label = task_label
        self.deadline = self.ctx.deadline = deadline
        self.signals.finish, self.signals.idle = None, False
        if prompt:
            self.add({"role": "user", "content": prompt})
        self._run_usage, steps = Usage(), 0
        pending_notes = list(notes)
        try:
            while True:
                if self.cancelled.is_set():
                    raise Interrupted("stopped by the lead")
                if self._past_deadline():
                    raise TimedOut(f"after {plural(steps, 'model call')}")
                if steps >= limit:
                    raise LimitsExceeded(f"step limit reached ({limit} model calls) without finishing")
                if self.limit is not None and (reached := self.limit()) is not None:
                    raise BudgetReached(reached)
                self.drain(pending_notes)
                pending_notes = []
                steps += 1
                completion = self._call_model()
                if completion.tool_calls:
                    self.add(completion.to_message())
                    self._run_tools(completion.tool_calls)
                    if self.signals.finish is not None:
                        raise TaskDone(*self.signals.finish)
                    if self.signals.idle:
                        return LoopResult("idle", "", None, steps, self._run_usage)
                    continue
                text = (completion.content or "").strip()
                self.add({"role": "assistant", "content": completion.content or ""})
                return LoopResult("completed", text, None, steps, self._run_usage)
        except TaskDone as done:
            return LoopResult(done.status, done.result, None if done.status == "completed" else
                             (done.result or "the agent marked the task failed"), steps, self._run_usage)
        except LimitsExceeded as e:
            return LoopResult("failed", "", str(e), steps, self._run_usage)
        except BudgetReached as e:
            return LoopResult("failed", "", f"budget reached: {e}", steps, self._run_usage)
        except Interrupted as e:
            return LoopResult("interrupted", "", str(e), steps, self._run_usage)
        except TimedOut as e:
            return LoopResult("timeout", "", str(e), steps, self._run_usage)
        except ModelError as e:
            if self._past_deadline():  # the call gave up because the task's time ran out
                return LoopResult("timeout", "", f"during model call {steps}, which gave up ({e})", steps, self._run_usage)
            return LoopResult("failed", "", f"ModelError: {e}", steps, self._run_usage)
        finally:
            self.ctx.deadline = None
            self.ctx.skill = None  # a skill's allowed-tools hold for the run that loaded it

    def _past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _call_model(self):
        if self.signals.compact:
            self.signals.compact = False
            self.compact("requested by the agent")
        prepared = self.window.prepare(self.messages, self.state(), self.tool_schemas)
        if prepared.compaction is not None:
            self._adopt(prepared.messages, prepared.compaction)
        completion = self.model.complete(prepared.request, self.tool_schemas, stream=True, deadline=self.deadline)
        self._count(completion)
        return completion

    def _count(self, completion: Completion) -> None:
        """One model call's usage: to the run's and the agent's sums, and to ``on_call`` (the ledger)."""
        self._run_usage += completion.usage
        self.usage += completion.usage
        if self.on_call is not None:
            self.on_call(completion.usage, completion.model)
        if self.on_usage is not None:
            self.on_usage(self.usage)

    def _run_tools(self, calls: list[ToolCall]) -> None:
        for tc in calls:
            if self.on_step is not None:
                self.on_step()
            try:
                obs = self.tools.call(tc.name, tc.arguments, self.ctx, tc.id)
                msg = obs.to_message()
                if obs.full_output:
                    msg["_ref"] = self.ctx.rel(Path(obs.full_output))
                if obs.is_error:
                    msg["_error"] = obs.stage
                # read_inbox: the text and the ids in one line, then the ack (an error: left unread)
                ids, ack = self._inbox_pending if self._inbox_pending and not obs.is_error else ((), None)
                self.add(msg, inbox_ids=ids)
                if ack is not None:
                    ack()
            finally:
                self._inbox_pending = None

    # ------------------------------------------------------------------ compaction
    def compact(self, reason: str = "requested") -> str:
        done = self.window.compact(self.messages, self.state(), reason=reason)
        if done.replaced:
            self._adopt(done.messages, done)
            return f"compacted {plural(done.replaced, 'message')}; full transcript: {done.transcript_path}"
        return "nothing to compact yet"

    def _adopt(self, messages: list[dict[str, Any]], info: Any) -> None:
        body = [m for m in messages if m.get("role") != "system"]
        self.transcript.add_compaction(body, replaced=info.replaced)
        self.messages = [self.system, *body]

    def _summarize(self, span: list[dict]) -> str:
        done = self.model.complete(summary_request(span), None, stream=False, deadline=self.deadline)
        self._count(done)  # a compaction's call is spent like any other
        return done.content or ""
