"""What the page is sent: the records of the wire format and the pure functions that build them.

Everything the board shows passes through ``Shown``: the secrets this process
knows are scrubbed (``core.redact.Secrets``), then control characters become
visible escapes exactly as in the terminal (``core.text.shown``), so a task
subject or a message can neither carry a key to the page nor reorder what a
reader sees. The page still treats every string as untrusted and sets it as
text, never as markup (static/board.js).

Derived here, from the stored facts (rule: store facts, derive state):

* a task's ``state``: ``running``, ``ready``, ``blocked`` or its final status
  (``tasks.graph`` decides ready and blocked);
* its place on the board (layout.py) and whether it is on the critical path:
  the remaining one (``tasks.graph.critical_path``) while work is left, else
  the path *as run* (from the task that finished last, back through the
  dependency that finished last, as ``team run`` reports it);
* ``Progress``: counts, done/left, and an ETA from the recent completion
  rate (never shorter than the remaining critical path at the mean task
  duration);
* ``Spend``: tokens and dollars per agent and in total (the ledger of spend, llm/ledger.py),
  against the budget given to ``team board --budget``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from ..core.models import MARKERS, Message, Status, Task
from ..core.redact import Secrets
from ..core.text import shown
from ..jobs.records import JobRecord, shown_status
from ..llm.ledger import Totals
from ..llm.pricing import Usage
from ..status import usage
from ..tasks import graph
from ..team.roster import MemberState
from .layout import Place

RATE_WINDOW = 120.0
"""Seconds of recent completions the ETA's rate is measured over."""
TEXT_LIMIT = 4000
"""Most characters of one message body or event note sent to the page."""


@dataclass(frozen=True)
class Shown:
    """Text made safe to show: secrets scrubbed, control characters escaped (see the module docstring)."""

    secrets: Secrets

    def line(self, text: str | None, limit: int = 400) -> str:
        """One-line field (subject, name, owner, command)."""
        out = shown(self.secrets.scrub(text or ""))
        return out if len(out) <= limit else out[: limit - 1] + "…"

    def block(self, text: str | None, limit: int = TEXT_LIMIT) -> str:
        """Multi-line text (message body, log tail, description): newlines and tabs kept."""
        out = shown(self.secrets.scrub(text or ""), lines=True)
        return out if len(out) <= limit else out[: limit - 1] + "…"



# ---------------------------------------------------------------------- records sent to the page
class TaskView(BaseModel):
    """One task card."""

    id: int
    name: str = Field(description="The task's name (slug), or empty.")
    subject: str
    status: str = Field(description="The stored status.")
    state: str = Field(description="running|ready|blocked|completed|failed|cancelled (derived).")
    marker: str = Field(description="The `team task list` marker: [ ] [>] [x] [!] [-].")
    owner: str
    kind: str
    attempts: int
    deps: list[int] = Field(description="Declared dependencies (blockedBy).")
    waiting: list[int] = Field(description="Dependencies not completed yet.")
    col: int = Field(description="Wave (layout.py).")
    row: int = Field(description="Order inside the wave.")
    started: float | None = Field(description="Unix time the current or last attempt began.")
    finished: float | None = Field(description="Unix time the task reached a final state.")
    cost: float | None = Field(description="Dollars of the attempt that ended it (agent tasks).")
    tokens: int = Field(description="Prompt + completion tokens of that attempt.")
    crit: bool = Field(description="On the critical path (remaining, or as run).")


class Progress(BaseModel):
    """The run at a glance."""

    total: int
    counts: dict[str, int] = Field(description="Tasks per stored status.")
    ready: int
    blocked: int
    done: int = Field(description="Completed tasks.")
    left: int = Field(description="Pending and running tasks.")
    first_start: float | None = Field(description="Earliest start of a task still in the store.")
    rate: float | None = Field(description="Completions per second over the last RATE_WINDOW seconds.")
    eta: float | None = Field(description="Seconds until the work left is done, roughly; None when unknown.")
    critical: list[int] = Field(description="The critical path, first task first.")
    critical_kind: str = Field(description="remaining | as run | none.")


class MemberView(BaseModel):
    """One roster row."""

    name: str
    role: str
    liveness: str = Field(description="working|idle|waiting|dead|shutdown (team/roster.py).")
    reason: str = Field(description="Why a member counts as dead.")
    task: int | None
    heartbeat_age: float | None
    tokens: int
    cost: float | None
    calls: int


class Spend(BaseModel):
    """Tokens and dollars so far, against the budget."""

    prompt_tokens: int
    completion_tokens: int
    calls: int
    cost: float | None = Field(description="Dollars; None when a call had no known price.")
    budget: float | None = Field(description="Dollars allowed (team board --budget), if given.")


class JobView(BaseModel):
    """One background job."""

    id: str
    command: str
    owner: str
    status: str = Field(description="running, orphaned (...), or the final status.")
    exit_code: int | None
    started: float
    finished: float | None
    task: int | None


class MessageView(BaseModel):
    """One inbox message."""

    id: str
    to: str
    sender: str
    type: str
    content: str
    ts: float


class ActivityView(BaseModel):
    """One line of the task event log."""

    ts: float
    task: int
    event: str
    actor: str
    before: str | None
    after: str | None
    note: str = Field(description="The event's reason or error, if any.")


class LeadView(BaseModel):
    """Whether a lead holds the root, and what it runs."""

    alive: bool
    pid: int | None = None
    plan: str | None = None
    mode: str | None = None


# ---------------------------------------------------------------------- builders
def task_state(task: Task, by_id: dict[int, Task]) -> str:
    if task.status == Status.in_progress:
        return "running"
    if task.status == Status.pending:
        return "blocked" if graph.open_blockers(task, by_id) else "ready"
    return str(task.status)


def critical(tasks: Sequence[Task]) -> tuple[list[int], str]:
    """The remaining critical path, else the path as run (see the module docstring)."""
    remaining = graph.critical_path(tasks).ids
    if remaining:
        return remaining, "remaining"
    by_id = graph.index(tasks)
    done = [t for t in tasks if t.status == Status.completed and t.finished_at is not None]
    cur = max(done, key=lambda t: (t.finished_at or 0.0, -t.id), default=None)
    path: list[int] = []
    while cur is not None:
        path.append(cur.id)
        prev = [by_id[d] for d in cur.blockedBy
                if d in by_id and by_id[d].status == Status.completed and by_id[d].finished_at is not None]
        cur = max(prev, key=lambda t: (t.finished_at or 0.0, -t.id), default=None)
    path.reverse()
    return path, ("as run" if path else "none")


def task_views(tasks: Sequence[Task], places: dict[int, Place], crit: Iterable[int], show: Shown) -> list[TaskView]:
    by_id = graph.index(tasks)
    on_path = set(crit)
    out = []
    for t in sorted(tasks, key=lambda t: t.id):
        u = usage.as_usage(t.usage)
        place = places.get(t.id, Place(0, 0))
        out.append(TaskView(
            id=t.id, name=show.line(t.name), subject=show.line(t.subject), status=t.status.value,
            state=task_state(t, by_id), marker=MARKERS[t.status], owner=show.line(t.owner), kind=t.kind,
            attempts=t.attempts, deps=list(t.blockedBy), waiting=graph.open_blockers(t, by_id),
            col=place.col, row=place.row, started=t.started_at, finished=t.finished_at,
            cost=u.cost if u else None, tokens=(u.prompt_tokens + u.completion_tokens) if u else 0,
            crit=t.id in on_path))
    return out


def progress(tasks: Sequence[Task], now: float, crit: tuple[list[int], str]) -> Progress:
    by_id = graph.index(tasks)
    counts = {s.value: 0 for s in Status}
    ready = blocked = 0
    for t in tasks:
        counts[t.status.value] += 1
        if t.status == Status.pending:
            if graph.open_blockers(t, by_id):
                blocked += 1
            else:
                ready += 1
    done = counts[Status.completed.value]
    left = counts[Status.pending.value] + counts[Status.in_progress.value]
    starts = [t.started_at for t in tasks if t.started_at is not None]
    finished = [t for t in tasks if t.status == Status.completed and t.finished_at is not None]
    recent = sorted(t.finished_at for t in finished if t.finished_at is not None and t.finished_at >= now - RATE_WINDOW)
    rate = eta = None
    if len(recent) >= 2 and now > recent[0]:
        rate = len(recent) / max(now - recent[0], 1e-3)
    if rate and left:
        took = [t.finished_at - t.started_at for t in finished
                if t.finished_at is not None and t.started_at is not None]
        mean = sum(took) / len(took) if took else 0.0
        path_left = len(crit[0]) if crit[1] == "remaining" else 0
        eta = max(left / rate, path_left * mean)
    return Progress(total=len(tasks), counts=counts, ready=ready, blocked=blocked, done=done, left=left,
                    first_start=min(starts) if starts else None, rate=rate, eta=eta,
                    critical=crit[0], critical_kind=crit[1])


def member_views(states: Iterable[MemberState], usages: Mapping[str, Usage], show: Shown) -> list[MemberView]:
    """The roster's rows, each with what the ledger of spend says the member spent (llm/ledger.py)."""
    out = []
    for s in states:
        u = usages.get(s.name)
        out.append(MemberView(
            name=show.line(s.name), role=show.line(s.role), liveness=s.liveness, reason=show.line(s.reason),
            task=s.task, heartbeat_age=s.heartbeat_age,
            tokens=(u.prompt_tokens + u.completion_tokens) if u else 0, cost=u.cost if u else None,
            calls=u.calls if u else 0))
    return out


def spend(totals: Totals, budget: float | None) -> Spend:
    """Everything spent under the root, from the ledger of spend (llm/ledger.py)."""
    t = totals.total
    return Spend(prompt_tokens=t.prompt_tokens, completion_tokens=t.completion_tokens, calls=t.calls, cost=t.cost,
                 budget=budget)


def job_view(j: JobRecord, show: Shown) -> JobView:
    return JobView(id=show.line(j.id), command=show.line(j.command), owner=show.line(j.owner),
                   status=shown_status(j), exit_code=j.exit_code, started=j.started_at,
                   finished=j.finished_at, task=j.task)


def message_view(to: str, m: Message, show: Shown) -> MessageView:
    return MessageView(id=show.line(m.id), to=show.line(to), sender=show.line(m.sender), type=show.line(m.type),
                       content=show.block(m.content), ts=m.timestamp)


def activity_view(e: dict[str, Any], show: Shown) -> ActivityView | None:
    """One event line as shown; None for a line that is not a task event."""
    task, ts = e.get("task"), e.get("ts")
    if not isinstance(task, int) or not isinstance(ts, int | float):
        return None
    note = e.get("reason") or e.get("error") or ""
    before, after = e.get("from"), e.get("to")
    return ActivityView(ts=float(ts), task=task, event=show.line(str(e.get("event", ""))),
                        actor=show.line(str(e.get("actor") or "")),
                        before=show.line(before) if isinstance(before, str) else None,
                        after=show.line(after) if isinstance(after, str) else None,
                        note=show.block(str(note), 600))
