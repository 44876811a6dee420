"""The attempt lifecycle of a task: claim, lease, hand over, finish, release.

``Attempts`` works on the store's files (``files.TaskFiles``: the lock,
reads, events and batch writes) and nothing else; ``store.TaskStore``
holds one and exposes its operations.

States and transitions::

    pending ──claim──► in_progress ──finish──► completed | failed | cancelled
       ▲                   │
       └──release──────────┤  (a retry: owner cleared, attempt kept)
       └──reclaim_expired──┘  (the lease ran out)

Counters: ``attempts`` counts claims, however the attempt ended; the run
scheduler keeps ``failures`` (attempts that failed, against ``retries``);
``interrupted`` counts attempts stopped from outside -- a release with
``interrupted=True`` (Ctrl-C, a dead lead), ``release_unfiled``,
``reclaim_expired`` -- which use no retry.

Rules:

* Every change runs under the one store lock. ``claim`` is a
  compare-and-set: it succeeds only while the task is pending, unowned and
  every dependency is completed; it starts a new attempt (``attempts + 1``)
  with a new ``epoch``.
* ``finish``/``renew``/``hand_over``/``release`` carry the claim's
  ``epoch`` and are refused when it is stale (the lease expired and the task
  was reclaimed by someone else).
* ``commit`` is the run scheduler's batch: it ends attempts and claims
  newly ready tasks in one locked, durable write (``TaskFiles.write``).
* Status timestamps are set in one place, ``apply_status``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from ..core.errors import ConflictError, UnknownRef, UserError
from ..core.models import TERMINAL, Status, Task
from .files import TaskFiles

Finish = tuple[int, int, "str | Status", dict[str, Any]]
"""One attempt to end in ``commit``: ``(task id, epoch, status, fields to set)``."""


def parse_status(value: str | Status) -> Status:
    try:
        return Status(value)
    except ValueError:
        allowed = ", ".join(s.value for s in Status)
        raise UserError(f"invalid status {value!r}: use one of {allowed}") from None


def apply_status(task: Task, status: Status, now: float) -> None:
    """Move ``task`` to ``status`` with its timestamps and lease (the one place that does)."""
    if status == Status.in_progress and task.status != Status.in_progress:
        task.started_at = now
    if status in TERMINAL:
        task.finished_at = now
    else:
        task.finished_at = None
    if status != Status.in_progress:
        task.lease_expires = None
    task.status = status


class Attempts:
    """Claims, leases and the end of attempts (see the module docstring)."""

    def __init__(self, files: TaskFiles):
        self.files = files

    # ------------------------------------------------------------------ claim / lease
    def claim(self, ref: int | str, owner: str, *, lease: float | None = None, actor: str | None = None) -> Task:
        """Compare-and-set claim: pending, unowned, all dependencies completed.

        Raises ``ConflictError`` saying why when the task is not claimable.
        """
        with self.files.locked_on(ref):
            task = self.files.get(ref)
            self._check_claimable(task, owner=owner)
            return self._claim_locked(task, owner, lease, actor or owner)

    def try_claim(self, ref: int | str, owner: str, *, lease: float | None = None) -> Task | None:
        try:
            return self.claim(ref, owner, lease=lease)
        except ConflictError:
            return None

    def claim_many(self, ids: Iterable[int], owner: str, *, lease: float | None = None) -> list[Task]:
        """Claim every claimable task among ``ids`` under one lock; skip the others."""
        won = []
        with self.files.locked():
            for tid in ids:
                try:
                    task = self.files.read(tid)
                    self._check_claimable(task, owner=owner)
                except (ConflictError, UnknownRef):
                    continue
                won.append(self._claim_locked(task, owner, lease, owner))
        return won

    def _check_claimable(self, task: Task, overlay: dict[int, Task] | None = None, owner: str | None = None) -> None:
        """Pending, unowned (or already assigned to ``owner``), every dependency completed."""
        if task.status != Status.pending:
            raise ConflictError(f"task #{task.id} is {task.status.value}, not pending")
        if task.owner and task.owner != owner:
            raise ConflictError(f"task #{task.id} is already owned by {task.owner}")
        waiting = []
        for dep in task.blockedBy:
            decided = (overlay or {}).get(dep)
            try:  # only the status counts: no parse of a file this process knows (files.status_of)
                if (decided.status if decided is not None else self.files.status_of(dep)) != Status.completed:
                    waiting.append(dep)
            except UnknownRef:
                waiting.append(dep)
        if waiting:
            raise ConflictError(f"task #{task.id} is blocked by {waiting}")

    def _mark_claimed(self, task: Task, owner: str, lease: float | None) -> Status:
        """The claim itself (a new attempt and epoch); returns the status before."""
        before = task.status
        task.owner = owner
        task.epoch += 1
        task.attempts += 1
        apply_status(task, Status.in_progress, self.files.clock())
        task.lease_expires = (self.files.clock() + lease) if lease else None
        task.error = None
        return before

    def _claim_locked(self, task: Task, owner: str, lease: float | None, actor: str) -> Task:
        before = self._mark_claimed(task, owner, lease)
        self.files.save(task, "claimed", actor, before, owner=owner, epoch=task.epoch, attempt=task.attempts)
        return task

    def _check_epoch(self, task: Task, epoch: int) -> None:
        if task.status != Status.in_progress or task.epoch != epoch:
            raise ConflictError(
                f"task #{task.id} attempt {epoch} is stale (task is {task.status.value}, epoch {task.epoch})"
            )

    def renew(self, ref: int | str, epoch: int, lease: float) -> Task:
        with self.files.locked_on(ref):
            task = self.files.get(ref)
            self._check_epoch(task, epoch)
            task.lease_expires = self.files.clock() + lease
            self.files.write([task])
            return task

    def hand_over(self, ref: int | str, epoch: int, owner: str, *, actor: str | None = None,
                  **fields: Any) -> Task:
        """Pass a running attempt to ``owner`` (the lead claims, a teammate works), with ``fields`` set
        (an agent CLI's attempt: ``cli_member``, edits.py ``_reported``).

        Epoch-checked like ``finish``: the attempt, lease and epoch stay the
        same; only who holds it changes, so ``task blocked`` can say who runs it.
        """
        with self.files.locked_on(ref):
            task = self.files.get(ref)
            self._check_epoch(task, epoch)
            changed = {k: v for k, v in fields.items() if getattr(task, k) != v}
            if task.owner != owner or changed:
                previous, task.owner = task.owner, owner
                for key, value in changed.items():
                    setattr(task, key, value)
                self.files.save(task, "handed_over", actor or previous or owner, None, owner=owner,
                            previous_owner=previous, epoch=epoch)
            return task

    def renew_many(self, leases: dict[int, int], lease: float) -> list[int]:
        """Renew several leases (id -> epoch) under one lock; returns the ids renewed.

        A batch like ``commit``'s: with a group-commit pipeline (``team run``) it is queued for the
        writer, not written while the section holds the store, so a heartbeat renewing a thousand
        in-flight leases does not hold up the scheduler's next batch for the time of a thousand fsyncs
        (the store lock stays held until they are on disk, as for any queued batch)."""
        renewed: list[Task] = []
        with self.files.locked_for_commit():
            for tid, epoch in leases.items():
                try:
                    task = self.files.read(tid)
                    self._check_epoch(task, epoch)
                except (ConflictError, UnknownRef):
                    continue
                task.lease_expires = self.files.clock() + lease
                renewed.append(task)
            self.files.write(renewed)
        return [t.id for t in renewed]

    def finish(
        self,
        ref: int | str,
        epoch: int,
        status: str | Status,
        *,
        result: str | None = None,
        error: str | None = None,
        actor: str | None = None,
        **fields: Any,
    ) -> Task:
        """End an attempt (completed/failed/cancelled). Refused on a stale epoch."""
        new = parse_status(status)
        with self.files.locked_on(ref):
            task = self.files.get(ref)
            self._check_epoch(task, epoch)
            before = task.status
            if result is not None:
                task.result = result
            if error is not None:
                task.error = error
            for key, value in fields.items():
                setattr(task, key, value)
            apply_status(task, new, self.files.clock())
            self.files.save(task, "status", actor or task.owner, before, epoch=epoch, error=error)
            return task

    def release(self, ref: int | str, epoch: int, *, reason: str, actor: str | None = None,
                interrupted: bool = False, **fields: Any) -> Task:
        """Give an attempt back: the task becomes pending and unowned (a retry).

        ``interrupted``: the attempt was stopped from outside (a signal, a dead lead), not
        failed; it is counted in ``interrupted`` and uses no retry."""
        with self.files.locked_on(ref):
            task = self.files.get(ref)
            self._check_epoch(task, epoch)
            before = task.status
            task.owner = ""
            task.error = reason
            if interrupted:
                task.interrupted += 1
            for key, value in fields.items():
                setattr(task, key, value)
            apply_status(task, Status.pending, self.files.clock())
            self.files.save(task, "released", actor or "lead", before, reason=reason)
            return task

    def unfiled_claims(self, tasks: Iterable[Task]) -> dict[int, tuple[int, int]]:
        """Claims in the event log that never reached their task file: ``{id: (epoch, attempt)}``.

        ``commit(on_logged=...)`` logs a claim, starts its work, then writes
        the file; a lead killed in between leaves the task ``pending`` at an
        older epoch. Only ``pending`` tasks among ``tasks`` (as read from
        their files) are considered; a task id's history restarts at its
        ``created``/``deleted`` events, so a reused id never inherits a claim.
        """
        files = {t.id: t for t in tasks if t.status == Status.pending}
        if not files:
            return {}
        try:
            data = self.files.events_path.read_bytes()
        except FileNotFoundError:
            return {}
        logged: dict[int, tuple[int, int]] = {}
        kinds = (b'"event":"claimed"', b'"event":"created"', b'"event":"deleted"')
        for line in data.split(b"\n"):
            if not any(k in line for k in kinds):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line torn by a killed writer
            tid = event.get("task")
            if tid not in files:
                continue
            if event.get("event") == "claimed":
                logged[tid] = (int(event.get("epoch") or 0), int(event.get("attempt") or 0))
            else:
                logged.pop(tid, None)
        return {tid: claim for tid, claim in logged.items() if claim[0] > files[tid].epoch}

    def release_unfiled(self, task_id: int, epoch: int, attempt: int, *, reason: str, actor: str) -> Task | None:
        """Record a claim that ran but never reached its file: the attempt is counted, the task stays pending."""
        with self.files.locked():
            task = self.files.read(task_id)
            if task.status != Status.pending or task.epoch >= epoch:
                return None  # changed since: nothing to repair
            task.epoch = epoch
            task.attempts = max(task.attempts, attempt)
            task.interrupted += 1
            task.owner = ""
            task.error = reason
            self.files.save(task, "released", actor, Status.pending, reason=reason, epoch=epoch, attempt=attempt)
            return task

    def reclaim_expired(self, *, actor: str = "lead", owner_filter: Callable[[str], bool] | None = None) -> list[Task]:
        """Return every in-progress task whose lease expired to pending (attempt kept)."""
        now = self.files.clock()
        out = []
        with self.files.locked():
            for task in self.files.scan()[0]:  # an unreadable file must not stall recovery of the rest
                if task.status != Status.in_progress or task.lease_expires is None:
                    continue
                if task.lease_expires > now:
                    continue
                if owner_filter is not None and not owner_filter(task.owner):
                    continue
                before, prev_owner = task.status, task.owner
                task.owner = ""
                task.interrupted += 1  # its owner went away: not a failure of the task
                task.error = f"lease of {prev_owner or 'unknown'} expired (attempt {task.attempts})"
                apply_status(task, Status.pending, self.files.clock())
                self.files.save(task, "lease_expired", actor, before, previous_owner=prev_owner)
                out.append(task)
        return out

    def cancel(self, ref: int | str, reason: str, *, actor: str = "lead") -> Task:
        """Mark a task that can no longer run as cancelled, with the reason."""
        with self.files.locked_on(ref):
            task = self.files.get(ref)
            if task.status in TERMINAL:
                return task
            before = task.status
            task.error = reason
            apply_status(task, Status.cancelled, self.files.clock())
            self.files.save(task, "status", actor, before, reason=reason)
            return task

    # ------------------------------------------------------------------ batches (the run scheduler)
    def commit(
        self,
        finishes: Iterable[Finish] = (),
        claims: Iterable[int] = (),
        owner: str = "lead",
        *,
        lease: float | None = None,
        actor: str | None = None,
        on_logged: Callable[[list[Task]], None] | None = None,
    ) -> tuple[list[Task], list[Task]]:
        """End attempts and claim tasks in one locked, durable batch.

        ``on_logged(claimed)`` is called once the batch is decided (under the
        lock, every CAS done) and its ``claimed`` event lines are appended,
        before any task file of the batch is written: a caller may start the
        claimed work there, so a job's start does not wait for the batch's
        fsyncs. A SIGKILL after it leaves a claim that is in the event log
        but not in the task file; the next lead counts that attempt and logs
        its release (``unfiled_claims``, ``run.runner.materialise``), just as for
        a claim that reached the file. Completion lines are appended only
        after the files are renamed. ``on_logged`` must not block or take the
        store lock.

        ``finishes``: ``(id, epoch, status, fields)``; a stale epoch skips that
        item. ``claims``: ids claimed under the same rule as ``claim`` (a
        dependency finished earlier in this batch counts as completed); the
        unclaimable are skipped. Returns ``(finished, claimed)``. Cost: the
        files are fsynced in parallel, renamed, then the directory and the
        event log are synced once for the whole batch; with a pipeline attached
        the batch is queued for the group-commit writer instead, and is
        durable once ``flush`` (or the block) returns.
        """
        finished: list[Task] = []
        claimed: list[Task] = []
        records: list[dict[str, Any]] = []
        claims_logged: list[dict[str, Any]] = []
        with self.files.locked_for_commit():
            overlay: dict[int, Task] = {}
            for tid, epoch, status, fields in finishes:
                try:
                    task = self.files.read(tid)
                    self._check_epoch(task, epoch)
                except (ConflictError, UnknownRef):
                    continue
                before = task.status
                for key, value in fields.items():
                    setattr(task, key, value)
                apply_status(task, parse_status(status), self.files.clock())
                finished.append(task)
                overlay[tid] = task
                records.append(self.files.event_record(task, "status", actor or task.owner, before, epoch=epoch,
                                                  error=fields.get("error")))
            for tid in claims:
                try:
                    task = self.files.read(tid)
                    self._check_claimable(task, overlay, owner)
                except (ConflictError, UnknownRef):
                    continue
                before = self._mark_claimed(task, owner, lease)
                claimed.append(task)
                claims_logged.append(self.files.event_record(task, "claimed", actor or owner, before, owner=owner,
                                                        epoch=task.epoch, attempt=task.attempts))
            self.files.write(finished + claimed, records, claims_logged,
                              on_logged=(lambda: on_logged(claimed)) if on_logged else None,
                              defer=[t.id for t in claimed])
        return finished, claimed
