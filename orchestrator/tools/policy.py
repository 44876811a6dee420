"""Policies the pipeline applies before a tool runs.

**Path policy** (``confine``): a path argument is resolved against the
workspace with every symlink followed (``Path.resolve``). The result must lie
inside the workspace; for reads the directory of saved full outputs is also
allowed, so the model can page through an output it was shown cut. For a
write the resolved parent must be inside too, the target may not be the
workspace itself, and the state directories (``.git``, ``.tasks``, ``.team``)
are off limits to file tools (the task tools exist for ``.tasks``). So
``../x``, ``/etc/passwd``, and ``link/x`` where ``link`` points outside are all
refused before anything is touched.

**Shell policy**: see shellpolicy.py (``check_shell`` and its rules).

**Skills** (``check_skill``): while a skill with ``allowed-tools`` is loaded
(``ctx.skill``, set by ``load_skill``, cleared when the run ends) a call to any
other tool is refused, naming the skill and what it allows (roles/skills.py).

**Plan mode** (``check_plan``): while ``ctx.mode == "plan"`` every tool whose
risk is ``write`` or ``execute`` is refused until the lead approves the plan.
"""

from __future__ import annotations

import os
from pathlib import Path

from .base import Refused, ToolContext

PROTECTED_DIRS = (".git", ".tasks", ".team")


# ---------------------------------------------------------------------- paths
def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def confine(ctx: ToolContext, raw: str, access: str) -> Path:
    """Resolve ``raw`` (relative to the workspace) or raise ``Refused``."""
    if "\x00" in raw:
        raise Refused(f"path {raw!r} contains a NUL byte", "path")
    expanded = os.path.expanduser(raw) if raw.startswith("~") else raw
    candidate = Path(expanded)
    if not candidate.is_absolute():
        candidate = ctx.workspace / candidate
    resolved = candidate.resolve()
    ws = ctx.workspace
    roots = [ws] if access == "write" else [ws, ctx.outputs_dir]
    if not any(_inside(resolved, r) for r in roots):
        via = ""
        lexical = Path(os.path.normpath(candidate))
        if _inside(lexical, ws):
            via = " through a symlink"
        raise Refused(
            f"path {raw!r} resolves{via} to {resolved}, outside the workspace {ws}; "
            f"file tools only work inside the workspace (use a relative path)",
            "path",
        )
    if access == "write":
        if resolved == ws:
            raise Refused(f"path {raw!r} is the workspace directory itself, not a file", "path")
        if not _inside(resolved.parent, ws):
            raise Refused(f"the directory of {raw!r} resolves outside the workspace", "path")
        parts = resolved.relative_to(ws).parts
        if parts and parts[0] in PROTECTED_DIRS:
            raise Refused(
                f"{raw!r} is inside {parts[0]}/, which file tools may not change "
                f"(use the task tools for tasks; git state is the lead's)",
                "path",
            )
    return resolved


# ---------------------------------------------------------------------- skills
def check_skill(ctx: ToolContext, tool_name: str) -> None:
    skill = ctx.skill
    if skill is None or tool_name in skill.tools:
        return
    raise Refused(
        f"the skill {skill.name!r} you loaded allows only {', '.join(sorted(skill.tools))}; {tool_name} is "
        f"refused while you follow it (its allowed-tools). Finish the skill's procedure with those tools, "
        f"or report back (send_message, task_update)",
        "permission",
    )


# ---------------------------------------------------------------------- plan mode
def check_plan(ctx: ToolContext, tool_name: str, risk: str) -> None:
    if ctx.mode == "plan" and risk in ("write", "execute"):
        raise Refused(
            f"plan mode: {tool_name} ({risk}) is not allowed until the lead approves your plan; "
            f"read, search and plan now, then send your plan for approval",
            "plan",
        )
