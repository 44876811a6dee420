"""Skills: task procedures the agent loads on demand (progressive disclosure).

A skill is ``<dir>/<name>/SKILL.md``: YAML front matter with ``name`` (equal
to the directory name) and ``description``, then the procedure body. Other
front matter keys are kept as ``meta``.

``allowed-tools`` (a list, or one string of names separated by commas or
spaces, as Claude Code writes it) is enforced, not only stored: once the
model loads the skill, the calls it makes for the rest of that run are
limited to those tools (and only those its role has), plus the few it needs
to report and finish (``SKILL_ALWAYS``); any other call is refused by the
tool pipeline naming the skill and what it allows (tools/registry.py, the
``permit`` stage). A skill without ``allowed-tools`` restricts nothing.

Skill roots searched in the workspace, first wins on a name clash:

    <workspace>/skills/<name>/SKILL.md
    <workspace>/.agents/skills/<name>/SKILL.md

``discover_skills`` reads only the front matter's fields into ``Skill``
records (name + description go into the stable system prompt, see
agent/prompt.py); the body enters the conversation only when the model calls
the ``load_skill`` tool, which wraps ``load_skill`` here. A malformed
SKILL.md is a ``UserError`` naming the file and the problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.models import NAME_RE
from .roles import split_front_matter

SKILL_ROOTS = ("skills", ".agents/skills")
SKILL_FILE = "SKILL.md"


@dataclass(frozen=True)
class Skill:
    """Metadata of one skill; the body is read by ``load_skill``."""

    name: str
    description: str
    path: Path  # relative to the workspace
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    allowed_tools: tuple[str, ...] | None = None
    """``allowed-tools``: the tools a run may use once it loaded this skill; None: no limit."""


SKILL_ALWAYS = ("load_skill", "task_get", "task_list", "task_update", "send_message", "read_inbox", "idle",
                "compact", "respond_shutdown", "submit_plan")
"""Tools a loaded skill never takes away: reporting, finishing, the protocols, another skill."""


def _allowed_tools(meta: dict[str, Any], rel: Path) -> tuple[str, ...] | None:
    raw = meta.get("allowed-tools")
    if raw is None:
        return None
    if isinstance(raw, str):
        names = raw.replace(",", " ").split()
    elif isinstance(raw, list) and all(isinstance(t, str) and t.strip() for t in raw):
        names = [t.strip() for t in raw]
    else:
        raise UserError(f"{rel}: 'allowed-tools' must be a list of tool names or one string of them, got {raw!r}")
    return tuple(dict.fromkeys(names))


def _parse(workspace: Path, path: Path) -> tuple[Skill, str]:
    rel = path.relative_to(workspace)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{rel}: not UTF-8 text") from None
    meta, body = split_front_matter(text, rel, what="SKILL.md")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UserError(f"{rel}: front matter needs 'name': letters, digits, '.', '_' or '-' (got {name!r})")
    if name != path.parent.name:
        raise UserError(f"{rel}: name {name!r} must equal its directory name {path.parent.name!r}")
    if not isinstance(description, str) or not description.strip():
        raise UserError(f"{rel}: front matter needs a non-empty 'description' saying when to use the skill")
    if not body.strip():
        raise UserError(f"{rel}: the skill body (the procedure after the front matter) is empty")
    extra = {k: v for k, v in meta.items() if k not in ("name", "description")}
    description = " ".join(description.split())
    return Skill(name, description, rel, extra, _allowed_tools(meta, rel)), body


def _skill_files(workspace: Path) -> list[Path]:
    found: dict[str, Path] = {}
    for root in SKILL_ROOTS:
        base = workspace / root
        if not base.is_dir():
            continue
        for path in sorted(base.glob(f"*/{SKILL_FILE}")):
            found.setdefault(path.parent.name, path)
    return [found[name] for name in sorted(found)]


def discover_skills(workspace: Path) -> list[Skill]:
    """Every skill of the workspace, sorted by name."""
    workspace = Path(workspace)
    return [_parse(workspace, path)[0] for path in _skill_files(workspace)]


def find_skill(workspace: Path, name: str) -> tuple[Skill, str]:
    """Skill ``name`` and its body; ``UserError`` listing the available skills when unknown."""
    workspace = Path(workspace)
    paths = {p.parent.name: p for p in _skill_files(workspace)}
    if name not in paths:
        known = ", ".join(sorted(paths)) or "(none)"
        raise UserError(f"unknown skill {name!r}; available skills: {known}")
    return _parse(workspace, paths[name])


def load_skill(workspace: Path, name: str) -> str:
    """The body of skill ``name``, framed for the conversation (``UserError`` when unknown)."""
    skill, body = find_skill(workspace, name)
    return f"# Skill: {skill.name} ({skill.path})\n\n{body}"
