"""What a tool may reach beyond files and the task store: one small Protocol per service.

``ToolContext`` holds each as an optional, typed slot; the module that owns
the real thing fills it (the team runtime, the agent loop, a teammate).
A tool asks for the slice it needs with ``ToolContext.need_*``, which turns
a missing service into an error observation the model can read::

    slot         Protocol      provided by                        used by
    store        TaskStorage   tasks.store.TaskStore              task_*, claim_task, worktree_* (on a Ray node:
                               run.ray_teammate.RemoteStore, which asks the lead's service)
    bus          MessageBus    team.inbox.Bus                     send_message, broadcast, review_plan
    jobs         JobRunner     jobs.manager.JobManager            background_run, check_background
    spawner      Spawner       runtime.runtime.TeamRuntime        spawn_teammate, list_teammates, request_shutdown
    subagents    Subagents     runtime.subagents.SubagentRunner   subagent (absent inside a subagent)
    loop         LoopControl   agent.loop.Agent                   idle, compact, read_inbox, task_update
    handshakes   Handshakes    runtime.handshakes.TeammateHandshakes  respond_shutdown, submit_plan
    claims       ClaimTracker  runtime.claims.ClaimLedger         claim_task (its lease is renewed, never stranded)

The Protocols name only what the tools call, so a test can hand a tool a
small fake, and the type checker holds every provider to the same shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..core.models import Message, Status, Task
from ..jobs.records import JobRecord
from ..roles.roles import Permissions
from ..team.protocols import Mailbox, Response


class TaskStorage(Protocol):
    """The task store, as tools use it: exactly the ``tasks.store.TaskStore`` methods they call.

    The store is the one implementation of the rules (locks, compare-and-set claims, epochs,
    dependency checks); a remote agent (``team run --backend ray``) reaches the lead's through a
    proxy with this shape (run/ray_teammate.py), so its rules are never re-implemented."""

    def read(self, task_id: int) -> Task: ...

    def resolve(self, ref: int | str) -> int: ...

    def all(self) -> list[Task]: ...

    def create(self, subject: str, description: str = "", blocked_by: Iterable[int | str] = (), owner: str = "",
               *, actor: str = "cli", **fields: Any) -> Task: ...

    def update(self, ref: int | str, *, status: str | Status | None = None, owner: str | None = None,
               add_blocked_by: Iterable[int | str] = (), remove_blocked_by: Iterable[int | str] = (),
               actor: str = "cli", **fields: Any) -> Task: ...

    def claim(self, ref: int | str, owner: str, *, lease: float | None = None, actor: str | None = None) -> Task: ...


class MessageBus(Mailbox, Protocol):
    """The inbox bus, as tools use it."""

    def broadcast(self, content: str, *, sender: str) -> list[Message]: ...


class JobRunner(Protocol):
    """Background jobs: start one, look at one, list them."""

    def start(self, command: str, *, owner: str = "lead", cwd: Path | None = None,
              env: Mapping[str, str] | None = None, timeout: float | None = None,
              task: int | None = None, ref: str | None = None, prefix: Sequence[str] = ()) -> JobRecord: ...

    def get(self, job_id: str) -> JobRecord: ...

    def list(self) -> list[JobRecord]: ...


class Spawner(Protocol):
    """The team, as the lead's tools change it."""

    def add_teammate(self, name: str, role: str, prompt: str | None) -> str:
        """Start (or message) teammate ``name``; a line saying what happened."""
        ...

    def describe(self) -> str: ...

    def request_shutdown(self, name: str, *, reason: str = "", timeout: float = 30.0) -> Response: ...


class AgentAnswer(Protocol):
    """How a subagent's run ended (the shape of ``agent.loop.LoopResult``)."""

    @property
    def status(self) -> str: ...

    @property
    def result(self) -> str: ...

    @property
    def error(self) -> str | None: ...

    @property
    def steps(self) -> int: ...


class Subagents(Protocol):
    def run(self, prompt: str, role: str, *, parent: str, network: bool = False,
            permissions: Permissions | None = None, task: int | None = None) -> AgentAnswer:
        """A fresh agent's answer; ``network`` and ``permissions``: the caller's own (never widened);
        ``task``: the caller's current task (its spend is counted there)."""
        ...


class LoopControl(Protocol):
    """The agent loop running this call: how tools end a task, go idle, compact, read the inbox."""

    def finish(self, status: str, result: str) -> None:
        """End the current task attempt after this step (``completed`` or ``failed``)."""
        ...

    def go_idle(self) -> None: ...

    def request_compaction(self) -> None: ...

    def inbox_text(self) -> str:
        """Unread messages as text (acknowledged once the tool result is in the transcript)."""
        ...


class ClaimTracker(Protocol):
    """Keeps an agent's claims alive (lease renewals) and releases them when the agent stops."""

    def claimed(self, task: Task) -> None: ...


class Handshakes(Protocol):
    """A teammate's side of the shutdown and plan-approval protocols."""

    def respond_shutdown(self, request_id: str, approve: bool, reason: str) -> str: ...

    def submit_plan(self, plan: str) -> str: ...
