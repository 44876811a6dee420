"""The executor seam: how the scheduler runs one attempt of one task.

The scheduler knows only the ``Executor`` Protocol below. ``start`` must
return quickly; when the attempt ends the executor calls ``done(Outcome(...))``
exactly once, from any thread. The scheduler's ``done`` only puts the outcome
on its event queue, so executors never touch scheduler state. The epoch is
the claim's epoch: it travels back in the outcome and the store refuses a
completion whose epoch went stale.

What an executor can do is declared here, not probed: ``inline_start``
says ``start`` only enqueues or sends (so the scheduler may call it inside
the store's commit, the moment a claim is logged), ``start_now`` starts on
the caller's thread, and ``reap_orphans`` kills what a dead lead left
running before anything runs again.

The executors: ``shell.ShellExecutor`` (``kind: shell``, background jobs),
``agents.AgentExecutor`` (``kind: agent``, LLM teammates), ``command.CommandExecutor``
(``kind: command``, agent CLIs as teammates, as jobs of the shell executor), ``sync.SyncExecutor``
(in-process, synchronous: the scheduler's policy in tests), and
``isolation``'s wrapper that runs either in a git worktree, and ``Rooted``
around them all, which makes a task's stored ``cwd`` absolute. ``runner``
builds the ones a plan needs (``build_executors``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core.budget import Budget
from ..core.hooks import Hooks, NoHooks
from ..core.mcpspec import McpServerSpec
from ..core.models import Task
from ..core.modelspec import ModelSpec
from ..core.paths import at_root
from ..core.sandbox import Sandbox
from ..jobs.records import JobRecord
from ..plan.model import TeamMember
from ..runtime.budgets import Spend
from ..tasks.store import TaskStore
from .stop import RunStop


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended."""

    task_id: int
    epoch: int
    status: str  # completed | failed | timeout | killed | lost
    exit_code: int | None = None
    duration: float = 0.0
    log: str | None = None
    tail: str = ""
    error: str | None = None
    result: str | None = None  # what an agent task produced (else the tail of the log is kept)
    usage: dict[str, Any] | None = None  # token usage of an agent attempt (pricing.Usage as a dict)
    fields: dict[str, Any] | None = None  # extra task fields to store with the outcome (worktree, branch, ...)
    node: str | None = None  # the cluster node the attempt ran on (backend ray), stored as the task's ``node``
    # The attempt was lost with its node or worker process (an infrastructure loss, not the task's
    # failure): the scheduler re-runs it without using a retry, up to the task's ``lost_retries``.
    lost: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "completed"

    def describe(self) -> str:
        """Why the attempt did not complete: the executor's ``error`` (a timeout's says the limit and
        how the attempt ended), else the status and exit code."""
        if self.ok:
            return "completed"
        if self.error:
            return self.error
        if self.status == "timeout":
            return f"timed out after {self.duration:.1f}s (process group killed)"
        if self.exit_code is not None and self.exit_code < 0:
            return f"{self.status}: killed by signal {-self.exit_code}"
        return f"{self.status}: exit code {self.exit_code}"


DoneCallback = Callable[[Outcome], None]


class Executor(Protocol):
    kind: str
    inline_start: bool
    """``start`` only enqueues or sends: safe inside ``TaskStore.commit``'s ``on_logged``."""

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        """Begin the attempt (non-blocking); ``done`` is called once when it ends."""
        ...

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        """``start`` on the caller's thread (the scheduler does this for a lone claim)."""
        ...

    def cancel(self, task_id: int) -> None:
        """Stop a running attempt (its ``done`` still comes)."""
        ...

    def reap_orphans(self) -> list[JobRecord]:
        """Kill what a dead lead left running (called before anything runs); what was killed."""
        ...

    def close(self) -> None:
        """Stop everything and free threads."""
        ...


Settle = Callable[[], list[str]]
"""Called by the runner when a run's work is done, before the executors close: waits for what must
still happen inside the run (a teammate working on a ``teammate_idle`` veto of its last attempt)
and returns what was left unsatisfied, one line each (the run is then incomplete, exit 1). An
executor that needs it adds one to ``ExecutorContext.settlers`` when it is built."""


@dataclass
class ExecutorContext:
    """What an executor is built with: the state root and run-wide settings."""

    root: Path
    plan: str
    model: str | None = None
    owner: str = "lead"
    workspace: Path | None = None  # where agent tasks work (default: root)
    team: list[tuple[str, str]] = field(default_factory=list)  # the plan's (name, role) teammates
    plan_mode: set[str] = field(default_factory=set)  # teammates that start in plan mode
    note: Callable[[str], None] | None = None  # tells the user something that is not an outcome
    store: TaskStore | None = None  # the run's task store, for executors to share (default: their own)
    stop: RunStop = field(default_factory=RunStop)  # threads of an executor report their death here (stop.py)
    sandbox: Sandbox = field(default_factory=Sandbox)  # where agents' shell commands run (core/sandbox.py)
    hooks: Hooks = field(default_factory=NoHooks)  # the run's hook dispatcher (hooks/dispatch.py)
    models: dict[str, str] = field(default_factory=dict)  # a teammate's own model (the plan's `team:`)
    budgets: dict[str, Budget] = field(default_factory=dict)  # a teammate's own budget (the plan's `team:`)
    spend: Spend | None = None  # usage against budgets: the plan's `budget:`, `--ask` (runtime/budgets.py)
    mcp_servers: list[McpServerSpec] = field(default_factory=list)  # the plan's MCP servers (teammates' tools)
    model_specs: dict[str, ModelSpec] = field(default_factory=dict)  # the plan's `models:` (llm/endpoints.py)
    command_members: list[TeamMember] = field(default_factory=list)  # the plan's agent CLIs (kind: command)
    settlers: list[Settle] = field(default_factory=list)  # what the run waits for once its work is done (below)
    slots: int | None = None  # set by a cluster's executor when built: its CPU slots (the run's default workers)


class Wrapper:
    """An executor around another (``inner``): the same kind and capabilities, and everything but
    starting an attempt passed straight through. ``Rooted`` and ``hooked.Hooked`` are ones."""

    def __init__(self, inner: Executor):
        self.inner = inner
        self.kind = inner.kind
        self.inline_start = inner.inline_start

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.inner.start(task, epoch, done)

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.inner.start_now(task, epoch, done)

    def cancel(self, task_id: int) -> None:
        self.inner.cancel(task_id)

    def reap_orphans(self) -> list[JobRecord]:
        return self.inner.reap_orphans()

    def close(self) -> None:
        self.inner.close()


class Rooted(Wrapper):
    """The outermost executor of a run: hands on each task with its stored ``cwd`` (relative to the
    state root: core/paths.py) made absolute, so the executors inside (isolation, shell, agents, ray)
    see the folder as it is now, wherever the repository was moved or copied."""

    def __init__(self, inner: Executor, root: Path):
        super().__init__(inner)
        self.root = root

    def _at_root(self, task: Task) -> Task:
        if task.cwd is None or task.cwd.startswith("/"):
            return task  # no cwd, or an absolute one (an older store, a folder outside the root)
        return task.model_copy(update={"cwd": str(at_root(task.cwd, self.root))})

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.inner.start(self._at_root(task), epoch, done)

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.inner.start_now(self._at_root(task), epoch, done)
