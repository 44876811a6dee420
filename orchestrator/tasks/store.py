"""The durable task store: ``<root>/.tasks/``.

Layout::

    .tasks/task_<id>.json   one Task per file (models.Task), written atomically
    .tasks/events.jsonl     append-only log: one line per transition
    .tasks/.lock            flock held for every multi-step change
    .tasks/.lock-waiting    held shared by a process blocked on .lock (store_pipeline)
    .tasks/.next_id         id counter (a cache: verified against the files)
    .tasks/names.jsonl      name -> id index (a cache: verified on every use)

``TaskStore`` is the one class callers use. This module holds its files,
lock, reads, scans, ref resolution, event log and repairs; the rest is
mixed in from one module per concept:

* ``store_edits.TaskEdits`` — ``create``/``create_many``/``update``:
  ids, unique names, dependency edges checked for unknown refs and cycles.
* ``store_attempts.AttemptLifecycle`` — ``claim``/``renew``/``hand_over``/
  ``finish``/``release``/``reclaim_expired``/``cancel`` and the run
  scheduler's ``commit`` batch, all epoch-checked.
* ``store_batch.BatchWriter`` — ``_write_batch``: many files and event
  lines made durable with two commit waits per batch; ``pipelined`` hands
  ``commit``'s batches to a group-commit writer (``store_pipeline``).

Rules:

* Every write is ``fsutil.atomic_write`` (temp + fsync + rename + dir fsync),
  so a reader never sees a torn file and a returned call is durable.
* Every read-modify-write runs under the one store lock (not reentrant).
* Readiness is derived: completing a task rewrites no other file.
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

from ..core.errors import CorruptFile, NotWritable, UnknownRef
from ..core.fsutil import (
    append_line,
    atomic_write,
    dumps,
    file_lock,
    fsync_dir,
    parse_jsonl,
    read_jsonl,
)
from ..core.models import Status, Task
from ..core.paths import tasks_dir
from ..core.redact import scrub
from .attempts import AttemptLifecycle
from .batch import BatchWriter
from .edits import TaskEdits
from .pipeline import active

TASK_PREFIX = "task_"
TASK_SUFFIX = ".json"

Clock = Callable[[], float]


def task_id_from_filename(fname: str) -> int | None:
    if fname.startswith(TASK_PREFIX) and fname.endswith(TASK_SUFFIX):
        digits = fname[len(TASK_PREFIX) : -len(TASK_SUFFIX)]
        if digits.isdigit():
            return int(digits)
    return None


class TaskStore(TaskEdits, AttemptLifecycle, BatchWriter):
    """All access to ``.tasks/``. Safe across threads and processes."""

    def __init__(self, root: Path | str, *, clock: Clock = time.time, durable: bool = True):
        self.root = Path(root)
        self.dir = tasks_dir(self.root)
        self.key = self.dir.absolute()  # names this store to the process's pipeline (store_pipeline)
        self.clock = clock
        self.durable = durable
        self.lock_path = self.dir / ".lock"
        self.waiting_path = self.dir / ".lock-waiting"  # held shared by whoever waits for .lock
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
        """Hold the store lock (not reentrant).

        While this process runs a pipeline (``pipelined``), every thread
        goes through it: the section starts once its queued batches are on
        disk, and then works on the files directly (``store_pipeline``).
        """
        pipe = active(self.key)
        if pipe is not None:
            with pipe.exclusive(drain=True):
                yield
            return
        self.ensure()
        with file_lock(self.lock_path, announce=self.waiting_path):
            yield

    @contextmanager
    def _locked_for_commit(self) -> Iterator[None]:
        """``locked``, except that in a pipelined run the section's batch is queued, not written."""
        pipe = active(self.key)
        if pipe is None:
            with self.locked():
                yield
            return
        with pipe.exclusive(drain=False):
            yield

    def _load_file(self, path: Path) -> Task:
        pipe = active(self.key)
        data = pipe.peek(path) if pipe is not None else None
        try:
            if data is None:
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

    def _load_task(self, task_id: int) -> Task:
        """``task_<id>.json``, checked to hold that id (a copied file would not)."""
        path = self.path(task_id)
        task = self._load_file(path)
        if task.id != task_id:
            raise CorruptFile(path, f"holds id {task.id}, not {task_id}")
        return task

    def read(self, task_id: int) -> Task:
        try:
            return self._load_task(task_id)
        except FileNotFoundError:
            raise UnknownRef(f"no task #{task_id}; `team task list` shows the tasks") from None

    @staticmethod
    def _serialize(task: Task) -> str:
        """The file's bytes; known secrets never reach a task file (redact.py)."""
        return scrub(dumps(task.to_json()))

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
                tasks.append(self._load_task(tid))
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
        """The task ``ref`` names (one read for a numeric ref)."""
        if isinstance(ref, int):
            return self.read(ref)
        text = str(ref).strip()
        digits = text[1:] if text.startswith("#") else text
        return self.read(int(digits)) if digits.isdigit() else self.read(self.resolve(text))

    def _index_lookup(self, name: str, entries: list[dict] | None = None) -> int | None:
        """The id the name index gives ``name``, checked against the task file.
        ``entries``: the index already read (a batch reads it once)."""
        for entry in reversed(read_jsonl(self.names_path) if entries is None else entries):
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
    def _event_record(self, task: Task, event: str, actor: str, before: Status | None, **extra: Any) -> dict:
        record: dict[str, Any] = {"ts": round(self.clock(), 6), "task": task.id, "event": event, "actor": actor}
        if before is not None or event == "created":
            record["from"] = before.value if before else None
            record["to"] = task.status.value
        record.update({k: v for k, v in extra.items() if v is not None})
        return record

    def _save(self, task: Task, event: str, actor: str, before: Status | None, **extra: Any) -> None:
        """Write one task and its event line as one durable batch (``_write_batch``):
        the directory and event-log syncs overlap, two waits instead of three."""
        self._write_batch([task], [self._event_record(task, event, actor, before, **extra)])

    def events(self, offset: int = 0) -> tuple[list[dict], int]:
        """Events from byte ``offset``; returns them and the offset to resume from."""
        try:
            with open(self.events_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], offset
        end = data.rfind(b"\n") + 1  # never consume a line still being written

        return list(parse_jsonl(data[:end])), offset + end

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
