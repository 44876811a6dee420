"""The durable task store: ``<root>/.tasks/``, one class for callers.

``TaskStore`` puts together three collaborators, each with one concept:

* ``files`` (``files.TaskFiles``): the directory's layout, the store lock,
  reads and refs, the event log, the name index and id counter, durable
  batch writes (and the group-commit pipeline of a run, pipeline.py);
* ``edits`` (``edits.TaskEdits``): ``create``/``create_many``/``update``:
  ids, unique names, dependency edges checked for unknown refs and cycles;
* ``attempts`` (``attempts.Attempts``): ``claim``/``renew``/``hand_over``/
  ``finish``/``release``/``reclaim_expired``/``cancel`` and the run
  scheduler's ``commit`` batch, all epoch-checked.

The methods below are that API in one place (each says which collaborator
does the work); the collaborators use only ``TaskFiles``' public methods.

Rules:

* Every write is atomic (temp + fsync + rename + dir fsync), so a reader
  never sees a torn file and a returned call is durable.
* Every read-modify-write runs under the one store lock (not reentrant).
* Readiness is derived: completing a task rewrites no other file.
* Caches (``.next_id``, ``names.jsonl``) are never trusted alone (files.py).

Hooks (core/hooks.py): ``observer``, when set (``team run`` sets the run's
hook dispatcher), is told ``task_created``, ``task_claimed`` and
``task_failed`` after the write returned, from the writing thread; it must
not block (the dispatcher queues). Completion is not observed here: a
``task_completed`` hook may veto, so the layer that decides a completion
asks the hooks before it writes (runtime/teammate.py, run/hooked.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.models import Status, Task
from ..core.redact import Secrets
from .attempts import Attempts, Finish
from .edits import TaskEdits
from .files import Clock, TaskFiles

if TYPE_CHECKING:  # the hooks' pydantic models cost a `task create` ~10 ms to import
    from ..core.hooks import TaskObserver


class TaskStore:
    """All access to ``.tasks/``. Safe across threads and processes."""

    def __init__(self, root: Path | str, *, clock: Clock = time.time, durable: bool = True,
                 secrets: Secrets | None = None):
        """``secrets``: never written to a task file or the event log (default: the
        credentials in this process's environment, core/redact.py)."""
        self.files = TaskFiles(root, clock=clock, durable=durable, secrets=secrets)
        self.edits = TaskEdits(self.files)
        self.attempts = Attempts(self.files)
        self.observer: TaskObserver | None = None
        """Told about created, claimed and failed tasks (see the module docstring)."""

    def _tell(self, event: str, tasks: Iterable[Task]) -> None:
        if self.observer is None:
            return
        for task in tasks:
            if event == "task_created":
                self.observer("task_created", task)
            elif event == "task_claimed":
                self.observer("task_claimed", task)
            elif task.status == Status.failed:
                self.observer("task_failed", task)

    # ------------------------------------------------------------------ where it lives
    @property
    def root(self) -> Path:
        return self.files.root

    @property
    def dir(self) -> Path:
        return self.files.dir

    @property
    def clock(self) -> Clock:
        return self.files.clock

    @property
    def events_path(self) -> Path:
        return self.files.events_path

    def path(self, task_id: int) -> Path:
        return self.files.path(task_id)

    def exists(self) -> bool:
        return self.files.exists()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store lock for a multi-step change of your own (not reentrant)."""
        with self.files.locked():
            yield

    # ------------------------------------------------------------------ reads (files)
    def read(self, task_id: int) -> Task:
        """The task with this id; ``UnknownRef`` if there is none, ``CorruptFile`` if it does not parse."""
        return self.files.read(task_id)

    def get(self, ref: int | str) -> Task:
        """The task ``ref`` (an id, ``#id`` or a name) names."""
        return self.files.get(ref)

    def resolve(self, ref: int | str) -> int:
        """The id ``ref`` names."""
        return self.files.resolve(ref)

    def ids(self) -> list[int]:
        return self.files.ids()

    def all(self) -> list[Task]:
        """Every task, by id; a corrupt file raises ``CorruptFile`` naming it."""
        return self.files.all()

    def scan(self) -> tuple[list[Task], list[tuple[Path, str]]]:
        """Every readable task, and the files that could not be read (with why)."""
        return self.files.scan()

    def events(self, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Event lines from byte ``offset``, and the offset to resume from."""
        return self.files.events(offset)

    # ------------------------------------------------------------------ edits
    def create(self, subject: str, description: str = "", blocked_by: Iterable[int | str] = (), owner: str = "",
               *, actor: str = "cli", **fields: Any) -> Task:
        """Create one task with the next id (``TaskEdits.create``)."""
        task = self.edits.create(subject, description, blocked_by, owner, actor=actor, **fields)
        self._tell("task_created", [task])
        return task

    def create_many(self, specs: list[dict[str, Any]], *, actor: str = "cli") -> list[Task]:
        """Create several tasks in one locked, durable batch (``TaskEdits.create_many``)."""
        tasks = self.edits.create_many(specs, actor=actor)
        self._tell("task_created", tasks)
        return tasks

    def check_names(self, names: Iterable[str]) -> None:
        """Refuse names that are invalid or taken, before a creation writes anything (``TaskEdits.check_names``)."""
        self.edits.check_names(names)

    def reserve(self, n: int) -> int:
        """Reserve ``n`` ids (the counter moved past them, durably); returns the first (``TaskEdits.reserve``)."""
        return self.edits.reserve(n)

    def create_reserved(self, specs: list[dict[str, Any]], ids: list[int], *, actor: str = "cli",
                        known: Mapping[int, list[int]] | None = None) -> list[Task]:
        """Create tasks at reserved ids in one locked, durable batch (``TaskEdits.create_reserved``)."""
        tasks = self.edits.create_reserved(specs, ids, actor=actor, known=known)
        self._tell("task_created", tasks)
        return tasks

    def update(self, ref: int | str, *, status: str | Status | None = None, owner: str | None = None,
               add_blocked_by: Iterable[int | str] = (), remove_blocked_by: Iterable[int | str] = (),
               actor: str = "cli", guard: Callable[[Task], None] | None = None, **fields: Any) -> Task:
        """Change a task by hand or by a tool; dependency edits are checked (``TaskEdits.update``;
        ``guard`` sees the task under the lock first and may refuse the change by raising)."""
        return self.edits.update(ref, status=status, owner=owner, add_blocked_by=add_blocked_by,
                                 remove_blocked_by=remove_blocked_by, actor=actor, guard=guard, **fields)

    def reopen(self, ids: Iterable[int], *, actor: str = "cli", reason: str = "", **fields: Any) -> list[Task]:
        """Finished tasks back to pending with a fresh retry budget, in one batch (``TaskEdits.reopen``)."""
        return self.edits.reopen(ids, actor=actor, reason=reason, **fields)

    # ------------------------------------------------------------------ attempts
    def claim(self, ref: int | str, owner: str, *, lease: float | None = None, actor: str | None = None) -> Task:
        """Compare-and-set claim; ``ConflictError`` saying why it is not claimable (``Attempts.claim``)."""
        task = self.attempts.claim(ref, owner, lease=lease, actor=actor)
        self._tell("task_claimed", [task])
        return task

    def try_claim(self, ref: int | str, owner: str, *, lease: float | None = None) -> Task | None:
        task = self.attempts.try_claim(ref, owner, lease=lease)
        self._tell("task_claimed", [task] if task is not None else [])
        return task

    def claim_many(self, ids: Iterable[int], owner: str, *, lease: float | None = None) -> list[Task]:
        tasks = self.attempts.claim_many(ids, owner, lease=lease)
        self._tell("task_claimed", tasks)
        return tasks

    def renew(self, ref: int | str, epoch: int, lease: float) -> Task:
        return self.attempts.renew(ref, epoch, lease)

    def renew_many(self, leases: dict[int, int], lease: float) -> list[int]:
        return self.attempts.renew_many(leases, lease)

    def hand_over(self, ref: int | str, epoch: int, owner: str, *, actor: str | None = None, **fields: Any) -> Task:
        return self.attempts.hand_over(ref, epoch, owner, actor=actor, **fields)

    def finish(self, ref: int | str, epoch: int, status: str | Status, *, result: str | None = None,
               error: str | None = None, actor: str | None = None, **fields: Any) -> Task:
        """End an attempt; refused on a stale epoch (``Attempts.finish``)."""
        task = self.attempts.finish(ref, epoch, status, result=result, error=error, actor=actor, **fields)
        self._tell("task_failed", [task])
        return task

    def release(self, ref: int | str, epoch: int, *, reason: str, actor: str | None = None,
                interrupted: bool = False, **fields: Any) -> Task:
        """Give an attempt back: pending and unowned again; ``interrupted``: stopped from outside,
        no retry used (``Attempts.release``)."""
        return self.attempts.release(ref, epoch, reason=reason, actor=actor, interrupted=interrupted, **fields)

    def cancel(self, ref: int | str, reason: str, *, actor: str = "lead") -> Task:
        return self.attempts.cancel(ref, reason, actor=actor)

    def reclaim_expired(self, *, actor: str = "lead",
                        owner_filter: Callable[[str], bool] | None = None) -> list[Task]:
        return self.attempts.reclaim_expired(actor=actor, owner_filter=owner_filter)

    def unfiled_claims(self, tasks: Iterable[Task]) -> dict[int, tuple[int, int]]:
        return self.attempts.unfiled_claims(tasks)

    def release_unfiled(self, task_id: int, epoch: int, attempt: int, *, reason: str, actor: str) -> Task | None:
        return self.attempts.release_unfiled(task_id, epoch, attempt, reason=reason, actor=actor)

    def commit(self, finishes: Iterable[Finish] = (), claims: Iterable[int] = (), owner: str = "lead", *,
               lease: float | None = None, actor: str | None = None,
               on_logged: Callable[[list[Task]], None] | None = None) -> tuple[list[Task], list[Task]]:
        """End attempts and claim tasks in one batch: the run scheduler's write (``Attempts.commit``)."""
        written, claimed = self.attempts.commit(finishes, claims, owner, lease=lease, actor=actor,
                                                on_logged=on_logged)
        self._tell("task_failed", written)
        self._tell("task_claimed", claimed)
        return written, claimed

    # ------------------------------------------------------------------ the run's group commit
    @contextmanager
    def pipelined(self, on_error: Callable[[BaseException], None] | None = None) -> Iterator[None]:
        """Batches ``commit`` makes in the block go to a group-commit writer (pipeline.py).

        Every section of this store object goes through it (share the object
        with whoever works on the run's tasks in this process); the block
        ends once everything is durable. ``on_error(exc)``: called from the
        writer thread when a write fails.
        """
        with self.files.pipelined(on_error):
            yield

    def flush(self) -> None:
        """Wait until every batch queued by this store's pipeline is durable."""
        if self.files.pipeline is not None:
            self.files.pipeline.flush()

    # ------------------------------------------------------------------ repairs (doctor, --fresh)
    def rebuild_name_index(self) -> dict[str, int]:
        """Rewrite ``names.jsonl`` from the task files (first id wins a duplicate name)."""
        with self.files.locked():
            return self.files.rebuild_names_locked()

    def repair_counter(self) -> int:
        """Rewrite ``.next_id`` as one past the highest task id; returns it."""
        with self.files.locked():
            ids = self.files.ids()
            nxt = (ids[-1] + 1) if ids else 1
            self.files.set_counter(nxt)
            return nxt

    def delete_all(self) -> None:
        """Remove every task file, the index and the event log."""
        with self.files.locked():
            self.files.delete_everything()

    def delete_many(self, ids: Iterable[int], *, actor: str = "lead", reason: str = "") -> int:
        """Remove these task files (``team run --fresh`` for one plan); logs a ``deleted`` event each."""
        with self.files.locked():
            return self.files.delete(ids, actor=actor, reason=reason)
