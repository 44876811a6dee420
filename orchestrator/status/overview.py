"""What the team looks like right now, as data and as text lines.

Shared by ``team status`` / ``team jobs`` / ``team inbox`` (cli/teamcmds.py)
and the chat's slash commands (chat/session.py), so both show the same thing. Pure
reads: the roster and liveness from team/roster.py, unread counts from team/inbox.py,
task counts from the store, jobs from jobs/manager.py, the lead from team/lead.py and the
token accounting from usage.py (the ledger of spend, llm/ledger.py). Nothing here prints.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..core.models import Message, Status
from ..core.text import plural, shown
from ..jobs.manager import JobManager
from ..jobs.records import JobRecord, job_orphaned, shown_status
from ..llm.ledger import Ledger
from ..tasks import graph
from ..tasks.store import TaskStore
from ..team.inbox import Bus
from ..team.lead import lead_info
from ..team.requests import Requests
from ..team.roster import Team
from . import usage


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def message_line(m: Message) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(m.timestamp))
    kind = "" if m.type == "message" else f" [{m.type}{' ' + m.request_id if m.request_id else ''}]"
    return f"{when} {shown(m.sender)}{shown(kind)}: {shown(m.content)}"


def job_line(j: JobRecord, now: float) -> str:
    code = "" if j.exit_code is None else f" (exit {j.exit_code})"
    took = age((j.finished_at or now) - j.started_at)
    task = f" task #{j.task}" if j.task else ""
    return f"{j.id}  {shown_status(j) + code:<18} {shown(j.owner):<8} {took:>5}{task}  {shown(j.command)}"


def job_data(j: JobRecord) -> dict[str, Any]:
    """A job as JSON, with ``orphaned``: running, but its manager is gone."""
    return {**j.model_dump(exclude_none=True), "orphaned": job_orphaned(j)}


def status_data(root: Path) -> dict[str, Any]:
    """Roster with liveness and unread counts, task counts, jobs, the lead, token usage, and the
    pending approval requests (team/requests.py)."""
    team = Team(root)
    bus = Bus(root, team=team)
    roster = team.load()
    members = []
    for s in team.states():
        data = s.model_dump(exclude_none=True)
        data["unread"] = len(bus.peek(s.name))
        members.append(data)
    tasks, bad = TaskStore(root).scan()
    counts = {s.value: 0 for s in Status}
    for t in tasks:
        counts[t.status.value] += 1
    ready = len(graph.ready(tasks))
    nodes: dict[str, int] = {}  # backend ray: where the tasks' last attempts ran
    lost = 0
    for t in tasks:
        if t.node:
            nodes[t.node] = nodes.get(t.node, 0) + 1
        lost += t.lost
    jobs = JobManager(root).list()
    running = [j for j in jobs if j.status == "running"]
    lead = lead_info(root)
    return {
        "team_name": roster.team_name,
        "lead": {"alive": lead is not None, **(lead or {})},
        "members": members,
        "tasks": {"total": len(tasks), **counts, "ready": ready, "unreadable": len(bad)},
        "nodes": {"tasks": dict(sorted(nodes.items())), "lost_attempts": lost},
        "jobs": {"total": len(jobs), "running": [job_data(j) for j in running]},
        "usage": usage.report(Ledger(root).totals(), roster.members, tasks),
        "requests": [r.model_dump(exclude_none=True) for r in Requests(root).pending()],
    }


def lead_text(lead: dict[str, Any]) -> str:
    """The lead in words; a sandbox that is not on (opted out, or unavailable) is always named."""
    if not lead["alive"]:
        return "not running"
    what = " · team chat" if lead.get("mode") == "chat" else ""
    if lead.get("backend"):
        what += f" · backend {shown(str(lead['backend']))}"
    sandbox = lead.get("sandbox")
    if isinstance(sandbox, str) and sandbox != "on":
        what += f" · sandbox {sandbox}"
    return f"running (pid {lead.get('pid')}){what}"


def member_lines(data: dict[str, Any]) -> list[str]:
    if not data["members"]:
        return ["members: none (add one with `team spawn NAME --role ROLE`)"]
    lines = ["members:"]
    width = max(len(m["name"]) for m in data["members"])
    models = [shown(m.get("model") or "-") for m in data["members"]]
    model_width = max(len(x) for x in models)
    for m, model in zip(data["members"], models, strict=True):
        bits = [f"heartbeat {age(m.get('heartbeat_age'))} ago" if "heartbeat_age" in m
                else "not started yet" if m["liveness"] == "waiting"
                else "never connected" if m["liveness"] == "offline" else "no heartbeat"]
        if m.get("task"):
            bits.append(f"task #{m['task']}")
        if m["unread"]:
            bits.append(f"{m['unread']} unread")
        if m["reason"] and m["liveness"] in ("dead", "waiting", "offline"):
            bits.append(shown(m["reason"]))
        lines.append(f"  {m['name']:<{width}}  {shown(m['role']):<10} {m['liveness']:<9} "
                     f"{m.get('kind', 'llm'):<8} {model:<{model_width}}  {' · '.join(dict.fromkeys(bits))}")
    return lines


def status_lines(data: dict[str, Any], *, with_usage: bool = True) -> list[str]:
    """``team status`` as text (the usage table only when some agent made calls)."""
    lines = [f"team: {shown(data['team_name'])}   lead: {lead_text(data['lead'])}", *member_lines(data)]
    t = data["tasks"]
    if t["total"]:
        parts = [f"{t[s.value]} {s.value}" for s in Status if t[s.value]]
        extra = f" ({t['ready']} ready)" if t["pending"] else ""
        bad = f" · {t['unreadable']} unreadable (run `team doctor`)" if t["unreadable"] else ""
        lines.append(f"tasks: {' · '.join(parts)}{extra}{bad}")
    else:
        lines.append("tasks: none")
    nodes = data.get("nodes") or {}
    if nodes.get("tasks"):
        lost = nodes.get("lost_attempts", 0)
        lines.append("nodes: " + " · ".join(f"{shown(n)} {plural(k, 'task')}" for n, k in nodes["tasks"].items())
                     + (f" · {plural(lost, 'attempt')} lost with a node" if lost else ""))
    running = data["jobs"]["running"]
    orphans = sum(1 for j in running if j.get("orphaned"))
    lines.append(f"jobs: {len(running)} running{f' ({orphans} orphaned)' if orphans else ''}, "
                 f"{data['jobs']['total']} in total")
    now = time.time()
    lines += [f"  {j['id']}  {shown(j['owner'])}  "
              + (f"orphaned (manager pid {j['manager_pid']} is gone)  " if j.get("orphaned") else "")
              + f"{age(now - j['started_at'])}  {shown(j['command'])}" for j in running]
    lines += request_lines(data.get("requests") or [])
    if with_usage:
        lines += usage.render(data["usage"])
    return lines


def request_lines(pending: list[dict[str, Any]]) -> list[str]:
    """The pending approval requests (plans, ``ask`` tool calls) and how to answer them."""
    if not pending:
        return []
    now = time.time()
    lines = [f"approvals: {len(pending)} pending (`team approve ID`, `team reject ID --reason TEXT`)"]
    for r in pending:
        left = f" · denied in {age(r['expires'] - now)}" if r.get("expires") else ""
        task = f" · task #{r['task']}" if r.get("task") else ""
        lines.append(f"  {r['id']}  {r['kind']:<4}  {shown(r['sender'])}: {shown(r['summary'])}{task}{left}")
    return lines


def task_lines(root: Path) -> list[str]:
    """``team task list`` as text."""
    from ..tasks.render import list_line

    tasks, bad = TaskStore(root).scan()
    by_id = {t.id: t for t in tasks}
    lines = [list_line(t, by_id) for t in tasks] or ["no tasks yet"]
    return lines + [f"unreadable: {path.name}: {shown(why)} (run `team doctor`)" for path, why in bad]


def job_lines(root: Path, jobs: list[JobRecord] | None = None) -> list[str]:
    """One line per job (``jobs``, default: all of ``root``'s), or "no jobs yet"."""
    if jobs is None:
        jobs = JobManager(root).list()
    if not jobs:
        return ["no jobs yet"]
    now = time.time()
    return [job_line(j, now) for j in jobs]
