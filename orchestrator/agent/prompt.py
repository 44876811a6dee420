"""The stable instruction layer (the prompt prefix) and the per-turn state block.

Two layers, kept apart so provider prompt caches hit:

* **Prefix** (``build_system_prompt``): identity, role prompt, the
  workspace's AGENTS.md files, the skills index, tool rules. A pure function
  of its inputs: no clock, no pids, no absolute paths, sorted file and skill
  order, so the same inputs give byte-identical text on every turn. The tool
  list the API gets is ``ToolRegistry.schemas()``, already deterministic
  (sorted by name); ``canonical_tools`` (sorted, byte-stable JSON) only feeds
  ``prefix_fingerprint`` and the tests and benches that compare prefixes.
* **State** (``state_message``): what changes during a session — current
  task, team roster, goal, files changed. Rebuilt every turn and placed at the
  end of the projected request (see projection.py), never in the prefix; after a
  compaction it is also re-injected right after the boundary.

AGENTS.md scoping: the workspace root's file always; for each directory a
task works in, every AGENTS.md from the root down to that directory (outer
before inner, so narrower rules come later and win). Each file is bounded to
``AGENTS_MD_LIMIT`` characters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.jsonutil import canonical, stable_json
from ..core.models import Member
from ..roles.roles import Role
from ..roles.skills import Skill

AGENTS_MD = "AGENTS.md"
AGENTS_MD_LIMIT = 16_000
STATE_KIND = "state"
STATE_HEADER = "[team state: maintained by the harness and refreshed every turn; this is not a user request]"

TOOL_RULES = """\
- Use tools to act; answer in plain text when you are done or need nothing more.
- Paths are relative to the workspace; anything outside it is refused.
- Read a file in full before you edit it. If it changed on disk since your read,
  the edit is refused: read it again and redo the edit on the current text.
- Tool results are bounded. When a result says "full: <path>", the complete output
  is in that file; read it with read_file (offset/limit) only if you need more.
- Older tool results in this conversation are replaced by short placeholders
  with the same kind of reference. Re-read instead of guessing from memory.
- A "[compaction boundary]" message summarizes earlier turns; the "[team state]"
  message after it and at the end of the conversation is current and authoritative.
- Skills listed above are procedures: call load_skill(name) before following one.
- A tool error is an observation: fix the call, do not repeat it unchanged."""


def canonical_tools(tools: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tool schemas sorted by name with keys in sorted order (byte-stable JSON)."""

    def name_of(tool: Mapping[str, Any]) -> str:
        return tool.get("function", {}).get("name") or tool.get("name", "")

    return [canonical(t) for t in sorted(tools, key=name_of)]


def prefix_fingerprint(system_prompt: str, tools: Iterable[Mapping[str, Any]] = ()) -> str:
    """Short sha256 of the prefix (system prompt + canonical tools), for logs and doctor."""
    data = system_prompt + "\n" + stable_json(canonical_tools(tools))
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def _inside(workspace: Path, d: str | Path) -> Path:
    path = (workspace / d).resolve()
    if path != workspace and workspace not in path.parents:
        raise UserError(f"work directory {str(d)!r} is outside the workspace {workspace}")
    return path


def agents_md_files(workspace: Path, work_dirs: Iterable[str | Path] = ()) -> list[tuple[str, str]]:
    """``(relative path, text)`` of the AGENTS.md files that apply, outer first."""
    workspace = Path(workspace).resolve()
    dirs = {workspace}
    for d in work_dirs:
        path = _inside(workspace, d)
        if path.is_file():
            path = path.parent
        while path != workspace:
            dirs.add(path)
            path = path.parent
    found = []
    for d in sorted(dirs, key=lambda p: p.relative_to(workspace).parts):
        f = d / AGENTS_MD
        if f.is_file():
            text = f.read_text(encoding="utf-8", errors="replace").strip()
            if len(text) > AGENTS_MD_LIMIT:
                text = text[:AGENTS_MD_LIMIT] + f"\n[... truncated at {AGENTS_MD_LIMIT} chars; read {f.relative_to(workspace)} for the rest]"
            found.append((f.relative_to(workspace).as_posix(), text))
    return found


def build_system_prompt(
    *,
    name: str,
    role: Role,
    team: str,
    workspace: Path,
    work_dirs: Iterable[str | Path] = (),
    skills: Sequence[Skill] = (),
    tool_rules: str = TOOL_RULES,
) -> str:
    """The stable system prompt; byte-identical for identical inputs."""
    parts = [f"You are {name}, a {role.name} on team {team}.", f"# Role: {role.name}\n\n{role.prompt.strip()}"]
    docs = agents_md_files(workspace, work_dirs)
    if docs:
        body = "\n\n".join(f"## {path}\n\n{text}" for path, text in docs)
        parts.append(
            "# Workspace instructions (AGENTS.md)\n\n"
            "Rules of this repository; a file deeper in the tree refines the ones above it.\n\n" + body
        )
    if skills:
        index = "\n".join(f"- {s.name}: {s.description}" for s in sorted(skills, key=lambda s: s.name))
        parts.append(
            "# Skills\n\nProcedures available in this workspace. Only the name and purpose are shown; "
            "call load_skill(name) to read one before you follow it.\n\n" + index
        )
    parts.append("# Tool rules\n\n" + tool_rules.strip())
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class AgentState:
    """Dynamic facts re-stated to the agent every turn and after compaction."""

    name: str
    role: str
    team: str
    task: str | None = None
    """Current task, e.g. ``"#3 migrate-a: Replace requests with httpx in src/a.py"``."""
    roster: Sequence[Member | Mapping[str, Any]] = ()
    """Members: ``core.models.Member`` objects or dicts with name/role/status."""
    goal: str | None = None
    goal_status: str = "active"
    changed_files: Iterable[str] = field(default_factory=tuple)
    notes: Sequence[str] = ()
    """Extra harness facts (e.g. a stale-file warning), one line each."""


def _member(m: Member | Mapping[str, Any]) -> tuple[str, str, str]:
    if isinstance(m, Mapping):
        return str(m.get("name", "")), str(m.get("role", "") or ""), str(m.get("status", "") or "")
    return m.name, m.role or "", m.status or ""


def render_state(state: AgentState) -> str:
    """The state block's text: deterministic for the same state."""
    lines = [STATE_HEADER, f"You are {state.name}, a {state.role} on team {state.team}."]
    lines.append(f"Current task: {state.task}" if state.task else "Current task: none")
    lines.append(f"Goal ({state.goal_status}): {state.goal}" if state.goal else "Goal: none set")
    members = sorted({_member(m) for m in state.roster})
    if members:
        lines.append("Team roster:")
        lines += [f"- {n} ({r}, {s})" if s else f"- {n} ({r})" for n, r, s in members]
    else:
        lines.append("Team roster: just you")
    changed = sorted(set(state.changed_files))
    lines.append("Files you changed: " + (", ".join(changed) if changed else "none yet"))
    lines += [f"Note: {n}" for n in state.notes]
    return "\n".join(lines)


def state_message(state: AgentState) -> dict[str, Any]:
    """The state block as a message. ``_kind`` is private: project() strips it."""
    return {"role": "user", "content": render_state(state), "_kind": STATE_KIND}
