"""One task opened on the board: its record, history, blocked chain, log tail and transcript summary.

Built on request (``GET /api/task/ID``) from what the feed already holds
(the tasks and job records) plus three reads: the event log (the task's
history), the task's log file and, for an agent task, its teammate's
transcript. Text is made safe as everywhere on the board (views.Shown).

* ``chain`` is the text ``team task blocked ID`` prints: the same functions
  (``tasks.graph.blocked_chains``, ``tasks.render.render_chains`` or
  ``render.not_blocked``) on the same tasks.
* The log is the task's ``log`` (set when an attempt ended), else the log of
  its latest job (a shell task still running). A path that resolves outside
  the state root is not read: a task file is data, not a capability.
* The transcript summary covers the teammate's conversation from its last
  ``task`` line for this task (agent/transcript.py) to the next one: how many
  messages, which tools it called how often, and its last words.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..agent.transcript import transcript_path
from ..core.budget import money
from ..core.models import TERMINAL, Status, Task
from ..jobs.records import JobRecord, read_tail
from ..tasks import graph, render
from ..tasks.store import TaskStore
from .views import ActivityView, Shown, activity_view, task_state

LOG_BYTES = 8192
"""Head + tail of a log shown, in bytes."""
HISTORY = 20
"""Most recent events of the task shown."""


class Ref(BaseModel):
    """A task named from another one."""

    id: int
    subject: str
    status: str = Field(description="The stored status, or 'missing'.")


class LogTail(BaseModel):
    """The head and tail of a task's output."""

    path: str = Field(description="Relative to the state root.")
    text: str
    live: bool = Field(description="The job is still running.")


class TranscriptSummary(BaseModel):
    """What the teammate did for this task, from its transcript."""

    member: str
    messages: int
    tools: dict[str, int] = Field(description="Tool name -> calls.")
    last: str = Field(description="The last thing the agent said (text).")


class TaskDetails(BaseModel):
    """Everything the side panel shows about one task."""

    id: int
    title: str
    state: str
    rows: list[tuple[str, str]] = Field(description="Field, value: as `team task show` lists them.")
    description: str
    blocked_by: list[Ref]
    blocks: list[Ref]
    chain: str = Field(description="The text of `team task blocked ID`.")
    history: list[ActivityView]
    log: LogTail | None
    transcript: TranscriptSummary | None
    can_retry: bool
    can_cancel: bool


def chain_text(tasks: Sequence[Task], tid: int, now: float) -> str:
    """What ``team task blocked TID`` prints for this task."""
    chains = graph.blocked_chains(tasks, tid, now=now)
    if chains:
        return render.render_chains(chains, tasks)
    return render.not_blocked(next(t for t in tasks if t.id == tid))


def _ref(tid: int, by_id: dict[int, Task], show: Shown) -> Ref:
    t = by_id.get(tid)
    return Ref(id=tid, subject=show.line(t.subject) if t else "", status=t.status.value if t else "missing")


def _rows(task: Task, by_id: dict[int, Task], now: float, show: Shown) -> list[tuple[str, str]]:
    state = task.status.value
    waiting = graph.open_blockers(task, by_id)
    if task.status == Status.pending:
        state += f" (blocked by {waiting})" if waiting else " (ready)"
    rows = [("status", state), ("owner", show.line(task.owner) or "-")]
    if task.name:
        rows.insert(0, ("name", show.line(task.name)))
    for key in ("kind", "command", "prompt", "assignee", "role", "estimate", "attempts", "worktree",
                "result", "error", "log"):
        value = getattr(task, key)
        if value not in (None, "", 0) and not (key == "kind" and value == "manual"):
            rows.append((key, show.block(str(value), 2000)))
    if task.started_at is not None:
        end = task.finished_at if task.finished_at is not None else now
        rows.append(("duration", f"{max(0.0, end - task.started_at):.2f}s" + ("" if task.finished_at else " so far")))
    if task.lease_expires is not None and task.status == Status.in_progress:
        left = task.lease_expires - now
        rows.append(("lease", f"{left:.0f}s left" if left >= 0 else f"expired {-left:.0f}s ago"))
    cost = task.usage.get("cost") if task.usage else None
    if isinstance(cost, int | float):
        rows.append(("cost", money(cost)))
    return rows


def _inside(root: Path, rel: str) -> Path | None:
    path = (root / rel).resolve()
    return path if path.is_relative_to(root.resolve()) else None


def _log(root: Path, task: Task, jobs: Sequence[JobRecord], show: Shown) -> LogTail | None:
    mine = [j for j in jobs if j.task == task.id]
    latest = max(mine, key=lambda j: (j.started_at, j.id), default=None)
    live = latest is not None and latest.status == "running" and task.status == Status.in_progress
    rel = latest.log if live and latest is not None else (task.log or (latest.log if latest else None))
    if not rel:
        return None
    path = _inside(root, rel)
    if path is None:
        return LogTail(path=show.line(rel), text="(not shown: the path is outside the state root)", live=False)
    text = read_tail(path, LOG_BYTES, show.secrets)
    return LogTail(path=show.line(rel), text=show.block(text, LOG_BYTES * 2) or "(empty)", live=live)


def _transcript(root: Path, task: Task, show: Shown) -> TranscriptSummary | None:
    for member in dict.fromkeys(n for n in (task.owner, task.assignee) if n):
        path = transcript_path(root, member)
        if not _inside(root, str(path.relative_to(root))):
            continue
        try:
            lines = path.read_bytes().splitlines()
        except (FileNotFoundError, ValueError):
            continue
        records: list[dict[str, Any]] = []
        for raw in lines:
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                records.append(rec)
        starts = [i for i, r in enumerate(records) if r.get("kind") == "task" and r.get("task") == task.id]
        if not starts:
            continue
        segment = []
        for r in records[starts[-1] + 1:]:
            if r.get("kind") == "task":
                break
            if r.get("kind") == "message" and isinstance(r.get("msg"), dict):
                segment.append(r["msg"])
        tools: Counter[str] = Counter()
        last = ""
        for m in segment:
            for call in m.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                    tools[show.line(fn["name"], 80)] += 1
            if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"].strip():
                last = m["content"]
        return TranscriptSummary(member=show.line(member), messages=len(segment), tools=dict(tools),
                                 last=show.block(last, 2000))
    return None


def task_details(root: Path, tasks: Sequence[Task], jobs: Sequence[JobRecord], tid: int, now: float,
                 show: Shown) -> TaskDetails | None:
    """The side panel for task ``tid``; None when the board knows no such task."""
    by_id = graph.index(tasks)
    task = by_id.get(tid)
    if task is None:
        return None
    events, _ = TaskStore(root).events(0)
    history = [a for a in (activity_view(e, show) for e in events if e.get("task") == tid) if a is not None]
    return TaskDetails(
        id=tid, title=f"#{tid}: {show.line(task.subject)}", state=task_state(task, by_id),
        rows=_rows(task, by_id, now, show), description=show.block(task.description),
        blocked_by=[_ref(d, by_id, show) for d in task.blockedBy],
        blocks=[_ref(d, by_id, show) for d in graph.dependents(tasks).get(tid, [])],
        chain=show.block(chain_text(tasks, tid, now), 20000), history=history[-HISTORY:],
        log=_log(root, task, jobs, show), transcript=_transcript(root, task, show),
        can_retry=task.status in (Status.failed, Status.cancelled),
        can_cancel=task.status not in TERMINAL)
