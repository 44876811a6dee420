"""Hooks: the events, their configuration record and the seam lower floors fire through.

A hook is a shell command run when something happens in a run (docs/hooks.md).
This module holds only what every floor may see:

* ``HookEvent``: the nine events (``EVENTS``); ``VETO_EVENTS`` are the three a
  hook may veto by exiting 2 (``task_completed``, ``teammate_idle``, ``tool_call``).
* ``HooksConfig``: the ``hooks:`` mapping of a plan and of ``.team/hooks.yaml``
  (one list of ``HookCommand`` per event, a default ``timeout``); a bare
  string is one command. ``merged`` puts two together (both run).
* ``ToolCall``: a teammate's tool call as a ``tool_call`` hook sees it (name, MCP server,
  arguments, risk) and what a matcher matches it against; ``HookCommand.match`` (``TOOL`` or
  ``TOOL(PATTERN)``, shell-style globs, ``Matcher``) picks the calls a ``tool_call`` hook runs for.
* ``Verdict``: what a deciding hook said (``vetoed`` and its ``feedback``: the
  hook's stderr, scrubbed; ``failed``: a ``tool_call`` hook that crashed or timed out, which
  refuses the call too: a guard that cannot decide does not let a call through).
* The seams: ``Hooks`` (``fire``: notify, in the background; ``decide``: run
  now and return the verdict; ``tool_call``: the hooks matching one tool call, now),
  ``TaskObserver`` (what ``tasks.TaskStore``
  calls after a create, claim or failure is written) and ``MessageObserver``
  (what ``team.inbox.Bus`` calls after a send). ``NoHooks`` does nothing.

The dispatcher that runs the commands is ``hooks.dispatch.HookDispatcher``
(floor 1); the store and the bus know only these Protocols.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .models import Message, Task

HookEvent = Literal["task_created", "task_claimed", "task_completed", "task_failed", "teammate_idle",
                    "teammate_stopped", "message_sent", "run_finished", "tool_call"]
EVENTS: tuple[str, ...] = get_args(HookEvent)
VETO_EVENTS: tuple[str, ...] = ("task_completed", "teammate_idle", "tool_call")
"""A hook of these events that exits 2 vetoes (docs/hooks.md)."""
DEFAULT_TIMEOUT = 60.0
"""Seconds a hook may run before its process group is killed, unless the config says otherwise."""
MAX_TIMEOUT = 86_400.0


MATCHER_RE = re.compile(r"^\s*(?P<tool>[A-Za-z0-9_.*?\[\]!-]+)\s*(?:\((?P<pattern>.*)\))?\s*$", re.S)
MCP_PREFIX = "mcp__"
"""An MCP tool also answers to ``mcp__<server>__<tool>`` in a matcher, as Claude Code names them."""


@dataclass(frozen=True)
class ToolCall:
    """A teammate's tool call, as a ``tool_call`` hook sees it (the payload's ``tool``) and matches it."""

    name: str
    """The tool's name as the model calls it (an MCP server's tool: ``<server>__<tool>``)."""
    arguments: dict[str, Any]
    """The validated arguments the model gave (defaults left out; scrubbed of secrets with the whole
    payload before a hook sees them)."""
    risk: str
    call_id: str = ""
    server: str | None = None
    """The MCP server whose tool it is; None for a built-in tool."""
    subjects: tuple[str, ...] = ()
    """What a matcher's ``(PATTERN)`` is matched against: a command tool's command (whole, and each
    simple command in it), a file tool's paths relative to the workspace, else the arguments as
    compact JSON (tools/hookgate.py builds them as the ``ask`` rules do)."""

    def names(self) -> tuple[str, ...]:
        """The names a matcher's ``TOOL`` may use for this call."""
        return (self.name, MCP_PREFIX + self.name) if self.server is not None else (self.name,)

    def payload(self) -> dict[str, Any]:
        return {"name": self.name, "server": self.server, "risk": self.risk, "arguments": self.arguments,
                "call_id": self.call_id}


@dataclass(frozen=True)
class Matcher:
    """One ``match:`` entry: ``TOOL`` (a glob over tool names) or ``TOOL(PATTERN)`` (a glob over the
    call's subjects too); ``*`` spans ``/`` and spaces, as in ``ask:`` rules (tools/approval.py)."""

    tool: str
    pattern: str | None

    @classmethod
    def parse(cls, entry: str) -> Matcher:
        m = MATCHER_RE.match(entry)
        if m is None or (m.group("pattern") is not None and not m.group("pattern").strip()):
            raise ValueError(f"{entry!r} must be TOOL or TOOL(PATTERN) with shell-style globs, e.g. bash, "
                             "\"bash(rm *)\", write_file, \"mcp__git__*\"")
        pattern = m.group("pattern")
        return cls(m.group("tool"), None if pattern is None else pattern.strip())

    def matches(self, call: ToolCall) -> bool:
        if not any(fnmatch.fnmatchcase(n, self.tool) for n in call.names()):
            return False
        return self.pattern is None or any(fnmatch.fnmatchcase(s, self.pattern) for s in call.subjects)


class HookCommand(BaseModel):
    """One hook: a shell command (``run``) and, optionally, its own timeout."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    run: str = Field(min_length=1, description="Shell command; gets the event's JSON payload on stdin.")
    timeout: float | None = Field(None, gt=0, le=MAX_TIMEOUT,
                                  description="Seconds before its process group is killed (else the hooks' timeout).")
    match: list[str] | None = Field(None, description="tool_call hooks only: the calls it runs for, each TOOL or "
                                                      "TOOL(PATTERN) with shell-style globs (bash, \"bash(rm *)\", "
                                                      "\"mcp__git__*\"); absent: every call.")

    @field_validator("match", mode="before")
    @classmethod
    def _one_match(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("match")
    @classmethod
    def _parse_match(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or []:
            Matcher.parse(entry)
        return value

    def matchers(self) -> tuple[Matcher, ...]:
        return tuple(Matcher.parse(e) for e in self.match or [])

    def matches(self, call: ToolCall) -> bool:
        """Whether this (``tool_call``) hook runs for ``call``: no ``match`` runs for every call."""
        return self.match is None or any(m.matches(call) for m in self.matchers())


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
    "tool_call": "a teammate's tool call is about to run (match: picks the tools); exit 2 refuses it",
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
    tool_call: list[HookCommand] = Field(default_factory=list, description=_DESC["tool_call"])

    _lists = field_validator(*EVENTS, mode="before")(_commands)

    @field_validator(*(e for e in EVENTS if e != "tool_call"))
    @classmethod
    def _match_only_for_tools(cls, value: list[HookCommand], info: ValidationInfo) -> list[HookCommand]:
        for i, cmd in enumerate(value):
            if cmd.match is not None:
                raise ValueError(f"{info.field_name}[{i}] has `match:`, which only tool_call hooks take (it picks "
                                 "the tool calls they see): remove it")
        return value

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
    failed: bool = False
    """A ``tool_call`` hook crashed, timed out or could not start: the call is refused all the same
    (``feedback`` says what happened to the hook)."""


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

    def tool_call(self, call: ToolCall, *, teammate: str, task: Task | None = None,
                  limit: float | None = None) -> Verdict:
        """Run the ``tool_call`` hooks whose ``match`` takes ``call``, now, in order: the first that exits 2
        vetoes it; one that fails (crash, timeout, cannot start) refuses it too (``Verdict.failed``).
        ``limit``: seconds no hook may run past (the task's time left)."""
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

    def tool_call(self, call: ToolCall, *, teammate: str, task: Task | None = None,
                  limit: float | None = None) -> Verdict:
        return Verdict()
