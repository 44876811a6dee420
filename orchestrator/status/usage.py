"""Token accounting: who spent which tokens, per agent, task and model, and what it cost.

Every figure comes from one place, the ledger of spend (llm/ledger.py,
``.team/spend.jsonl``: one line per model call, with its run, agent, member,
task and model), so every report counts the same calls: teammates' task
attempts, their turns outside a task (woken by a message), tasks they
claimed by themselves, subagents (charged to their teammate), compactions,
and the chat lead. Nothing is summed from roster or task files.

``report(totals, members, tasks)`` turns ledger ``Totals`` into data (for
``--json``): ``agents`` (by member), ``tasks`` (by task), ``models`` (by
model) and ``total``; ``root_report(root)`` is every run's (``team status``,
``/cost``, the API's status, the board), ``run_usage(root, run_id)`` one
run's (the end of ``team run``). Each row is a ``pricing.Usage`` dict:
``prompt_tokens``, ``completion_tokens``, ``cached_tokens`` (part of
prompt), ``cost`` (US dollars, ``None`` when any summed call had no known
price) and ``calls``. ``render`` makes text lines of it.

Budgets (core/budget.py): a roster member keeps the budget its runtime
enforced (``budget``), so every table shows a teammate's spend against it,
and a task's spend against the budget of the teammate that ran it
(``against``); ``render_spend`` is the run summary's table of each
teammate's spend in that run (and the run's, row ``run``). Money is printed
with enough digits to see a small cap or spend (core/budget.py ``money``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.budget import Budget, describe
from ..core.budget import money as budget_money
from ..core.models import Member, Task
from ..core.text import plural, shown
from ..llm.ledger import Ledger, Totals
from ..llm.pricing import Usage

SUBJECT_SHOWN = 24
"""Characters of an unnamed task's subject in its row."""


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


def report(totals: Totals, members: Iterable[Member] = (), tasks: Iterable[Task] = ()) -> dict[str, Any]:
    """``{"agents": [...], "tasks": [...], "models": [...], "total": {...}}`` of ledger ``totals``.

    ``members`` and ``tasks`` only name the rows: a member's role and budget (``budget``), a
    task's label and subject and its owner's budget (``budget``, ``budget_of``: what the teammate
    that spent it may spend). A member or task the ledger knows and the store does not (a task
    removed by ``--fresh``) keeps its row. Agents are in name order (the chat lead first), tasks
    in id order, models in name order."""
    roster = {m.name: m for m in members}
    budgets = {name: b for name, m in roster.items() if (b := _budget(getattr(m, "budget", None))) is not None}
    agents = []
    for name, u in sorted(totals.members.items(), key=lambda kv: (kv[0] != "lead", kv[0])):
        m = roster.get(name)
        extra: dict[str, Any] = {"role": m.role} if m is not None else {}
        if name in budgets:
            extra["budget"] = budgets[name].model_dump(exclude_none=True)
        agents.append(_row(name, u, **extra))
    by_id = {t.id: t for t in tasks}
    rows = []
    for tid, u in sorted(totals.tasks.items()):
        t = by_id.get(tid)
        owner = (t.owner or "") if t is not None else ""
        extra = {"budget": budgets[owner].model_dump(exclude_none=True), "budget_of": owner} if owner in budgets else {}
        if t is not None:  # an unnamed task (made by a teammate or by hand) is shown with its subject
            label = t.label() if t.name else f"#{tid} {shown(t.subject)[:SUBJECT_SHOWN]}"
            rows.append(_row(label, u, task=tid, subject=t.subject, **extra))
        else:
            rows.append(_row(f"#{tid}", u, task=tid, subject=""))
    models = [_row(name or "(unnamed)", u) for name, u in sorted(totals.models.items())]
    return {"agents": agents, "tasks": rows, "models": models, "total": totals.total.model_dump()}


def root_report(root: Path) -> dict[str, Any]:
    """``report`` of every run under ``root`` (``team status``, ``/cost``, the board, the API)."""
    from ..tasks.store import TaskStore
    from ..team.roster import Team

    tasks, _bad = TaskStore(root).scan()
    return report(Ledger(root).totals(), Team(root).members(), tasks)


def run_usage(root: Path, run_id: str) -> dict[str, Any] | None:
    """``report`` of one ``team run`` (None when it made no model call)."""
    from ..tasks.store import TaskStore
    from ..team.roster import Team

    totals = Ledger(root).totals(run_id)
    if not totals.total.calls:
        return None
    tasks, _bad = TaskStore(root).scan()
    return report(totals, Team(root).members(), tasks)


def money(cost: float | None) -> str:
    """A cost as every report prints it (core/budget.py ``money``), or "cost unknown"."""
    return "cost unknown" if cost is None else budget_money(cost)


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
    models = data.get("models") or []
    names = [*labels, *(t["name"] for t in tasks), *(m["name"] for m in models if len(models) > 1)]
    width = max([len(x) for x in [*names, "total", "by agent:"]] + [len(title) - 1])
    head = f"{title}:".ljust(width + 2)
    lines = [f"{head}  {'prompt':>10} {'completion':>10} {'cached':>10} {'calls':>6}  cost"]
    if agents:
        lines.append("  by agent:")
        lines += [_line(label, a, width) for label, a in zip(labels, agents, strict=False)]
    if tasks:
        lines.append("  by task:")
        lines += [_line(t["name"], t, width) for t in tasks]
    if len(models) > 1:
        lines.append("  by model:")
        lines += [_line(m["name"], m, width) for m in models]
    lines.append(_line("total", data["total"], width))
    return lines
