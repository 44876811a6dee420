"""Token accounting: who spent which tokens, per agent and per task, and what it cost.

Facts come from where they are already stored; nothing is double-stored:

    agent   roster member ``usage`` (.team/config.json; teammates, summed across runs)
            + the chat lead's ``usage`` in .team/chat.json (written by chat/session.py)
    task    task ``usage`` (.tasks/task_N.json; the attempt that ended it)

Each record is a ``pricing.Usage`` dict: ``prompt_tokens``,
``completion_tokens``, ``cached_tokens`` (part of prompt), ``cost`` (US
dollars, ``None`` when any summed call had no known price) and ``calls``.
The total is the sum over *agents*: task usage is part of the usage of the
agent that ran it, so adding both would count it twice. ``run_usage`` (the
end of ``team run``) sums the tasks that ran.

``report`` returns data (for ``--json``), ``render`` text lines (for
``team status``, ``/cost`` and the ``team run`` summary).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.paths import team_dir
from ..llm.pricing import Usage

CHAT_STATE = "chat.json"
"""The chat lead's state file under .team/ (chat/session.py writes it; ``usage`` is read here)."""


def as_usage(raw: Mapping[str, Any] | Usage | None) -> Usage | None:
    """A stored usage dict as ``Usage``; None when absent, empty or unreadable."""
    if isinstance(raw, Usage):
        return raw
    if not raw:
        return None
    try:
        return Usage(**{k: v for k, v in raw.items() if k in Usage.model_fields})
    except (TypeError, ValidationError):
        return None


def total(usages: Iterable[Usage | None]) -> Usage:
    """The sum (absent usages count nothing)."""
    out = Usage()
    for u in usages:
        if u is not None:
            out += u
    return out


def lead_usage(root: Path) -> Usage | None:
    """The chat lead's usage totals, if a chat session ever ran here."""
    try:
        data = json.loads((team_dir(root) / CHAT_STATE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return as_usage(data.get("usage")) if isinstance(data, dict) else None


def _row(name: str, u: Usage, **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra, **u.model_dump()}


def report(members: Iterable[Any], tasks: Iterable[Any], lead: Usage | None = None) -> dict[str, Any]:
    """``{"agents": [...], "tasks": [...], "total": {...}}``; rows only for records with usage."""
    agents = [_row("lead", lead)] if lead is not None and lead.calls else []
    for m in members:
        u = as_usage(getattr(m, "usage", None))
        if u is not None and u.calls:
            agents.append(_row(m.name, u, role=m.role))
    rows = []
    for t in tasks:
        u = as_usage(getattr(t, "usage", None))
        if u is not None and u.calls:
            rows.append(_row(t.label(), u, task=t.id, subject=t.subject))
    agent_total = total(as_usage(r) for r in agents)
    return {"agents": agents, "tasks": rows, "total": agent_total.model_dump()}


def root_report(root: Path) -> dict[str, Any]:
    """``report`` over what is on disk under ``root``."""
    from ..tasks.store import TaskStore
    from ..team.roster import Team

    tasks, _bad = TaskStore(root).scan()
    return report(Team(root).members(), tasks, lead_usage(root))


def run_usage(root: Path, task_ids: Iterable[int]) -> dict[str, Any] | None:
    """Usage of the tasks that ran in one ``team run`` (None when no agent task ran)."""
    from ..tasks.store import TaskStore

    wanted = set(task_ids)
    tasks, _bad = TaskStore(root).scan()
    r = report((), [t for t in tasks if t.id in wanted])
    if not r["tasks"]:
        return None
    t = total(as_usage(row) for row in r["tasks"])
    return {"tasks": r["tasks"], "total": t.model_dump()}


def money(cost: float | None) -> str:
    if cost is None:
        return "cost unknown"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def _line(label: str, r: Mapping[str, Any], width: int) -> str:
    return (f"  {label:<{width}}  {r['prompt_tokens']:>10,} {r['completion_tokens']:>10,} {r['cached_tokens']:>10,}"
            f" {r['calls']:>6,}  {money(r['cost'])}")


def render(data: Mapping[str, Any], title: str = "tokens") -> list[str]:
    """Text table of a ``report``/``run_usage``; [] when there is nothing to show."""
    agents, tasks = data.get("agents") or [], data.get("tasks") or []
    if not agents and not tasks:
        return []
    labels = [a["name"] + (f" ({a['role']})" if a.get("role") else "") for a in agents]
    width = max([len(x) for x in [*labels, *(t["name"] for t in tasks), "total", "by agent:"]] + [len(title) - 1])
    head = f"{title}:".ljust(width + 2)
    lines = [f"{head}  {'prompt':>10} {'completion':>10} {'cached':>10} {'calls':>6}  cost"]
    if agents:
        lines.append("  by agent:")
        lines += [_line(label, a, width) for label, a in zip(labels, agents, strict=False)]
    if tasks:
        lines.append("  by task:")
        lines += [_line(t["name"], t, width) for t in tasks]
    lines.append(_line("total", data["total"], width))
    return lines
