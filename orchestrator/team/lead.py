"""One lead per state root.

The lead holds an exclusive ``flock`` on ``.team/lead.lock`` for its whole
life and describes itself in ``.team/lead.json`` (pid, start time, plan,
control address). The kernel drops the lock when the process dies, even on
SIGKILL, so "is a lead alive?" is answered by trying the lock, never by
trusting a pid file. ``lead.json`` may outlive a killed lead; it is only
read while the lock is held by someone.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from ..core.errors import LeadRunning
from ..core.fsutil import atomic_write
from ..core.jsonutil import dumps
from ..core.paths import team_dir


def _paths(root: Path) -> tuple[Path, Path]:
    d = team_dir(root)
    return d / "lead.lock", d / "lead.json"


class LeadLock:
    """Hold the lead lock for a state root. Use as a context manager."""

    def __init__(self, root: Path, **info: Any):
        self.root = Path(root)
        self.info = info
        self._fd: int | None = None

    def acquire(self) -> LeadLock:
        lock_path, info_path = _paths(self.root)
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            other = read_info(info_path)
            pid = other.get("pid", "?")
            raise LeadRunning(
                f"another lead (pid {pid}) is running on {self.root}; wait for it, or stop it with `kill {pid}`"
            ) from None
        self._fd = fd
        self.info = {"pid": os.getpid(), "started_at": time.time(), **self.info}
        atomic_write(info_path, dumps(self.info))
        return self

    def release(self) -> None:
        if self._fd is not None:
            _paths(self.root)[1].unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LeadLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def read_info(info_path: Path) -> dict[str, Any]:
    try:
        data = json.loads(info_path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def lead_info(root: Path) -> dict[str, Any] | None:
    """The running lead's ``lead.json``, or None when no lead holds the root."""
    lock_path, info_path = _paths(Path(root))
    if not lock_path.exists():
        return None
    fd = os.open(lock_path, os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_info(info_path) or {"pid": None}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
