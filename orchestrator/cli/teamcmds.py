"""``team send|broadcast|inbox|status`` and ``team jobs [show|kill]``.

Formatting only: the roster and liveness come from team.py, messages from
inbox.py, jobs from jobs.py, task counts from the store. ``team inbox NAME``
drains (fetch + ack) unless ``--peek``. ``team spawn`` lives in another module.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from ..inbox import Bus
from ..jobs import JobManager, JobRecord
from ..lead import lead_info
from ..models import MESSAGE_TYPES, Message, Status
from ..store import TaskStore
from ..team import Team
from .common import JsonOpt, RootOpt, out, print_json, root_of

jobs_app = typer.Typer(help="Background shell jobs (.team/jobs/): list, show, kill.")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _message_line(m: Message) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(m.timestamp))
    kind = "" if m.type == "message" else f" [{m.type}{' ' + m.request_id if m.request_id else ''}]"
    return f"{when} {m.sender}{kind}: {m.content}"


def send_cmd(
    to: Annotated[str, typer.Argument(help="Recipient: 'lead' or a team member.")],
    text: Annotated[str, typer.Argument(help="Message text.")],
    sender: Annotated[str, typer.Option("--from", help="Sender name.")] = "lead",
    type_: Annotated[str, typer.Option("--type", help=f"One of: {', '.join(MESSAGE_TYPES)}.")] = "message",
    request_id: Annotated[str | None, typer.Option("--request-id", help="Required for protocol types.")] = None,
    root: RootOpt = None,
) -> None:
    """Append a message to TO's inbox (returns once it is on disk)."""
    msg = Bus(root_of(root)).send(to, text, sender=sender, type=type_, request_id=request_id)
    out(f"sent {msg.id} to {to}")


def broadcast_cmd(
    text: Annotated[str, typer.Argument(help="Message text.")],
    sender: Annotated[str, typer.Option("--from", help="Sender name.")] = "lead",
    root: RootOpt = None,
) -> None:
    """Send TEXT to every team member except the sender."""
    sent = Bus(root_of(root)).broadcast(text, sender=sender)
    out(f"broadcast to {', '.join(m.to for m in sent)}" if sent else "no other members to broadcast to")


def inbox_cmd(
    name: Annotated[str, typer.Argument(help="Whose inbox: 'lead' or a member.")],
    peek: Annotated[bool, typer.Option("--peek", help="Show without consuming.")] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Read (and consume) NAME's unread messages."""
    bus = Bus(root_of(root))
    messages = bus.peek(name) if peek else bus.read(name)
    if as_json:
        print_json([m.to_json() for m in messages])
    elif not messages:
        out(f"no unread messages for {name}")
    else:
        out("\n".join(_message_line(m) for m in messages))


def _status_data(root) -> dict[str, Any]:
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
    done = {t.id for t in tasks if t.status == Status.completed}
    ready = sum(1 for t in tasks if t.status == Status.pending and set(t.blockedBy) <= done)
    jobs = JobManager(root).list()
    running = [j for j in jobs if j.status == "running"]
    lead = lead_info(root)
    return {
        "team_name": roster.team_name,
        "lead": {"alive": lead is not None, **(lead or {})},
        "members": members,
        "tasks": {"total": len(tasks), **counts, "ready": ready, "unreadable": len(bad)},
        "jobs": {"total": len(jobs), "running": [j.model_dump(exclude_none=True) for j in running]},
    }


def status_cmd(as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Roster with working/idle/dead/shutdown, task counts, running jobs, lead alive?"""
    data = _status_data(root_of(root))
    if as_json:
        print_json(data)
        return
    lead = data["lead"]
    lead_text = f"running (pid {lead.get('pid')})" if lead["alive"] else "not running"
    out(f"team: {data['team_name']}   lead: {lead_text}")
    if data["members"]:
        out("members:")
        width = max(len(m["name"]) for m in data["members"])
        for m in data["members"]:
            bits = [f"heartbeat {age(m.get('heartbeat_age'))} ago" if "heartbeat_age" in m else "no heartbeat"]
            if m.get("task"):
                bits.append(f"task #{m['task']}")
            if m["unread"]:
                bits.append(f"{m['unread']} unread")
            if m["reason"] and m["liveness"] == "dead":
                bits.append(m["reason"])
            out(f"  {m['name']:<{width}}  {m['role']:<10} {m['liveness']:<9} {' · '.join(dict.fromkeys(bits))}")
    else:
        out("members: none (add one with `team spawn NAME --role ROLE`)")
    t = data["tasks"]
    if t["total"]:
        parts = [f"{t[s.value]} {s.value}" for s in Status if t[s.value]]
        extra = f" ({t['ready']} ready)" if t["pending"] else ""
        bad = f" · {t['unreadable']} unreadable (run `team doctor`)" if t["unreadable"] else ""
        out(f"tasks: {' · '.join(parts)}{extra}{bad}")
    else:
        out("tasks: none")
    running = data["jobs"]["running"]
    out(f"jobs: {len(running)} running, {data['jobs']['total']} in total")
    now = time.time()
    for j in running:
        out(f"  {j['id']}  {j['owner']}  {age(now - j['started_at'])}  {j['command']}")


def _job_line(j: JobRecord, now: float) -> str:
    code = "" if j.exit_code is None else f" (exit {j.exit_code})"
    took = age((j.finished_at or now) - j.started_at)
    task = f" task #{j.task}" if j.task else ""
    return f"{j.id}  {j.status + code:<18} {j.owner:<8} {took:>5}{task}  {j.command}"


@jobs_app.callback(invoke_without_command=True)
def jobs_list(ctx: typer.Context, as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """List background jobs (oldest first)."""
    if ctx.invoked_subcommand is not None:
        return
    jobs = JobManager(root_of(root)).list()
    if as_json:
        print_json([j.model_dump(exclude_none=True) for j in jobs])
    elif not jobs:
        out("no jobs yet")
    else:
        now = time.time()
        out("\n".join(_job_line(j, now) for j in jobs))


@jobs_app.command("show")
def jobs_show(
    job_id: Annotated[str, typer.Argument(help="Job id (see `team jobs`).")],
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """A job's record and the tail of its output."""
    j = JobManager(root_of(root)).get(job_id)
    if as_json:
        print_json(j.model_dump(exclude_none=True))
        return
    out(_job_line(j, time.time()))
    out(f"  pid {j.pid} · pgid {j.pgid} · manager pid {j.manager_pid} · log {j.log}")
    if j.cwd:
        out(f"  cwd {j.cwd}")
    if j.tail:
        out("--- output (tail) ---")
        out(j.tail.rstrip("\n"))


@jobs_app.command("kill")
def jobs_kill(
    job_id: Annotated[str, typer.Argument(help="Job id (see `team jobs`).")],
    root: RootOpt = None,
) -> None:
    """Kill a job's whole process group (from any process)."""
    mgr = JobManager(root_of(root))
    before = mgr.get(job_id)
    if before.status != "running":
        out(f"{job_id} already {before.status}" + ("" if before.exit_code is None else f" (exit {before.exit_code})"))
        return
    after = mgr.kill(job_id)
    out(f"{job_id} {after.status}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("send")(send_cmd)
    app.command("broadcast")(broadcast_cmd)
    app.command("inbox")(inbox_cmd)
    app.command("status")(status_cmd)
    app.add_typer(jobs_app, name="jobs")
