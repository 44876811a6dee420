"""Claims the runtime's teammates hold outside the scheduler, each with a lease, none left stranded.

A teammate can hold a task the ``team run`` scheduler did not hand it: one
it claimed with the ``claim_task`` tool (often a task it or a teammate
created during the run) or one the autoclaimer took for it. ``ClaimLedger``
keeps them:

* every such claim carries a lease (``claim_task`` claims with
  ``ToolContext.claim_lease``, which the runtime sets to its ``lease``);
* the runtime's heartbeat renews the leases of the claims in the ledger
  (``renew``); a claim whose task ended or moved on (finished through
  ``task_update``, reclaimed by someone else) drops out, because the store
  refuses to renew it;
* when the runtime closes (the run ends, ``team chat`` quits), every claim
  still in progress is released to ``pending`` (epoch-checked, with the
  reason in the event log) and returned, so the run can say so; nothing is
  left ``in_progress`` under a teammate that no longer runs. A lead killed
  before it could release them leaves leases that expire: the next runtime
  (``reclaim_leases``) or ``team doctor --fix`` returns those tasks.

It is the ``ClaimTracker`` service of the teammates' tools (tools/services.py).
"""

from __future__ import annotations

import threading

from ..core.errors import ConflictError, UnknownRef
from ..core.models import Status, Task
from ..tasks.store import TaskStore


class ClaimLedger:
    """See the module docstring. Thread-safe."""

    def __init__(self, store: TaskStore, *, lease: float):
        self.store, self.lease = store, lease
        self._held: dict[int, tuple[int, str]] = {}  # task id -> (epoch, owner)
        self._lock = threading.Lock()

    def claimed(self, task: Task) -> None:
        """Keep ``task``'s claim (just made, with a lease) until it ends or the runtime closes."""
        with self._lock:
            self._held[task.id] = (task.epoch, task.owner)

    def ended(self, task_id: int) -> None:
        with self._lock:
            self._held.pop(task_id, None)

    def held(self) -> dict[int, tuple[int, str]]:
        with self._lock:
            return dict(self._held)

    def renew(self) -> None:
        """Extend every held claim's lease; forget the ones the store no longer gives us."""
        held = self.held()
        if not held:
            return
        renewed = set(self.store.renew_many({tid: epoch for tid, (epoch, _) in held.items()}, self.lease))
        with self._lock:
            for tid in set(held) - renewed:
                if self._held.get(tid) == held[tid]:
                    del self._held[tid]

    def release_all(self, why: str) -> list[Task]:
        """Release every claim still in progress (``why`` goes into the event log); those released."""
        with self._lock:
            held, self._held = dict(self._held), {}
        released = []
        for tid, (epoch, owner) in sorted(held.items()):
            try:
                task = self.store.read(tid)
                if task.status != Status.in_progress or task.epoch != epoch:
                    continue  # finished, or someone else's attempt now
                released.append(self.store.release(tid, epoch, reason=f"{owner} {why}", actor=owner))
            except (ConflictError, UnknownRef):
                continue
        return released
