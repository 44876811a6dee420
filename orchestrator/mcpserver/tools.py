"""What each ``team mcp`` tool does: plain functions over the store, the bus and the overview.

The same implementation as the CLI's: ``TaskStore`` (locks, validation, cycle checks, the
compare-and-set claim), ``Bus`` (inbox files), ``tasks.graph``/``tasks.render`` (queries and
their text) and ``status.overview`` (``team status``). A refused change raises the same
``TeamError`` the CLI would print; server.py turns it into an MCP tool error carrying the CLI's
one line (``TypeName: message``).

``Caller`` is who the MCP client is (``team mcp --as NAME``): the actor of every change in the
event log, the default claimant, sender and inbox.

Results are short text an agent reads: a task is its JSON record plus ``ready``,
``waiting_on`` and ``blocks``; a listing is one ``render.list_line`` per task, as in
``team task list``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.jsonutil import dumps
from ..core.models import Status, Task
from ..status import overview
from ..tasks import graph, render
from ..tasks.attempts import parse_status
from ..tasks.store import TaskStore
from ..team.inbox import Bus
from ..team.roster import check_name

EMPTY = "no tasks yet"


@dataclass
class Caller:
    """The state root served and who the client is."""

    root: Path
    name: str

    def __post_init__(self) -> None:
        check_name(self.name, "caller name (--as)")
        self.store = TaskStore(self.root)
        self.bus = Bus(self.root)


def task_json(store: TaskStore, task: Task) -> str:
    """The task's record with ``ready``, ``waiting_on`` (unfinished blockers) and ``blocks``."""
    tasks = store.all()
    by_id = graph.index(tasks)
    data: dict[str, Any] = task.to_json()
    data["ready"] = graph.is_ready(task, by_id)
    data["waiting_on"] = graph.open_blockers(task, by_id)
    data["blocks"] = graph.dependents(tasks).get(task.id, [])
    return dumps(data)


def task_create(c: Caller, subject: str, description: str, blocked_by: list[int | str], owner: str,
                name: str | None, estimate: float | None) -> str:
    fields: dict[str, Any] = {}
    if name is not None:
        fields["name"] = name
    if estimate is not None:
        fields["estimate"] = estimate
    task = c.store.create(subject, description, blocked_by, owner, actor=c.name, **fields)
    return task_json(c.store, task)


def task_update(c: Caller, task: int | str, status: str | None, owner: str | None, add_blocked_by: list[int | str],
                remove_blocked_by: list[int | str], subject: str | None, description: str | None,
                result: str | None) -> str:
    if status is not None:
        parse_status(status)  # fail before touching anything, as the CLI does
    fields = {k: v for k, v in (("subject", subject), ("description", description), ("result", result))
              if v is not None}
    if status is None and owner is None and not add_blocked_by and not remove_blocked_by and not fields:
        raise UserError("nothing to update: give status, owner, add_blocked_by, remove_blocked_by, subject, "
                        "description or result")
    done = c.store.update(task, status=status, owner=owner, add_blocked_by=add_blocked_by,
                          remove_blocked_by=remove_blocked_by, actor=c.name, **fields)
    return task_json(c.store, done)


def task_get(c: Caller, task: int | str) -> str:
    return task_json(c.store, c.store.get(task))


def task_list(c: Caller, status: str | None, owner: str | None, ready: bool, blocked: bool) -> str:
    want = parse_status(status) if status is not None else None
    tasks, bad = c.store.scan()  # as `team task list`: a torn file does not take the listing down
    by_id = graph.index(tasks)
    shown = graph.TaskFilter(status=want, owner=owner, ready=ready, blocked=blocked).select(tasks)
    lines = [render.list_line(t, by_id) for t in shown]
    if not shown:
        lines = [f"no tasks match ({len(tasks)} in total)" if tasks else EMPTY]
    lines += [f"warning: {path.name} cannot be read; it is left out (`team doctor` says more)" for path, _ in bad]
    return "\n".join(lines)


def task_blocked(c: Caller, task: int | str | None) -> str:
    tid = c.store.resolve(task) if task is not None else None
    tasks = c.store.all()
    chains = graph.blocked_chains(tasks, tid, now=c.store.clock())
    if chains:
        return render.render_chains(chains, tasks)
    if tid is not None:
        return render.not_blocked(c.store.read(tid))
    return "no blocked tasks: every pending task is ready" if tasks else EMPTY


def task_critical(c: Caller) -> str:
    tasks = c.store.all()
    cp = graph.critical_path(tasks)
    wv = graph.waves(tasks)
    return dumps({"path": cp.ids, "total": cp.total, "by": cp.by, "waves": wv.waves, "stuck": wv.stuck})


def task_claim(c: Caller, task: int | str, owner: str | None) -> str:
    """Compare-and-set: a ``ConflictError`` naming who holds it, or why it is not ready."""
    who = check_name(owner, "owner") if owner is not None else c.name
    claimed = c.store.claim(task, who, actor=c.name)
    return task_json(c.store, claimed)


def message_send(c: Caller, to: str, text: str, sender: str | None) -> str:
    msg = c.bus.send(to, text, sender=sender or c.name)
    return f"sent {msg.id} to {to}"


def message_broadcast(c: Caller, text: str, sender: str | None) -> str:
    sent = c.bus.broadcast(text, sender=sender or c.name)
    return f"broadcast to {', '.join(m.to or '?' for m in sent)}" if sent else "no other members to broadcast to"


def inbox_read(c: Caller, name: str | None, peek: bool) -> str:
    who = name or c.name
    messages = c.bus.peek(who) if peek else c.bus.read(who)
    if not messages:
        return f"no unread messages for {who}"
    return "\n".join(overview.message_line(m) for m in messages)


def team_status(c: Caller) -> str:
    return "\n".join(overview.status_lines(overview.status_data(c.root)))


def status_names() -> str:
    return "|".join(s.value for s in Status)
