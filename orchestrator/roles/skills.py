"""Skills: task procedures the agent loads on demand (progressive disclosure).

A skill is ``<dir>/<name>/SKILL.md``: YAML front matter with ``name`` (equal
to the directory name) and ``description``, then the procedure body. Other
front matter keys (``allowed-tools``, ...) are kept as ``meta``.

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
    return Skill(name, description, rel, extra), body


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


def load_skill(workspace: Path, name: str) -> str:
    """The body of skill ``name``, framed for the conversation.

    Raises ``UserError`` listing the available skills when ``name`` is unknown.
    """
    workspace = Path(workspace)
    paths = {p.parent.name: p for p in _skill_files(workspace)}
    if name not in paths:
        known = ", ".join(sorted(paths)) or "(none)"
        raise UserError(f"unknown skill {name!r}; available skills: {known}")
    skill, body = _parse(workspace, paths[name])
    return f"# Skill: {skill.name} ({skill.path})\n\n{body}"
