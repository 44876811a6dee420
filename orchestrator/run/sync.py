"""A synchronous, in-process executor: the scheduler's policy without processes (as dask's ``get_sync``).

``SyncExecutor(kind, decide)`` runs an attempt inside ``start`` by calling
``decide(task)``, a plain Python function that says how the attempt ends:
a status (``"completed"``, ``"failed"``, ``"timeout"``…), or a whole
``Outcome`` for anything more (an error text, fields, a stale epoch). The
outcome is handed to ``done`` before ``start`` returns. No thread, no fork,
no file of its own: with a non-durable ``TaskStore`` a whole plan's
priorities, retries, fail-fast, keep-going, cancellation downstream and
deadlock detection run in milliseconds, and ``started`` records what was
started in which order.

It is for tests and for debugging the scheduler; ``team run`` never builds it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.models import Task
from ..jobs.records import JobRecord
from .executor import DoneCallback, Outcome

Decide = Callable[[Task], "str | Outcome"]


class SyncExecutor:
    """Runs each attempt at once on the scheduler's thread (see the module docstring)."""

    inline_start = False  # outcomes come back from inside start(): never inside the store's commit

    def __init__(self, kind: str, decide: Decide):
        self.kind = kind
        self.decide = decide
        self.started: list[tuple[int, int]] = []  # (task id, attempt), in start order
        self.cancelled: list[int] = []
        self.closed = False

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.started.append((task.id, task.attempts))
        verdict = self.decide(task)
        if isinstance(verdict, Outcome):
            done(verdict)
            return
        error = None if verdict == "completed" else f"{verdict} (decided by the test)"
        done(Outcome(task.id, epoch, verdict, exit_code=0 if verdict == "completed" else 1, error=error))

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.start(task, epoch, done)

    def cancel(self, task_id: int) -> None:
        self.cancelled.append(task_id)

    def reap_orphans(self) -> list[JobRecord]:
        return []

    def close(self) -> None:
        self.closed = True
