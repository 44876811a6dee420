"""Agent roles: ``agents/<role>.md`` = YAML front matter + the role prompt.

    ---
    name: coder                      # must equal the file name (coder.md)
    description: Edits code to ...   # one line, shown in rosters and to the lead
    tools: [read_file, edit_file]    # tool names the role may use
    model: gpt-4o-mini               # optional; else the plan's / $TEAM_MODEL
    models:                          # optional; a model's endpoint, key variable, price (core/modelspec.py)
      llama3: {base_url: "http://127.0.0.1:8080/v1", api_key_env: LOCAL_API_KEY, price: {input: 0, output: 0}}
    plan_mode: false                 # optional; true: writes wait for the lead's approval
    network: false                   # optional; true: its shell commands may use the network
    ask: [write_file, "bash(git push*)"]  # optional; calls a person approves first (tools/approval.py)
    budget: {tokens: 200000}         # optional; tokens and/or dollars each teammate of it may spend
    permissions:                     # optional; what its task and worktree tools may change
      tasks: [create, update-own]    #   create | update-own | update-any | assign
      worktrees: own                 #   none | own | any
    mcp_servers:                     # optional; MCP servers this role brings (core/mcpspec.py)
      - {name: time, command: mcp-server-time}
    mcp_tools: [time.*, git.status]  # optional; the MCP tools it may use (default: all of them)
    ---
    You are the team's coder. ...    # the role prompt (non-empty)

Where roles come from, later wins by name:

1. the built-in roles shipped with ``team``: ``orchestrator/builtin_agents/``
   when installed from a wheel (package data, see pyproject), else the
   repository's top-level ``agents/`` next to the package (source checkout and
   editable install);
2. the workspace's own ``<workspace>/agents/*.md``.

Permissions (``Permissions``) are enforced by the tool pipeline (tools/registry.py,
the ``permit`` stage), not by the prompt:

* ``tasks``: ``create`` (task_create: tasks owned by nobody or by the agent),
  ``update-own`` (task_update on a task the agent owns, or created and nobody
  owns), ``update-any`` (task_update on any task), ``assign`` (set an owner
  other than the agent or nobody: create for, or hand a task to, someone else).
  Without ``permissions`` a role gets ``[create, update-own]``: a teammate may
  split its work into subtasks and update its own, and only a role with
  ``assign`` (the built-in ``lead``) reassigns others' tasks.
* ``worktrees``: ``own`` (create worktrees for itself, and use the ones it owns),
  ``any`` (create them for others, merge and remove any), ``none``.

A malformed file is a ``UserError`` naming the file and the field; an unknown
role is a ``UserError`` listing the known ones. Tool names are checked
against the tool registry by ``check_tools`` (the registry lives elsewhere).
``split_front_matter`` is shared with ``skills.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.budget import Budget
from ..core.errors import UserError
from ..core.mcpspec import McpServerSpec
from ..core.models import NAME_RE, Task
from ..core.modelspec import ModelSpec

ROLE_KEYS = ("name", "description", "tools", "model", "models", "plan_mode", "network", "budget", "permissions", "ask", "mcp_servers",
             "mcp_tools")
TASK_RIGHTS = ("create", "update-own", "update-any", "assign")
WORKTREE_RIGHTS = ("none", "own", "any")
ASK_RE = re.compile(r"^\s*[A-Za-z_][\w.-]*\s*(\(\s*\S.*\))?\s*$", re.S)
"""The shape of an ``ask`` entry (tools/approval.py parses and checks it against the tools)."""
_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # orchestrator/


@dataclass(frozen=True)
class Permissions:
    """What a role's task and worktree tools may change (see the module docstring)."""

    tasks: frozenset[str] = frozenset({"create", "update-own"})
    worktrees: str = "own"

    @classmethod
    def full(cls) -> Permissions:
        """Everything: the lead's, and a tool context made without a role (tests, scripts)."""
        return cls(frozenset(TASK_RIGHTS), "any")

    def narrow(self, other: Permissions) -> Permissions:
        """What both allow (a subagent never gets more than its caller)."""
        rank = WORKTREE_RIGHTS.index
        return Permissions(self.tasks & other.tasks, min(self.worktrees, other.worktrees, key=rank))

    def may(self, right: str) -> bool:
        return right in self.tasks

    def describe(self) -> str:
        tasks = ", ".join(r for r in TASK_RIGHTS if r in self.tasks) or "read only"
        return f"tasks: {tasks}; worktrees: {self.worktrees}"

    def refuse_create(self, actor: str, owner: str) -> str | None:
        """Why ``actor`` may not create a task owned by ``owner`` (``""``: nobody), else None."""
        if not self.may("create"):
            return "your role may not create tasks"
        if owner not in ("", actor) and not self.may("assign"):
            return (f"only the lead assigns tasks to others: create it without an owner (or owner {actor!r}), "
                    f"not for {owner!r}")
        return None

    def refuse_update(self, actor: str, task: Task, owner: str | None, working_on: int | None = None) -> str | None:
        """Why ``actor`` may not update ``task`` (setting its owner to ``owner`` unless None), else None.

        Its own: it owns the task, or created it and nobody owns it, or it is the attempt the actor
        was given (``working_on``)."""
        if self.may("update-any") and self.may("assign"):
            return None
        mine = (task.owner == actor or (not task.owner and task.created_by == actor) or task.id == working_on)
        if not self.may("update-any") and not (mine and self.may("update-own")):
            whose = (f"owned by {task.owner}" if task.owner
                     else f"owned by nobody and was created by {task.created_by or 'someone else'}")
            return f"task #{task.id} is {whose}: you may update only tasks you own or created"
        if owner is not None and owner != task.owner and not self.may("assign"):
            if task.owner not in ("", actor) or owner not in ("", actor):
                now = f"from {task.owner} " if task.owner else ""
                return f"only the lead reassigns tasks: task #{task.id} cannot go {now}to {owner or 'nobody'} by your hand"
        return None


@dataclass(frozen=True)
class Role:
    """One parsed role file."""

    name: str
    description: str
    tools: tuple[str, ...]
    prompt: str
    model: str | None = None
    path: Path | None = None
    builtin: bool = False
    plan_mode: bool = False  # teammates of this role start in plan mode (writes wait for the lead's approval)
    network: bool = False  # its shell commands may reach the network (else the sandbox has none: core/sandbox.py)
    ask: tuple[str, ...] = ()  # TOOL or TOOL(PATTERN): calls a person approves before they run (tools/approval.py)
    budget: Budget | None = None  # what each teammate of this role may spend (core/budget.py)
    permissions: Permissions = Permissions()  # what its task and worktree tools may change
    mcp_servers: tuple[McpServerSpec, ...] = ()  # MCP servers the role brings, besides the plan's
    mcp_tools: tuple[str, ...] | None = None  # allow-list of MCP tools (server.tool, server.*); None: all
    models: tuple[tuple[str, ModelSpec], ...] = ()  # (model name, its endpoint/key variable/price); a plan's win

    def model_spec(self, model: str) -> ModelSpec | None:
        """What this role's ``models:`` says of ``model`` (None: nothing)."""
        return next((spec for name, spec in self.models if name == model), None)


def split_front_matter(text: str, path: Path, *, what: str) -> tuple[dict[str, Any], str]:
    """Split ``---\\n<yaml>\\n---\\n<body>``; raise ``UserError`` naming ``path``."""
    import yaml

    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise UserError(f"{path}: {what} must start with a '---' line opening the YAML front matter")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise UserError(f"{path}: front matter is not closed: add a '---' line after it")
    try:
        meta = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "mapping values are not allowed" in problem:
            problem += " (quote a value that contains ': ')"
        raise UserError(f"{path}: front matter is not valid YAML{where}: {problem}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise UserError(f"{path}: front matter must be a mapping of keys (name: ..., description: ...)")
    return meta, "".join(lines[end + 1 :]).strip() + "\n"


def _text_field(meta: dict[str, Any], key: str, path: Path) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{path}: '{key}' must be a non-empty string, got {value!r}")
    return value.strip()


def _required_text(meta: dict[str, Any], key: str, path: Path) -> str:
    value = _text_field(meta, key, path)
    if value is None:
        raise UserError(f"{path}: front matter is missing '{key}'")
    return value


def _flag(meta: dict[str, Any], key: str, path: Path) -> bool:
    value = meta.get(key, False)
    if not isinstance(value, bool):
        raise UserError(f"{path}: '{key}' must be true or false, got {value!r}")
    return value


def _permissions(meta: dict[str, Any], path: Path) -> Permissions:
    raw = meta.get("permissions")
    if raw is None:
        return Permissions()
    if not isinstance(raw, dict):
        raise UserError(f"{path}: 'permissions' must be a mapping like {{tasks: [create, update-own], worktrees: own}}")
    unknown = sorted(set(raw) - {"tasks", "worktrees"})
    if unknown:
        raise UserError(f"{path}: unknown {'key' if len(unknown) == 1 else 'keys'} {unknown} in 'permissions'; allowed: ['tasks', 'worktrees']")
    tasks = raw.get("tasks", ["create", "update-own"])
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise UserError(f"{path}: 'permissions.tasks' must be a list of {list(TASK_RIGHTS)}, got {tasks!r}")
    bad = [t for t in tasks if t not in TASK_RIGHTS]
    if bad:
        raise UserError(f"{path}: unknown task {'right' if len(bad) == 1 else 'rights'} {bad} in 'permissions.tasks'; known: {list(TASK_RIGHTS)}")
    worktrees = raw.get("worktrees", "own")
    if worktrees not in WORKTREE_RIGHTS:
        raise UserError(f"{path}: 'permissions.worktrees' must be one of {list(WORKTREE_RIGHTS)}, got {worktrees!r}")
    return Permissions(frozenset(tasks), str(worktrees))


def parse_role(text: str, path: Path, *, builtin: bool = False) -> Role:
    """Parse one role file's text; ``path`` is used for the name check and errors."""
    meta, body = split_front_matter(text, path, what="a role file")
    unknown = sorted(set(meta) - set(ROLE_KEYS))
    if unknown:
        raise UserError(f"{path}: unknown front matter {'key' if len(unknown) == 1 else 'keys'} {unknown}; allowed: {list(ROLE_KEYS)}")
    name = _required_text(meta, "name", path)
    if not NAME_RE.match(name):
        raise UserError(f"{path}: name {name!r} must be letters, digits, '.', '_' or '-'")
    if name != path.stem:
        raise UserError(f"{path}: name {name!r} does not match the file name; rename the file to {name}.md")
    description = _required_text(meta, "description", path)
    tools = meta.get("tools")
    if tools is None:
        raise UserError(f"{path}: front matter is missing 'tools' (a list of tool names, e.g. [read_file, grep])")
    if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
        raise UserError(f"{path}: 'tools' must be a list of tool names, got {tools!r}")
    dupes = sorted({t for t in tools if tools.count(t) > 1})
    if dupes:
        raise UserError(f"{path}: 'tools' lists {dupes} more than once")
    model = _text_field(meta, "model", path)
    ask = meta.get("ask") or []
    if not isinstance(ask, list) or not all(isinstance(a, str) and ASK_RE.match(a) for a in ask):
        raise UserError(f"{path}: 'ask' must be a list of TOOL or TOOL(PATTERN) entries, e.g. "
                        f"[write_file, \"bash(git push*)\"], got {ask!r}")
    if not body.strip():
        raise UserError(f"{path}: the role prompt (the text after the front matter) is empty")
    return Role(name, description, tuple(tools), body, model, path, builtin,
                plan_mode=_flag(meta, "plan_mode", path), network=_flag(meta, "network", path),
                budget=_budget(meta, path), permissions=_permissions(meta, path),
                ask=tuple(a.strip() for a in ask), mcp_servers=_mcp_servers(meta, path),
                mcp_tools=_mcp_tools(meta, path), models=_models(meta, path))


def _models(meta: dict[str, Any], path: Path) -> tuple[tuple[str, ModelSpec], ...]:
    from pydantic import ValidationError

    raw = meta.get("models")
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not all(isinstance(k, str) and k.strip() for k in raw):
        raise UserError(f"{path}: 'models' must map model names to {{base_url, api_key_env, price}}, got {raw!r}")
    out = []
    for name, item in raw.items():
        try:
            out.append((name, ModelSpec.model_validate(item)))
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ()))
            raise UserError(f"{path}: models.{name}{'.' + where if where else ''}: {err['msg']}") from None
    return tuple(out)


def _budget(meta: dict[str, Any], path: Path) -> Budget | None:
    value = meta.get("budget")
    if value is None:
        return None
    from pydantic import ValidationError

    try:
        return Budget.model_validate(value)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{path}: 'budget{'.' + where if where else ''}': {err['msg']} (e.g. budget: "
                        "{tokens: 200000, dollars: 2.5})") from None


def _mcp_servers(meta: dict[str, Any], path: Path) -> tuple[McpServerSpec, ...]:
    from pydantic import ValidationError

    raw = meta.get("mcp_servers")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UserError(f"{path}: 'mcp_servers' must be a list of servers ({{name, command, args, env}} or "
                        f"{{name, url}}), got {raw!r}")
    specs = []
    for i, item in enumerate(raw):
        try:
            specs.append(McpServerSpec.model_validate(item))
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ()))
            raise UserError(f"{path}: mcp_servers[{i}]{'.' + where if where else ''}: {err['msg']}") from None
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UserError(f"{path}: 'mcp_servers' names {dupes} more than once")
    return tuple(specs)


def _mcp_tools(meta: dict[str, Any], path: Path) -> tuple[str, ...] | None:
    raw = meta.get("mcp_tools")
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(t, str) and t for t in raw):
        raise UserError(f"{path}: 'mcp_tools' must be a list like [git.status, time.*], got {raw!r}")
    return tuple(raw)


def load_role_file(path: Path, *, builtin: bool = False) -> Role:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    return parse_role(text, path, builtin=builtin)


def builtin_agents_dir() -> Path:
    """The directory holding the shipped roles (installed copy first)."""
    installed = _PACKAGE_DIR / "builtin_agents"
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / "agents"


def role_files(workspace: Path | None = None) -> dict[str, tuple[Path, bool]]:
    """Role name -> (file, is built-in), workspace files overriding built-ins; not parsed."""
    dirs = [(builtin_agents_dir(), True)]
    if workspace is not None:
        ws_dir = Path(workspace) / "agents"
        # In the team repository itself the workspace's agents/ are the built-ins.
        if ws_dir.resolve() != builtin_agents_dir().resolve():
            dirs.append((ws_dir, False))
    files: dict[str, tuple[Path, bool]] = {}
    for directory, builtin in dirs:
        if directory.is_dir():
            files.update((p.stem, (p, builtin)) for p in directory.glob("*.md"))
    return dict(sorted(files.items()))


def discover_roles(workspace: Path | None = None) -> dict[str, Role]:
    """Every role by name, parsed (a malformed file raises): for listings and doctor."""
    return {name: load_role_file(path, builtin=b) for name, (path, b) in role_files(workspace).items()}


def get_role(name: str, workspace: Path | None = None) -> Role:
    """The role called ``name``; ``UserError`` listing the known roles if absent.

    Only that role's file is parsed, so a broken unrelated role file does not
    stop this one.
    """
    files = role_files(workspace)
    if name not in files:
        where = Path(workspace) / "agents" if workspace is not None else builtin_agents_dir()
        raise UserError(
            f"unknown role {name!r}; known roles: {', '.join(files) or '(none)'}; "
            f"to define it, add {where / (name + '.md')}"
        )
    path, builtin = files[name]
    return load_role_file(path, builtin=builtin)


def check_tools(role: Role, known: Iterable[str]) -> None:
    """Raise ``UserError`` if ``role`` names a tool that is not in ``known``."""
    known = set(known)
    missing = [t for t in role.tools if t not in known]
    if missing:
        raise UserError(
            f"{role.path or role.name}: unknown {'tool' if len(missing) == 1 else 'tools'} {missing} in 'tools'; available: {', '.join(sorted(known))}"
        )
