"""The lead's side of agent tasks on Ray: the one service teammates on other nodes reach the store through.

``LeadService`` runs as a Ray actor pinned to the lead's own node
(``NodeAffinitySchedulingStrategy(soft=False)``, no CPU; ray_agents.py makes it),
so it works on the lead's files: it opens the lead's ``TaskStore``, ``Bus`` and
roster (``Team``) on the state root, as a CLI command does during a run (the
file store's locks make a second process on the lead's machine safe), and
nothing else ever writes ``.tasks/`` or ``.team/``. A teammate on a node holds
typed proxies of them (ray_teammate.py: ``RemoteStore``, ``RemoteBus``,
``RemoteRoster``, ``RemoteClaims``) implementing the same Protocols as the local
objects (tools/services.py, runtime/teammate.py); each proxy method is one
``call(target, method, args, kwargs)`` here, which runs the real object's
method: the rules (compare-and-set claims, epochs, dependency checks, inbox
cursors) have one implementation, the store's and the bus's.

Only the methods in ``ALLOWED`` can be called. A ``TeamError`` raised by the
real object comes back as ``("err", its type name, its message)`` and is raised
again, as that type, on the node (a tool then shows the model the usual one-line
error); anything else is our bug and travels as Ray's error.

An inbox batch (``Bus.fetch``) holds the inbox's consumer lock until it is
acknowledged or released: the service keeps it under an id the node's batch
names. Claims teammates make with ``claim_task`` are kept alive here
(``ClaimLedger``: their leases renewed every ``RENEW_EVERY`` seconds) and
released when the run ends (``close``), as the local runtime does.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

from ..core.errors import TeamError
from ..core.redact import Secrets
from ..runtime.claims import ClaimLedger
from ..tasks.store import TaskStore
from ..team.inbox import Bus, InboxBatch
from ..team.roster import Team

ALLOWED: dict[str, frozenset[str]] = {
    "store": frozenset({"read", "resolve", "all", "create", "update", "claim", "hand_over"}),
    "bus": frozenset({"send", "broadcast", "peek", "wait_unread"}),
    "roster": frozenset({"members", "update"}),
}
"""What a remote teammate may call: the Protocols' methods (TaskStorage, HandOver, MessageBus,
TeammateBus, Roster); ``fetch``/``ack``/``release`` and ``claimed`` are the service's own."""
RENEW_EVERY = 2.0
"""Seconds between renewals of the leases of claims remote teammates made."""

Reply = tuple[str, Any] | tuple[str, str, str]


class LeadService:
    """See the module docstring. Thread-safe: the actor serves calls concurrently (``max_concurrency``)."""

    def __init__(self, root: str, secrets: Secrets, lease: float):
        self.root = Path(root)
        self.store = TaskStore(self.root, secrets=secrets)
        self.team = Team(self.root)
        self.bus = Bus(self.root, team=self.team, poll_interval=0.01, secrets=secrets)
        self.claims = ClaimLedger(self.store, lease=lease)
        self._targets: dict[str, Any] = {"store": self.store, "bus": self.bus, "roster": self.team}
        self._batches: dict[int, InboxBatch] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name="team-lead-service-renew", daemon=True)
        self._renewer.start()

    def ready(self) -> str:
        """The node this service runs on (the lead's: checked by the executor)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def call(self, target: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Reply:
        if method not in ALLOWED.get(target, frozenset()):
            return ("err", "UserError", f"the lead's service has no {target}.{method}")
        try:
            return ("ok", getattr(self._targets[target], method)(*args, **kwargs))
        except TeamError as e:
            return ("err", type(e).__name__, str(e))

    # -- inbox batches: the consumer lock stays here until the node acks or releases ------------
    def fetch(self, name: str, seen: list[str], limit: int | None) -> Reply:
        try:
            batch = self.bus.fetch(name, seen=set(seen), limit=limit)
        except TeamError as e:
            return ("err", type(e).__name__, str(e))
        if not batch.messages:  # nothing to acknowledge later: give the lock back now
            batch.ack()
            return ("ok", (0, []))
        with self._lock:
            bid = next(self._ids)
            self._batches[bid] = batch
        return ("ok", (bid, batch.messages))

    def settle(self, batch_id: int, ack: bool) -> Reply:
        with self._lock:
            batch = self._batches.pop(batch_id, None)
        if batch is None:
            return ("err", "UserError", f"inbox batch {batch_id} was already acknowledged or released")
        try:
            batch.ack() if ack else batch.release()
        except TeamError as e:
            return ("err", type(e).__name__, str(e))
        return ("ok", None)

    # -- claims made by claim_task on a node ----------------------------------------------------
    def claimed(self, task_id: int, epoch: int, owner: str) -> None:
        task = self.store.read(task_id)
        if task.epoch == epoch and task.owner == owner:
            self.claims.claimed(task)

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY):
            self.claims.renew()

    def close(self, why: str) -> list[Any]:
        """Release what is still held: unsettled inbox batches, and the claims teammates made and did not
        finish (back to pending; returned so the lead can say so)."""
        self._stop.set()
        with self._lock:
            batches, self._batches = list(self._batches.values()), {}
        for b in batches:
            b.release()
        return self.claims.release_all(why)
