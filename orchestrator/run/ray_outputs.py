"""Outputs brought back from a node are kept only if their attempt is accepted (``--backend ray``).

An outputs-mode attempt's files (the ``outputs`` globs, a tar from the node)
are written into the lead's folder as soon as the attempt lands, before the
scheduler's store commit records it (a dependent submitted right after must
find them: the next workspace archive is made from that folder). A lead
killed in between leaves the files of an attempt the store never recorded as
done; the next run runs the task again, from a folder that already holds its
previous attempt's outputs: a command that appends (``echo x >> ledger``)
then writes its line twice. That is the fence this module puts in front of
the tree:

* ``OutputsJournal.bring`` first writes an undo record,
  ``.team/ray/undo/<seq>-t<task>e<epoch>.json``: for every path the tar will
  write, what was there before (nothing, a file's bytes and mode, a symlink's
  target, a folder) and a digest of what the tar writes; then extracts the
  tar;
* a record whose attempt the store accepted (its task file, as on disk,
  ``completed`` at that epoch) is dropped: during the run every
  ``PRUNE_EVERY`` records, and at ``settle``;
* ``settle`` (when the executor starts, before anything runs, and when it
  closes, after the scheduler made its last batch durable) undoes every
  record whose attempt was not accepted, newest first: each path that still
  holds exactly what the attempt wrote gets its previous state back (a path
  changed since, by a later attempt or by hand, is left alone).

So the outputs of an attempt are in the tree, for good, exactly when its
completion is in the store; the task's re-run starts from the folder as it
was before. What a command does outside its workspace is not fenced (it is
at-least-once: docs/run.md, "What a kill promises"). The records are written
without fsync: a ``kill -9`` keeps them (the page cache survives a process),
a power loss may lose a record together with the outputs it covers.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import CorruptFile
from ..core.fsutil import atomic_write
from ..core.models import Status
from ..core.paths import team_dir
from ..tasks.files import parse_task
from ..tasks.store import TaskStore
from .ray_remote import open_tar

PRUNE_EVERY = 64
"""Records written between two looks at which of them their tasks' completions made final."""

State = dict[str, Any]
"""What a path held: ``{"kind": "none"|"file"|"link"|"dir", "data": base64, "mode": int, "target": str}``."""


def _state(path: Path) -> State:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"kind": "none"}
    if stat.S_ISLNK(st.st_mode):
        return {"kind": "link", "target": os.readlink(path)}
    if stat.S_ISDIR(st.st_mode):
        return {"kind": "dir"}
    if stat.S_ISREG(st.st_mode):
        return {"kind": "file", "data": base64.b64encode(path.read_bytes()).decode(), "mode": stat.S_IMODE(st.st_mode)}
    return {"kind": "other"}


def _digest(path: Path) -> str:
    """What ``path`` holds now, as ``bring`` recorded what the tar writes there."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "none"
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(path)
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    if stat.S_ISREG(st.st_mode):
        return "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return "other"


def _written(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    if member.issym():
        return "link:" + member.linkname
    if member.isdir():
        return "dir"
    f = tar.extractfile(member)
    return "file:" + hashlib.sha256(f.read() if f is not None else b"").hexdigest()


@dataclass(frozen=True)
class Undone:
    """An attempt whose outputs were taken back: it was not recorded as done."""

    task_id: int
    epoch: int
    paths: int  # paths given their previous state back


class OutputsJournal:
    """The undo records of outputs brought back into the lead's folders (see the module docstring).
    Thread-safe: shell and agent attempts land on their executors' threads."""

    def __init__(self, root: Path, store: TaskStore):
        self.dir = team_dir(root) / "ray" / "undo"
        self.store = store
        self._lock = threading.Lock()
        self._since_prune = 0

    # -------------------------------------------------------------- bringing outputs in
    def bring(self, task_id: int, epoch: int, folder: Path, data: bytes) -> bool:
        """Extract the tar ``data`` into ``folder`` behind an undo record; False when it holds nothing."""
        with open_tar(data) as tar:
            members = tar.getmembers()
            if not members:
                return False
            files = []
            for m in members:
                rel = os.path.normpath(m.name)
                if rel in (".", "") or rel.startswith("..") or os.path.isabs(rel):
                    continue  # the extraction's "data" filter refuses what would escape the folder
                path = folder / rel
                files.append({"path": rel, "before": _state(path), "after": _written(tar, m)})
            self.dir.mkdir(parents=True, exist_ok=True)
            record = self.dir / f"{time.time_ns():020d}-t{task_id}e{epoch}.json"
            atomic_write(record, json.dumps({"task": task_id, "epoch": epoch, "folder": str(folder),
                                             "files": files}), durable=False)
            tar.extractall(folder, filter="data")
        with self._lock:
            self._since_prune += 1
            prune = self._since_prune >= PRUNE_EVERY
            if prune:
                self._since_prune = 0
        if prune:
            self.settle(undo=False)
        return True

    # -------------------------------------------------------------- settling
    def accepted(self, task_id: int, epoch: int) -> bool:
        """The store, as on disk, holds this attempt's completion (the lead's queued, not yet written
        batches do not count: a kill now would lose them)."""
        path = self.store.path(task_id)
        try:
            task = parse_task(path, path.read_bytes())
        except (FileNotFoundError, CorruptFile):
            return False
        return task.status == Status.completed and task.epoch == epoch

    def settle(self, *, undo: bool = True, accepted: Callable[[int, int], bool] | None = None) -> list[Undone]:
        """Drop the records of accepted attempts; with ``undo``, take back the others' outputs (newest
        first) and drop them too. Only with nothing in flight: an attempt landed but not yet committed
        is "not accepted" here."""
        check = accepted or self.accepted
        out: list[Undone] = []
        with self._lock:
            if not self.dir.is_dir():
                return out
            for record in sorted(self.dir.glob("*.json"), reverse=True):
                try:
                    entry = json.loads(record.read_bytes())
                    task_id, epoch = int(entry["task"]), int(entry["epoch"])
                except (ValueError, KeyError, TypeError):
                    record.unlink()  # cut short while written: atomic_write leaves no such file; a hand edit
                    continue
                if check(task_id, epoch):
                    record.unlink()
                elif undo:
                    out.append(Undone(task_id, epoch, _undo(Path(entry["folder"]), entry["files"])))
                    record.unlink()
        return out


def _undo(folder: Path, files: list[dict[str, Any]]) -> int:
    """Give each path that still holds what the attempt wrote its previous state back; how many."""
    n = 0
    for f in reversed(files):  # children before their folders
        path = folder / f["path"]
        if _digest(path) != f["after"]:
            continue  # changed since (a later attempt, or by hand): not ours to take back
        before: State = f["before"]
        kind = before.get("kind")
        if kind == "dir" or (f["after"] == "dir" and kind != "none"):
            continue  # a folder that was there stays
        if f["after"] == "dir":
            try:
                path.rmdir()  # made by the extraction: goes if nothing else is in it now
            except OSError:
                continue
        else:
            path.unlink()
            if kind == "file":
                atomic_write(path, base64.b64decode(before["data"]), durable=False)
                os.chmod(path, int(before.get("mode", 0o644)))
            elif kind == "link":
                os.symlink(before["target"], path)
        n += 1
    return n
