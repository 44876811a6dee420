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

Budgets (core/budget.py): a roster member keeps the budget its runtime
enforced (``budget``), so every table shows a teammate's spend against it,
and a task's spend against the budget of the teammate that ran it
(``against``); ``render_spend`` is the run summary's table of each
teammate's spend in that run (and the run's, row ``run``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.budget import Budget, describe
from ..core.paths import team_dir
from ..core.text import plural
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


def _budget(raw: Any) -> Budget | None:
    """A member's stored ``budget`` (the roster keeps what its runtime enforced), if readable."""
    if not isinstance(raw, dict):
        return None
    try:
        return Budget.model_validate(raw)
    except ValueError:
        return None


def report(members: Iterable[Any], tasks: Iterable[Any], lead: Usage | None = None) -> dict[str, Any]:
    """``{"agents": [...], "tasks": [...], "total": {...}}``; rows only for records with usage.

    An agent with a budget has it in its row (``budget``); a task's row carries its owner's
    (``budget``, ``budget_of``): what the teammate that spent it may spend."""
    agents = [_row("lead", lead)] if lead is not None and lead.calls else []
    budgets: dict[str, Budget] = {}
    for m in members:
        budget = _budget(getattr(m, "budget", None))
        if budget is not None:
            budgets[m.name] = budget
        u = as_usage(getattr(m, "usage", None))
        if u is not None and u.calls:
            extra: dict[str, Any] = {"budget": budget.model_dump(exclude_none=True)} if budget is not None else {}
            agents.append(_row(m.name, u, role=m.role, **extra))
    rows = []
    for t in tasks:
        u = as_usage(getattr(t, "usage", None))
        if u is not None and u.calls:
            owner = getattr(t, "owner", "") or ""
            extra = {"budget": budgets[owner].model_dump(exclude_none=True), "budget_of": owner} \
                if owner in budgets else {}
            rows.append(_row(t.label(), u, task=t.id, subject=t.subject, **extra))
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


def against(r: Mapping[str, Any]) -> str:
    """A row's spend against its budget (``220/150 tok, $0.0001/$1.00``); "" without a budget."""
    budget = _budget(r.get("budget"))
    if budget is None:
        return ""
    said = describe(budget, int(r["prompt_tokens"]) + int(r["completion_tokens"]), r.get("cost"))
    return f"  budget {said}" + (f" ({r['budget_of']}'s)" if r.get("budget_of") else "")


def _line(label: str, r: Mapping[str, Any], width: int) -> str:
    return (f"  {label:<{width}}  {r['prompt_tokens']:>10,} {r['completion_tokens']:>10,} {r['cached_tokens']:>10,}"
            f" {r['calls']:>6,}  {money(r['cost'])}{against(r)}")


def render_spend(rows: Iterable[Mapping[str, Any]], title: str = "spend this run") -> list[str]:
    """Each teammate's spend in one run against its budget (and the run's: the row ``run``); []
    when nobody has a budget (the token table says it all)."""
    rows = list(rows)
    if not any(r.get("budget") for r in rows):
        return []
    width = max(len(r["name"]) for r in rows)
    lines = [f"{title}:"]
    for r in rows:
        budget = _budget(r.get("budget"))
        tokens = int(r["prompt_tokens"]) + int(r["completion_tokens"])
        lines.append(f"  {r['name']:<{width}}  {describe(budget, tokens, r.get('cost'))}, {plural(r['calls'], 'call')}")
    return lines


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
