"""The board's picture of a state root, and what changed in it: snapshots and deltas.

``Feed`` holds the last thing sent to pages (views.py records) and a
version number. Each ``tick`` asks the watcher what changed on disk
(watch.py), rebuilds only what depends on it, and returns a delta holding
what differs from the last version, or None::

    snapshot  {"version", "now", "root", "actions", "lead", "tasks": [...],
               "progress", "members", "spend", "jobs": [...], "messages": [...],
               "activity": [...], "unreadable": {...}}
    delta     {"version", "now", and only the keys that changed: "tasks"
               (changed task views), "removed" (ids), "messages"/"activity"
               (new items, oldest first), and "lead", "progress", "members",
               "spend", "jobs", "unreadable" replaced whole}

A page applies deltas in version order to the snapshot it started from
(hub.py hands a new subscriber a snapshot and every later delta). Task views
are rebuilt when any task changed (the critical path and the ready/blocked
states of dependents can move with one completion): O(tasks + edges), a few
milliseconds at 1,000 tasks; the layout only when the structure changed.

Thread safety: one thread calls ``tick``; any thread may call ``snapshot``,
``tasks`` and ``jobs`` (they take the same lock).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.models import Member, Task
from ..core.redact import Secrets
from ..jobs.records import JobRecord
from ..llm.ledger import Ledger, Totals
from ..team.roster import MemberState
from . import views
from .layout import Place, layout, structure
from .watch import Changes, Lead, RootWatcher

KEEP_MESSAGES = 200
KEEP_ACTIVITY = 300
KEEP_FINISHED_JOBS = 40
"""Finished jobs shown (running jobs are always shown)."""


def _dump(models: Any) -> Any:
    if isinstance(models, list):
        return [m.model_dump() for m in models]
    return models.model_dump()


class Feed:
    """Snapshots and deltas of one state root (see the module docstring)."""

    def __init__(self, root: Path, *, secrets: Secrets | None = None, budget: float | None = None,
                 actions: bool = False, watcher: RootWatcher | None = None,
                 clock: Callable[[], float] = time.time):
        self.root = Path(root)
        self.show = views.Shown(Secrets.from_environ() if secrets is None else secrets)
        self.budget, self.actions, self.clock = budget, actions, clock
        self.watcher = watcher or RootWatcher(self.root)
        self.lock = threading.Lock()
        self.version = 0
        self._tasks: dict[int, Task] = {}
        self._structure: tuple[tuple[int, tuple[int, ...]], ...] = ()
        self._places: dict[int, Place] = {}
        self._critical: tuple[list[int], str] = ([], "none")
        self._views: dict[int, views.TaskView] = {}
        self._progress: views.Progress | None = None
        self._members: list[Member] = []
        self._member_views: list[views.MemberView] = []
        self._spend: views.Spend | None = None
        self.ledger = Ledger(self.root)
        self._totals = Totals()
        self._states: list[MemberState] = []
        self._lead = views.LeadView(alive=False)
        self._jobs: dict[str, JobRecord] = {}
        self._job_views: list[views.JobView] = []
        self._messages: deque[views.MessageView] = deque(maxlen=KEEP_MESSAGES)
        self._activity: deque[views.ActivityView] = deque(maxlen=KEEP_ACTIVITY)
        self._unreadable: dict[str, str] = {}

    # ------------------------------------------------------------------ reads for the app
    def tasks(self) -> list[Task]:
        with self.lock:
            return list(self._tasks.values())

    def jobs(self) -> list[JobRecord]:
        with self.lock:
            return sorted(self._jobs.values(), key=lambda j: (j.started_at, j.id))

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "version": self.version, "now": self.clock(), "root": self.show.line(str(self.root)),
                "actions": self.actions, "lead": _dump(self._lead),
                "tasks": [v.model_dump() for v in self._views.values()],
                "progress": _dump(self._progress) if self._progress else None,
                "members": _dump(self._member_views), "spend": _dump(self._spend) if self._spend else None,
                "jobs": _dump(self._job_views), "messages": _dump(list(self._messages)),
                "activity": _dump(list(self._activity)), "unreadable": dict(self._unreadable),
            }

    # ------------------------------------------------------------------ the tick
    def tick(self) -> dict[str, Any] | None:
        """Look at the disk once; the delta since the last version, or None when nothing changed."""
        ch = self.watcher.poll()
        if not ch:
            return None
        with self.lock:
            delta = self._apply(ch)
            if not delta:
                return None
            self.version += 1
            return {"version": self.version, "now": self.clock(), **delta}

    def _apply(self, ch: Changes) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        now = self.clock()
        tasks_changed = bool(ch.tasks or ch.removed)
        for tid in ch.removed:
            self._tasks.pop(tid, None)
        self._tasks.update(ch.tasks)
        if ch.unreadable is not None:
            self._unreadable = {f"task_{tid}.json": self.show.line(why) for tid, why in ch.unreadable.items()}
            delta["unreadable"] = dict(self._unreadable)
        if tasks_changed:
            delta.update(self._rebuild_tasks(sorted(ch.removed)))
        if tasks_changed or ch.slow:
            prog = views.progress(list(self._tasks.values()), now, self._critical)
            if prog != self._progress:
                self._progress = prog
                delta["progress"] = prog.model_dump()
        if ch.members is not None:
            self._members = ch.members
        if ch.spend:
            self._totals = self.ledger.totals()  # reads only the lines appended since the last time
        if ch.states is not None:
            self._states = ch.states
        if ch.states is not None or ch.spend:
            mv = views.member_views(self._states, self._totals.members, self.show)
            if mv != self._member_views:
                self._member_views = mv
                delta["members"] = _dump(mv)
        if ch.spend or self._spend is None:
            sp = views.spend(self._totals, self.budget)
            if sp != self._spend:
                self._spend = sp
                delta["spend"] = sp.model_dump()
        if ch.lead_changed:
            self._lead = self._lead_view(ch.lead)
            delta["lead"] = self._lead.model_dump()
        if ch.jobs or ch.jobs_removed or ch.slow:
            for job_id in ch.jobs_removed:
                self._jobs.pop(job_id, None)
            self._jobs.update(ch.jobs)
            jv = self._job_list()
            if jv != self._job_views:
                self._job_views = jv
                delta["jobs"] = _dump(jv)
        if ch.messages:
            new = [views.message_view(to, m, self.show) for to, m in sorted(ch.messages, key=lambda x: x[1].timestamp)]
            self._messages.extend(new)
            delta["messages"] = _dump(new[-KEEP_MESSAGES:])
        if ch.events:
            acts = [a for a in (views.activity_view(e, self.show) for e in ch.events) if a is not None]
            if acts:
                self._activity.extend(acts)
                delta["activity"] = _dump(acts[-KEEP_ACTIVITY:])
        return delta

    def _rebuild_tasks(self, removed: list[int]) -> dict[str, Any]:
        tasks = list(self._tasks.values())
        shape = structure(tasks)
        if shape != self._structure:
            self._structure, self._places = shape, layout(tasks)
        self._critical = views.critical(tasks)
        fresh = {v.id: v for v in views.task_views(tasks, self._places, self._critical[0], self.show)}
        changed = [v.model_dump() for tid, v in fresh.items() if self._views.get(tid) != v]
        gone = [tid for tid in self._views if tid not in fresh]
        self._views = fresh
        out: dict[str, Any] = {}
        if changed:
            out["tasks"] = changed
        if gone or removed:
            out["removed"] = sorted(set(gone) | set(removed))
        return out

    def _job_list(self) -> list[views.JobView]:
        jobs = sorted(self._jobs.values(), key=lambda j: (j.started_at, j.id))
        running = [j for j in jobs if j.status == "running"]
        finished = [j for j in jobs if j.status != "running"][-KEEP_FINISHED_JOBS:]
        return [views.job_view(j, self.show) for j in sorted(running + finished, key=lambda j: (j.started_at, j.id))]


    def _lead_view(self, lead: Lead | None) -> views.LeadView:
        if lead is None:
            return views.LeadView(alive=False)
        plan, mode = lead.info.get("plan"), lead.info.get("mode")
        return views.LeadView(alive=True, pid=lead.pid, plan=self.show.line(plan) if isinstance(plan, str) else None,
                              mode=self.show.line(mode) if isinstance(mode, str) else None)
