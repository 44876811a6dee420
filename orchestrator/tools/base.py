"""The tool contract: what a tool declares and what a call produces.

A ``Tool`` is data plus a handler. The data is what the harness needs to
decide on a call *before* running anything:

* ``name``, ``description`` and ``args`` (a pydantic model, ``extra="forbid"``):
  the model sees these as one OpenAI ``tools`` entry.
* ``risk``: ``read`` | ``write`` | ``execute`` | ``coordinate``. Plan mode
  refuses ``write`` and ``execute``.
* ``budget``: the most characters of result that go back to the model; the
  rest is saved under ``ctx.outputs_dir`` and referenced.
* ``paths``: which argument fields are paths and how they are used
  (``read``/``write``); the pipeline confines them to the workspace and hands
  the handler the resolved ``Path`` in ``call.paths``.
* ``fresh``: the path field whose *existing* file needs a fresh, full read
  baseline before the call may run (edits and overwrites).
* ``command``: the field holding a shell command, checked by the shell policy.
* ``authorize``: a check of the validated call against the agent's role
  ``permissions`` (``ctx.permissions``, roles/roles.py), run by the pipeline's
  ``permit`` stage before anything is touched; it raises ``Refused`` (stage
  ``permission``) saying what the role may do instead.
* ``schema``: the arguments' JSON Schema when they are not a pydantic model (an MCP
  server's tool: its ``inputSchema``); the pipeline validates against it (``jsonschema``),
  the model sees it, and the handler gets the arguments as a dict. ``args`` is then
  ``JsonArgs`` and takes no part.
* ``server``: the MCP server whose tool it is (tools/mcptools.py); None for a built-in tool.
  A ``tool_call`` hook's matcher also knows it as ``mcp__<server>__<tool>``.

A handler takes one ``Call`` and returns ``str`` or ``ToolOutput``. Expected
failures (file missing, no match, a store conflict) raise ``ToolError`` or a
``TeamError``; they become error observations. Anything else is a bug in our
code: the pipeline logs it with its traceback and tells the model so.

``ToolContext`` carries everything a call may touch: the workspace the file
tools are confined to (its ``home``, and the git worktree an agent entered),
bash's working directory (``cwd``, kept between calls), the role's
``permissions`` and the skill a run loaded (``skill``), the state root, the agent's name and mode, where full
outputs and the call log go, the agent's ``FileTruth`` and ``TaskStore``, the
sandbox its shell commands run in and whether they may use the network, the
secrets no result may carry, and
typed slots for the services other modules provide (``tools.services``:
message bus, job runner, spawner, subagents, the agent loop, the protocol
handshakes). A tool that needs a missing service gets an error observation
from ``ctx.need_*``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from ..core.hooks import Hooks
from ..core.redact import Secrets
from ..core.sandbox import Sandbox
from ..roles.roles import Permissions

if TYPE_CHECKING:
    from .approval import ApprovalGate
    from .filetruth import FileTruth
    from .services import (
        ClaimTracker,
        Handshakes,
        JobRunner,
        LoopControl,
        MessageBus,
        Spawner,
        Subagents,
        TaskStorage,
    )

T = TypeVar("T")

Risk = Literal["read", "write", "execute", "coordinate"]
RISKS: tuple[str, ...] = ("read", "write", "execute", "coordinate")
Access = Literal["read", "write"]
Mode = Literal["normal", "plan"]

DEFAULT_BUDGET = 20_000


class ToolError(Exception):
    """An expected tool failure; its message goes back to the model verbatim."""

    stage = "execute"


class Refused(ToolError):
    """A call stopped by the pipeline before (or instead of) running.

    ``stage`` names the step: parse, lookup, validate, path, fresh, policy,
    plan or service.
    """

    def __init__(self, message: str, stage: str):
        super().__init__(message)
        self.stage = stage


MAX_SECONDS = 86_400.0
"""The longest wait a model may ask a tool for (a day): a timeout past it is refused at validation."""


class Args(BaseModel):
    """Base of every argument model: unknown fields are refused, and so are numbers that are not
    finite (``1e999`` parses as infinity); every numeric field declares its bounds, so no number a
    model sends reaches the OS unchecked (a ``1e300`` timeout once killed the job watcher)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class JsonArgs(BaseModel):
    """The ``args`` of a tool described by a JSON ``schema`` instead (see ``Tool.schema``)."""

    model_config = ConfigDict(extra="allow")


@dataclass
class ToolOutput:
    """What a handler returns when a plain string is not enough."""

    text: str
    is_error: bool = False
    bounded: bool = False
    """True when the handler already cut ``text`` to budget itself."""
    full_output: Path | None = None
    """Where the complete output already lives (set with ``bounded``)."""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActiveSkill:
    """A skill the agent loaded in this run, and the tools it allows (its ``allowed-tools``)."""

    name: str
    tools: frozenset[str]


@dataclass
class Observation:
    """The result of one tool call, as the model will see it."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    stage: str = "ok"
    """Where the call ended: parse, lookup, validate, path, fresh, policy,
    plan, service, execute (an expected failure), crash (our bug) or ok."""
    full_output: str | None = None
    """Path of the complete output when ``content`` was cut."""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_message(self) -> dict[str, Any]:
        """The OpenAI chat message carrying this result."""
        return {"role": "tool", "tool_call_id": self.call_id, "content": self.content}


@dataclass
class Call:
    """One validated, authorised invocation handed to a handler."""

    tool: Tool
    args: Any
    ctx: ToolContext
    call_id: str
    paths: dict[str, Path] = field(default_factory=dict)
    """Resolved, policy-checked paths by argument field name."""
    current: dict[str, bytes] = field(default_factory=dict)
    """Current bytes of files that passed the freshness check, by field name."""


Handler = Callable[[Call], "str | ToolOutput"]
Authorize = Callable[[Call], None]


@dataclass(frozen=True)
class Tool:
    """A tool contract. See the module docstring for each field."""

    name: str
    description: str
    args: type[BaseModel]
    risk: Risk
    handler: Handler
    budget: int = DEFAULT_BUDGET
    paths: tuple[tuple[str, Access], ...] = ()
    fresh: str | None = None
    command: str | None = None
    authorize: Authorize | None = None
    schema: dict[str, Any] | None = None
    server: str | None = None

    def __post_init__(self) -> None:
        if self.risk not in RISKS:
            raise ValueError(f"tool {self.name}: risk must be one of {RISKS}, not {self.risk!r}")
        fields = self.args.model_fields
        for name, access in self.paths:
            if name not in fields or access not in ("read", "write"):
                raise ValueError(f"tool {self.name}: bad path field {name!r}/{access!r}")
        for field_name in (self.fresh, self.command):
            if field_name is not None and field_name not in fields:
                raise ValueError(f"tool {self.name}: no argument field {field_name!r}")


def tool(
    name: str,
    *,
    args: type[BaseModel],
    risk: Risk,
    budget: int = DEFAULT_BUDGET,
    paths: dict[str, Access] | None = None,
    fresh: str | None = None,
    command: str | None = None,
    description: str | None = None,
    authorize: Authorize | None = None,
) -> Callable[[Handler], Tool]:
    """Decorator turning ``def handler(call) -> str | ToolOutput`` into a ``Tool``.

    The description defaults to the handler's docstring.
    """

    def wrap(fn: Handler) -> Tool:
        desc = description or " ".join((fn.__doc__ or "").split())
        if not desc:
            raise ValueError(f"tool {name}: needs a description or a docstring")
        return Tool(
            name=name,
            description=desc,
            args=args,
            risk=risk,
            handler=fn,
            budget=budget,
            paths=tuple(sorted((paths or {}).items())),
            fresh=fresh,
            command=command,
            authorize=authorize,
        )

    return wrap


def _need(value: T | None, what: str, why: str) -> T:
    if value is None:
        raise Refused(f"{what} is not available in this session ({why}); carry on without it", "service")
    return value


@dataclass
class ToolContext:
    """Everything a tool call may touch. One per agent; ``mode`` may change."""

    workspace: Path
    root: Path
    agent: str
    truth: FileTruth
    store: TaskStorage
    """The task store (``tasks.store.TaskStore``, or a remote agent's proxy of the lead's: tools.services)."""
    outputs_dir: Path
    call_log: Path | None = None
    mode: Mode = "normal"
    task_id: int | None = None
    """The task the agent is working on, if any."""
    claim_lease: float = 60.0
    """Lease (seconds) of a ``claim_task`` claim: every claim expires unless someone renews it."""
    shell_timeout: float = 120.0
    """Default and ceiling come from here: bash's ``timeout`` may not exceed 5x it."""
    deadline: float | None = None
    """``time.monotonic()`` at which the current task attempt runs out of time (its ``timeout``);
    set by the teammate, and no tool call waits past it."""
    sandbox: Sandbox = field(default_factory=Sandbox)
    """Where ``bash`` and ``background_run`` commands run (core/sandbox.py); the session's, shared."""
    network: bool = False
    """The agent's shell commands may use the network (its role says ``network: true``)."""
    secrets: Secrets = field(default_factory=Secrets.from_environ)
    """Scrubbed from every result, the call log and the saved outputs (core/redact.py)."""
    bus: MessageBus | None = None
    jobs: JobRunner | None = None
    spawner: Spawner | None = None
    subagents: Subagents | None = None
    loop: LoopControl | None = None
    """The agent loop running the calls (set by ``agent.loop.Agent``)."""
    handshakes: Handshakes | None = None
    """A teammate's side of the protocols (set by ``runtime.teammate.Teammate``)."""
    claims: ClaimTracker | None = None
    """Renews the agent's ``claim_task`` claims and releases them when it stops (the team runtime)."""
    permissions: Permissions = field(default_factory=Permissions.full)
    """What the agent's role lets its task and worktree tools change (roles/roles.py); a context made
    without a role (a script, a test) may do everything."""
    skill: ActiveSkill | None = None
    """The skill loaded in the current run whose ``allowed-tools`` limit the calls (the loop clears it)."""
    cwd: Path | None = None
    """bash's working directory, kept between calls; None: the workspace. Always inside it."""
    worktree: str | None = None
    """The agent worktree the agent entered (``worktree_enter``): ``workspace`` is its directory."""
    home: Path | None = None
    """The workspace before ``worktree_enter`` (``worktree_leave`` goes back); None: not in one."""
    approvals: ApprovalGate | None = None
    """The agent's ``ask`` rules and who answers them (tools/approval.py); None: nothing asks."""
    hooks: Hooks | None = None
    """The run's hooks (core/hooks.py): its ``tool_call`` hooks see each call before it runs and may
    refuse it (hookgate.py); None: no hooks."""

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace).resolve()
        self.root = Path(self.root).resolve()
        self.outputs_dir = Path(self.outputs_dir).resolve()

    def time_left(self) -> float:
        """Seconds until ``deadline`` (never negative; a day when there is none)."""
        if self.deadline is None:
            return MAX_SECONDS
        return max(0.0, self.deadline - time.monotonic())

    # -- services: each missing one is an error observation naming it --------------
    def need_bus(self) -> MessageBus:
        return _need(self.bus, "messaging", "no message bus")

    def need_jobs(self) -> JobRunner:
        return _need(self.jobs, "background jobs", "no job manager")

    def need_spawner(self) -> Spawner:
        return _need(self.spawner, "spawning teammates", "no team")

    def need_subagents(self) -> Subagents:
        return _need(self.subagents, "subagents", "subagents cannot nest")

    def need_loop(self) -> LoopControl:
        return _need(self.loop, "this tool", "it needs an agent loop, and none is running this call")

    def need_handshakes(self) -> Handshakes:
        return _need(self.handshakes, "the teammate protocols", "only teammates answer shutdown and plan requests")

    def move_to(self, workspace: Path) -> None:
        """Work in ``workspace`` from now on (a worktree, or back home); bash starts at its top."""
        self.workspace = Path(workspace).resolve()
        self.cwd = None

    def leave_worktree(self) -> None:
        """Back to the workspace the agent had before it entered a worktree."""
        if self.home is not None:
            self.move_to(self.home)
        self.home, self.worktree = None, None

    def check_worktree(self) -> str:
        """Before a call: the worktree the agent entered is gone (merged, removed)? Back home,
        and the note saying so; else ``""``."""
        if self.home is None or self.workspace.is_dir():
            return ""
        gone = self.worktree
        self.leave_worktree()
        return f"[worktree {gone} you were in is gone (merged or removed): you are back in {self.workspace}]\n"

    def rel(self, path: Path) -> str:
        """``path`` relative to the workspace when inside it, else absolute."""
        try:
            return path.relative_to(self.workspace).as_posix() or "."
        except ValueError:
            return str(path)
