"""Which files under the state root changed since the last look, read without disturbing anyone.

``RootWatcher.poll()`` is called a few times a second by the feed's thread
(feed.py). It takes no lock any writer takes, writes nothing, and costs a
handful of ``stat`` calls when nothing changed:

    .tasks/events.jsonl   followed by byte offset (``TaskStore.events``); its
                          growth says tasks changed, its lines are the activity
    .tasks/               the directory's mtime changes on every atomic rename;
                          then each task file's (inode, mtime, size) says which
                          ones to read again. A full scan also runs every
                          ``full_scan_every`` seconds, so a change that fell
                          inside one mtime tick is seen soon after.
    .team/config.json     the roster (``team.roster.Team`` caches by signature);
                          liveness is recomputed every ``slow_every`` seconds
                          (heartbeats age without any file changing)
    .team/lead.lock       who holds the lead lock, read from /proc/locks
                          (``lead_holder``): probing with flock, as
                          ``team.lead.lead_info`` does, could make a starting
                          lead fail for the instant we hold it
    .team/jobs/*.json     job records, by signature when the directory changed
    .team/inbox/*.jsonl   each inbox followed by offset (inode change: a new
                          generation after rotation, read from its start)
    .team/spend.jsonl     the ledger of spend (llm/ledger.py): a new signature
                          says the spend changed (the feed reads its new lines)

The first poll reads everything (the event log and the inboxes only from
their last ``tail_bytes``: the board shows recent traffic, the task files
hold the state). Reads race with writers safely: task and job files are
replaced atomically, and logs are read up to their last complete line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import CorruptFile
from ..core.models import Member, Message, Task
from ..core.paths import team_dir
from ..jobs.records import JobRecord
from ..tasks.files import task_id_from_filename
from ..tasks.store import TaskStore
from ..team.roster import MemberState, Team

TAIL_BYTES = 256 * 1024
"""How much of the event log and of each inbox the first poll reads."""
CONSUMED = ".consumed.jsonl"


@dataclass(frozen=True)
class Sig:
    """A file's identity and version: an atomic replace changes the inode, an append the size."""

    ino: int
    mtime_ns: int
    size: int

    @classmethod
    def of(cls, st: os.stat_result) -> Sig:
        return cls(st.st_ino, st.st_mtime_ns, st.st_size)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def tail_start(path: Path, size: int, tail: int) -> int:
    """Offset of the first whole line within the last ``tail`` bytes of a file of ``size`` bytes."""
    if size <= tail:
        return 0
    with open(path, "rb") as f:
        f.seek(size - tail)
        chunk = f.read(tail)
    cut = chunk.find(b"\n")
    return size - tail + cut + 1 if cut >= 0 else size


@dataclass
class Lead:
    """The lead as seen from outside: who holds the lock, and its ``lead.json``."""

    pid: int | None
    info: dict[str, Any]


def lead_holder(root: Path) -> Lead | None:
    """The process holding ``.team/lead.lock`` (from /proc/locks), or None when no lead runs."""
    lock = team_dir(root) / "lead.lock"
    st = _stat(lock)
    if st is None:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            rows = [line.split() for line in f]
    except OSError:
        return None
    for row in rows:
        # "1: FLOCK  ADVISORY  WRITE 22412 fe:00:2295170 0 EOF" (a blocked waiter's row has "->")
        if len(row) >= 6 and row[1] == "FLOCK" and row[5] == want and "->" not in row:
            try:
                info = json.loads((team_dir(root) / "lead.json").read_text())
            except (FileNotFoundError, ValueError):
                info = {}
            return Lead(int(row[4]) if row[4].isdigit() else None, info if isinstance(info, dict) else {})
    return None


class Follow:
    """Complete lines appended to one file since the last call (a new inode starts over)."""

    def __init__(self, path: Path, tail: int):
        self.path = path
        self.tail = tail
        self.ino: int | None = None
        self.offset = 0

    def read(self) -> tuple[list[tuple[int, bytes]], int]:
        """``[(offset, line)]`` appended since the last call, and the file's inode."""
        st = _stat(self.path)
        if st is None:
            self.ino, self.offset = None, 0
            return [], 0
        if st.st_ino != self.ino or st.st_size < self.offset:
            start = tail_start(self.path, st.st_size, self.tail) if self.ino is None else 0
            self.ino, self.offset = st.st_ino, start
        if st.st_size <= self.offset:
            return [], st.st_ino
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        end = data.rfind(b"\n") + 1
        out, pos = [], 0
        for raw in data[:end].split(b"\n")[:-1]:
            out.append((self.offset + pos, raw))
            pos += len(raw) + 1
        self.offset += end
        return out, st.st_ino


@dataclass
class Changes:
    """What one ``poll`` found. Empty collections and None mean "unchanged"."""

    tasks: dict[int, Task] = field(default_factory=dict)
    removed: set[int] = field(default_factory=set)
    unreadable: dict[int, str] | None = None  # every unreadable task file now (when the set changed)
    events: list[dict[str, Any]] = field(default_factory=list)
    members: list[Member] | None = None
    states: list[MemberState] | None = None
    lead: Lead | None = None
    lead_changed: bool = False
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    jobs_removed: set[str] = field(default_factory=set)
    messages: list[tuple[str, Message]] = field(default_factory=list)
    slow: bool = False  # the periodic refresh ran (liveness, orphaned jobs, durations)
    spend: bool = False  # the ledger of spend grew (or appeared, or was replaced)

    def __bool__(self) -> bool:
        return bool(self.tasks or self.removed or self.unreadable is not None or self.events
                    or self.members is not None or self.states is not None or self.lead_changed
                    or self.jobs or self.jobs_removed or self.messages or self.slow or self.spend)


class RootWatcher:
    """Polls one state root (see the module docstring). One thread calls ``poll``."""

    def __init__(self, root: Path, *, tail_bytes: int = TAIL_BYTES, full_scan_every: float = 2.0,
                 slow_every: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.root = Path(root)
        self.store = TaskStore(self.root)
        self.team = Team(self.root)
        self.jobs_dir = team_dir(self.root) / "jobs"
        self.inbox_dir = team_dir(self.root) / "inbox"
        self.tail_bytes, self.full_scan_every, self.slow_every, self.clock = tail_bytes, full_scan_every, slow_every, clock
        self._task_sigs: dict[int, Sig] = {}
        self._bad: dict[int, str] = {}
        self._dir_mtime: int | None = None
        self._last_full = float("-inf")
        self._last_slow = float("-inf")
        self._events_ino: int | None = None
        self._events_off = 0
        self._roster_sig: Sig | None = None
        self._lead: tuple[int | None, str] | None = None
        self._jobs_mtime: int | None = None
        self._job_sigs: dict[str, Sig] = {}
        self._inboxes: dict[str, Follow] = {}
        self.spend_path = team_dir(self.root) / "spend.jsonl"
        self._spend_sig: Sig | None = None

    def poll(self) -> Changes:
        ch = Changes()
        now = self.clock()
        ch.events = self._poll_events()
        st = _stat(self.store.dir)
        mtime = st.st_mtime_ns if st else None
        if ch.events or mtime != self._dir_mtime or now - self._last_full >= self.full_scan_every:
            self._dir_mtime = mtime
            self._last_full = now
            self._scan_tasks(ch)
        slow = now - self._last_slow >= self.slow_every
        if slow:
            self._last_slow = now
            ch.slow = True
        self._poll_roster(ch, slow)
        if slow:
            self._poll_lead(ch)
        self._poll_jobs(ch)
        self._poll_inboxes(ch)
        st = _stat(self.spend_path)
        sig = Sig.of(st) if st is not None else None
        if sig != self._spend_sig:
            self._spend_sig, ch.spend = sig, True
        return ch

    # ------------------------------------------------------------------ tasks
    def _poll_events(self) -> list[dict[str, Any]]:
        st = _stat(self.store.events_path)
        if st is None:
            self._events_ino, self._events_off = None, 0
            return []
        if st.st_ino != self._events_ino or st.st_size < self._events_off:  # a new log (--fresh)
            first = self._events_ino is None
            self._events_ino = st.st_ino
            self._events_off = tail_start(self.store.events_path, st.st_size, self.tail_bytes) if first else 0
        if st.st_size <= self._events_off:
            return []
        events, self._events_off = self.store.events(self._events_off)
        return events

    def _scan_tasks(self, ch: Changes) -> None:
        seen: dict[int, Sig] = {}
        try:
            with os.scandir(self.store.dir) as it:
                for entry in it:
                    tid = task_id_from_filename(entry.name)
                    if tid is None:
                        continue
                    try:
                        seen[tid] = Sig.of(entry.stat())
                    except FileNotFoundError:
                        continue
        except FileNotFoundError:
            pass
        bad_before = dict(self._bad)
        for tid, sig in seen.items():
            if self._task_sigs.get(tid) == sig:
                continue
            try:
                task = self.store.files.load(tid)
            except FileNotFoundError:
                continue  # replaced or removed since the scan: the next scan sees it
            except CorruptFile as e:
                self._bad[tid] = str(e)
                self._task_sigs[tid] = sig
                continue
            self._bad.pop(tid, None)
            self._task_sigs[tid] = sig
            ch.tasks[tid] = task
        for tid in set(self._task_sigs) - set(seen):
            del self._task_sigs[tid]
            self._bad.pop(tid, None)
            ch.removed.add(tid)
        if self._bad != bad_before:
            ch.unreadable = dict(self._bad)

    # ------------------------------------------------------------------ the team
    def _poll_roster(self, ch: Changes, slow: bool) -> None:
        st = _stat(self.team.config)
        sig = Sig.of(st) if st else None
        if sig == self._roster_sig and not slow:
            return
        changed = sig != self._roster_sig
        self._roster_sig = sig
        try:
            if changed:
                ch.members = self.team.members()
            ch.states = self.team.states()
        except CorruptFile:
            ch.members, ch.states = [], []  # `team doctor` names the file; the page shows no roster

    def _poll_lead(self, ch: Changes) -> None:
        lead = lead_holder(self.root)
        key = (lead.pid, json.dumps(lead.info, sort_keys=True, default=str)) if lead else None
        if key != self._lead:
            self._lead = key
            ch.lead, ch.lead_changed = lead, True

    def _poll_jobs(self, ch: Changes) -> None:
        st = _stat(self.jobs_dir)
        mtime = st.st_mtime_ns if st else None
        if mtime == self._jobs_mtime:
            return
        self._jobs_mtime = mtime
        seen: dict[str, Sig] = {}
        try:
            with os.scandir(self.jobs_dir) as it:
                for entry in it:
                    if entry.name.endswith(".json") and not entry.name.startswith("."):
                        try:
                            seen[entry.name[:-5]] = Sig.of(entry.stat())
                        except FileNotFoundError:
                            continue
        except FileNotFoundError:
            pass
        for job_id, sig in seen.items():
            if self._job_sigs.get(job_id) == sig:
                continue
            try:
                record = JobRecord.model_validate_json((self.jobs_dir / f"{job_id}.json").read_bytes())
            except FileNotFoundError:
                continue
            except ValidationError:
                self._job_sigs[job_id] = sig  # a torn or foreign file: `team doctor` reports it
                continue
            self._job_sigs[job_id] = sig
            ch.jobs[job_id] = record
        for job_id in set(self._job_sigs) - set(seen):
            del self._job_sigs[job_id]
            ch.jobs_removed.add(job_id)

    def _poll_inboxes(self, ch: Changes) -> None:
        try:
            names = [e.name for e in os.scandir(self.inbox_dir)
                     if e.name.endswith(".jsonl") and not e.name.endswith(CONSUMED)]
        except FileNotFoundError:
            return
        for fname in sorted(names):
            who = fname[: -len(".jsonl")]
            follow = self._inboxes.get(who)
            if follow is None:
                follow = self._inboxes[who] = Follow(self.inbox_dir / fname, self.tail_bytes)
            lines, ino = follow.read()
            for offset, raw in lines:
                msg = Message.from_line(raw, offset, ino)
                if msg is not None:
                    ch.messages.append((who, msg))
