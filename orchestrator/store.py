"""The durable task store: ``<root>/.tasks/``.

Layout::

    .tasks/task_<id>.json   one Task per file (models.Task), written atomically
    .tasks/events.jsonl     append-only log: one line per transition
    .tasks/.lock            flock held for every multi-step change
    .tasks/.next_id         id counter (a cache: verified against the files)
    .tasks/names.jsonl      name -> id index (a cache: verified on every use)

Rules:

* Every write is ``fsutil.atomic_write`` (temp + fsync + rename + dir fsync),
  so a reader never sees a torn file and a returned call is durable.
* Every read-modify-write runs under the one store lock. ``claim`` is a
  compare-and-set: it succeeds only while the task is pending, unowned and
  every dependency is completed. ``finish``/``renew``/``release`` carry the
  claim's ``epoch`` and are refused when it is stale (the lease expired and
  the task was reclaimed by someone else).
* Readiness is derived: completing a task rewrites no other file.
* A dependency that does not exist, or that would close a cycle, is refused
  with the unknown ref or the cycle (``#4 → #7 → #4``) in the message.
* Caches (``.next_id``, ``names.jsonl``) are never trusted alone: an id is
  used only if no file has it, a name hit is checked against the task file,
  and a miss falls back to a scan. Losing them loses nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import (
    ConflictError,
    CorruptFile,
    CycleError,
    InvalidName,
    NotWritable,
    UnknownRef,
    UserError,
)
from .fsutil import append_line, atomic_write, dumps, file_lock, fsync_dir, read_jsonl
from .models import NAME_RE, TERMINAL, Status, Task
from .paths import tasks_dir

TASK_PREFIX = "task_"
TASK_SUFFIX = ".json"

Clock = Callable[[], float]


def task_id_from_filename(fname: str) -> int | None:
    if fname.startswith(TASK_PREFIX) and fname.endswith(TASK_SUFFIX):
        digits = fname[len(TASK_PREFIX) : -len(TASK_SUFFIX)]
        if digits.isdigit():
            return int(digits)
    return None


def parse_status(value: str | Status) -> Status:
    try:
        return Status(value)
    except ValueError:
        allowed = ", ".join(s.value for s in Status)
        raise UserError(f"invalid status {value!r}: use one of {allowed}") from None


_POOL = None


def _io_pool():
    """Threads that fsync a batch of files at once (the kernel merges them into one journal commit)."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="team-fsync")
    return _POOL


def _forget_pool_after_fork() -> None:
    # A forked child inherits the pool object but none of its threads: work
    # submitted to it would wait forever. The child builds its own.
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool_after_fork)


def format_cycle(ids: list[int]) -> str:
    return " → ".join(f"#{i}" for i in ids)


class TaskStore:
    """All access to ``.tasks/``. Safe across threads and processes."""

    def __init__(self, root: Path | str, *, clock: Clock = time.time, durable: bool = True):
        self.root = Path(root)
        self.dir = tasks_dir(self.root)
        self.clock = clock
        self.durable = durable
        self.lock_path = self.dir / ".lock"
        self.events_path = self.dir / "events.jsonl"
        self.counter_path = self.dir / ".next_id"
        self.names_path = self.dir / "names.jsonl"

    # ------------------------------------------------------------------ files
    def path(self, task_id: int) -> Path:
        return self.dir / f"{TASK_PREFIX}{task_id}{TASK_SUFFIX}"

    def exists(self) -> bool:
        return self.dir.is_dir()

    def ensure(self) -> None:
        """Create ``.tasks/`` if needed; refuse a root we cannot write."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise NotWritable(f"cannot create {self.dir}: {e.strerror}; pass a writable --root or set TEAM_ROOT") from None
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise NotWritable(f"{self.dir} is not writable; pass a writable --root or set TEAM_ROOT")

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store lock (not reentrant)."""
        self.ensure()
        with file_lock(self.lock_path):
            yield

    def _load_file(self, path: Path) -> Task:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise
        except OSError as e:
            raise CorruptFile(path, f"cannot read: {e.strerror}") from None
        try:
            return Task.model_validate_json(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "file"
            raise CorruptFile(path, f"{where}: {first.get('msg', 'invalid')}") from None

    def read(self, task_id: int) -> Task:
        try:
            return self._load_file(self.path(task_id))
        except FileNotFoundError:
            raise UnknownRef(f"no task #{task_id}; `team task list` shows the tasks") from None

    def _write(self, task: Task) -> None:
        task.updated_at = self.clock()
        atomic_write(self.path(task.id), dumps(task.to_json()), durable=self.durable)

    def ids(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        out = []
        with os.scandir(self.dir) as it:
            for entry in it:
                tid = task_id_from_filename(entry.name)
                if tid is not None:
                    out.append(tid)
        out.sort()
        return out

    def all(self) -> list[Task]:
        """Every task, by id. A corrupt file raises ``CorruptFile`` naming it."""
        tasks = []
        for tid in self.ids():
            try:
                tasks.append(self._load_file(self.path(tid)))
            except FileNotFoundError:
                continue  # deleted between listing and reading
        return tasks

    def scan(self) -> tuple[list[Task], list[tuple[Path, str]]]:
        """Like ``all`` but collects unreadable files instead of raising (doctor)."""
        tasks, bad = [], []
        for tid in self.ids():
            path = self.path(tid)
            try:
                task = self._load_file(path)
            except FileNotFoundError:
                continue
            except CorruptFile as e:
                bad.append((path, str(e)))
                continue
            if task.id != tid:
                bad.append((path, f"{path}: holds id {task.id}, not {tid}"))
                continue
            tasks.append(task)
        return tasks, bad

    # ------------------------------------------------------------------ refs
    def resolve(self, ref: int | str) -> int:
        """Numeric id (``4``, ``#4``) or task name -> id; UnknownRef otherwise."""
        if isinstance(ref, int):
            if self.path(ref).exists():
                return ref
            raise UnknownRef(f"no task #{ref}; `team task list` shows the tasks")
        text = str(ref).strip()
        digits = text[1:] if text.startswith("#") else text
        if digits.isdigit():
            return self.resolve(int(digits))
        hit = self._index_lookup(text)
        if hit is not None:
            return hit
        for task in self.all():
            if task.name == text:
                return task.id
        raise UnknownRef(f"no task named {text!r}; `team task list` shows the tasks")

    def get(self, ref: int | str) -> Task:
        return self.read(self.resolve(ref))

    def _index_lookup(self, name: str) -> int | None:
        for entry in reversed(read_jsonl(self.names_path)):
            if entry.get("name") == name:
                tid = entry.get("id")
                if isinstance(tid, int):
                    try:
                        if self._load_file(self.path(tid)).name == name:
                            return tid
                    except (FileNotFoundError, CorruptFile):
                        return None
                return None
        return None

    # ------------------------------------------------------------------ events
    def _event(self, task: Task, event: str, actor: str, before: Status | None, **extra: Any) -> None:
        record: dict[str, Any] = {"ts": round(self.clock(), 6), "task": task.id, "event": event, "actor": actor}
        if before is not None or event == "created":
            record["from"] = before.value if before else None
            record["to"] = task.status.value
        record.update({k: v for k, v in extra.items() if v is not None})
        append_line(self.events_path, record, durable=self.durable)

    def events(self, offset: int = 0) -> tuple[list[dict], int]:
        """Events from byte ``offset``; returns them and the offset to resume from."""
        try:
            with open(self.events_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], offset
        end = data.rfind(b"\n") + 1  # never consume a line still being written
        from .fsutil import parse_jsonl

        return list(parse_jsonl(data[:end])), offset + end

    # ------------------------------------------------------------------ create
    def _next_id(self) -> int:
        try:
            candidate = int(self.counter_path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            candidate = 0
        if candidate < 1:
            ids = self.ids()
            candidate = (ids[-1] + 1) if ids else 1
        while self.path(candidate).exists():  # stale counter (crash, seed-written store)
            ids = self.ids()
            candidate = max(candidate + 1, (ids[-1] + 1) if ids else 1)
        return candidate

    def _check_name(self, name: str | None) -> None:
        if name is None:
            return
        if not NAME_RE.match(name) or name.isdigit():
            raise InvalidName(
                f"invalid task name {name!r}: use letters, digits, '.', '_' or '-' (not all digits, ≤ 64 chars)"
            )
        if self._index_lookup(name) is not None:
            raise UserError(f"a task named {name!r} already exists; pick another name")

    def _check_deps_exist(self, deps: Iterable[int], known: Iterable[int] = ()) -> None:
        known = set(known)
        for dep in deps:
            if dep not in known and not self.path(dep).exists():
                raise UnknownRef(f"no task #{dep} to depend on; `team task list` shows the tasks")

    def resolve_many(self, refs: Iterable[int | str]) -> list[int]:
        return [self.resolve(r) for r in refs]

    def create(
        self,
        subject: str,
        description: str = "",
        blocked_by: Iterable[int | str] = (),
        owner: str = "",
        *,
        actor: str = "cli",
        **fields: Any,
    ) -> Task:
        """Create one task with the next id. Dependencies must exist."""
        return self.create_many(
            [dict(subject=subject, description=description, blockedBy=list(blocked_by), owner=owner, **fields)],
            actor=actor,
        )[0]

    def create_many(self, specs: list[dict[str, Any]], *, actor: str = "cli") -> list[Task]:
        """Create several tasks under one lock.

        ``blockedBy`` entries may be ids, names of existing tasks, or
        ``("new", i)`` — the i-th task of this batch — so a whole plan can be
        materialised in one call. Batch-internal edges are acyclic by
        construction only if the caller checked; we check again here.
        """
        if not specs:
            return []
        with self.locked():
            if any(spec.get("name") for spec in specs) and not self.names_path.exists() and self.ids():
                self._rebuild_names_locked()  # the index was lost: names must stay unique
            first = self._next_id()
            ids = [first + i for i in range(len(specs))]
            now = self.clock()
            tasks = []
            seen_names: set[str] = set()
            for i, spec in enumerate(specs):
                spec = dict(spec)
                deps: list[int] = []
                for dep in spec.pop("blockedBy", []) or []:
                    if isinstance(dep, tuple) and dep[0] == "new":
                        deps.append(ids[dep[1]])
                    else:
                        deps.append(self.resolve(dep))
                name = spec.get("name")
                self._check_name(name)
                if name is not None:
                    if name in seen_names:
                        raise UserError(f"a task named {name!r} appears twice; names must be unique")
                    seen_names.add(name)
                status = parse_status(spec.pop("status", Status.pending))
                tasks.append(
                    Task(id=ids[i], blockedBy=sorted(set(deps)), status=status, created_at=now, **spec)
                )
            for t in tasks:
                self._check_deps_exist(t.blockedBy, known=ids)
                if t.id in t.blockedBy:
                    raise CycleError(f"task #{t.id} cannot depend on itself: {format_cycle([t.id, t.id])}", [t.id, t.id])
            batch = {t.id: t for t in tasks}
            for t in tasks:
                cycle = self._find_path(t.blockedBy, t.id, batch)
                if cycle:
                    raise CycleError(f"dependency cycle: {format_cycle([t.id, *cycle])}", [t.id, *cycle])
            atomic_write(self.counter_path, str(ids[-1] + 1), durable=False)
            for t in tasks:
                if t.name:
                    append_line(self.names_path, {"name": t.name, "id": t.id}, durable=False)
            self._write_batch(tasks, [self._event_record(t, "created", actor, None) for t in tasks])
            return tasks

    # ------------------------------------------------------------------ graph checks
    def _deps_of(self, tid: int, overlay: dict[int, Task]) -> list[int]:
        if tid in overlay:
            return overlay[tid].blockedBy
        try:
            return self.read(tid).blockedBy
        except UnknownRef:
            return []

    def _find_path(self, starts: Iterable[int], target: int, overlay: dict[int, Task]) -> list[int] | None:
        """A dependency path from one of ``starts`` to ``target`` (inclusive), or None.

        Walks ``blockedBy`` edges reading only reachable task files.
        """
        parent: dict[int, int | None] = {}
        stack = []
        for s in starts:
            if s not in parent:
                parent[s] = None
                stack.append(s)
        while stack:
            node = stack.pop()
            if node == target:
                path = [node]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])  # type: ignore[arg-type]
                return list(reversed(path))
            for dep in self._deps_of(node, overlay):
                if dep not in parent:
                    parent[dep] = node
                    stack.append(dep)
        return None

    # ------------------------------------------------------------------ update
    def update(
        self,
        ref: int | str,
        *,
        status: str | Status | None = None,
        owner: str | None = None,
        add_blocked_by: Iterable[int | str] = (),
        remove_blocked_by: Iterable[int | str] = (),
        actor: str = "cli",
        **fields: Any,
    ) -> Task:
        """Change a task by hand (or by a tool). Dependency edits are checked."""
        new_status = parse_status(status) if status is not None else None
        with self.locked():
            task = self.read(self.resolve(ref))
            before = task.status
            add = [self.resolve(r) for r in add_blocked_by]
            remove = {self._resolve_dep_to_remove(task, r) for r in remove_blocked_by}
            for dep in add:
                if dep == task.id:
                    raise CycleError(
                        f"task #{task.id} cannot depend on itself: {format_cycle([task.id, task.id])}",
                        [task.id, task.id],
                    )
                cycle = self._find_path([dep], task.id, {})
                if cycle:
                    raise CycleError(f"dependency cycle: {format_cycle([task.id, *cycle])}", [task.id, *cycle])
            deps = [d for d in task.blockedBy if d not in remove]
            deps = sorted(set(deps) | set(add))
            task.blockedBy = deps
            if owner is not None:
                task.owner = owner
            for key, value in fields.items():
                setattr(task, key, value)
            if new_status is not None and new_status != before:
                self._apply_status(task, new_status)
            self._write(task)
            changed = []
            if add or remove:
                changed.append("blockedBy")
            if owner is not None:
                changed.append("owner")
            changed.extend(fields)
            if new_status is not None and new_status != before:
                self._event(task, "status", actor, before)
            if changed:
                self._event(task, "updated", actor, None, fields=changed)
            return task

    def _resolve_dep_to_remove(self, task: Task, ref: int | str) -> int:
        """Like ``resolve``, but a declared id whose file is gone may be removed."""
        try:
            return self.resolve(ref)
        except UnknownRef:
            text = str(ref).strip().lstrip("#")
            if text.isdigit() and int(text) in task.blockedBy:
                return int(text)
            raise

    def _apply_status(self, task: Task, status: Status) -> None:
        now = self.clock()
        if status == Status.in_progress and task.status != Status.in_progress:
            task.started_at = now
        if status in TERMINAL:
            task.finished_at = now
        else:
            task.finished_at = None
        if status != Status.in_progress:
            task.lease_expires = None
        task.status = status

    # ------------------------------------------------------------------ claim / lease
    def claim(self, ref: int | str, owner: str, *, lease: float | None = None, actor: str | None = None) -> Task:
        """Compare-and-set claim: pending, unowned, all dependencies completed.

        Raises ``ConflictError`` saying why when the task is not claimable.
        """
        with self.locked():
            task = self.read(self.resolve(ref))
            self._check_claimable(task)
            return self._claim_locked(task, owner, lease, actor or owner)

    def try_claim(self, ref: int | str, owner: str, *, lease: float | None = None) -> Task | None:
        try:
            return self.claim(ref, owner, lease=lease)
        except ConflictError:
            return None

    def claim_many(self, ids: Iterable[int], owner: str, *, lease: float | None = None) -> list[Task]:
        """Claim every claimable task among ``ids`` under one lock; skip the others."""
        won = []
        with self.locked():
            for tid in ids:
                try:
                    task = self.read(tid)
                    self._check_claimable(task)
                except (ConflictError, UnknownRef):
                    continue
                won.append(self._claim_locked(task, owner, lease, owner))
        return won

    def _check_claimable(self, task: Task, overlay: dict[int, Task] | None = None) -> None:
        if task.status != Status.pending:
            raise ConflictError(f"task #{task.id} is {task.status.value}, not pending")
        if task.owner:
            raise ConflictError(f"task #{task.id} is already owned by {task.owner}")
        waiting = []
        for dep in task.blockedBy:
            try:
                if ((overlay or {}).get(dep) or self.read(dep)).status != Status.completed:
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
        self._apply_status(task, Status.in_progress)
        task.lease_expires = (self.clock() + lease) if lease else None
        task.error = None
        return before

    def _claim_locked(self, task: Task, owner: str, lease: float | None, actor: str) -> Task:
        before = self._mark_claimed(task, owner, lease)
        self._write(task)
        self._event(task, "claimed", actor, before, owner=owner, epoch=task.epoch, attempt=task.attempts)
        return task

    def _check_epoch(self, task: Task, epoch: int) -> None:
        if task.status != Status.in_progress or task.epoch != epoch:
            raise ConflictError(
                f"task #{task.id} attempt {epoch} is stale (task is {task.status.value}, epoch {task.epoch})"
            )

    def renew(self, ref: int | str, epoch: int, lease: float) -> Task:
        with self.locked():
            task = self.read(self.resolve(ref))
            self._check_epoch(task, epoch)
            task.lease_expires = self.clock() + lease
            self._write(task)
            return task

    def hand_over(self, ref: int | str, epoch: int, owner: str, *, actor: str | None = None) -> Task:
        """Pass a running attempt to ``owner`` (the lead claims, a teammate works).

        Epoch-checked like ``finish``: the attempt, lease and epoch stay the
        same; only who holds it changes, so ``task blocked`` can say who runs it.
        """
        with self.locked():
            task = self.read(self.resolve(ref))
            self._check_epoch(task, epoch)
            if task.owner != owner:
                previous, task.owner = task.owner, owner
                self._write(task)
                self._event(task, "handed_over", actor or previous or owner, None, owner=owner,
                            previous_owner=previous, epoch=epoch)
            return task

    def renew_many(self, leases: dict[int, int], lease: float) -> list[int]:
        """Renew several leases (id -> epoch) under one lock; returns the ids renewed."""
        renewed = []
        with self.locked():
            for tid, epoch in leases.items():
                try:
                    task = self.read(tid)
                    self._check_epoch(task, epoch)
                except (ConflictError, UnknownRef):
                    continue
                task.lease_expires = self.clock() + lease
                self._write(task)
                renewed.append(tid)
        return renewed

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
        with self.locked():
            task = self.read(self.resolve(ref))
            self._check_epoch(task, epoch)
            before = task.status
            if result is not None:
                task.result = result
            if error is not None:
                task.error = error
            for key, value in fields.items():
                setattr(task, key, value)
            self._apply_status(task, new)
            self._write(task)
            self._event(task, "status", actor or task.owner, before, epoch=epoch, error=error)
            return task

    def release(self, ref: int | str, epoch: int, *, reason: str, actor: str | None = None, **fields: Any) -> Task:
        """Give an attempt back: the task becomes pending and unowned (a retry)."""
        with self.locked():
            task = self.read(self.resolve(ref))
            self._check_epoch(task, epoch)
            before = task.status
            task.owner = ""
            task.error = reason
            for key, value in fields.items():
                setattr(task, key, value)
            self._apply_status(task, Status.pending)
            self._write(task)
            self._event(task, "released", actor or "lead", before, reason=reason)
            return task

    def reclaim_expired(self, *, actor: str = "lead", owner_filter: Callable[[str], bool] | None = None) -> list[Task]:
        """Return every in-progress task whose lease expired to pending (attempt kept)."""
        now = self.clock()
        out = []
        with self.locked():
            for task in self.scan()[0]:  # an unreadable file must not stall recovery of the rest
                if task.status != Status.in_progress or task.lease_expires is None:
                    continue
                if task.lease_expires > now:
                    continue
                if owner_filter is not None and not owner_filter(task.owner):
                    continue
                before, prev_owner = task.status, task.owner
                task.owner = ""
                task.error = f"lease of {prev_owner or 'unknown'} expired (attempt {task.attempts})"
                self._apply_status(task, Status.pending)
                self._write(task)
                self._event(task, "lease_expired", actor, before, previous_owner=prev_owner)
                out.append(task)
        return out

    def cancel(self, ref: int | str, reason: str, *, actor: str = "lead") -> Task:
        """Mark a task that can no longer run as cancelled, with the reason."""
        with self.locked():
            task = self.read(self.resolve(ref))
            if task.status in TERMINAL:
                return task
            before = task.status
            task.error = reason
            self._apply_status(task, Status.cancelled)
            self._write(task)
            self._event(task, "status", actor, before, reason=reason)
            return task

    # ------------------------------------------------------------------ repairs (doctor)
    def _rebuild_names_locked(self) -> dict[str, int]:
        names: dict[str, int] = {}
        for task in self.scan()[0]:
            if task.name and task.name not in names:
                names[task.name] = task.id
        atomic_write(self.names_path, "".join(dumps({"name": n, "id": i}) + "\n" for n, i in names.items()), durable=self.durable)
        return names

    def rebuild_name_index(self) -> dict[str, int]:
        """Rewrite ``names.jsonl`` from the task files (first id wins a duplicate name)."""
        with self.locked():
            return self._rebuild_names_locked()

    def repair_counter(self) -> int:
        """Rewrite ``.next_id`` as one past the highest task id; returns it."""
        with self.locked():
            ids = self.ids()
            nxt = (ids[-1] + 1) if ids else 1
            atomic_write(self.counter_path, str(nxt), durable=self.durable)
            return nxt

    def delete_all(self) -> None:
        """Remove every task file, the index and the event log (``--fresh``)."""
        with self.locked():
            for tid in self.ids():
                self.path(tid).unlink(missing_ok=True)
            for p in (self.counter_path, self.names_path, self.events_path):
                p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ batches (the run scheduler)
    def commit(
        self,
        finishes: list[tuple[int, int, str | Status, dict[str, Any]]] = (),
        claims: Iterable[int] = (),
        owner: str = "lead",
        *,
        lease: float | None = None,
        actor: str | None = None,
        on_visible: Callable[[list[Task]], None] | None = None,
    ) -> tuple[list[Task], list[Task]]:
        """End attempts and claim tasks in one locked, durable batch.

        ``on_visible(claimed)`` is called once every file of the batch is
        renamed into place and its event lines are written, before the final
        directory and event-log fsyncs: a caller may start the claimed work
        there, overlapping those syncs. A SIGKILL at any point after it sees
        exactly what a later one would (the page cache survives the process);
        only a power loss in that window can forget the claim, and then the
        task simply runs again (at-least-once). It must not block or take the
        store lock.

        ``finishes``: ``(id, epoch, status, fields)``; a stale epoch skips that
        item. ``claims``: ids claimed under the same rule as ``claim`` (a
        dependency finished earlier in this batch counts as completed); the
        unclaimable are skipped. Returns ``(finished, claimed)``. Cost: the
        files are fsynced in parallel, renamed, then the directory and the
        event log are synced once for the whole batch.
        """
        finished: list[Task] = []
        claimed: list[Task] = []
        records: list[dict[str, Any]] = []
        with self.locked():
            overlay: dict[int, Task] = {}
            for tid, epoch, status, fields in finishes:
                try:
                    task = self.read(tid)
                    self._check_epoch(task, epoch)
                except (ConflictError, UnknownRef):
                    continue
                before = task.status
                for key, value in fields.items():
                    setattr(task, key, value)
                self._apply_status(task, parse_status(status))
                finished.append(task)
                overlay[tid] = task
                records.append(self._event_record(task, "status", actor or task.owner, before, epoch=epoch,
                                                  error=fields.get("error")))
            for tid in claims:
                try:
                    task = self.read(tid)
                    self._check_claimable(task, overlay)
                except (ConflictError, UnknownRef):
                    continue
                before = self._mark_claimed(task, owner, lease)
                claimed.append(task)
                records.append(self._event_record(task, "claimed", actor or owner, before, owner=owner,
                                                  epoch=task.epoch, attempt=task.attempts))
            self._write_batch(finished + claimed, records,
                              on_visible=(lambda: on_visible(claimed)) if on_visible else None)
        return finished, claimed

    def _event_record(self, task: Task, event: str, actor: str, before: Status | None, **extra: Any) -> dict:
        record: dict[str, Any] = {"ts": round(self.clock(), 6), "task": task.id, "event": event, "actor": actor}
        if before is not None or event == "created":
            record["from"] = before.value if before else None
            record["to"] = task.status.value
        record.update({k: v for k, v in extra.items() if v is not None})
        return record

    def _events_batch(self, records: list[dict[str, Any]]) -> None:
        if records:
            append_line(self.events_path, "\n".join(dumps(r) for r in records), durable=self.durable)

    def _write_batch(self, tasks: list[Task], records: list[dict[str, Any]] = (),
                     on_visible: Callable[[], None] | None = None) -> None:
        """Atomic per file, durable as a batch, then the batch's event lines.

        Temp files are fsynced in parallel (the kernel merges them into one
        journal commit) and renamed; then the directory fsync and the event
        append+fsync run side by side: two commit waits per batch, whatever
        its size.
        """
        if not tasks:
            self._events_batch(list(records))
            return
        now = self.clock()
        for task in tasks:
            task.updated_at = now
        payloads = [(self.path(t.id), dumps(t.to_json())) for t in tasks]
        if len(payloads) == 1 or not self.durable:
            for path, data in payloads:
                atomic_write(path, data, durable=self.durable, sync_dir=False)
        else:
            list(_io_pool().map(lambda pd: atomic_write(pd[0], pd[1], sync_dir=False), payloads))
        if not self.durable:
            self._events_batch(list(records))
            if on_visible is not None:
                on_visible()
            return
        if on_visible is not None:
            if records:
                append_line(self.events_path, "\n".join(dumps(r) for r in records), durable=False)
            on_visible()
            pending = _io_pool().submit(fsync_dir, self.events_path) if records else None
        else:
            pending = _io_pool().submit(self._events_batch, list(records)) if records else None
        fsync_dir(self.dir)
        if pending is not None:
            pending.result()

    def delete_many(self, ids: Iterable[int], *, actor: str = "lead", reason: str = "") -> int:
        """Remove these task files (``team run --fresh`` for one plan); logs a ``deleted`` event each."""
        n = 0
        with self.locked():
            for tid in ids:
                path = self.path(tid)
                if path.exists():
                    path.unlink()
                    append_line(self.events_path, {"ts": round(self.clock(), 6), "task": tid, "event": "deleted",
                                                   "actor": actor, "reason": reason}, durable=False)
                    n += 1
            if n and self.durable:
                fsync_dir(self.dir)
        return n
