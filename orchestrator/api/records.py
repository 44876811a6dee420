"""The records the Python API returns that the rest of the package has no type for.

``RunEvent`` is one event of a run, the same object ``team run --json`` prints
one line of (docs/run.md), with its common fields typed. ``TeamStatus`` and
``MemberStatus`` are what ``team status --json`` prints (status/overview.py),
with the fields a program most often reads typed and the whole document in
``data``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunEvent:
    """One event of a run: ``run_started``, ``started``, ``completed``, ``failed``, ``retry``,
    ``cancelled``, ``stopping``, ``merge_queued``, ``merging``, ``stale``… (docs/run.md)."""

    kind: str
    """The event's name (the ``event`` key of ``team run --json``)."""
    task: int | None = None
    """The task's id in the store, for events about one task."""
    name: str | None = None
    """The task's id in the plan, for events about one task."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """The whole event as ``team run --json`` prints it (``duration``, ``error``, ``log``…)."""

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> RunEvent:
        task, name = data.get("task"), data.get("name")
        return cls(kind=str(data.get("event", "")), task=task if isinstance(task, int) else None,
                   name=name if isinstance(name, str) else None, data=dict(data))


@dataclass(frozen=True)
class MemberStatus:
    """One roster member as ``team status`` shows it."""

    name: str
    role: str
    liveness: str
    """``working``, ``idle``, ``waiting`` (enrolled, not started yet), ``dead``, ``shutdown``, or
    ``offline`` (an external member whose ``team mcp`` is not running)."""
    reason: str = ""
    """Why it counts as dead (or what it waits for)."""
    task: int | None = None
    """The task it works on."""
    unread: int = 0
    """Messages in its inbox it has not read."""
    heartbeat_age: float | None = None
    """Seconds since its last heartbeat; ``None``: none yet."""
    kind: str = "llm"
    """``llm`` (a teammate the lead runs) or ``external`` (an MCP client, ``team mcp --as NAME``)."""
    model: str | None = None
    """The model an llm teammate talks to, once a lead has started it."""


@dataclass(frozen=True)
class TeamStatus:
    """The state root at a glance: ``team status``."""

    team_name: str
    lead_running: bool
    lead_pid: int | None
    members: tuple[MemberStatus, ...]
    tasks: Mapping[str, int]
    """Counts: ``total``, one per status (``pending``, ``in_progress``, ``completed``, ``failed``,
    ``cancelled``), ``ready`` and ``unreadable``."""
    jobs_running: int
    jobs_total: int
    data: Mapping[str, Any] = field(default_factory=dict)
    """The whole document ``team status --json`` prints (usage, running jobs, the lead's lock)."""

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> TeamStatus:
        lead, jobs = data["lead"], data["jobs"]
        members = tuple(MemberStatus(name=m["name"], role=m["role"], liveness=m["liveness"],
                                     reason=m.get("reason", ""), task=m.get("task"), unread=m.get("unread", 0),
                                     heartbeat_age=m.get("heartbeat_age"), kind=m.get("kind", "llm"),
                                     model=m.get("model")) for m in data["members"])
        return cls(team_name=data["team_name"], lead_running=bool(lead["alive"]), lead_pid=lead.get("pid"),
                   members=members, tasks=dict(data["tasks"]), jobs_running=len(jobs["running"]),
                   jobs_total=int(jobs["total"]), data=dict(data))
