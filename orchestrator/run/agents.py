"""``kind: agent`` tasks in ``team run``: the executor that hands them to teammates.

``AgentExecutor(ctx)`` is built by ``runner.build_executors`` when a plan has
agent tasks. Before any work starts it resolves the model service
(``LLMConfig.resolve(plan/--model, env)``: a missing model or key is a
``UserError``, exit 2; the key comes from the environment, whose credentials
every writer scrubs: core/redact.py), starts a ``TeamRuntime`` with the plan's
``team:`` members (on the run's ``TaskStore`` when ``ExecutorContext.store``
carries one, so the scheduler and the teammates share one store object) and
opens the control queue for ``team spawn``.

``start(task, epoch, done)`` queues the attempt on a teammate (assignee, else
an idle teammate of the task's role, else a new ``<role>-<n>``) and returns.
When the teammate's run ends, its ``LoopResult`` becomes the ``Outcome``:

    completed    the agent marked the task completed, or gave a final answer
    failed       marked failed, step limit, model service down after retries
    timeout      the task's ``timeout`` ran out: the agent is stopped there (its
                 loop, its model calls and its tool calls all end at the
                 deadline; teammate.py), and the error says so ("timed out
                 after 300s; the agent was stopped during model call 12");
                 one that has not stopped ``TIMEOUT_GRACE`` seconds later is
                 abandoned: the timeout is reported and the attempt cancelled
    killed       cancelled by the scheduler or the run shutting down

with the result text and the attempt's token usage, which the scheduler
stores on the task (``result``, ``usage``) with the claim's epoch.
With ``isolation: worktree`` (isolation.py) the task arrives with its
``cwd`` inside its own worktree; the teammate's tools work there for that
attempt (``ToolContext.workspace``).

Every teammate's shell commands run in the run's sandbox (``ExecutorContext.sandbox``,
core/sandbox.py), with the network only when its role says ``network: true``.

A plan's ``mcp_servers:`` reach the runtime, which starts each server when a teammate that may
use it is spawned and stops them when it closes (docs/mcp.md); a server that cannot start
fails the task that needed the teammate, and one that dies mid-run fails the task in flight.

When the run's work is done the runner waits for the teammates to settle (``settle``, added to
``ExecutorContext.settlers``): one whose ``teammate_idle`` hooks vetoed going idle after its last
attempt works on what they asked before the run ends; hooks still refusing after
``MAX_IDLE_VETOES`` tries make the run incomplete (exit 1), naming the teammate and the feedback.

Idle teammates also claim ready non-plan tasks by themselves (runtime/autoclaim.py);
``TEAM_AUTOCLAIM=0`` turns that off. A ``team:`` member with ``plan_mode:
true`` starts in plan mode (team/protocols.py).

Models and budgets: a teammate's model is its ``team:`` entry's ``model``,
else its role's, else the run's (``--model``, the plan's ``model:``,
``$TEAM_MODEL``); its endpoint, key variable and price come from the plan's
``models:``, else its role's (llm/endpoints.py): one client per model and
entry. Its budget is its ``team:`` entry's ``budget``, else its role's; the
plan's ``budget:`` caps all of them together (runtime/budgets.py ``Spend``,
which writes every call to the ledger of spend). A teammate that reaches a
budget ends its attempt as failed with "budget reached: ..." (or, with
``--ask``, asks the lead first: runtime/teammate.py); one under a dollar cap
whose model has no price is refused at spawn (``_priced``; a plan's
teammates were refused before the run: teammodels.py).

A teammate whose role marks a tool ``ask`` (tools/approval.py) waits for a
person at that call: the request goes to the lead's inbox and the request
store, a line in the run's output says how to answer (``team approve ID`` /
``team deny ID --reason TEXT`` from another shell), and no answer within
``TEAM_APPROVAL_TIMEOUT`` seconds (default 300) is a denial the agent reads
as the tool's result.

Settings from the environment: ``TEAM_AGENT_MAX_STEPS`` (model calls per
attempt, default 40), ``TEAM_APPROVAL_TIMEOUT``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from ..agent.loop import DEFAULT_MAX_STEPS, LoopResult
from ..core.errors import UserError
from ..core.models import Task
from ..core.modelspec import ModelSpec
from ..jobs.records import JobRecord
from ..llm.client import LLMClient
from ..llm.endpoints import Endpoints, price_of
from ..llm.types import LLMConfig
from ..roles.roles import Role
from ..runtime.approvals import approval_line
from ..runtime.budgets import Spend
from ..runtime.runtime import MemberSettings, OtherMembers, TeamRuntime
from ..team.requests import Request
from .executor import DoneCallback, ExecutorContext, Outcome

STATUS = {"completed": "completed", "failed": "failed", "interrupted": "killed", "idle": "failed",
          "timeout": "timeout"}
TIMEOUT_GRACE = 10.0
"""Seconds past an agent task's ``timeout`` before the executor reports it timed out itself,
should the agent not have stopped (a model call that ignores its deadline)."""


def max_steps_from_env(env: Mapping[str, str] = os.environ) -> int:
    raw = env.get("TEAM_AGENT_MAX_STEPS", "").strip()
    if not raw:
        return DEFAULT_MAX_STEPS
    if not raw.isdigit() or int(raw) < 1:
        raise UserError(f"TEAM_AGENT_MAX_STEPS={raw!r} must be a whole number >= 1")
    return int(raw)


def run_config(model: str | None, specs: Mapping[str, ModelSpec], env: Mapping[str, str] = os.environ) -> LLMConfig:
    """The run's model (``--model``, the plan's, ``$TEAM_MODEL``) and how to reach it: its ``models:``
    entry's endpoint and key variable, else ``$OPENAI_BASE_URL`` and ``$OPENAI_API_KEY``."""
    name = (model or env.get("TEAM_MODEL") or "").strip()
    return LLMConfig.resolve(model, None, env, spec=specs.get(name) if name else None)


class AgentExecutor:
    kind = "agent"
    inline_start = False  # placing an attempt on a teammate may spawn one: not inside the store's commit

    def __init__(self, ctx: ExecutorContext, others: OtherMembers | None = None):
        """``others``: the run's agent CLI members (run/command.py), whom ``team shutdown`` may name."""
        self.endpoints = Endpoints(ctx.model_specs)
        self.config = run_config(ctx.model, ctx.model_specs)
        self._closed = False
        self.note = ctx.note
        self.spend = ctx.spend if ctx.spend is not None else Spend()
        members = {name: MemberSettings(ctx.models.get(name), ctx.budgets.get(name))
                   for name in {*ctx.models, *ctx.budgets}}
        self.runtime = TeamRuntime(ctx.root, model_for=self._model_for, workspace=ctx.workspace,
                                   team_name=ctx.plan, max_steps=max_steps_from_env(), store=ctx.store,
                                   on_crash=ctx.stop.fail,
                                   autoclaim=os.environ.get("TEAM_AUTOCLAIM", "1") != "0", sandbox=ctx.sandbox,
                                   hooks=ctx.hooks, spend=self.spend, members=members,
                                   on_approval=self._approval, priced=self._priced,
                                   mcp_servers=ctx.mcp_servers, others=others)
        try:
            for name, role in ctx.team:
                self.runtime.spawn(name, role, plan_mode=name in ctx.plan_mode)
            self.runtime.serve_control()
        except BaseException:
            self.runtime.close()
            raise
        stop = ctx.stop
        # the run's work is done: its teammates' teammate_idle hooks still decide (a veto is worked on)
        ctx.settlers.append(lambda: self.runtime.settle(lambda: stop.signum is not None or stop.error is not None))

    def _approval(self, r: Request) -> None:
        """A teammate waits for a person: an ``ask`` call (the lead's inbox gets the request) or a
        plan (the protocol's message reached the lead's inbox already); the run's output says how."""
        if r.kind == "tool":
            self.runtime.tell_lead(r)
        if self.note is not None:
            self.note(approval_line(r))

    def _model_for(self, role: Role) -> LLMClient:
        """One client per model and endpoint: a teammate's own model (plan ``team:``), else its role's,
        else the run's; its endpoint, key and price from ``models:`` (llm/endpoints.py)."""
        model = role.model or self.config.model
        return self.endpoints.client(model, self.endpoints.spec(model, role.model_spec(model)))

    def _priced(self, role: Role) -> bool:
        """Whether the calls of a teammate of ``role`` have a known cost (a dollar budget can hold it)."""
        model = role.model or self.config.model
        return price_of(model, self.endpoints.spec(model, role.model_spec(model))) is not None

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        started = time.monotonic()
        deadline = started + task.timeout if task.timeout else None
        reported = threading.Lock()  # the teammate's report and the backstop's: whichever comes first

        def report(r: LoopResult) -> None:
            if not reported.acquire(blocking=False):
                return  # the backstop reported this attempt already: its late end is ignored
            if backstop is not None:
                backstop.cancel()
            status = STATUS.get(r.status, "failed")
            error = r.error if status != "completed" else None
            if status == "timeout":
                error = f"timed out after {task.timeout:g}s; the agent was stopped {r.error}"
            elif status == "failed" and not error:
                error = f"the agent ended with {r.status!r}"
            done(Outcome(task.id, epoch, status, duration=time.monotonic() - started, error=error, log=r.log,
                         result=r.result or None, usage=r.usage.model_dump() if r.usage.calls else None))

        def abandon() -> None:
            """The agent did not stop by its deadline + the grace: report the timeout, cancel the attempt."""
            if not reported.acquire(blocking=False):
                return
            self.runtime.cancel(task.id)
            done(Outcome(task.id, epoch, "timeout", duration=time.monotonic() - started,
                         error=f"timed out after {task.timeout:g}s; the agent did not stop within the "
                               f"{TIMEOUT_GRACE:g}s grace and was abandoned (its late answer is ignored)"))

        backstop = None
        if deadline is not None:
            backstop = threading.Timer(deadline - started + TIMEOUT_GRACE, abandon)
            backstop.daemon = True
            backstop.start()
        # With worktree isolation the task's cwd is inside its own worktree: the agent works there.
        self.runtime.assign(task, epoch, report, workspace=Path(task.cwd) if task.worktree and task.cwd else None,
                            deadline=deadline)

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.start(task, epoch, done)

    def reap_orphans(self) -> list[JobRecord]:
        """Nothing to reap: teammates are threads of this process; their claims are released by the runner."""
        return []

    def cancel(self, task_id: int) -> None:
        self.runtime.cancel(task_id)

    def close(self) -> None:
        """Stop the teammates and the model clients; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        for task in self.runtime.close():
            if self.note is not None:
                self.note(f"#{task.id} ({task.subject}) was claimed by a teammate during the run and not "
                          f"finished: released to pending ({task.error})")
        self.endpoints.close()

