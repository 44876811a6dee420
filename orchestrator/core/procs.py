"""Process identity on Linux, robust against pid reuse.

A bare pid is not an identity: after a process dies its number is recycled.
We pair a pid with its start time (``/proc/<pid>/stat`` field 22, clock ticks
since boot) or with an environment marker the process inherited
(``TEAM_JOB_ID=<id>``, see jobs/manager.py). Zombies count as dead.
"""

from __future__ import annotations

import os
import signal


def stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, pgrp, start_ticks)`` of ``pid``, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2]), int(fields[19])


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (None if it does not exist)."""
    st = stat(pid)
    return st[2] if st else None


def alive(pid: int | None, ticks: int | None = None) -> bool:
    """``pid`` runs (not a zombie) and, if ``ticks`` is given, started at ``ticks``."""
    st = stat(pid) if pid else None
    if st is None or st[0] in ("Z", "X"):
        return False
    return ticks is None or st[2] == ticks


def environ(pid: int) -> dict[str, str]:
    """``pid``'s initial environment ({} when it is gone or not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return {}
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def cmdline(pid: int) -> str:
    """``pid``'s command line, words joined by spaces ("" when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pids() -> list[int]:
    """Every process id in ``/proc``."""
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def has_env(pid: int, key: str, value: str) -> bool:
    """``pid`` carries ``key=value`` in its (initial) environment."""
    return environ(pid).get(key) == value


def group_members(pgid: int, key: str, value: str) -> list[int]:
    """Live processes of group ``pgid`` that carry ``key=value``."""
    found = []
    for pid in pids():
        st = stat(pid)
        if st and st[1] == pgid and st[0] not in ("Z", "X") and has_env(pid, key, value):
            found.append(pid)
    return found


def killpg(pgid: int, sig: int) -> None:
    """Signal a process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
