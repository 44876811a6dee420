"""The control plane of ``team chat``: routing an input line, the slash commands, the goal.

Routing happens *before* any model call (seed 002: control-plane intent is
never sent to the model as chat)::

    line ──► route() ──► empty            nothing
                     ├─► "/name arg"      a slash command, answered locally (no model call)
                     │                     unknown: help + the nearest command
                     ├─► "//text"         the prompt "/text" (escape for a leading slash)
                     └─► anything else    a user turn of the lead's agent loop (streamed)

``COMMANDS`` is the command table (usage and help line per name); the
session (session.py) answers ``/name`` with its ``_cmd_<name>`` method.

Goal: ``/goal set TEXT | pause | resume | complete | clear`` is *control
state*: set and changed only by the user, through the router, and shown to
the lead every turn; no tool writes it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from ..core.errors import UserError

COMMANDS: dict[str, tuple[str, str]] = {
    "help": ("/help", "this list"),
    "status": ("/status", "lead, teammates, tasks, jobs, goal and tokens"),
    "tasks": ("/tasks", "the task board"),
    "team": ("/team", "teammates: role, working/idle/dead, current task"),
    "inbox": ("/inbox", "unread messages for the lead (left unread: the lead reads them with your next line)"),
    "jobs": ("/jobs", "background jobs"),
    "cost": ("/cost", "tokens and cost per agent and per task"),
    "compact": ("/compact", "fold older turns of the lead's conversation into a summary now"),
    "reset": ("/reset", "start the lead's conversation afresh (the last one is archived; goal, teammates kept)"),
    "tools": ("/tools", "the lead's tools (risk, ask rules) and each teammate's"),
    "skills": ("/skills", "the workspace's skills (skills/NAME/SKILL.md)"),
    "approve": ("/approve [ID [always]]", "pending approval requests (plans, ask tools); approve one"),
    "deny": ("/deny ID REASON", "reject a plan or deny an ask tool call; the teammate reads the reason"),
    "doctor": ("/doctor", "check .tasks/ and .team/ for damage (read only)"),
    "goal": ("/goal [ACTION]", "set TEXT | pause | resume | complete | clear: the lead sees the goal, only you change it"),
    "quit": ("/quit", "leave: teammates shut down, the session is kept for `team chat --resume`"),
}
GOAL_STATUSES = ("active", "paused", "completed")


# ---------------------------------------------------------------- the router
@dataclass(frozen=True)
class Input:
    """One routed input line."""

    kind: Literal["empty", "command", "prompt"]
    text: str = ""
    """The prompt, or the command's argument."""
    name: str = ""
    """The command name, without the slash."""


def route(line: str) -> Input:
    s = line.strip()
    if not s:
        return Input("empty")
    if s.startswith("//"):
        return Input("prompt", s[1:])
    if s.startswith("/"):
        name, _, arg = s[1:].partition(" ")
        return Input("command", arg.strip(), name.strip().lower())
    return Input("prompt", s)


def nearest(name: str) -> str | None:
    """The command ``name`` most likely meant: a unique prefix, else the closest spelling."""
    starts = [c for c in COMMANDS if name and c.startswith(name)]
    if len(starts) == 1:
        return starts[0]
    close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.5)
    return close[0] if close else None


def help_text() -> str:
    width = max(len(u) for u, _ in COMMANDS.values())
    lines = ["commands (answered here, never sent to the model):"]
    lines += [f"  {u:<{width}}  {h}" for u, h in COMMANDS.values()]
    lines.append("anything else goes to the lead; start a line with // to send a leading slash")
    return "\n".join(lines)


def unknown_command(name: str) -> str:
    guess = nearest(name)
    head = f"unknown command /{name}" + (f" — did you mean /{guess}?" if guess else "")
    return head + "\n" + help_text()


# ---------------------------------------------------------------- the goal
@dataclass
class Goal:
    """Control state: set and changed only by the user, shown to the lead every turn."""

    text: str | None = None
    status: str = "active"

    def describe(self) -> str:
        return f"goal ({self.status}): {self.text}" if self.text else "no goal set (/goal set TEXT)"

    def apply(self, arg: str) -> str:
        """Run ``/goal ARG``; the answer to show. ``UserError`` on misuse."""
        verb, _, rest = arg.partition(" ")
        verb, rest = verb.lower(), rest.strip()
        if not verb:
            return self.describe()
        if verb == "set":
            if not rest:
                raise UserError("/goal set needs the goal's text, e.g. /goal set every module on httpx, tests green")
            self.text, self.status = rest, "active"
        elif verb == "clear":
            self.text, self.status = None, "active"
            return "goal cleared"
        elif verb in ("pause", "resume", "complete"):
            if not self.text:
                raise UserError(f"no goal to {verb}: set one with /goal set TEXT")
            self.status = {"pause": "paused", "resume": "active", "complete": "completed"}[verb]
        else:
            raise UserError(f"unknown /goal action {verb!r}: use /goal set TEXT, pause, resume, complete or clear")
        return self.describe()
