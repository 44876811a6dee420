"""Hooks: the events, their configuration record and the seam lower floors fire through.

A hook is a shell command run when something happens in a run (docs/hooks.md).
This module holds only what every floor may see:

* ``HookEvent``: the eight events (``EVENTS``); ``VETO_EVENTS`` are the two a
  hook may veto by exiting 2 (``task_completed``, ``teammate_idle``).
* ``HooksConfig``: the ``hooks:`` mapping of a plan and of ``.team/hooks.yaml``
  (one list of ``HookCommand`` per event, a default ``timeout``); a bare
  string is one command. ``merged`` puts two together (both run).
* ``Verdict``: what a deciding hook said (``vetoed`` and its ``feedback``: the
  hook's stderr, scrubbed).
* The seams: ``Hooks`` (``fire``: notify, in the background; ``decide``: run
  now and return the verdict), ``TaskObserver`` (what ``tasks.TaskStore``
  calls after a create, claim or failure is written) and ``MessageObserver``
  (what ``team.inbox.Bus`` calls after a send). ``NoHooks`` does nothing.

The dispatcher that runs the commands is ``hooks.dispatch.HookDispatcher``
(floor 1); the store and the bus know only these Protocols.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .models import Message, Task

HookEvent = Literal["task_created", "task_claimed", "task_completed", "task_failed", "teammate_idle",
                    "teammate_stopped", "message_sent", "run_finished"]
EVENTS: tuple[str, ...] = get_args(HookEvent)
VETO_EVENTS: tuple[str, ...] = ("task_completed", "teammate_idle")
"""A hook of these events that exits 2 vetoes (docs/hooks.md)."""
DEFAULT_TIMEOUT = 60.0
"""Seconds a hook may run before its process group is killed, unless the config says otherwise."""
MAX_TIMEOUT = 86_400.0


class HookCommand(BaseModel):
    """One hook: a shell command (``run``) and, optionally, its own timeout."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    run: str = Field(min_length=1, description="Shell command; gets the event's JSON payload on stdin.")
    timeout: float | None = Field(None, gt=0, le=MAX_TIMEOUT,
                                  description="Seconds before its process group is killed (else the hooks' timeout).")


def _commands(value: Any) -> Any:
    """``cmd`` or ``[cmd, {run: cmd, timeout: 5}]``: a string is one command."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        return [{"run": v} if isinstance(v, str) else v for v in value]
    return value


_DESC = {
    "task_created": "a task was created (the plan's, or by a teammate's task_create)",
    "task_claimed": "a task was claimed (an attempt starts)",
    "task_completed": "a task attempt is about to be recorded completed; exit 2 vetoes",
    "task_failed": "a task failed for good",
    "teammate_idle": "a teammate is about to go idle; exit 2 keeps it working",
    "teammate_stopped": "a teammate's thread ended",
    "message_sent": "a message was sent in the run",
    "run_finished": "the run ended",
}


class HooksConfig(BaseModel):
    """``hooks:`` in a plan and in ``.team/hooks.yaml``: commands per event."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    timeout: float = Field(DEFAULT_TIMEOUT, gt=0, le=MAX_TIMEOUT,
                           description="Seconds a hook may run before its process group is killed.")
    task_created: list[HookCommand] = Field(default_factory=list, description=_DESC["task_created"])
    task_claimed: list[HookCommand] = Field(default_factory=list, description=_DESC["task_claimed"])
    task_completed: list[HookCommand] = Field(default_factory=list, description=_DESC["task_completed"])
    task_failed: list[HookCommand] = Field(default_factory=list, description=_DESC["task_failed"])
    teammate_idle: list[HookCommand] = Field(default_factory=list, description=_DESC["teammate_idle"])
    teammate_stopped: list[HookCommand] = Field(default_factory=list, description=_DESC["teammate_stopped"])
    message_sent: list[HookCommand] = Field(default_factory=list, description=_DESC["message_sent"])
    run_finished: list[HookCommand] = Field(default_factory=list, description=_DESC["run_finished"])

    _lists = field_validator(*EVENTS, mode="before")(_commands)

    def commands(self, event: HookEvent) -> list[HookCommand]:
        found: list[HookCommand] = getattr(self, event)
        return found

    def __bool__(self) -> bool:
        return any(self.commands(e) for e in get_args(HookEvent))

    def merged(self, other: HooksConfig | None) -> HooksConfig:
        """Both sets of commands (``self``'s first); ``other``'s timeout when it sets one."""
        if other is None:
            return self
        fields: dict[str, Any] = {e: [*self.commands(e), *other.commands(e)] for e in get_args(HookEvent)}
        timeout = other.timeout if "timeout" in other.model_fields_set else self.timeout
        return HooksConfig(timeout=timeout, **fields)


@dataclass(frozen=True)
class Verdict:
    """What the hooks of a deciding event said."""

    vetoed: bool = False
    feedback: str = ""
    """The vetoing hook's stderr (scrubbed of secrets), for the agent to read."""
    command: str = ""


class Hooks(Protocol):
    """The one dispatcher (``hooks.dispatch.HookDispatcher``), as the layers that own an event see it."""

    def wants(self, event: HookEvent) -> bool:
        """Whether any hook runs on ``event`` (a layer may skip building what it would hand over)."""
        ...

    def fire(self, event: HookEvent, *, teammate: str | None = None, task: Task | None = None,
             **extra: Any) -> None:
        """Run the event's hooks in the background; their failures are reported, never raised."""
        ...

    def decide(self, event: HookEvent, *, teammate: str | None = None, task: Task | None = None,
               **extra: Any) -> Verdict:
        """Run the event's hooks now; the first that exits 2 vetoes (only ``VETO_EVENTS``)."""
        ...


class TaskObserver(Protocol):
    """Told by the task store after a task was created, claimed or failed (the write is durable)."""

    def __call__(self, event: HookEvent, task: Task) -> None: ...


class MessageObserver(Protocol):
    """Told by the bus after a message was appended to an inbox."""

    def __call__(self, message: Message) -> None: ...


class NoHooks:
    """No hooks configured: nothing runs."""

    def wants(self, event: HookEvent) -> bool:
        return False

    def fire(self, event: HookEvent, *, teammate: str | None = None, task: Task | None = None,
             **extra: Any) -> None:
        return None

    def decide(self, event: HookEvent, *, teammate: str | None = None, task: Task | None = None,
               **extra: Any) -> Verdict:
        return Verdict()
