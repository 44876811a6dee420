"""Attempts die with their lead: what runs on a node to kill an attempt's processes once nobody waits for it.

A lead killed with ``kill -9`` takes its Ray driver with it; Ray then kills
the worker processes that ran its attempts, but not the commands they started
(each in a session of its own, ray_remote.py): those ran on beside the next
lead's attempt of the same task. Two things end them:

* **The registry.** Each attempt, while its command runs, has a file in
  ``<scratch>/team-attempts/<pid namespace>/`` (``scratch_root``:
  ``$TEAM_SCRATCH``, else ``/dev/shm``, else the temporary folder; one per
  machine, or container, shared by the nodes on it): the state root it belongs to (a digest of the lead's host and
  root, ``root_key``), the run (``run``: one per lead process), the task and
  attempt, the command's process group (with its leader's start time, so a
  reused pid is never killed), the worker process that waits for it (pid and
  start time) and the attempt's scratch folder.
* **The reaper** (``reap``) kills an entry's process group (SIGKILL), and every
  process started with its ``TEAM_RAY_ATTEMPT`` (what left the group with
  ``setsid``), removes its scratch folder and its entry, when

  - its worker process is gone (Ray killed it with its driver, or the node's
    raylet died): checked every ``WATCH_EVERY`` seconds by the machine's
    watcher process (``python -m orchestrator.run.ray_reaper DIR``; started
    by the first attempt that finds none, detached from Ray, it exits once
    the registry stayed empty for ``IDLE_EXIT`` seconds), and by every
    attempt starting on the machine;
  - or it belongs to the same state root as a newer lead's run (``stale``):
    the lead holds the root's lead lock, so any other run of that root is
    dead. A new lead runs this on every node before anything runs
    (``ray_backend.RayExecutor``'s start check): whatever the timing of
    Ray's own clean-up, an attempt of a dead lead is gone before its task
    runs again.

  A teammate's actor (ray_teammate.py) registers its scratch folder the same
  way (no process group: its tools' processes are its own), so a teammate
  lost with its worker leaves no scratch behind either.

  Each attempt also looks, before its command starts, at the entries of its
  own task on its machine (stale, or with their worker gone: a worker that
  crashed, its attempt lost and run again).

A worker told to exit while its attempt runs (Ray ends a dead driver's workers
so) kills the command's group itself on its way out (ray_remote.py); the
registry is for workers that are SIGKILLed.

The watcher also removes the layer caches of runs (ray_cache.py) unused for
``CACHE_IDLE`` seconds: a lead that closes removes its own on every node; one
that died leaves it to this.

Costs per attempt: one small file written and removed in memory (``/dev/shm``),
a directory listing, and a non-blocking ``flock`` to see the watcher is alive.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

WATCH_EVERY = 0.5
"""Seconds between the watcher's looks at the registry."""
IDLE_EXIT = 120.0
"""Seconds the registry stays empty before the watcher exits (the next attempt starts another)."""
CACHE_IDLE = 3600.0
"""Seconds a run's layer cache on the machine (ray_cache.py) goes unused before the watcher removes it (a
lead that closes removes its own; this is for a lead that died)."""
CACHE_EVERY = 60.0
"""Seconds between the watcher's looks for such caches."""
CHECK_WATCHER_EVERY = 5.0
"""Seconds a worker process goes without checking that the machine's watcher runs."""
BEFORE = -1
"""The ``pgid`` of an entry an attempt makes before its command starts: a worker SIGKILLed between the
command's start and its entry would leave the command unknown to every reaper, so the attempt is
registered first with only its tag (every process of the command carries it), then with its group."""
ENV = "TEAM_RAY_ATTEMPT"
TAG_SCANS = 5
"""At most this many scans of the processes for an attempt's tag (``kill_attempt``)."""
"""The variable naming an attempt in its command's environment (``<run>.<task>.<epoch>``)."""


def root_key(host: str, root: str) -> str:
    """Which state root a run belongs to, the same on every node: its lead's host and root folder."""
    return hashlib.sha256(f"{host}\0{root}".encode()).hexdigest()[:16]


def registry(base: str | None) -> Path:
    """The registry folder under a scratch base (None: the temporary folder), one per PID namespace: its
    pids mean nothing in another (containers sharing ``/dev/shm``)."""
    import tempfile

    try:
        space = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        space = "0"
    return Path(base or tempfile.gettempdir()) / "team-attempts" / space


def start_time(pid: int, *, running: bool = False) -> int | None:
    """When process ``pid`` started (clock ticks since boot), None if there is none; with ``running``, None
    for a process that has ended too (a zombie its parent has not waited for yet: a worker SIGKILLed a
    moment ago, while Ray's raylet, its parent, is slow to notice)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if running and fields[0] in (b"Z", b"X"):
            return None
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Entry:
    """One running attempt (the file ``<root>-<run>-<pgid>.json`` of the registry)."""

    root: str
    run: str
    task: int
    attempt: int
    name: str
    pgid: int
    leader_start: int
    worker: int
    worker_start: int
    scratch: str
    tag: str  # the value of TEAM_RAY_ATTEMPT in its command's environment

    @property
    def filename(self) -> str:
        if self.pgid < 0:  # made before the command exists (``BEFORE``): one per worker at a time
            return f"{self.root}-{self.run}-t{self.task}-w{self.worker}.json"
        return f"{self.root}-{self.run}-t{self.task}-{self.pgid or self.worker}.json"


def register(folder: Path, entry: Entry) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / entry.filename
    tmp = folder / f".{entry.filename}.tmp"
    tmp.write_text(json.dumps(entry.__dict__))
    os.replace(tmp, path)
    return path


def _read(path: Path) -> Entry | None:
    try:
        return Entry(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        path.unlink(missing_ok=True)  # cut short while written (the rename makes that rare): nothing to go by
        return None


@dataclass(frozen=True)
class Reaped:
    """An attempt whose processes were killed."""

    task: int
    attempt: int
    name: str
    processes: int


def reap(folder: Path, *, root: str | None = None, run: str | None = None, task: int | None = None) -> list[Reaped]:
    """Kill the entries whose worker is gone, and, given ``root`` and ``run``, those of ``root`` in another
    run than ``run``; given ``task`` too, only that task's entries are looked at (an attempt about to
    start: a cheap listing). See the module docstring."""
    out: list[Reaped] = []
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return out
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        if task is not None and not (name.startswith(f"{root}-") and f"-t{task}-" in name):
            continue
        stale = root is not None and name.startswith(f"{root}-") and not name.startswith(f"{root}-{run}-")
        path = folder / name
        entry = _read(path)
        if entry is None:
            continue
        if not stale and start_time(entry.worker, running=True) == entry.worker_start:
            continue  # its worker still waits for it
        n = kill_attempt(entry)
        shutil.rmtree(entry.scratch, ignore_errors=True)
        path.unlink(missing_ok=True)
        out.append(Reaped(entry.task, entry.attempt, entry.name, n))
    return out


def kill_attempt(entry: Entry) -> int:
    """SIGKILL the attempt's process group and what it started outside it; how many processes. (An entry
    without a group, ``pgid`` 0, is a teammate's scratch folder: only that goes; one made before its
    command started, ``BEFORE``, has only the tag to find its processes by.)"""
    n = 0
    if not entry.pgid:
        return n
    leader = start_time(entry.pgid) if entry.pgid > 0 else None
    if entry.pgid > 0 and (leader is None or leader == entry.leader_start):  # else the pid is another's now
        n += len(_group(entry.pgid))
        try:
            os.killpg(entry.pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    marker = f"{ENV}={entry.tag}".encode()
    seen: set[int] = set()
    for _ in range(TAG_SCANS):  # again while a scan found new ones: one may have forked while we listed
        killed = 0
        for pid in _pids():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    found = marker in f.read().split(b"\0")
            except OSError:
                continue
            if found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed += pid not in seen  # (one killed but not yet gone is found again)
                seen.add(pid)
        if not killed:
            break
    n += len(seen)
    return n


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _group(pgid: int) -> list[int]:
    out = []
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if int(f.read().rsplit(b")", 1)[1].split()[2]) == pgid:
                    out.append(pid)
        except (OSError, IndexError, ValueError):
            continue
    return out


# -------------------------------------------------------------------------- the machine's watcher
_CHECKED: list[float] = []


def ensure_watcher(folder: Path) -> None:
    """Start the machine's watcher unless one runs (it holds ``.watcher.lock``); at most every
    ``CHECK_WATCHER_EVERY`` seconds per worker process."""
    now = time.monotonic()
    if _CHECKED and now - _CHECKED[0] < CHECK_WATCHER_EVERY:
        return
    _CHECKED[:] = [now]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".watcher.lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # held: the watcher runs
        fcntl.flock(f, fcntl.LOCK_UN)
    # it forks once more and this child exits: the watcher is nobody's child in Ray (a worker's
    # children are killed when it exits), and its own session
    subprocess.run([sys.executable, "-m", "orchestrator.run.ray_reaper", str(folder)], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, check=False)


def watch(folder: Path) -> None:
    """The watcher's loop: ``reap`` every ``WATCH_EVERY`` seconds, until the registry stayed empty for
    ``IDLE_EXIT`` seconds; one per machine (the lock)."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = open(folder / ".watcher.lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    from .ray_cache import drop_idle

    idle_since = time.monotonic()
    caches_at = 0.0
    while True:
        reap(folder)
        if time.monotonic() - caches_at > CACHE_EVERY:
            drop_idle(CACHE_IDLE)
            caches_at = time.monotonic()
        busy = any(n.endswith(".json") and not n.startswith(".") for n in os.listdir(folder))
        if busy:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > IDLE_EXIT:
            return
        time.sleep(WATCH_EVERY)


def main(argv: list[str]) -> None:
    if os.fork() > 0:
        os._exit(0)  # the starter waits for this one only; the watcher goes on, reparented
    watch(Path(argv[1]))


if __name__ == "__main__":
    main(sys.argv)
