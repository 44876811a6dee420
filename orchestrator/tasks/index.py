"""The task index, ``.tasks/index.json``: reading every task without validating every file.

What costs in a listing of thousands of tasks is not reading the files but
validating each one (a pydantic ``Task`` per file, and importing pydantic at
all). The index remembers which file contents were already validated: per
task id, a hash (BLAKE2b, 12 bytes) of the exact bytes of a file that
``Task`` accepted and whose ``to_json()`` equals ``json.loads`` of those
bytes, i.e. bytes that are ``dumps(task.to_json())`` (every file ``team``
writes). A reader (``read_rows``):

* lists ``.tasks/`` and reads every task file (the files stay the source of
  truth: nothing is taken from the index but "these bytes were valid");
* bytes whose hash the index holds are parsed with ``json.loads`` alone;
* a file in the seed's format (written by the seed's ``TaskManager`` or any
  tool of its kind: only the keys ``id``, ``subject``, ``description``,
  ``status``, ``blockedBy``, ``owner``, with plain JSON values of their types)
  is checked by ``seed_form`` without pydantic: for such a file pydantic would
  accept exactly these values, and ``Task.to_json()`` is those keys with the
  defaults of the missing ones. Anything else in it (a string id, an unknown
  status, another key) goes the validated way. Before, such files were never
  in the index (their bytes, ``indent=2``, are not team's form), so every
  listing imported pydantic and validated them all: 130 ms against 50 ms for
  1,000 files (issue 29);
* any other file (new, edited by hand, written by a run since) is validated
  as before (``files.parse_task``: pydantic, so an invalid file is reported,
  never masked) and, if its JSON is the canonical form, remembered;
* a file removed by hand is simply not listed; its entry is dropped;
* if what the index vouches for changed, it is rewritten (a cache: atomic,
  not fsynced; a root we may not write keeps working without it).

A missing, torn or foreign index is treated as empty: everything is
validated once and the index rebuilt. Staleness is decided by content, not
by times, so there is no window (same clock tick, a copied file with its old
mtime) in which an edit could hide behind the index. A bulk create of 100
or more tasks (``TaskStore.create_many``) adds its files to the index under
the same lock (``remember``); the files a run writes are validated by the
first listing after it, which rewrites the index.

``Row`` carries what the listing queries read (``graph.TaskLike``) and the
task's JSON form; nothing here imports pydantic unless a file must be
validated.
"""

from __future__ import annotations

import json
import os
from hashlib import blake2b
from pathlib import Path
from typing import Any

from ..core.fsutil import atomic_write
from ..core.jsonutil import dumps
from ..core.states import MAX_TASK_ID, Status

INDEX_NAME = "index.json"
VERSION = 1
TASK_PREFIX = "task_"
TASK_SUFFIX = ".json"


class Row:
    """One task as the index reader gives it: the fields listings use, its JSON form, and the
    file's bytes when they are that JSON form exactly (``dumps(data)``: every file ``team``
    writes), so a listing can print them as they are."""

    __slots__ = ("blockedBy", "canonical", "data", "id", "name", "owner", "status", "subject")

    def __init__(self, data: dict[str, Any], canonical: bytes | None = None):
        self.data = data
        self.canonical = canonical
        self.id: int = data["id"]
        self.status = Status(data.get("status", "pending"))
        self.blockedBy: list[int] = data.get("blockedBy", [])  # noqa: N815 (the seed's key)
        self.owner: str = data.get("owner", "")
        self.subject: str = data["subject"]
        self.name: str | None = data.get("name")


SEED_KEYS = ("id", "subject", "description", "status", "blockedBy", "owner")
"""The keys of a task file of the seed, in ``Task.to_json()``'s order."""
_SEED_KEYS = frozenset(SEED_KEYS)
_STATUSES = frozenset(s.value for s in Status)


def seed_form(raw: bytes, tid: int) -> dict[str, Any] | None:
    """The JSON form (``Task.to_json()``) of task file ``tid`` when it holds only the seed's keys with
    plain values (module docstring), worked out without pydantic; None for anything else."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if type(data) is not dict or not data.keys() <= _SEED_KEYS or data.get("id") != tid:
        return None
    subject, description, owner = data.get("subject"), data.get("description", ""), data.get("owner", "")
    status, blocked = data.get("status", "pending"), data.get("blockedBy", [])
    if (type(tid) is not int or not 1 <= tid <= MAX_TASK_ID or type(data["id"]) is not int
            or type(subject) is not str or type(description) is not str or type(owner) is not str
            or type(status) is not str or status not in _STATUSES
            or type(blocked) is not list or any(type(b) is not int for b in blocked)):
        return None
    return {"id": tid, "subject": subject, "description": description, "status": status, "blockedBy": blocked,
            "owner": owner}


def digest(data: bytes) -> str:
    return blake2b(data, digest_size=12).hexdigest()


def index_path(tasks_dir: Path) -> Path:
    return tasks_dir / INDEX_NAME


def _task_id(fname: str) -> int | None:
    if fname.startswith(TASK_PREFIX) and fname.endswith(TASK_SUFFIX):
        digits = fname[len(TASK_PREFIX): -len(TASK_SUFFIX)]
        if digits.isdigit():
            return int(digits)
    return None


def load(tasks_dir: Path) -> dict[str, str]:
    """``{id: hash of valid bytes}``; empty if the index is missing, torn or not ours."""
    try:
        data = json.loads(index_path(tasks_dir).read_bytes())
    except (OSError, ValueError):
        return {}
    valid = data.get("valid") if isinstance(data, dict) and data.get("v") == VERSION else None
    if not isinstance(valid, dict):
        return {}
    return {str(k): str(v) for k, v in valid.items()}


def save(tasks_dir: Path, valid: dict[str, str]) -> None:
    """Rewrite the index. A root we may not write (or a full disk) keeps working without it."""
    try:
        atomic_write(index_path(tasks_dir), json.dumps({"v": VERSION, "valid": valid}, separators=(",", ":")),
                     durable=False)
    except OSError:
        return  # a cache: every reader validates what the index does not vouch for


def remember(tasks_dir: Path, digests: dict[int, str]) -> None:
    """Add files just written by ``team`` (canonical JSON of valid tasks; ``{id: digest(bytes)}``) to the index.

    Called under the store lock by the bulk write of a plan's tasks; a reader
    rewriting the index at the same time may drop these entries again, which
    only costs that many validations later.
    """
    valid = load(tasks_dir)
    for tid, sha in digests.items():
        valid[str(tid)] = sha
    save(tasks_dir, valid)


def read_rows(tasks_dir: Path, *, update: bool = True) -> tuple[list[Row], list[tuple[Path, str]]]:
    """Every readable task by id, and the files that could not be read (with why), like
    ``TaskFiles.scan``; validating only what the index does not vouch for. ``update=False``:
    leave the index as it is (``team run --dry-run`` writes nothing)."""
    if not tasks_dir.is_dir():
        return [], []
    names = []
    with os.scandir(tasks_dir) as it:
        for entry in it:
            tid = _task_id(entry.name)
            if tid is not None:
                names.append((tid, entry.name))
    names.sort()
    valid = load(tasks_dir)
    fresh: dict[str, str] = {}
    rows: list[Row] = []
    bad: list[tuple[Path, str]] = []
    dir_fd = os.open(tasks_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for tid, fname in names:
            try:
                raw = _read_at(dir_fd, fname)
            except FileNotFoundError:
                continue  # deleted between listing and reading
            except OSError as e:
                path = tasks_dir / fname
                bad.append((path, f"{path}: cannot read: {e.strerror}"))
                continue
            key = str(tid)
            h = digest(raw)
            if valid.get(key) == h:
                fresh[key] = h
                rows.append(Row(json.loads(raw), raw))
                continue
            seed = seed_form(raw, tid)
            if seed is not None:  # checked as cheaply as the index would vouch for it: nothing to remember
                rows.append(Row(seed))  # (printed with dumps: a comparison with the bytes cost more)
                continue
            path = tasks_dir / fname
            data, why = _validate(path, tid, raw)
            if data is None:
                bad.append((path, why))
                continue
            if raw == dumps(data).encode():  # canonical: the bytes alone give the same task next time
                fresh[key] = h
                rows.append(Row(data, raw))
            else:
                rows.append(Row(data))
    finally:
        os.close(dir_fd)
    if update and fresh != valid:
        save(tasks_dir, fresh)
    return rows, bad


READ_SIZE = 1 << 16


def _read_at(dir_fd: int, name: str) -> bytes:
    """The bytes of ``name`` in the directory ``dir_fd``, without a path object or a buffered
    file (``Path.read_bytes`` of 10,000 task files cost ~60 ms more)."""
    fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, READ_SIZE):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _validate(path: Path, tid: int, raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """The task's JSON form, or None and why the file is not a task (as ``TaskFiles.scan`` says)."""
    from ..core.errors import CorruptFile
    from .files import parse_task

    try:
        task = parse_task(path, raw)
    except CorruptFile as e:
        return None, str(e)
    if task.id != tid:
        return None, f"{path}: holds id {task.id}, not {tid}"
    return task.to_json(), ""
