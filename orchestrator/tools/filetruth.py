"""File truth: what the agent may believe about files it has read.

The transcript remembers text; this remembers *truth*. Every read records a
``Baseline`` per resolved path: sha256, size, mtime_ns, the line ranges the
model saw, the file's line count, whether the read covered the whole file,
and where the baseline came from (``read`` or the agent's own ``write``).

Rules (enforced by ``check``, which the tool pipeline runs before any edit or
overwrite of an existing file):

* no baseline → refused: read the file first;
* partial baseline (a range, or lines cut for length) → refused: a slice
  does not authorise rewriting the file. Several reads of the *same* content
  whose ranges together cover every line do count as a full read;
* the file on disk no longer hashes to the baseline → refused, and the
  refusal shows the changed lines: a short unified diff between the content
  at read time and now. For that we keep what was read in a content cache
  keyed by sha256, bounded in bytes (LRU); a file larger than
  ``max_file_bytes`` is tracked by hash only and the refusal says so.

A timestamp-only change (same hash) is not a change. A successful write or
edit records the new content as a fresh full baseline (``source="write"``),
so the agent can keep editing its own work. ``changes()`` reports tracked
files that changed on disk (for the next prompt), and ``to_json`` /
``from_json`` carry baselines and cached content across a resume.
Thread-safe; one instance per agent.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .base import Refused

DIFF_LINES = 40
DIFF_CHARS = 4000


class StaleFile(Refused):
    """An edit refused because the agent's view of the file is not the truth."""

    def __init__(self, message: str):
        super().__init__(message, "fresh")


@dataclass
class Baseline:
    """What the agent knows about one file."""

    path: str
    sha256: str
    size: int
    mtime_ns: int
    total_lines: int
    ranges: list[list[int]] = field(default_factory=list)
    """1-based inclusive [start, end] line ranges the model has seen."""
    truncated: bool = False
    """Some line in a read was cut for length: the model did not see it all."""
    source: str = "read"
    """``read`` (read_file) or ``write`` (the agent's own write/edit)."""

    @property
    def full(self) -> bool:
        if self.truncated:
            return False
        if self.total_lines == 0:
            return bool(self.ranges) or self.source == "write"
        covered = 0
        for start, end in sorted(self.ranges):
            if start > covered + 1:
                return False
            covered = max(covered, end)
        return covered >= self.total_lines

    def describe_range(self) -> str:
        """``line 3`` / ``lines 3-4`` / ``lines 1-2, 7-9`` / ``no lines``."""
        parts = [f"{s}-{e}" if e > s else f"{s}" for s, e in sorted(self.ranges)]
        if not parts:
            return "no lines"
        return ("line " if parts == [str(self.ranges[0][0])] else "lines ") + ", ".join(parts)


@dataclass
class FileChange:
    """A tracked file that differs from its baseline."""

    path: str
    kind: str  # "changed" | "deleted"
    detail: str


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def count_lines(data: bytes) -> int:
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


class FileTruth:
    """Per-agent baselines plus a bounded cache of the content they describe."""

    def __init__(self, *, max_cache_bytes: int = 4_000_000, max_file_bytes: int = 1_000_000):
        self.max_cache_bytes = max_cache_bytes
        self.max_file_bytes = max_file_bytes
        self._baselines: dict[str, Baseline] = {}
        self._content: OrderedDict[str, bytes] = OrderedDict()
        self._cache_bytes = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ recording
    def record_read(
        self, path: Path, data: bytes, start: int, end: int, *, truncated: bool = False
    ) -> Baseline:
        """Record that the model saw lines ``start..end`` of ``data`` (the whole file)."""
        key = str(path)
        digest = sha256(data)
        st = os.stat(path)
        with self._lock:
            old = self._baselines.get(key)
            ranges = [[start, end]] if end >= start else []
            if old is not None and old.sha256 == digest and old.source == "read":
                ranges = old.ranges + ranges
                truncated = truncated or old.truncated
            base = Baseline(
                path=key,
                sha256=digest,
                size=len(data),
                mtime_ns=st.st_mtime_ns,
                total_lines=count_lines(data),
                ranges=_merge(ranges),
                truncated=truncated,
                source="read",
            )
            self._baselines[key] = base
            self._remember(digest, data)
            return base

    def record_write(self, path: Path, data: bytes) -> Baseline:
        """The agent wrote ``data`` to ``path``: that is now the known truth."""
        key = str(path)
        digest = sha256(data)
        st = os.stat(path)
        total = count_lines(data)
        base = Baseline(
            path=key,
            sha256=digest,
            size=len(data),
            mtime_ns=st.st_mtime_ns,
            total_lines=total,
            ranges=[[1, total]] if total else [],
            source="write",
        )
        with self._lock:
            self._baselines[key] = base
            self._remember(digest, data)
        return base

    def forget(self, path: Path) -> None:
        with self._lock:
            self._baselines.pop(str(path), None)

    def _remember(self, digest: str, data: bytes) -> None:
        if len(data) > self.max_file_bytes:
            return
        if digest in self._content:
            self._content.move_to_end(digest)
            return
        self._content[digest] = data
        self._cache_bytes += len(data)
        live = {b.sha256 for b in self._baselines.values()}
        while self._cache_bytes > self.max_cache_bytes and len(self._content) > 1:
            victim = next((d for d in self._content if d not in live), None)
            if victim is None:
                victim = next(iter(self._content))
            self._cache_bytes -= len(self._content.pop(victim))

    # ------------------------------------------------------------------ queries
    def baseline(self, path: Path) -> Baseline | None:
        with self._lock:
            return self._baselines.get(str(path))

    def written(self) -> list[str]:
        """Paths the agent itself wrote or edited (for compaction summaries)."""
        with self._lock:
            return sorted(k for k, b in self._baselines.items() if b.source == "write")

    def check(self, path: Path, shown: str) -> bytes:
        """Refuse unless the agent holds a fresh, full baseline of ``path``.

        Returns the file's current bytes (the ones that were verified), so the
        caller edits exactly what was checked. ``shown`` is the path as the
        model knows it, used in messages.
        """
        data = path.read_bytes()
        with self._lock:
            base = self._baselines.get(str(path))
            cached = self._content.get(base.sha256) if base else None
        if base is None:
            raise StaleFile(
                f"{shown} exists and you have not read it in this session: "
                f"read_file {shown} (the whole file) before editing or overwriting it"
            )
        if sha256(data) != base.sha256:
            raise StaleFile(self._changed_message(shown, base, cached, data))
        if not base.full:
            why = (
                "some lines were cut for length"
                if base.truncated
                else f"you have seen only {base.describe_range()} of {base.total_lines}"
            )
            raise StaleFile(
                f"{shown}: your read is partial ({why}); read the whole file "
                f"(read_file without offset/limit) before editing or overwriting it"
            )
        return data

    def _changed_message(self, shown: str, base: Baseline, cached: bytes | None, now: bytes) -> str:
        head = (
            f"{shown} changed on disk since you last {'read' if base.source == 'read' else 'wrote'} it "
            f"(size {base.size} → {len(now)} bytes); your copy is stale, so the edit was refused. "
        )
        tail = f"Read {shown} again and redo the change against the current content."
        if cached is None:
            return head + "(The old content is too large to diff.) " + tail
        diff = unified(cached, now, f"{shown} (when you read it)", f"{shown} (on disk now)")
        return f"{head}Changed lines:\n{diff}\n{tail}"

    def changes(self) -> list[FileChange]:
        """Tracked files whose content no longer matches the baseline.

        Timestamp-only changes refresh the baseline quietly.
        """
        with self._lock:
            items = list(self._baselines.items())
        out = []
        for key, base in items:
            path = Path(key)
            try:
                st = os.stat(path)
                if st.st_size == base.size and st.st_mtime_ns == base.mtime_ns:
                    continue
                data = path.read_bytes()
            except FileNotFoundError:
                out.append(FileChange(key, "deleted", f"{key} was deleted"))
                continue
            if sha256(data) == base.sha256:
                with self._lock:
                    base.mtime_ns = st.st_mtime_ns
                continue
            with self._lock:
                cached = self._content.get(base.sha256)
            detail = unified(cached, data, key, key) if cached is not None else "(too large to diff)"
            out.append(FileChange(key, "changed", detail))
        return out

    # ------------------------------------------------------------------ persistence
    def to_json(self, *, include_content: bool = True) -> dict[str, Any]:
        with self._lock:
            data: dict[str, Any] = {
                "version": 1,
                "baselines": [asdict(b) for b in self._baselines.values()],
            }
            if include_content:
                live = {b.sha256 for b in self._baselines.values()}
                # Cached content only feeds diffs, so a lossy decode is fine.
                data["content"] = {
                    d: c.decode("utf-8", "replace") for d, c in self._content.items() if d in live
                }
            return data

    @classmethod
    def from_json(cls, data: dict[str, Any], **kw: Any) -> FileTruth:
        truth = cls(**kw)
        for raw in data.get("baselines", []):
            base = Baseline(**raw)
            truth._baselines[base.path] = base
        for digest, text in data.get("content", {}).items():
            truth._remember(digest, text.encode())
        return truth


def _merge(ranges: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def unified(old: bytes, new: bytes, old_name: str, new_name: str, *, context: int = 1) -> str:
    """A short unified diff of two byte strings, bounded to DIFF_LINES/DIFF_CHARS."""
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(a, b, old_name, new_name, n=context):
        lines.append(line if line.endswith("\n") else line + "\n")
    more = len(lines) - DIFF_LINES
    text = "".join(lines[:DIFF_LINES])
    if len(text) > DIFF_CHARS:
        text = text[:DIFF_CHARS] + "\n"
    if more > 0:
        text += f"… {more} more diff lines\n"
    return text.rstrip("\n") or "(no line differences: only bytes such as line endings changed)"
