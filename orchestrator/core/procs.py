"""Process identity on Linux, robust against pid reuse.

A bare pid is not an identity: after a process dies its number is recycled.
We pair a pid with its start time (``/proc/<pid>/stat`` field 22, clock ticks
since boot) or with an environment marker the process inherited
(``TEAM_JOB_ID=<id>``, see jobs/manager.py). Zombies count as dead.

Also here: making this process a *subreaper* (``become_subreaper``:
``PR_SET_CHILD_SUBREAPER``, so orphaned descendants are reparented to it,
not to init), listing its children (``children``), and killing every process
that carries a marker (``kill_marked``).

A process in the middle of ``execve`` shows an empty ``/proc/<pid>/environ``
for a moment: the kernel has switched it to the new program's memory (and
closed its close-on-exec descriptors, so the parent's ``subprocess.Popen`` has
already returned) but not yet laid out the new stack, whose end of environment
is still 0. Every read of a marker goes through ``_environ_bytes``, which waits
for that end to be set instead of taking such a process for one without a marker
(a job's process would survive ``kill_marked`` and its log be taken for a spare).
Kernel threads and zombies have no environment either and are not waited for.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable

PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags (field 9): a kernel thread
EXEC_WAIT = 2.0  # seconds a read waits at most for a process to finish its execve


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
    out = {}
    for item in _environ_bytes(pid).split(b"\0"):
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


def open_anywhere(path: str | os.PathLike[str]) -> bool:
    """Whether a process has ``path`` open (its ``/proc/<pid>/fd`` links). Processes whose
    descriptors we may not read (another user's, unless we are root) are not seen. Without
    ``/proc`` (not Linux) it cannot tell: True, so that nobody's lock is taken for stale."""
    if not os.path.isdir("/proc/self/fd"):
        return True
    target = os.path.realpath(path)
    for pid in pids():
        fds = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fds)
        except OSError:  # gone, or not ours to read
            continue
        for name in names:
            try:
                if os.readlink(f"{fds}/{name}") == target:
                    return True
            except OSError:  # closed meanwhile
                continue
    return False


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


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux ``prctl``); False if the
    kernel (or the platform) does not allow it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def children(pid: int | None = None, tids: Iterable[int] | None = None) -> set[int]:
    """The children of ``pid`` (default: this process): all its threads', or only those of
    ``tids`` (a caller that knows which of its threads can have children saves the listing).

    ``/proc/<pid>/task/<tid>/children`` (one small read per thread); without it, a scan of
    every process's parent."""
    pid = os.getpid() if pid is None else pid
    found: set[int] = set()
    if tids is None:
        try:
            tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            return found
    for tid in tids:
        try:
            found.update(int(word) for word in _read(f"/proc/{pid}/task/{tid}/children").split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended while we listed
            return {p for p in pids() if _ppid(p) == pid}  # a kernel without CONFIG_PROC_CHILDREN
    return found


def _read(path: str) -> bytes:
    """The whole of a small file: open, read to the end, close (no buffered file object)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return int(data[data.rfind(b")") + 2 :].split()[1])


def kill_marked(key: str, value: str, passes: int = 2) -> list[int]:
    """SIGKILL every live process carrying ``key=value`` in its environment, and the group of
    each that leads one; ``passes`` scans (a second catches what forked during the first).
    Returns the pids killed. Costs a read of every process's environment per pass."""
    killed: list[int] = []
    entry = f"{key}={value}".encode()
    for _ in range(passes):
        found = []
        for pid in pids():
            if not _carries(pid, entry):
                continue
            st = stat(pid)
            if st is None or st[0] in ("Z", "X"):
                continue
            found.append(pid)
            if st[1] == pid:
                killpg(pid, signal.SIGKILL)
            kill(pid, signal.SIGKILL)
        if not found:
            break
        killed += found
    return killed


def _carries(pid: int, entry: bytes) -> bool:
    """``pid``'s initial environment holds the whole ``KEY=value`` entry (one read, no parsing)."""
    data = _environ_bytes(pid)
    at = data.find(entry)
    while at >= 0:
        end = at + len(entry)
        if (at == 0 or data[at - 1] == 0) and (end == len(data) or data[end] == 0):
            return True
        at = data.find(entry, at + 1)
    return False


def _environ_bytes(pid: int) -> bytes:
    """The raw ``/proc/<pid>/environ`` (b"" when gone or not ours to read); a process caught in
    its ``execve`` is read again once the new program's environment is in place (module doc)."""
    deadline = time.monotonic() + EXEC_WAIT
    settled = False
    while True:
        try:
            data = _read(f"/proc/{pid}/environ")
        except OSError:
            return b""
        if data or settled:
            return data
        # Empty: a process inside its execve is read again once it is out (within EXEC_WAIT);
        # any other once more, as its execve may have ended between the two reads.
        settled = not _mid_exec(pid) or time.monotonic() > deadline
        if not settled:
            time.sleep(0.0005)


def _mid_exec(pid: int) -> bool:
    """``pid`` is a live user process whose memory has no environment laid out yet (``stat`` field
    51, ``env_end``, is 0): it is inside ``execve``. A kernel without that field says False."""
    try:
        data = _read(f"/proc/{pid}/stat")
    except OSError:
        return False
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 49 or fields[0] in (b"Z", b"X") or int(fields[6]) & PF_KTHREAD:
        return False
    return fields[48] == b"0"
