"""The ``plan.yaml`` format: pydantic models (``extra="forbid"``) and the JSON Schema.

``Plan`` holds ``defaults`` (``Defaults``), ``team`` (``TeamMember``) and
``tasks`` (``PlanTask``: a shell ``run`` or an agent ``prompt``; a ``prompt`` assigned to a
``kind: command`` member is that agent CLI's, kind ``command``), ``mcp_servers``
(core/mcpspec.py: MCP servers whose tools teammates use), and whether
agents' shell commands run in the OS sandbox (``sandbox``, core/sandbox.py:
``off`` is an explicit opt-out), its ``hooks`` (core/hooks.py, docs/hooks.md)
and spending caps (``budget``: the run's; a ``team:`` member's own, with its
``model``; core/budget.py), and per model its endpoint, key variable and price
(``models``: core/modelspec.py); every field
carries its description, which ``team plan schema`` publishes through
``json_schema``. ``LoadedPlan`` is a validated plan with where it came from:
a task's ``cwd`` (or ``defaults.cwd``) is resolved against the directory
holding the plan file, so a plan and its project move together.

Loading and the checks beyond types are load.py's; analysis is analysis.py's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from ..core.budget import Budget
from ..core.hooks import HooksConfig
from ..core.mcpspec import McpServerSpec
from ..core.models import NAME_RE
from ..core.modelspec import ModelSpec

Loc = tuple[Any, ...]
"""Where a value sits in the plan document: keys and list indexes from the top."""


MAX_SECONDS = 30 * 86_400.0
"""The longest ``timeout`` (and the largest ``estimate``) a plan may give: 30 days."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # `.inf` and `.nan` are no numbers here


def _env_values(value: Any) -> Any:
    """Allow ``DEBUG: 1`` in env maps: numbers and booleans become strings."""
    if isinstance(value, dict):
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) if isinstance(v, (int, float, bool)) else v
                for k, v in value.items()}
    return value


def _env_names(value: dict[str, str]) -> dict[str, str]:
    """Refuse names no environment can hold: empty, or with ``=`` or a NUL byte."""
    for name in value:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{name!r} cannot be an environment variable name (it must be non-empty, "
                             "without '=' or a NUL byte)")
    return value


def _resource_names(value: dict[str, float] | None) -> dict[str, float] | None:
    """Custom resources: names Ray accepts, amounts not negative (``CPU`` is ``num_cpus``)."""
    for name, amount in (value or {}).items():
        if not NAME_RE.match(name) or name in ("CPU", "cpu", "num_cpus"):
            raise ValueError(f"{name!r} is not a resource name (a slug; CPUs are `num_cpus`)")
        if amount < 0:
            raise ValueError(f"{name}: {amount} is negative")
    return value


def _one_glob(value: Any) -> Any:
    """``outputs: dist`` is ``outputs: [dist]`` (each glob is checked by load.py, at its line)."""
    return [value] if isinstance(value, str) else value


OUTPUTS = ("The files (globs relative to the task's cwd) its result is made of; `[]`: none (a check). "
           "isolation worktree: only changes to them are committed and merged, the rest it leaves behind "
           "is not kept. backend ray: they are brought back to the lead's folder. Without isolation on this "
           "machine the task writes in place and nothing is dropped. Unset: everything it changes is kept.")
"""The one meaning of ``outputs:`` (docs/run.md, "What a task keeps")."""


class Defaults(_Strict):
    """Values every task inherits unless it sets its own."""

    timeout: float | None = Field(None, gt=0, le=MAX_SECONDS, description="Seconds before an attempt is killed.")
    retries: int = Field(0, ge=0, le=1000, description="Extra attempts after a failure.")
    retry_delay: float = Field(1.0, ge=0, le=86_400, description="Seconds before the first retry; doubles each "
                                                                 "time, up to an hour.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    cwd: str | None = Field(None, description="Working directory, relative to the plan file.")
    outputs: list[str] | None = Field(None, description=OUTPUTS)
    num_cpus: float | None = Field(None, ge=0, le=1024, description="backend ray: CPUs an attempt reserves on a "
                                                                    "node (default 1).")
    resources: dict[str, float] | None = Field(None, description="backend ray: custom resources an attempt "
                                                                 "reserves on a node, e.g. {gpu: 1}.")
    lost_retries: int | None = Field(None, ge=0, le=1000, description="backend ray: attempts lost with a node "
                                                                      "re-run elsewhere (use no retry; default 3).")

    _env = field_validator("env", mode="before")(_env_values)
    _env_name = field_validator("env")(_env_names)
    _res = field_validator("resources")(_resource_names)
    _out = field_validator("outputs", mode="before")(_one_glob)


class TeamMember(_Strict):
    """A named teammate for agent tasks: an LLM teammate the lead runs (``kind: llm``), or any agent CLI
    the run starts for each of its tasks (``kind: command``, run/command.py, docs/agents.md)."""

    name: str = Field(pattern=NAME_RE.pattern, description="Teammate name (a slug).")
    role: str = Field("coder", description="Role, e.g. coder, tester, reviewer.")
    plan_mode: bool = Field(False, description="Write tools refused until the lead approves its plan.")
    model: str | None = Field(None, description="Model for this teammate (else its role's, the plan's, --model).")
    budget: Budget | None = Field(None, description="Tokens and/or dollars this teammate may spend in the run "
                                                    "(else its role's).")
    # -- kind: command (an agent CLI as a teammate); grouped here -------------------------------------
    kind: Literal["llm", "command"] = Field("llm", description="llm: a teammate thread the lead runs; command: an "
                                                               "agent CLI the run starts for each task assigned to it.")
    command: str | None = Field(None, min_length=1, description="kind: command: the shell command line run in the "
                                                                "task's workspace, the task's prompt on stdin.")
    env: dict[str, str] = Field(default_factory=dict, description="kind: command: extra environment of its process "
                                                                  "($NAME from yours when it starts); nothing else "
                                                                  "of yours reaches it.")

    _env = field_validator("env", mode="before")(_env_values)
    _env_name = field_validator("env")(_env_names)

    @model_validator(mode="after")
    def _kind_keys(self) -> TeamMember:
        if self.kind == "command":
            if self.command is None:
                raise ValueError(f"{self.name} is kind: command: give the `command:` it runs, e.g. "
                                 "command: codex exec --full-auto")
            own: list[str] = [k for k in ("model", "budget", "plan_mode") if k in self.model_fields_set]
            if own:
                raise ValueError(f"{self.name} is kind: command: {', '.join(own)} belong to LLM teammates (the "
                                 "agent CLI picks its own model); remove them")
        else:
            own = [k for k in ("command", "env") if k in self.model_fields_set]
            if own:
                raise ValueError(f"{', '.join(own)} are for kind: command members (an agent CLI the run starts); "
                                 f"add `kind: command` to {self.name}, or remove them")
        return self


class PlanTask(_Strict):
    """One task: a shell command (``run``) or an agent prompt (``prompt``)."""

    id: str = Field(pattern=NAME_RE.pattern, description="Unique slug within the plan.")
    run: str | None = Field(None, description="Shell command (a shell task).")
    prompt: str | None = Field(None, description="Instruction for an LLM teammate (an agent task).")
    needs: list[str] = Field(default_factory=list, description="Ids of tasks that must complete first.")
    description: str = Field("", description="What done means.")
    assignee: str | None = Field(None, description="Teammate an agent task goes to.")
    role: str | None = Field(None, description="Role an agent task wants.")
    estimate: float | None = Field(None, gt=0, le=MAX_SECONDS, description="Expected seconds (weights the critical path).")
    timeout: float | None = Field(None, gt=0, le=MAX_SECONDS, description="Seconds before an attempt is killed.")
    retries: int | None = Field(None, ge=0, le=1000, description="Extra attempts after a failure.")
    retry_delay: float | None = Field(None, ge=0, le=86_400, description="Seconds before the first retry.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    cwd: str | None = Field(None, description="Working directory, relative to the plan file.")
    isolation: Literal["none", "worktree"] | None = Field(None, description="Per-task isolation.")
    outputs: list[str] | None = Field(None, description=OUTPUTS)
    num_cpus: float | None = Field(None, ge=0, le=1024, description="backend ray: CPUs an attempt reserves on a "
                                                                    "node (default 1).")
    resources: dict[str, float] | None = Field(None, description="backend ray: custom resources an attempt "
                                                                 "reserves on a node, e.g. {gpu: 1}.")
    lost_retries: int | None = Field(None, ge=0, le=1000, description="backend ray: attempts lost with a node "
                                                                      "re-run elsewhere (use no retry; default 3).")

    _env = field_validator("env", mode="before")(_env_values)
    _env_name = field_validator("env")(_env_names)
    _res = field_validator("resources")(_resource_names)
    _out = field_validator("outputs", mode="before")(_one_glob)

    @field_validator("needs", mode="before")
    @classmethod
    def _one_need(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(map(isinstance, value, repeat(str))):
            return list(dict.fromkeys(value))
        return value

    _command_member: bool = PrivateAttr(False)
    """Its assignee is a ``kind: command`` member (set by ``Plan``): the run starts that agent CLI."""

    @property
    def kind(self) -> str:
        """shell (``run``), agent (``prompt``, an LLM teammate), or command (``prompt`` for an agent CLI)."""
        if self.prompt is None:
            return "shell"
        return "command" if self._command_member else "agent"


def _on_off(value: Any) -> Any:
    """YAML reads a bare ``off`` / ``on`` as a boolean: take it as the word."""
    return ("on" if value else "off") if isinstance(value, bool) else value


class Plan(_Strict):
    """A ``plan.yaml`` file: ``team run`` turns it into tasks."""

    name: str = Field(pattern=NAME_RE.pattern, description="Plan name; keys its tasks in the store.")
    description: str = Field("", description="What the plan does.")
    workers: int = Field(4, ge=1, le=1024, description="Max tasks running at once.")
    model: str | None = Field(None, description="Model for agent tasks (else --model or $TEAM_MODEL).")
    isolation: Literal["none", "worktree"] = Field("none", description="none, or a git worktree per task.")
    backend: Literal["local", "ray"] = Field(
        "local", description="local: tasks run on this machine; ray: on a Ray cluster (`team run --backend ray "
                             "--address ...`; docs/scale.md).")
    sandbox: Literal["on", "off"] = Field(
        "on", description="on: agents' shell commands run in an OS sandbox (bubblewrap); off: without one, "
                          "on purpose (shown in `team status`). Plan shell tasks never run in it.")
    # -- models and spend (docs/llm.md, docs/agents.md "Budgets")
    budget: Budget | None = Field(None, description="Tokens and/or dollars all teammates together may spend.")
    models: dict[str, ModelSpec] = Field(
        default_factory=dict, description="Per model name: its own endpoint (base_url), the NAME of the "
                                          "environment variable holding its key (api_key_env) and its price "
                                          "(price: dollars per 1M tokens, which a dollar budget needs for a "
                                          "model team has no list price for). docs/llm.md.")
    # --
    hooks: HooksConfig | None = Field(None, description="Shell commands run on task and teammate events "
                                                        "(docs/hooks.md); .team/hooks.yaml adds more.")
    defaults: Defaults = Field(default_factory=Defaults, description="Values every task inherits.")
    team: list[TeamMember] = Field(default_factory=list, description="Named teammates.")
    mcp_servers: list[McpServerSpec] = Field(
        default_factory=list, description="MCP servers whose tools the plan's teammates may use (as "
                                          "NAME__TOOL; a role's mcp_tools narrows them). docs/mcp.md.")
    tasks: list[PlanTask] = Field(min_length=1, description="The tasks.")

    _sandbox = field_validator("sandbox", mode="before")(_on_off)

    @field_validator("models")
    @classmethod
    def _model_names(cls, value: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
        for name in value:
            if not name.strip():
                raise ValueError("a model name under `models:` must not be empty")
        return value

    @model_validator(mode="after")
    def _command_tasks(self) -> Plan:
        """A ``prompt`` task assigned to a ``kind: command`` member is that agent CLI's (kind ``command``)."""
        clis = {m.name for m in self.team if m.kind == "command"}
        for t in self.tasks:
            t._command_member = t.assignee in clis
        return self

    def command_members(self) -> list[TeamMember]:
        return [m for m in self.team if m.kind == "command"]

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(cls, value: list[McpServerSpec]) -> list[McpServerSpec]:
        names = [s.name for s in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"mcp server names must be unique: {dupes} appear more than once")
        return value


@dataclass
class LoadedPlan:
    """A validated plan plus where it came from.

    ``lines`` (the 1-based line of every key and item, by ``Loc``) is only read by messages: a plan
    that loads cleanly is read without it, and ``marks`` makes it on first use (plan/load.py)."""

    plan: Plan
    path: Path
    base: Path
    model: str | None
    marks: Callable[[], dict[Loc, int]] = field(default=dict, repr=False, compare=False)

    @functools.cached_property
    def lines(self) -> dict[Loc, int]:
        return self.marks()

    def task_cwd(self, task: PlanTask) -> Path:
        rel = task.cwd or self.plan.defaults.cwd
        return (self.base / rel).resolve() if rel else self.base

    def store_name(self, task: PlanTask) -> str:
        return f"{self.plan.name}.{task.id}"


def json_schema() -> dict[str, Any]:
    """The plan's JSON Schema (``team plan schema``)."""
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "team plan"
    return schema
