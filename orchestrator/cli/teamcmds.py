"""``team send|broadcast|inbox|status`` and ``team jobs [show|kill]``.

Formatting only: what the team looks like comes from status/overview.py (roster and
liveness, task counts, jobs, the lead, token usage per agent and per task). ``team inbox NAME``
drains (fetch + ack) unless ``--peek``. ``team spawn`` lives in another module.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from ..core.states import MESSAGE_TYPES
from ..core.text import shown
from .common import JsonOpt, RootOpt, out, print_json, root_of

# The bus, the job manager and the overview are imported by the commands that use them:
# importing this module is part of every command's start-up (cli/__init__.py).

jobs_app = typer.Typer(help="Background shell jobs (.team/jobs/): list, show, kill.")


def send_cmd(
    ctx: typer.Context,
    to: Annotated[str, typer.Argument(help="Recipient: 'lead' or a team member.")],
    text: Annotated[str, typer.Argument(help="Message text.")],
    sender: Annotated[str, typer.Option("--from", help="Sender name.")] = "lead",
    type_: Annotated[str, typer.Option("--type", help=f"One of: {', '.join(MESSAGE_TYPES)}.")] = "message",
    request_id: Annotated[str | None, typer.Option("--request-id", help="Required for protocol types.")] = None,
    root: RootOpt = None,
) -> None:
    """Append a message to TO's inbox (returns once it is on disk)."""
    from ..team.inbox import Bus

    msg = Bus(root_of(root, ctx)).send(to, text, sender=sender, type=type_, request_id=request_id)
    out(f"sent {msg.id} to {to}")


def broadcast_cmd(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="Message text.")],
    sender: Annotated[str, typer.Option("--from", help="Sender name.")] = "lead",
    root: RootOpt = None,
) -> None:
    """Send TEXT to every team member except the sender."""
    from ..team.inbox import Bus

    sent = Bus(root_of(root, ctx)).broadcast(text, sender=sender)
    out(f"broadcast to {', '.join(m.to or '?' for m in sent)}" if sent else "no other members to broadcast to")


def inbox_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Whose inbox: 'lead' or a member.")],
    peek: Annotated[bool, typer.Option("--peek", help="Show without consuming.")] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Read (and consume) NAME's unread messages."""
    from ..status import overview
    from ..team.inbox import Bus

    bus = Bus(root_of(root, ctx))
    messages = bus.peek(name) if peek else bus.read(name)
    if as_json:
        print_json([m.to_json() for m in messages])
    elif not messages:
        out(f"no unread messages for {shown(name)}")
    else:
        out("\n".join(overview.message_line(m) for m in messages))


def status_cmd(ctx: typer.Context, as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Roster with working/idle/waiting/dead/shutdown, task counts, running jobs, lead alive?, token usage."""
    from ..status import overview

    data = overview.status_data(root_of(root, ctx))
    if as_json:
        print_json(data)
        return
    out("\n".join(overview.status_lines(data)))


@jobs_app.callback(invoke_without_command=True)
def jobs_list(ctx: typer.Context, as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """List background jobs (oldest first)."""
    from ..jobs.manager import JobManager
    from ..status import overview

    if ctx.invoked_subcommand is not None:
        return
    where = root_of(root, ctx)
    jobs = JobManager(where).list()
    if as_json:
        print_json([overview.job_data(j) for j in jobs])
    else:
        out("\n".join(overview.job_lines(where, jobs)))


@jobs_app.command("show")
def jobs_show(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="Job id (see `team jobs`).")],
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """A job's record and the tail of its output."""
    from ..jobs.manager import JobManager
    from ..status import overview

    j = JobManager(root_of(root, ctx)).get(job_id)
    if as_json:
        print_json(overview.job_data(j))
        return
    out(overview.job_line(j, time.time()))
    out(f"  pid {j.pid} · pgid {j.pgid} · manager pid {j.manager_pid} · log {j.log}")
    if j.cwd:
        out(f"  cwd {shown(j.cwd)}")
    if j.tail:
        out("--- output (tail) ---")
        out(shown(j.tail.rstrip("\n"), lines=True))


@jobs_app.command("kill")
def jobs_kill(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="Job id (see `team jobs`).")],
    root: RootOpt = None,
) -> None:
    """Kill a job's whole process group (from any process)."""
    from ..jobs.manager import JobManager

    mgr = JobManager(root_of(root, ctx))
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
