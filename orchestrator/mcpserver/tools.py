"""What each ``team mcp`` tool does: plain functions over the store, the bus and the overview.

The same implementation as the CLI's: ``TaskStore`` (locks, validation, cycle checks, the
compare-and-set claim), ``Bus`` (inbox files), ``tasks.graph``/``tasks.render`` (queries and
their text) and ``status.overview`` (``team status``). A refused change raises the same
``TeamError`` the CLI would print; server.py turns it into an MCP tool error carrying the CLI's
one line (``TypeName: message``).

``Caller`` (caller.py) is who the client is (``team mcp --as NAME``): the actor of every change
in the event log, the default claimant, sender and inbox, and what it may change. The checks,
each before anything is written:

* ``task_create``: the role's ``create``; an owner other than the caller needs ``assign``;
  the task records ``created_by``.
* ``task_update``: the role's rules for a task it owns or created (``update-own``) or any
  other (``update-any``), and ``assign`` to hand a task to someone else
  (``Permissions.refuse_update``), checked again under the store's lock; ``status:
  completed`` asks the root's ``task_completed`` hooks first (a veto refuses it).
* ``task_claim`` for someone else: ``assign``.
* ``message_send``/``message_broadcast`` in another's name, and ``inbox_read`` that consumes
  another member's messages: nobody (``peek`` reads any inbox; the lead sends as anyone).

Reads are bounded (paging.py): ``limit`` and ``cursor``, a page of at most ``MAX_CHARS``
characters ending with the total and the call for the next page.

Results are short text an agent reads: a task is its JSON record plus ``ready``,
``waiting_on`` and ``blocks``; a listing is one ``render.list_line`` per task, as in
``team task list``.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ConflictError, NotAllowed, UserError
from ..core.jsonutil import dumps
from ..core.models import Message, Status, Task
from ..core.text import plural
from ..status import overview
from ..tasks import graph, render
from ..tasks.attempts import parse_status
from ..tasks.edits import TaskEdits
from ..tasks.store import TaskStore
from ..team.roster import check_name
from . import paging
from .caller import Caller

EMPTY = "no tasks yet"
FIELD_CHARS = 4_000
"""Characters of a task's description or result in ``task_get`` (the rest: ``team task show``)."""
BLOCKS_SHOWN = 200
"""Dependents listed in ``task_get``'s ``blocks`` (``blocks_total`` counts them all)."""
MESSAGE_CHARS = 4_000
"""Characters of one message in ``inbox_read`` (the rest: ``team inbox NAME``)."""
CRITICAL_LIMIT = 500
"""Ids ``task_critical`` lists by default (of the path, of the waves together, of the stuck tasks)."""


def task_json(store: TaskStore, task: Task) -> str:
    """The task's record with ``ready``, ``waiting_on`` (unfinished blockers) and ``blocks``;
    long text fields and a long ``blocks`` list are cut, saying so."""
    tasks = store.all()
    by_id = graph.index(tasks)
    data: dict[str, Any] = task.to_json()
    for key in ("description", "result", "prompt", "error"):
        if isinstance(data.get(key), str):
            data[key] = paging.clip(data[key], FIELD_CHARS, f"`team task show {task.id}` has it all")
    data["ready"] = graph.is_ready(task, by_id)
    data["waiting_on"] = graph.open_blockers(task, by_id)
    blocks = graph.dependents(tasks).get(task.id, [])
    data["blocks"] = blocks[:BLOCKS_SHOWN]
    if len(blocks) > BLOCKS_SHOWN:
        data["blocks_total"] = len(blocks)
    return dumps(data)


# -- changes ----------------------------------------------------------------------
def task_create(c: Caller, subject: str, description: str, blocked_by: list[int | str], owner: str,
                name: str | None, estimate: float | None) -> str:
    why = c.permissions.refuse_create(c.name, owner)
    if why is not None:
        raise c.refuse(why)
    fields: dict[str, Any] = {"created_by": c.name}
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
    TaskEdits.check_owner(owner)  # a bad name is that, before whether the caller may give the task to it
    fields = {k: v for k, v in (("subject", subject), ("description", description), ("result", result))
              if v is not None}
    if status is None and owner is None and not add_blocked_by and not remove_blocked_by and not fields:
        raise UserError("nothing to update: give status, owner, add_blocked_by, remove_blocked_by, subject, "
                        "description or result")
    seen = c.store.read(c.store.resolve(task))

    def allowed(now: Task) -> None:
        why = c.permissions.refuse_update(c.name, now, owner)
        if why is not None:
            raise c.refuse(why)

    allowed(seen)  # refused at once, before a hook runs
    completing = status == Status.completed.value and seen.status != Status.completed
    # an agent CLI's report on its own attempt is decided by the run, hooks included, when its process ends
    # (run/command.py): asking the hooks here too would run them twice for one completion
    completing = completing and not TaskEdits.is_report(seen, Status.completed, c.name)
    if completing:  # the hooks decide before the completion is written, as for a teammate's (docs/hooks.md)
        verdict = c.hooks.decide("task_completed", teammate=c.name, task=seen,
                                 outcome={"status": "completed", "result": result or seen.result})
        if verdict.vetoed:
            raise NotAllowed(f"a task_completed hook refused to record task #{seen.id} completed: "
                             f"{verdict.feedback.strip()} -- fix what it says, then mark it completed again")

    def guard(now: Task) -> None:
        allowed(now)
        if completing and (now.status, now.owner) != (seen.status, seen.owner):
            raise ConflictError(f"task #{now.id} changed while its task_completed hooks ran (now {now.status.value}"
                                f"{', owned by ' + now.owner if now.owner else ''}): read it again")

    done = c.store.update(seen.id, status=status, owner=owner, add_blocked_by=add_blocked_by,
                          remove_blocked_by=remove_blocked_by, actor=c.name, guard=guard, **fields)
    return task_json(c.store, done)


def task_claim(c: Caller, task: int | str, owner: str | None) -> str:
    """Compare-and-set: a ``ConflictError`` naming who holds it, or why it is not ready."""
    who = check_name(owner, "owner") if owner is not None else c.name
    if who != c.name and not c.permissions.may("assign"):
        raise c.refuse(f"only the lead claims tasks for others: claim it for yourself, not for {who!r}")
    claimed = c.store.claim(task, who, actor=c.name)
    return task_json(c.store, claimed)


def _sender(c: Caller, sender: str | None) -> str:
    if sender is None or sender == c.name:
        return c.name
    if not c.is_lead:
        raise c.refuse(f"you send as yourself ({c.name}), not as {sender!r}", ask=False)
    return sender


def message_send(c: Caller, to: str, text: str, sender: str | None) -> str:
    msg = c.bus.send(to, text, sender=_sender(c, sender))
    return f"sent {msg.id} to {to}"


def message_broadcast(c: Caller, text: str, sender: str | None) -> str:
    sent = c.bus.broadcast(text, sender=_sender(c, sender))
    return f"broadcast to {', '.join(m.to or '?' for m in sent)}" if sent else "no other members to broadcast to"


# -- reads ------------------------------------------------------------------------
def task_get(c: Caller, task: int | str) -> str:
    return task_json(c.store, c.store.get(task))


def task_list(c: Caller, status: str | None, owner: str | None, ready: bool, blocked: bool, limit: int,
              cursor: int | None) -> str:
    want = parse_status(status) if status is not None else None
    tasks, bad = c.store.scan()  # as `team task list`: a torn file does not take the listing down
    by_id = graph.index(tasks)
    shown = graph.TaskFilter(status=want, owner=owner, ready=ready, blocked=blocked).select(tasks)
    warnings = [f"warning: {path.name} cannot be read; it is left out (`team doctor` says more)" for path, _ in bad]
    if not shown:
        return "\n".join([f"no tasks match ({len(tasks)} in total)" if tasks else EMPTY, *warnings])
    filtered = want is not None or owner is not None or ready or blocked
    what = f"matching tasks ({len(tasks)} in all)" if filtered else "tasks"
    page = paging.take(sorted(t.id for t in shown), lambda tid: render.list_line(by_id[tid], by_id),
                       after=cursor, limit=limit)
    again = paging.call("task_list", status=status, owner=owner, ready=ready, blocked=blocked)
    return "\n".join([paging.render(page, what, again), *warnings])


def task_blocked(c: Caller, task: int | str | None, limit: int, cursor: int | None) -> str:
    tid = c.store.resolve(task) if task is not None else None
    tasks = c.store.all()
    chains = graph.blocked_chains(tasks, tid, now=c.store.clock())
    if not chains:
        if tid is not None:
            return render.not_blocked(c.store.read(tid))
        return "no blocked tasks: every pending task is ready" if tasks else EMPTY
    by_chain = {ch.id: ch for ch in chains}
    page = paging.take(sorted(by_chain), lambda tid: render.render_chains([by_chain[tid]], tasks),
                       after=cursor, limit=limit)
    return paging.render(page, "blocked tasks", paging.call("task_blocked", task=task))


def task_critical(c: Caller, limit: int, cursor: int | None) -> str:
    """The critical path (its first ``limit`` ids) and the waves from wave ``cursor`` on, as many as
    fit ``limit`` ids and the page; the counts say what was left out."""
    tasks = c.store.all()
    cp = graph.critical_path(tasks)
    wv = graph.waves(tasks)
    start = cursor or 0
    data: dict[str, Any] = {"path": cp.ids[:limit], "path_length": len(cp.ids), "total": cp.total, "by": cp.by,
                            "waves": [], "wave_sizes": [], "wave_count": len(wv.waves), "first_wave": start + 1,
                            "stuck": wv.stuck[:limit], "stuck_count": len(wv.stuck)}
    budget, ids = paging.MAX_CHARS - len(dumps(data)), 0
    for wave in wv.waves[start:]:
        shown = wave[:limit]  # a wave wider than the limit is cut: wave_sizes says by how much
        cost = len(json.dumps(shown)) + len(str(len(wave))) + 4
        if data["waves"] and (ids + len(shown) > limit or cost > budget):
            break
        data["waves"].append(shown)
        data["wave_sizes"].append(len(wave))
        budget, ids = budget - cost, ids + len(shown)
    end = start + len(data["waves"])
    if end < len(wv.waves):
        data["next"] = paging.call("task_critical", limit=limit if limit != CRITICAL_LIMIT else None)(end)
    return dumps(data)


def inbox_read(c: Caller, name: str | None, peek: bool, limit: int, cursor: int | None) -> str:
    """Unread messages, oldest first: consumed (only your own inbox) up to ``limit`` and the page,
    the rest left unread; with ``peek``, any inbox, nothing consumed, paged by position."""
    who = name or c.name
    if who != c.name and not peek:
        raise c.refuse(f"only {who} consumes its own messages: read {who!r} with peek=true, or your own inbox",
                       ask=False)
    if peek:
        unread = c.bus.peek(who)
        if not unread:
            return f"no unread messages for {who}"
        page = paging.take(range(1, len(unread) + 1), lambda i: _message(unread[i - 1], who), after=cursor,
                           limit=limit)
        return paging.render(page, f"unread messages of {who} (peek: none consumed)",
                             paging.call("inbox_read", name=name, peek=True), mark="")
    with c.bus.fetch(who, limit=limit) as batch:
        got = batch.messages
        page = paging.take(range(1, len(got) + 1), lambda i: _message(got[i - 1], who), after=None, limit=limit)
        if len(page.shown) == len(batch.messages):
            batch.ack()
    if not batch.messages:
        return f"no unread messages for {who}"
    if len(page.shown) < len(batch.messages):  # what fits the page, consumed; the rest stay unread
        with c.bus.fetch(who, limit=len(page.shown)) as batch:
            batch.ack()
    left = len(c.bus.peek(who))
    tail = (f"— {plural(len(page.shown), 'message')} read; {left} more unread: call inbox_read again" if left
            else f"— {plural(len(page.shown), 'message')} read; none left unread")
    return "\n".join([*(text for _, text in page.shown), tail])


def _message(m: Message, inbox: str) -> str:
    return paging.clip(overview.message_line(m), MESSAGE_CHARS, f"the whole message is {m.id} in .team/inbox/{inbox}.jsonl")


def team_status(c: Caller, limit: int) -> str:
    data = overview.status_data(c.root)
    cut = []
    for key, what in (("members", "members"), ("requests", "pending requests")):
        if len(data[key]) > limit:
            cut.append(f"{len(data[key]) - limit} more {what}")
            data[key] = data[key][:limit]
    running = data["jobs"]["running"]
    if len(running) > limit:
        cut.append(f"{len(running) - limit} more running jobs")
        data["jobs"]["running"] = running[:limit]
    text = paging.clip("\n".join(overview.status_lines(data)), paging.MAX_CHARS)
    if cut:
        text += f"\n— {', '.join(cut)} left out: team_status(limit=N) shows more"
    return text


def status_names() -> str:
    return "|".join(s.value for s in Status)
