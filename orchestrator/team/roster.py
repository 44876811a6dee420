"""The team roster and member liveness: ``.team/config.json`` + ``.team/heartbeat/``.

Roster: ``.team/config.json`` is a ``models.Roster``; a file holding only the
seed's keys (``team_name``, members with ``name``/``role``/``status``) loads,
and unknown keys round-trip. Every read-modify-write runs under the flock
``.team/config.lock`` and replaces the file atomically, so concurrent
``add``/``update`` calls from any process lose nothing.

Names match ``models.NAME_RE`` (no path separators) or raise ``InvalidName``.
``lead`` is reserved: it is never a roster member but always a valid
recipient (the lead's own inbox).

Liveness: a member's process calls ``heartbeat(name)`` every few seconds.
Heartbeats go to one small file per member, ``.team/heartbeat/<name>.json``
(``{"pid", "pid_start", "ts"}``, atomic rename, no fsync, no lock), so
frequent beats never contend on ``config.json``. ``liveness`` derives what
``team status`` shows:

    shutdown   the roster says so (a clean exit)
    waiting    ``team spawn`` enrolled it while no lead ran, and no lead has
               started it yet (the next lead does: runtime/enrol.py)
    dead       no heartbeat ever, the heartbeat's process is gone (pid +
               /proc start time, so a reused pid does not count as alive),
               or the heartbeat is older than ``stale_after`` seconds
    working    alive, and the roster status is ``working``
    idle       alive, and the roster status is ``idle``
    offline    an ``external`` member (an MCP client, ``team mcp --as NAME``) whose
               ``team mcp`` process is not running: it is still a member and its
               inbox keeps what is sent to it (not ``dead``: nothing was lost)

Kinds (``Member.kind``): ``llm`` (the default, and every seed entry) is a
teammate thread the lead starts and runs; ``external`` is an MCP client that
joined with ``team mcp --as NAME`` (``join_external``). No lead ever starts
an external member as a teammate (``check_startable``); its ``team mcp``
process beats its heartbeat while it serves.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..core import procs
from ..core.errors import CorruptFile, InvalidName, UnknownRef, UserError
from ..core.fsutil import atomic_write, file_lock
from ..core.jsonutil import dumps
from ..core.models import NAME_RE, Member, Roster
from ..core.paths import team_dir

LEAD = "lead"
MEMBER_STATUSES = ("working", "idle", "shutdown")
Liveness = Literal["working", "idle", "waiting", "dead", "shutdown", "offline"]


def check_name(name: str, what: str = "member name") -> str:
    """Return ``name`` if usable as a file name, else raise ``InvalidName``."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidName(
            f"invalid {what} {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (no path separators or spaces)"
        )
    return name


class MemberState(BaseModel):
    """A member as ``team status`` shows it: roster entry + derived liveness."""

    name: str
    role: str
    status: str = Field(description="Roster status: working|idle|shutdown.")
    liveness: Liveness = Field(description="working|idle|waiting|dead|shutdown|offline (derived).")
    reason: str = Field("", description="Why a member counts as dead (or what a waiting one waits for).")
    pid: int | None = None
    heartbeat_age: float | None = Field(None, description="Seconds since the last heartbeat.")
    task: int | None = None
    kind: str = Field("llm", description="llm: a teammate the lead runs; external: an MCP client.")
    model: str | None = Field(None, description="The model an llm teammate talks to (set when a lead starts it).")


class Team:
    """Roster and heartbeats under ``root/.team``. Safe across threads and processes."""

    def __init__(self, root: Path | str, *, clock: Callable[[], float] = time.time, stale_after: float = 30.0):
        self.root = Path(root)
        self.dir = team_dir(self.root)
        self.config = self.dir / "config.json"
        self.hb_dir = self.dir / "heartbeat"
        self.clock = clock
        self.stale_after = stale_after
        self._cache: tuple[tuple[int, int, int], Roster] | None = None
        self._cache_lock = threading.Lock()
        self._names: frozenset[str] = frozenset()

    # -- roster -------------------------------------------------------------
    def _cached(self) -> Roster:
        """The roster on disk, parsed once per version of the file (do not mutate)."""
        try:
            st = os.stat(self.config)
        except FileNotFoundError:
            return Roster()
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._cache_lock:
            if self._cache and self._cache[0] == key:
                return self._cache[1]
        try:
            roster = Roster.model_validate_json(self.config.read_bytes())
        except FileNotFoundError:
            return Roster()
        except ValidationError as e:
            raise CorruptFile(self.config, str(e).splitlines()[0]) from None
        with self._cache_lock:
            self._cache = (key, roster)
            self._names = frozenset(m.name for m in roster.members)
        return roster

    def load(self) -> Roster:
        """The roster on disk (an empty one when there is no config.json)."""
        return self._cached().model_copy(deep=True)

    def _save(self, roster: Roster) -> None:
        data = roster.model_dump(mode="json", exclude_none=True)
        for m in data["members"]:
            if not m.get("usage"):
                m.pop("usage", None)
            if m.get("kind") == "llm":  # the default: a roster of teammates keeps the seed's shape
                m.pop("kind")
        atomic_write(self.config, json.dumps(data, ensure_ascii=False, indent=2) + "\n")

    @contextmanager
    def _locked(self) -> Iterator[Roster]:
        """Hold the roster lock; yields the roster, saved on normal exit."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / "config.lock"):
            roster = self.load()
            yield roster
            self._save(roster)

    def members(self) -> list[Member]:
        return self.load().members

    def names(self) -> list[str]:
        return [m.name for m in self._cached().members]

    def get(self, name: str) -> Member:
        check_name(name)
        for m in self.load().members:
            if m.name == name:
                return m
        raise UnknownRef(f"no team member {name!r}; members: {', '.join(self.names()) or '(none)'}")

    def add(self, name: str, role: str = "coder", *, status: str = "idle", exist_ok: bool = False,
            **extra: Any) -> Member:
        """Add a member; with ``exist_ok`` an existing one is updated instead."""
        check_name(name)
        if name == LEAD:
            raise InvalidName("'lead' is reserved for the lead's own inbox; pick another member name")
        _check_status(status)
        with self._locked() as roster:
            for i, m in enumerate(roster.members):
                if m.name == name:
                    if not exist_ok:
                        raise UserError(f"member {name!r} already exists; use another name")
                    data = {**m.model_dump(), "role": role, "status": status, **extra}
                    roster.members[i] = Member.model_validate(data)
                    return roster.members[i]
            member = Member(name=name, role=role, status=status, **extra)
            roster.members.append(member)
            return member

    def join_external(self, name: str, role: str = "coder") -> Member:
        """Put MCP client ``name`` (``team mcp --as NAME``) on the roster as an ``external`` member,
        or find it there; ``UserError`` when ``name`` is a teammate the lead runs (kind ``llm``):
        a client must not read that teammate's inbox or act in its name."""
        check_name(name)
        if name == LEAD:
            raise InvalidName("'lead' is the lead's own inbox, not a member")
        with self._locked() as roster:
            for m in roster.members:
                if m.name == name:
                    if m.kind == "llm":
                        raise UserError(f"{name!r} is a teammate the lead runs ({m.role}, kind llm), not an MCP "
                                        f"client: pick another --as name (e.g. {name}-mcp)")
                    return m
            member = Member(name=name, role=role, status="idle", kind="external")
            roster.members.append(member)
            return member

    def check_startable(self, name: str) -> None:
        """``UserError`` when ``name`` is on the roster as a member no lead starts (kind ``external`` or ``command``):
        a lead spawning it would make a second, LLM ``name`` that reads its inbox."""
        member = next((m for m in self._cached().members if m.name == name), None)
        if member is not None and member.kind != "llm":
            what = (f"an MCP client: `team mcp --as {name}`" if member.kind == "external"
                    else "an agent CLI a plan's run starts for its tasks")
            raise UserError(f"{name!r} is an {member.kind} member ({what}); a lead does not start it as a "
                            f"teammate: message it with `team send {name}`, or pick another name")

    def update(self, name: str, **fields: Any) -> Member:
        """Change fields of a member (``status`` must be working|idle|shutdown)."""
        check_name(name)
        if "status" in fields:
            _check_status(fields["status"])
        with self._locked() as roster:
            for i, m in enumerate(roster.members):
                if m.name == name:
                    roster.members[i] = Member.model_validate({**m.model_dump(), **fields})
                    return roster.members[i]
        raise UnknownRef(f"no team member {name!r}; add it first (`team spawn {name} --role ROLE`)")

    def remove(self, name: str) -> None:
        check_name(name)
        with self._locked() as roster:
            before = len(roster.members)
            roster.members = [m for m in roster.members if m.name != name]
            if len(roster.members) == before:
                raise UnknownRef(f"no team member {name!r}")
        (self.hb_dir / f"{name}.json").unlink(missing_ok=True)

    def set_team_name(self, team_name: str) -> None:
        with self._locked() as roster:
            roster.team_name = team_name

    def is_recipient(self, name: str) -> bool:
        if name == LEAD:
            return True
        roster = self._cached()
        with self._cache_lock:
            if self._cache and self._cache[1] is roster:
                return name in self._names
        return any(m.name == name for m in roster.members)

    def check_recipient(self, name: str, *, reading: bool = False) -> str:
        """``name`` if it is ``lead`` or a roster member, else InvalidName/UnknownRef.

        ``reading``: the name is an inbox being read, not a message's recipient (the words differ)."""
        check_name(name, "inbox" if reading else "recipient")
        if not self.is_recipient(name):
            known = ", ".join([LEAD, *self.names()])
            what = f"no inbox {name!r}: the inboxes are" if reading else f"unknown recipient {name!r}: known are"
            raise UnknownRef(f"{what} {known}; add a member with `team spawn {name} --role ROLE`")
        return name

    # -- heartbeats ---------------------------------------------------------
    def heartbeat(self, name: str, *, pid: int | None = None) -> None:
        """Record that ``name`` is alive in process ``pid`` (default: this one)."""
        check_name(name)
        pid = pid or os.getpid()
        self.hb_dir.mkdir(parents=True, exist_ok=True)
        beat = {"pid": pid, "pid_start": procs.start_ticks(pid), "ts": self.clock()}
        atomic_write(self.hb_dir / f"{name}.json", dumps(beat), durable=False)

    def last_heartbeat(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.hb_dir / f"{check_name(name)}.json").read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def state(self, member: Member, now: float | None = None) -> MemberState:
        """The member's derived liveness (see the module docstring)."""
        now = self.clock() if now is None else now
        beat = self.last_heartbeat(member.name)
        model = (member.model_extra or {}).get("model")
        state = MemberState(name=member.name, role=member.role, status=member.status,
                            liveness=member.status, task=member.task, kind=member.kind,
                            model=model if isinstance(model, str) else None)
        if beat:
            state.pid = beat.get("pid")
            state.heartbeat_age = round(max(0.0, now - float(beat.get("ts", 0))), 1)
        if member.status == "shutdown":
            return state
        if member.kind == "external":
            if not beat or not procs.alive(state.pid, beat.get("pid_start")) or (
                    state.heartbeat_age is not None and state.heartbeat_age > self.stale_after):
                state.liveness, state.reason = "offline", f"no `team mcp --as {member.name}` is running"
            return state
        if not beat and enrolled(member):
            state.liveness, state.reason = "waiting", "the next lead starts it"
        elif not beat:
            state.liveness, state.reason = "dead", "no heartbeat"
        elif not procs.alive(state.pid, beat.get("pid_start")):
            state.liveness, state.reason = "dead", f"process {state.pid} is gone"
        elif state.heartbeat_age is not None and state.heartbeat_age > self.stale_after:
            state.liveness, state.reason = "dead", f"heartbeat {state.heartbeat_age:.0f}s old"
        return state

    def states(self) -> list[MemberState]:
        now = self.clock()
        return [self.state(m, now) for m in self.load().members]


def enrolled(member: Member) -> bool:
    """``team spawn`` put ``member`` on the roster while no lead ran, and no lead has started it
    since (runtime/enrol.py; the runtime clears the mark when it starts the member)."""
    return bool((member.model_extra or {}).get("enrolled"))


def _check_status(status: str) -> None:
    if status not in MEMBER_STATUSES:
        raise UserError(f"invalid member status {status!r}: use one of {', '.join(MEMBER_STATUSES)}")
