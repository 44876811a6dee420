"""The files of ``.tasks/``: how the task store is laid out, read and written.

Layout::

    .tasks/task_<id>.json   one Task per file (core.models.Task), written atomically
    .tasks/events.jsonl     append-only log: one line per transition
    .tasks/.lock            flock held for every multi-step change
    .tasks/.lock-waiting    held shared by a process blocked on .lock (see pipeline.py)
    .tasks/.next_id         id counter: the next id is past it and past every file
    .tasks/names.jsonl      name -> id index (a cache: verified on every use)
    .tasks/index.json       hashes of task files already validated (a cache: index.py)

``TaskFiles`` is this layer and nothing more: paths, the store lock, reading
and parsing task files, refs (id or name), the event log, the name index and
the id counter, and the durable write of a batch. The rules about *what* may
change (claims, epochs, cycles) live above it, in ``attempts.py`` and
``edits.py``; ``store.TaskStore`` puts them together.

Writes:

* A batch (``write``) is atomic per file (temp file + fsync + rename) and
  durable as a whole: the temp files are fsynced in parallel (the kernel
  merges them into one journal commit), renamed, then the directory fsync
  and the event-log append+fsync run side by side: two commit waits per
  batch, whatever its size. A returned call is durable.
* ``create_files`` writes new task files at reserved ids (a plan's chunk:
  ``TaskEdits.create_reserved``), each linked into place so that an
  existing file is never replaced, then fsyncs the folder; ``holding``
  keeps other processes out meanwhile, and in a run lets this process's
  own sections go on (``Pipeline.pinned``).
* With a group-commit ``Pipeline`` attached (``team run``: pipeline.py), a
  batch written inside a ``commit`` section is queued for the pipeline's
  writer thread instead, and every read in this process sees queued
  versions first (``Pipeline.peek``).
* Known secrets never reach a task file or an event line (``core.redact``).

Caches (``.next_id``, ``names.jsonl``) are never trusted alone: an id is
used only if no file has it, a name hit is checked against the task file,
and a miss falls back to a scan. Losing them loses nothing.

The bytes this process knows (``Known``): a run's lead reads the same task
files over and over (a claim reads the task, a dependency check each
dependency, a completion the claimed task), almost always files it wrote a
moment before. ``TaskFiles`` keeps, per task file, the bytes it last wrote
or read and the file's identity then (``Ident``: device, inode, size,
mtime and ctime in ns, from ``fstat`` of the descriptor written, after its
rename or link, or read; the identity is taken before a read, so a change
after it leaves the identity behind, never the bytes). A read ``stat``-s the file and uses the kept bytes only
if the identity is the same; anything else is read from the file as before:
another process's write (every write here is a rename or a link, so a new
version is a new inode), a file edited in place (a new ctime, even when the
old mtime is put back), a removed file. So the files stay the truth; a hit costs one ``stat`` instead
of an open, read and close, and a dependency check (``status_of``) needs no
parse either: the status of kept bytes is kept with them, and so is that of
a version queued for the pipeline (``write`` keeps its ``Head`` until the
writer has written it; ``peek`` still decides which bytes are the newest,
and a head is used only with the very bytes it was kept for). A hit is still
parsed into a new ``Task`` (callers change what they get): a parse costs
about what a ``model_copy`` does, and a parsed ``Task`` takes ten times the
memory of its bytes. At most ``KNOWN_MAX`` files are kept, the least
recently used dropped first (~0.45 KB each besides the file's bytes); a
plan's new files are kept only while there is room, so its first tasks,
claimed first, are not pushed out by its last. What the identity cannot
see happens within one file-system clock tick (a few ms) of the kept
version: the file edited in place at the same size, or replaced by another
of the same size whose inode number is the kept file's, reused (two writes
of that task by another process, each under the store lock).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import AmbiguousRef, ConflictError, CorruptFile, NotWritable, UnknownRef
from ..core.fsutil import (
    append_line,
    atomic_write,
    create_new,
    file_lock,
    fsync_dir,
    parse_jsonl,
    read_jsonl,
)
from ..core.jsonutil import dumps
from ..core.models import MAX_TASK_ID, Status, Task
from ..core.paths import tasks_dir
from ..core.redact import MASK, Secrets
from . import index as task_index
from .index import INDEX_NAME
from .pipeline import Pipeline, WriteBatch

TASK_PREFIX = "task_"
TASK_SUFFIX = ".json"
FSYNC_THREADS = 8
"""Most temp files fsynced at once by one batch."""

Clock = Callable[[], float]
EventRecord = dict[str, Any]


def task_id_from_filename(fname: str) -> int | None:
    if fname.startswith(TASK_PREFIX) and fname.endswith(TASK_SUFFIX):
        digits = fname[len(TASK_PREFIX) : -len(TASK_SUFFIX)]
        if digits.isdigit():
            return int(digits)
    return None


def _near(text: str, tasks: list[Task]) -> str:
    """`` (did you mean 'demo.build'?)`` for a ref close to a task's name or plan id, else ``""``."""
    import difflib

    names = {t.name: t.name for t in tasks if t.name}
    names.update((t.plan_task, t.name) for t in tasks if t.plan_task and t.name)
    near = difflib.get_close_matches(text, list(names), n=1)
    return f" (did you mean {names[near[0]]!r}?)" if near else ""


def parse_task(path: Path, data: bytes) -> Task:
    """The task in ``data`` (the bytes of ``path``); ``CorruptFile`` saying why if it is not one."""
    try:
        return Task.model_validate_json(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "file"
        raise CorruptFile(path, f"{where}: {first.get('msg', 'invalid')}") from None


def _parallel(pool: Executor, jobs: Sequence[Callable[[], None]]) -> None:
    """Run ``jobs`` at once: the last on this thread, the others on ``pool``; re-raise the first error."""
    futures = [pool.submit(job) for job in jobs[:-1]]
    try:
        jobs[-1]()
    finally:
        for future in futures:
            future.result()


def _create_new(path: Path, data: bytes, *, durable: bool) -> os.stat_result:
    try:
        return create_new(path, data, durable=durable)
    except FileExistsError:
        raise ConflictError(f"{path} exists already, but its id was reserved for a task being created: the id "
                            "counter .next_id was moved back while a plan was being created; run `team doctor`") from None


KNOWN_MAX = 32768
"""Task files whose bytes one ``TaskFiles`` keeps (``Known``): ~30 MB at most with a run's files (~0.4 KB)."""

Head = tuple[int, Status]
"""What a dependency check needs of a task file: ``(id, status)``."""

Ident = tuple[int, int, int, int, int]
"""A file's identity for ``Known``: ``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``. The
ctime is the kernel's own: a write, a rename or a link sets it, and no user can set it back (an
editor that restores the old mtime with ``touch -d`` or ``os.utime`` still changes it)."""


def ident_of(st: os.stat_result) -> Ident:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class Known:
    """The bytes of a task file as this process last wrote or read them, and what they say (see the
    module docstring). ``head``, once parsed: the task's ``(id, status)``."""

    __slots__ = ("data", "head", "ident")

    def __init__(self, ident: Ident, data: bytes, head: Head | None = None):
        self.ident = ident
        self.data = data
        self.head = head


WRITE_CHUNK = 2048
"""Task files serialised and written at a time by one big write (a plan's bulk create): bounds its memory."""


class TaskFiles:
    """The ``.tasks/`` directory of one state root (see the module docstring). Thread-safe."""

    def __init__(self, root: Path | str, *, clock: Clock = time.time, durable: bool = True,
                 secrets: Secrets | None = None):
        self.root = Path(root)
        self.secrets = Secrets.from_environ() if secrets is None else secrets
        self.dir = tasks_dir(self.root)
        self.clock = clock
        self.durable = durable
        self.lock_path = self.dir / ".lock"
        self.waiting_path = self.dir / ".lock-waiting"  # held shared by whoever waits for .lock
        self.events_path = self.dir / "events.jsonl"
        self.counter_path = self.dir / ".next_id"
        self.names_path = self.dir / "names.jsonl"
        self.pipeline: Pipeline | None = None  # attached for a run (``TaskStore.pipelined``)
        self._append_lock = threading.Lock()  # event-log appends of this object's threads, one at a time
        self._pools: dict[str, ThreadPoolExecutor] = {}  # fsync threads, made on first need (``_threads``)
        self._pool_pid: dict[str, int] = {}
        self._pool_lock = threading.Lock()
        self._known: dict[str, Known] = {}  # task file name -> its bytes as last written or read here
        self._queued: dict[str, tuple[bytes, Head]] = {}  # file name -> bytes queued for the pipeline, their head
        self._known_lock = threading.Lock()

    # ------------------------------------------------------------------ paths and the lock
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

        With a pipeline attached, the section starts once its queued batches
        are on disk, and then works on the files directly (pipeline.py).
        """
        pipe = self.pipeline
        if pipe is not None:
            with pipe.exclusive(drain=True):
                yield
            return
        self.ensure()
        with file_lock(self.lock_path, announce=self.waiting_path):
            yield

    @contextmanager
    def holding(self) -> Iterator[Callable[[], AbstractContextManager[object]]]:
        """The store held against other processes for the block, for writes only this thread makes
        (new files at reserved ids); yields ``section``, which gives the short locked steps around them.

        With a pipeline (a run) the flock is pinned (``Pipeline.pinned``) and ``section()`` is one
        mutex section: this process's sections (the scheduler's commits) go on meanwhile. Without,
        the block holds the lock and ``section()`` is nothing more.
        """
        pipe = self.pipeline
        if pipe is None:
            with self.locked():
                yield nullcontext
            return
        with pipe.pinned():
            yield partial(pipe.exclusive, drain=True)

    @contextmanager
    def locked_on(self, ref: int | str) -> Iterator[None]:
        """``locked`` for a change to the existing task ``ref``: without a store there is no such
        task, so ``UnknownRef`` is raised before the lock would create ``.tasks/``."""
        if self.pipeline is None and not self.exists():
            self.resolve(ref)  # raises: nothing to change, and nothing is created
        with self.locked():
            yield

    @contextmanager
    def locked_for_commit(self) -> Iterator[None]:
        """``locked``, except that with a pipeline the section's batch is queued, not written."""
        pipe = self.pipeline
        if pipe is None:
            with self.locked():
                yield
            return
        with pipe.exclusive(drain=False):
            yield

    # ------------------------------------------------------------------ reads
    def load_file(self, path: Path) -> Task:
        """Parse one task file (its queued version first, with a pipeline); FileNotFoundError if none."""
        pipe = self.pipeline
        data = pipe.peek(path) if pipe is not None else None
        if data is not None:
            return parse_task(path, data)
        known = self._known_as_on_disk(path)
        if known is not None:
            return parse_task(path, known.data)
        data, ident = self._read_file(path)
        task = parse_task(path, data)
        if ident is not None:
            self._remember(path, ident, data, (task.id, task.status))
        return task

    def status_of(self, task_id: int) -> Status:
        """The status of task ``task_id``, as ``read(task_id).status`` says it (the same errors), without
        a parse when this process knows the file's bytes (a dependency check: ``Attempts``)."""
        if 1 <= task_id <= MAX_TASK_ID:
            path = self.path(task_id)
            pipe = self.pipeline
            queued = pipe.peek(path) if pipe is not None else None
            head: Head | None = None
            if queued is not None:  # a version this process decided: its head was kept with it (``write``)
                with self._known_lock:
                    mine = self._queued.get(path.name)
                head = mine[1] if mine is not None and mine[0] is queued else None
            else:
                try:
                    known = self._known_as_on_disk(path)
                except FileNotFoundError:
                    known = None  # read says so
                if known is not None:
                    if known.head is None:
                        task = parse_task(path, known.data)
                        known.head = (task.id, task.status)
                    head = known.head
            if head is not None and head[0] == task_id:
                return head[1]
        return self.read(task_id).status  # raises as read does

    # ------------------------------------------------------------------ the bytes this process knows
    def _known_as_on_disk(self, path: Path) -> Known | None:
        """The kept bytes of ``path`` if the file is still the one they came from (``stat``-ed now)."""
        with self._known_lock:
            known = self._known.get(path.name)
        if known is None:
            return None
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._forget(path)
            raise
        except OSError as e:
            raise CorruptFile(path, f"cannot read: {e.strerror}") from None
        if ident_of(st) != known.ident:
            return None
        with self._known_lock:  # most recently used last: the first are dropped when full
            current = self._known.pop(path.name, None)
            if current is not None:
                self._known[path.name] = current
        return known

    def _read_file(self, path: Path) -> tuple[bytes, Ident | None]:
        """The bytes of ``path`` and its identity as it was before they were read (``None`` when the
        file changed size meanwhile: edited in place, it is not kept); FileNotFoundError if none."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._forget(path)
            raise
        except OSError as e:
            raise CorruptFile(path, f"cannot read: {e.strerror}") from None
        try:
            st = os.fstat(fd)  # before the read: a change after it leaves the identity behind, never the bytes
            chunks = []
            want = st.st_size + 1
            while chunk := os.read(fd, want):
                chunks.append(chunk)
                if len(chunk) < want:
                    break
                want = 65536
        except OSError as e:
            raise CorruptFile(path, f"cannot read: {e.strerror}") from None
        finally:
            os.close(fd)
        data = b"".join(chunks)
        return data, (ident_of(st) if len(data) == st.st_size else None)

    def _remember(self, path: Path, ident: Ident, data: bytes, head: Head | None = None) -> None:
        """Keep ``data`` as the bytes of the file ``ident`` names."""
        with self._known_lock:
            self._keep(path, Known(ident, data, head))

    def _keep(self, path: Path, known: Known, *, room_only: bool = False) -> None:
        """(``_known_lock`` held.) The most recently used last; the first dropped past ``KNOWN_MAX``.
        ``room_only``: only if that drops nothing (a plan's new files: the first of them are claimed
        first, the last would push them out)."""
        if room_only and len(self._known) >= KNOWN_MAX and path.name not in self._known:
            return
        self._known.pop(path.name, None)
        self._known[path.name] = known
        while len(self._known) > KNOWN_MAX:
            del self._known[next(iter(self._known))]

    def _remember_written(self, written: dict[Path, tuple[os.stat_result, bytes]], heads: dict[Path, Head] | None,
                          *, room_only: bool) -> None:
        """Keep files just written (``_write_files``), each with its head: from ``heads``, else the one
        kept when its bytes were queued (``write``), which then goes (unless a newer version is queued)."""
        with self._known_lock:
            for path, (st, data) in written.items():
                if heads is not None:
                    head = heads.get(path)
                else:
                    mine = self._queued.get(path.name)
                    head = None
                    if mine is not None and mine[0] is data:
                        del self._queued[path.name]
                        head = mine[1]
                self._keep(path, Known(ident_of(st), data, head), room_only=room_only)

    def _forget(self, path: Path) -> None:
        with self._known_lock:
            self._known.pop(path.name, None)

    def load(self, task_id: int) -> Task:
        """``task_<id>.json``, checked to hold that id (a copied file would not)."""
        path = self.path(task_id)
        task = self.load_file(path)
        if task.id != task_id:
            raise CorruptFile(path, f"holds id {task.id}, not {task_id}")
        return task

    def read(self, task_id: int) -> Task:
        if not 1 <= task_id <= MAX_TASK_ID:
            raise UnknownRef(f"no task #{task_id}; `team task list` shows the tasks")
        try:
            return self.load(task_id)
        except FileNotFoundError:
            raise UnknownRef(f"no task #{task_id}; `team task list` shows the tasks") from None

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
                tasks.append(self.load(tid))
            except FileNotFoundError:
                continue  # deleted between listing and reading
        return tasks

    def scan(self) -> tuple[list[Task], list[tuple[Path, str]]]:
        """Like ``all`` but collects unreadable files instead of raising (doctor)."""
        tasks, bad = [], []
        for tid in self.ids():
            path = self.path(tid)
            try:
                task = self.load_file(path)
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
        """The one resolver of a task REF (every command, tool and board action that takes one):
        a numeric id (``4``, ``#4``), a task name (``build.src-make``), or a plan task's id alone
        (``src-make``) when one plan has it. A bare id that several plans have is refused with the
        ``PLAN.ID`` names that match (``AmbiguousRef``); anything else is ``UnknownRef``."""
        if isinstance(ref, int):
            if 1 <= ref <= MAX_TASK_ID and self.path(ref).exists():
                return ref
            raise UnknownRef(f"no task #{ref}; `team task list` shows the tasks")
        text = str(ref).strip()
        digits = text[1:] if text.startswith("#") else text
        if digits.isdigit():
            return self.resolve(int(digits))
        hit = self.name_lookup(text)
        if hit is not None:
            return hit
        tasks = self.scan()[0]
        for task in tasks:
            if task.name == text:
                return task.id
        plans = [t for t in tasks if t.plan and t.plan_task == text]
        if len(plans) == 1:
            return plans[0].id
        if plans:
            names = ", ".join(f"{t.name or f'{t.plan}.{t.plan_task}'} (#{t.id})" for t in plans)
            raise AmbiguousRef(f"task {text!r} is in {len(plans)} plans: {names}; name one of them as PLAN.{text}")
        raise UnknownRef(f"no task named {text!r}{_near(text, tasks)}; `team task list` shows the tasks")

    def get(self, ref: int | str) -> Task:
        """The task ``ref`` names (one read for a numeric ref)."""
        if isinstance(ref, int):
            return self.read(ref)
        text = str(ref).strip()
        digits = text[1:] if text.startswith("#") else text
        return self.read(int(digits)) if digits.isdigit() else self.read(self.resolve(text))

    # ------------------------------------------------------------------ the name index and the id counter
    def name_entries(self) -> list[dict[str, Any]]:
        """``names.jsonl`` as read (a batch reads it once)."""
        return read_jsonl(self.names_path)

    def name_lookup(self, name: str, entries: list[dict[str, Any]] | None = None) -> int | None:
        """The id the name index gives ``name``, checked against the task file."""
        for entry in reversed(self.name_entries() if entries is None else entries):
            if entry.get("name") == name:
                tid = entry.get("id")
                if isinstance(tid, int):
                    try:
                        if self.load_file(self.path(tid)).name == name:
                            return tid
                    except (FileNotFoundError, CorruptFile):
                        return None
                return None
        return None

    def add_names(self, tasks: Iterable[Task]) -> None:
        """Index the names of new tasks (under the lock; a cache, not fsynced)."""
        lines = "\n".join(dumps({"name": t.name, "id": t.id}) for t in tasks if t.name)
        if lines:  # one append for a whole batch
            append_line(self.names_path, lines, durable=False)

    def rebuild_names_locked(self) -> dict[str, int]:
        """Rewrite ``names.jsonl`` from the task files (first id wins a duplicate name); under the lock."""
        names: dict[str, int] = {}
        for task in self.scan()[0]:
            if task.name and task.name not in names:
                names[task.name] = task.id
        atomic_write(self.names_path, "".join(dumps({"name": n, "id": i}) + "\n" for n, i in names.items()),
                     durable=self.durable)
        return names

    def next_id(self) -> int:
        """The next id: past the highest on disk and past the counter, so an id is never
        handed out twice and never fills a gap (a task removed by hand, a seed file copied in
        above the counter). The counter remembers ids whose files are gone; the scan catches
        files the counter never saw."""
        try:
            counter = int(self.counter_path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            counter = 0
        ids = self.ids()
        return max(counter, (ids[-1] + 1) if ids else 1, 1)

    def set_counter(self, next_id: int, *, durable: bool = False) -> None:
        """``durable``: fsynced (a reservation of ids, ``TaskEdits.reserve``); else a cache like the rest."""
        atomic_write(self.counter_path, str(next_id), durable=durable and self.durable)

    # ------------------------------------------------------------------ events
    def event_record(self, task: Task, event: str, actor: str, before: Status | None, **extra: Any) -> EventRecord:
        record: EventRecord = {"ts": round(self.clock(), 6), "task": task.id, "event": event, "actor": actor}
        if before is not None or event == "created":
            record["from"] = before.value if before else None
            record["to"] = task.status.value
        record.update({k: v for k, v in extra.items() if v is not None})
        return record

    def events(self, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Events from byte ``offset``; returns them and the offset to resume from."""
        try:
            with open(self.events_path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], offset
        end = data.rfind(b"\n") + 1  # never consume a line still being written
        return list(parse_jsonl(data[:end])), offset + end

    def _event_lines(self, records: Iterable[EventRecord]) -> str:
        """Event lines as written: known secrets never reach the log (core.redact)."""
        return self.secrets.scrub("\n".join(dumps(r) for r in records))

    def _append_events(self, lines: str) -> None:
        with self._append_lock:
            append_line(self.events_path, lines, durable=False)

    # ------------------------------------------------------------------ writes
    def serialize(self, task: Task) -> str:
        """The file's bytes; known secrets never reach a task file (core.redact)."""
        return self.secrets.scrub(dumps(task.to_json()))

    def save(self, task: Task, event: str, actor: str, before: Status | None, **extra: Any) -> None:
        """Write one task and its event line as one durable batch."""
        self.write([task], [self.event_record(task, event, actor, before, **extra)])

    def write(self, tasks: Sequence[Task], records: Sequence[EventRecord] = (),
              logged_first: Sequence[EventRecord] = (), on_logged: Callable[[], None] | None = None,
              *, index: bool = False, defer: Sequence[int] = ()) -> None:
        """Atomic per file, durable as a batch, then the batch's event lines (under the lock).

        ``logged_first`` lines are appended before any file is written, and
        ``on_logged`` is called right after them (see ``Attempts.commit``).
        Inside a pipeline's commit section the files and ``records`` are
        queued for the group-commit writer instead of written here.
        ``index``: add the files to the task index once they are durable
        (index.py; a plan's bulk create). ``defer``: ids of tasks whose new
        state ``logged_first`` already made durable (claims); a pipeline may
        hold their files back (pipeline.py ``CLAIM_DEFER``).
        """
        if logged_first:
            self._append_events(self._event_lines(logged_first))
        if on_logged is not None:
            on_logged()
        if not tasks and not records and not logged_first:
            return
        now = self.clock()
        for task in tasks:
            task.updated_at = now
        lines = self._event_lines(records) if records else ""
        pipe = self.pipeline
        if pipe is not None and pipe.queueing == threading.get_ident():
            files = {self.path(t.id): self.serialize(t).encode() for t in tasks}
            with self._known_lock:  # what each queued version says, for dependency checks (``status_of``)
                self._queued.update((path.name, (data, (t.id, t.status)))
                                    for (path, data), t in zip(files.items(), tasks, strict=True))
            pipe.submit(WriteBatch(files, lines, logged=bool(logged_first),
                                   defer=frozenset(self.path(i) for i in defer) if logged_first else frozenset()))
            return
        digests: dict[int, str] = {}
        for start in range(0, len(tasks), WRITE_CHUNK):  # a plan's 100k files are never all in memory at once
            chunk = tasks[start:start + WRITE_CHUNK]
            data = [self.serialize(t).encode() for t in chunk]
            self._write_files({self.path(t.id): d for t, d in zip(chunk, data, strict=True)},
                              heads={self.path(t.id): (t.id, t.status) for t in chunk})
            if index:
                # a file whose secrets were masked is not dumps(to_json()) of its task: left to the readers
                digests.update({t.id: task_index.digest(d) for t, d in zip(chunk, data, strict=True)
                                if MASK.encode() not in d})
        self._sync(lines, had_files=bool(tasks), synced_lines=bool(logged_first))
        if index:
            task_index.remember(self.dir, digests)

    def create_files(self, tasks: Sequence[Task], *, index: bool = False) -> None:
        """New task files at reserved ids, each atomic and never over an existing file (``ConflictError``),
        then the folder fsynced; ``index``: add them to the task index (``TaskEdits.create_reserved``)."""
        now = self.clock()
        digests: dict[int, str] = {}
        for start in range(0, len(tasks), WRITE_CHUNK):
            chunk = tasks[start:start + WRITE_CHUNK]
            for task in chunk:
                task.updated_at = now
            data = [self.serialize(t).encode() for t in chunk]
            self._write_files({self.path(t.id): d for t, d in zip(chunk, data, strict=True)}, exclusive=True,
                              heads={self.path(t.id): (t.id, t.status) for t in chunk})
            if index:
                digests.update({t.id: task_index.digest(d) for t, d in zip(chunk, data, strict=True)
                                if MASK.encode() not in d})
        if self.durable and tasks:
            fsync_dir(self.dir)
        if index:
            task_index.remember(self.dir, digests)

    def log(self, records: Sequence[EventRecord]) -> None:
        """Append event lines and make them durable (under the lock), with no task file of their own."""
        if records:
            self._append_events(self._event_lines(records))
            if self.durable:
                fsync_dir(self.events_path)

    def _threads(self, kind: str = "fsync") -> Executor:
        """This object's fsync threads (a forked child, which inherits none of them, makes its own);
        ``create``: a second set for new files at reserved ids, written while the run's group-commit
        writer goes on with the first (``create_files``)."""
        with self._pool_lock:
            pool = self._pools.get(kind)
            if pool is None or self._pool_pid.get(kind) != os.getpid():
                pool = self._pools[kind] = ThreadPoolExecutor(max_workers=FSYNC_THREADS,
                                                              thread_name_prefix=f"team-{kind}")
                self._pool_pid[kind] = os.getpid()
            return pool

    def write_now(self, files: dict[Path, bytes], lines: str, *, synced_lines: bool = True) -> None:
        """Write ``files`` (each atomically), then append ``lines``; durable together on return.

        ``synced_lines``: the event log has lines of this batch to fsync even
        when ``lines`` is empty (claims appended first).
        """
        self._write_files(files)
        self._sync(lines, had_files=bool(files), synced_lines=synced_lines)

    def _write_files(self, files: dict[Path, bytes], *, exclusive: bool = False,
                     heads: dict[Path, Head] | None = None) -> None:
        """Each file atomically (renamed into place, its data fsynced); the folder is synced by ``_sync``.
        ``exclusive``: new files, linked into place (``create_new``): an existing one is never replaced.
        Each is kept as known (``Known``) with its head: from ``heads``, else the one kept when it was
        queued (``write``)."""
        put: Callable[[Path, bytes], os.stat_result] = (partial(_create_new, durable=self.durable) if exclusive
                                                        else partial(atomic_write, durable=self.durable, sync_dir=False))

        written: dict[Path, os.stat_result] = {}

        def write(path: Path, data: bytes) -> None:
            written[path] = put(path, data)

        if len(files) <= 1 or not self.durable:
            for path, data in files.items():
                write(path, data)
        else:
            _parallel(self._threads("create" if exclusive else "fsync"),
                      [partial(write, path, data) for path, data in files.items()])
        # kept in one go, on this thread, once all are written (a failed batch keeps nothing: read again)
        self._remember_written({path: (written[path], data) for path, data in files.items()}, heads,
                               room_only=exclusive)

    def _sync(self, lines: str, *, had_files: bool, synced_lines: bool) -> None:
        """After the files of a batch: append its event ``lines``, then make the folder and the log durable."""
        if lines:
            self._append_events(lines)
        if not self.durable:
            return
        syncs: list[Callable[[], None]] = []
        if lines or synced_lines:
            syncs.append(lambda: fsync_dir(self.events_path))
        if had_files:
            syncs.append(lambda: fsync_dir(self.dir))
        if len(syncs) == 1:
            syncs[0]()
        elif syncs:
            _parallel(self._threads(), syncs)

    def delete(self, ids: Iterable[int], *, actor: str, reason: str) -> int:
        """Remove these task files (under the lock); logs a ``deleted`` event each."""
        n = 0
        for tid in ids:
            path = self.path(tid)
            self._forget(path)
            if path.exists():
                path.unlink()
                self._append_events(dumps({"ts": round(self.clock(), 6), "task": tid, "event": "deleted",
                                           "actor": actor, "reason": reason}))
                n += 1
        if n and self.durable:
            fsync_dir(self.dir)
        return n

    def delete_everything(self) -> None:
        """Remove every task file, the index, the counter and the event log (under the lock)."""
        with self._known_lock:
            self._known.clear()
        for tid in self.ids():
            self.path(tid).unlink(missing_ok=True)
        for p in (self.counter_path, self.names_path, self.events_path, self.dir / INDEX_NAME):
            p.unlink(missing_ok=True)

    # ------------------------------------------------------------------ group commit
    @contextmanager
    def pipelined(self, on_error: Callable[[BaseException], None] | None = None) -> Iterator[Pipeline]:
        """Attach a group-commit pipeline for the block (pipeline.py); everything is durable after it."""
        if self.pipeline is not None:
            raise RuntimeError(f"{self.dir}: this store already runs a pipeline")
        pipe = Pipeline(self, on_error)
        self.pipeline = pipe
        try:
            yield pipe
        except BaseException:
            try:
                pipe.close(reraise=False)  # an error is on its way already: do not chain the writer's onto it
            finally:
                self._detach()
            raise
        try:
            pipe.close()
        finally:
            self._detach()

    def _detach(self) -> None:
        self.pipeline = None
        with self._known_lock:
            self._queued.clear()  # versions a failed writer dropped: nobody's now
