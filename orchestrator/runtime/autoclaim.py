"""Autonomous claiming: idle teammates take ready, unowned work from the task graph.

Which tasks a teammate may claim by itself (``claimable``), decided here:

* ready: ``pending``, no owner, every ``blockedBy`` task ``completed``;
* not a plan task (``task.plan`` is empty): plan tasks belong to the
  ``team run`` scheduler, which claims and dispatches them itself. So the
  tasks teammates pick up are the ones created outside a plan: by the lead's
  or a teammate's ``task_create`` tool, or ``team task create``;
* not a shell task (``kind: shell`` has a command for the scheduler, not a
  prompt for an agent); ``manual`` and ``agent`` tasks qualify;
* meant for this teammate: ``assignee`` is its name, or no assignee and
  ``role`` is unset or its role.

The claim is the store's compare-and-set (``TaskStore.claim``, under the
store lock, with a lease the runtime renews): of several teammates racing
for one task exactly one wins; the others move to the next candidate. The
claim is a ``claimed`` event in ``.tasks/events.jsonl`` with the teammate as
actor and owner, which is how the lead sees it. The teammate runs the task
as it runs an assigned one and records the end itself with
``TaskStore.finish`` and the claim's epoch (refused if the lease expired and
someone else reclaimed it); an interrupted attempt is released to
``pending`` for someone else.

``AutoClaimer.claim`` returns the claimed task with the callback that records
its end (the runtime wraps both in an ``Assignment``); until then the claim
is in the runtime's ``ClaimLedger`` (claims.py), whose ``renew`` (the
runtime's heartbeat) extends its lease.

Scanning costs a directory read, so a teammate rescans only when the event
log changed since its last scan (every create/claim/finish appends to it)
or ``rescan_every`` seconds passed.

Lease recovery: a claim whose owner died (the lead process was killed)
expires without an event. On a rescan, at most once per ``rescan_every``
for the whole runtime, ``recover(tasks)`` (``TeamRuntime.reclaim_leases``)
returns such tasks to ``pending`` so they become candidates again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..core.errors import ConflictError, UnknownRef
from ..core.models import Status, Task
from ..tasks import graph
from ..tasks.store import TaskStore
from .claims import ClaimLedger

if TYPE_CHECKING:
    from ..agent.loop import LoopResult

log = logging.getLogger("orchestrator.teammates")


def claimable(task: Task, member: str, role: str) -> bool:
    """May ``member`` (a ``role``) claim ``task`` by itself? (readiness is checked apart)."""
    if task.status != Status.pending or task.owner or task.plan or task.kind == "shell":
        return False
    if task.assignee:
        return task.assignee == member
    return task.role in (None, "", role)


def candidates(tasks: Iterable[Task], member: str, role: str) -> list[Task]:
    """Ready tasks ``member`` may claim, oldest first."""
    return [t for t in graph.ready(list(tasks)) if claimable(t, member, role)]


class AutoClaimer:
    """One per team runtime; ``next_for(name, role)`` claims the next task or returns None."""

    def __init__(self, store: TaskStore, ledger: ClaimLedger, *, rescan_every: float = 5.0,
                 recover: Callable[[list[Task]], list[Task]] | None = None):
        """``ledger``: where its claims are kept (leases renewed, released when the runtime closes)."""
        self.store, self.ledger, self.rescan_every, self.recover = store, ledger, rescan_every, recover
        self.lease = ledger.lease
        self._recovered_at = float("-inf")
        self._seen: dict[str, tuple[tuple[int, int] | None, float]] = {}
        self._lock = threading.Lock()

    def _mark(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.store.events_path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size)

    def next_for(self, member: str, role: str) -> Task | None:
        mark, now = self._mark(), time.monotonic()
        with self._lock:
            last = self._seen.get(member)
            if last is not None and last[0] == mark and now - last[1] < self.rescan_every:
                return None
            self._seen[member] = (mark, now)
        if mark is None or not self.store.exists():
            return None
        tasks = self.store.all()
        if self.recover is not None and self._recovery_due(now) and self.recover(tasks):
            tasks = self.store.all()
        for task in candidates(tasks, member, role):
            try:
                return self.store.claim(task.id, member, lease=self.lease, actor=member)
            except (ConflictError, UnknownRef):
                continue  # another teammate (or the scheduler) got it first
        return None

    def _recovery_due(self, now: float) -> bool:
        with self._lock:
            if now - self._recovered_at < self.rescan_every:
                return False
            self._recovered_at = now
            return True

    def claim(self, member: str, role: str) -> tuple[Task, Callable[[LoopResult], None]] | None:
        """Claim the next task for ``member``: the task and the callback recording its end."""
        task = self.next_for(member, role)
        if task is None:
            return None
        self.ledger.claimed(task)
        return task, lambda r: self._finish(task, member, r)

    def _finish(self, task: Task, member: str, r: LoopResult) -> None:
        self.ledger.ended(task.id)
        try:
            if r.status == "interrupted":
                self.store.release(task.id, task.epoch, reason=f"{member}: {r.error}", actor=member)
                return
            ok = r.status == "completed"
            self.store.finish(task.id, task.epoch, "completed" if ok else "failed", result=r.result or None,
                              error=None if ok else (r.error or f"ended with {r.status}"), actor=member,
                              log=r.log, **({"usage": r.usage.model_dump()} if r.usage.calls else {}))
        except ConflictError as e:  # the lease expired and someone else has the task now
            log.warning("teammate %s: the end of task #%s was not recorded: %s", member, task.id, e)
