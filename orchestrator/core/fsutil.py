"""Crash-safe file primitives shared by every on-disk store.

* ``atomic_write``: temp file in the same directory, fsync, ``os.replace``,
  fsync of the directory. A reader sees the old file or the new one, never a
  torn one, and a completed call survives power loss. The new file keeps the
  permission bits of the one it replaces (an edited ``build.sh`` stays
  executable); a new file gets ``0o666 & ~umask`` like ``open(path, "w")``.
  ``mkstemp`` creates 0600, so the temp file is ``fchmod``-ed before the
  rename. The umask is read once at import (``UMASK``): ``os.umask`` can
  only be read by setting it, which races with threads creating files, so
  ``read_umask`` uses ``/proc/self/status`` where it exists.
* ``create_new``: like ``atomic_write`` for a file that must not exist yet:
  the temp file is hard-linked to its name (``link(2)`` fails on an
  existing name), so a file someone else made is never replaced
  (``FileExistsError``). The store's reserved ids rely on it (tasks/edits.py).
* A write that fails (a full disk) raises an ``OSError`` naming the file it
  was writing, also when the failing call (``write``, ``fsync``) names none.
* ``append_line``: appends one JSON line to a log under an exclusive lock
  held by the caller. If a previous writer was killed mid-line the file does
  not end in ``\\n``; we first terminate that torn fragment so it becomes its
  own (unparsable, skipped) line and can never swallow our record.
* ``read_jsonl``: parses a JSONL file, skipping torn or corrupt lines.
* ``file_lock``: a cross-process and cross-thread exclusive lock. It is a
  blocking ``flock(2)`` on a fresh descriptor per acquisition: the kernel
  wakes the next waiter the moment the holder releases (filelock's default
  is a 50 ms non-blocking poll, which caps a contended store at ~20 ops/s
  per waiter), a killed holder's lock is released by the kernel, and two
  threads of one process exclude each other because each gets its own
  open file description. Not reentrant.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .jsonutil import dumps

TMP_PREFIX = ".tmp-"


def read_umask(status: str = "/proc/self/status") -> int:
    """The process umask, read from ``status`` (Linux) without changing it.

    Elsewhere it falls back to set-and-restore, which briefly changes the
    process-global umask: call it before starting threads (we do, at import).
    """
    try:
        with open(status) as f:
            found = re.search(r"^Umask:\s*([0-7]+)$", f.read(), re.M)
    except OSError:  # no procfs
        found = None
    if found:
        return int(found.group(1), 8)
    old = os.umask(0o022)
    os.umask(old)
    return old


UMASK = read_umask()
"""The umask at import; new files written by ``atomic_write`` get ``0o666 & ~UMASK``."""


def fsync_dir(path: Path) -> None:
    """fsync a directory (its entries) or, as well, any existing file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True, sync_dir: bool = True) -> os.stat_result:
    """Replace ``path`` with ``data`` atomically (and durably unless told not to).

    ``sync_dir=False`` leaves the directory fsync to the caller, who batches
    several writes and calls ``fsync_dir`` once. Returns the ``fstat`` of the
    new file taken after the rename (which changes its ctime): a reader's
    cache key (tasks/files.py).
    """
    if isinstance(data, str):
        data = data.encode()
    with _naming(path):
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".part", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                try:
                    mode = os.stat(path).st_mode & 0o7777
                except FileNotFoundError:
                    mode = 0o666 & ~UMASK
                os.fchmod(fd, mode)
                f.write(data)
                f.flush()  # all of it in the file before the rename shows it
                if durable:
                    os.fsync(fd)
                os.replace(tmp, path)
                st = os.fstat(fd)  # after the rename: the file as readers find it
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        if durable and sync_dir:
            fsync_dir(path.parent)
    return st


def create_new(path: Path, data: bytes, *, durable: bool = True) -> os.stat_result:
    """Create ``path`` holding ``data``, atomically for readers; ``FileExistsError`` if it exists
    (nothing is replaced). The directory is left for the caller to fsync (``fsync_dir``).
    Returns the ``fstat`` of the new file taken once it is linked in and its temporary name
    removed (both change its ctime), as ``atomic_write``."""
    with _naming(path):
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".part", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            try:
                os.fchmod(fd, 0o666 & ~UMASK)
                f.write(data)
                f.flush()
                if durable:
                    os.fsync(fd)
                os.link(tmp, path)
            finally:
                os.unlink(tmp)
            st = os.fstat(fd)
    return st


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An ``OSError`` raised without a file name (a ``write`` or ``fsync`` that hit a full disk)
    gets ``path``, so the one line the user reads says which file (core.errors.storage_error)."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno is not None:
            raise OSError(e.errno, e.strerror, str(path)) from e
        raise


def append_line(path: Path, record: dict[str, Any] | str, *, durable: bool = True) -> int:
    """Append one line to ``path``; the caller holds the file's lock.

    A write cut short by a SIGKILL (the kernel may stop a write at a page
    boundary) leaves a fragment without its newline; it is an append that
    never finished, so the next append cuts it off before writing.
    Returns the byte offset at which the record starts.
    """
    line = (record if isinstance(record, str) else dumps(record)).encode() + b"\n"
    with _naming(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                size = _last_line_end(fd, size)
                os.ftruncate(fd, size)
            os.write(fd, line)
            if durable:
                os.fsync(fd)
            return size
        finally:
            os.close(fd)


def _last_line_end(fd: int, size: int, chunk: int = 65536) -> int:
    """Offset just past the last newline before ``size`` (0 if there is none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            return start + at + 1
        end = start
    return 0


def parse_jsonl(data: bytes) -> Iterator[dict[str, Any]]:
    """Yield each parsable JSON object line; torn or corrupt lines are skipped."""
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return list(parse_jsonl(data))


class LockTimeout(TimeoutError):
    """The lock was not acquired within the timeout."""


def flock_fd(fd: int, path: Path, timeout: float | None = None, announce: Path | None = None) -> None:
    """Take an exclusive flock on an open ``fd`` (see ``file_lock`` for ``timeout`` and ``announce``)."""
    if announce is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        afd = os.open(announce, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(afd, fcntl.LOCK_SH)  # "someone waits" while we block (see waiters)
            flock_fd(fd, path, timeout)
        finally:
            os.close(afd)
        return
    if timeout is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise LockTimeout(f"{path} is held by another process") from None
            time.sleep(0.001)


def waiters(announce_fd: int) -> bool:
    """Someone is blocked on the lock that ``announce_fd``'s file announces (they hold it shared)."""
    try:
        fcntl.flock(announce_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(announce_fd, fcntl.LOCK_UN)
    return False


@contextmanager
def file_lock(path: Path, timeout: float | None = None, announce: Path | None = None) -> Iterator[int]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block.

    ``timeout=None`` blocks in the kernel; a number polls every millisecond
    and raises ``LockTimeout`` when it runs out (``0`` tries once).
    ``announce``: while blocked, hold a shared lock on that file, so a
    holder that keeps the lock for long stretches can tell someone waits
    (``waiters``) and let go (the task store's group-commit writer does).
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        flock_fd(fd, path, timeout, announce)
        yield fd
    finally:
        os.close(fd)  # closing the last descriptor releases the flock
