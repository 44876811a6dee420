"""Approval requests people answer: plans and risky tool calls (``.team/requests/``).

One JSON file per request, written atomically; deciding one is a compare-and-set
under ``.team/requests/.lock``, so the first answer wins from any process and a
second one is refused naming the first::

    .team/requests/<id>.json   {"id", "kind", "sender", "to", "summary", "detail", "tool", "rule",
                                "task", "created", "expires", "pid", "status", "reason",
                                "decided_by", "decided_at", "always"}

Kinds:

* ``plan``: a plan-mode teammate's ``submit_plan`` (team/protocols.py). The
  request id is the protocol's ``request_id``. Answering it also sends the
  ``plan_approval_response`` to the teammate over the bus (``answer``), which
  is what the teammate's harness acts on; the lead's ``review_plan`` tool
  decides the same record, so a plan is answered once, by whoever is first.
* ``tool``: a call of a tool (or shell command) its role marks ``ask``
  (tools/approval.py). The teammate's thread waits (``wait``) for the
  decision; nobody answering before ``expires`` is a denial (status
  ``expired``), and so is the asking process dying (its ``pid``).
* ``budget``: a teammate at its budget under ``team run --ask``
  (runtime/teammate.py): approved, its cap grows once more. The request id
  is the ``budget_request`` message's, so a ``budget_response`` message
  answers it too. Expires like a tool request.

Status: ``pending`` → ``approved`` | ``rejected`` | ``expired``. Decided
requests stay on disk as the record of who allowed what; ``pending()`` lists
the open ones. A request is named by its id or a unique prefix of it.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from ..core import procs
from ..core.errors import UserError
from ..core.fsutil import atomic_write, file_lock
from ..core.paths import team_dir
from ..core.redact import Secrets
from .protocols import Mailbox, review_plan

Kind = Literal["plan", "tool", "budget"]
State = Literal["pending", "approved", "rejected", "expired"]
DETAIL_CHARS = 4000
SUMMARY_CHARS = 300


def cut(text: str, limit: int) -> str:
    """``text`` at most ``limit`` characters (an ellipsis says it was cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Request(BaseModel):
    """One approval request (see the module docstring)."""

    id: str
    kind: Kind
    sender: str
    to: str = "lead"
    summary: str
    detail: str = ""
    tool: str | None = None
    rule: str | None = None
    task: int | None = None
    created: float
    expires: float | None = None
    pid: int | None = None
    status: State = "pending"
    reason: str = ""
    decided_by: str | None = None
    decided_at: float | None = None
    always: bool = False

    @property
    def approved(self) -> bool:
        return self.status == "approved"

    def verdict(self) -> str:
        """``approved by lead``, ``rejected by user: not now``, ``expired (...)``."""
        if self.status == "pending":
            return "pending"
        by = f" by {self.decided_by}" if self.decided_by else ""
        return f"{self.status}{by}" + (f": {self.reason}" if self.reason else "")

    def line(self, now: float | None = None) -> str:
        """One line for listings: id, kind, who asks, what, and for how long it waits."""
        now = time.time() if now is None else now
        left = f" · denied in {max(0.0, self.expires - now):.0f}s" if self.expires and self.status == "pending" else ""
        task = f" · task #{self.task}" if self.task else ""
        return f"{self.id}  {self.kind:<4}  {self.sender}: {self.summary}{task}{left}"


class Requests:
    """The request files of one state root. Safe across threads and processes."""

    def __init__(self, root: Path | str, *, clock: Callable[[], float] = time.time):
        self.dir = team_dir(Path(root)) / "requests"
        self.clock = clock
        self.secrets = Secrets.from_environ()

    def _path(self, rid: str) -> Path:
        if not rid.isalnum():
            raise UserError(f"invalid request id {rid!r}: letters and digits only (see `team approve`)")
        return self.dir / f"{rid}.json"

    def _save(self, r: Request) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self._path(r.id), self.secrets.scrub(r.model_dump_json(exclude_none=True)), durable=False)

    def _load(self, path: Path) -> Request | None:
        try:
            return Request.model_validate_json(path.read_bytes())
        except (FileNotFoundError, ValidationError, ValueError):
            return None

    # -- creating ------------------------------------------------------------
    def create(self, kind: Kind, sender: str, summary: str, *, detail: str = "", rid: str | None = None,
               tool: str | None = None, rule: str | None = None, task: int | None = None,
               timeout: float | None = None, to: str = "lead") -> Request:
        """Record a new pending request; ``timeout``: seconds until it counts as denied."""
        now = self.clock()
        r = Request(id=rid or secrets.token_hex(6), kind=kind, sender=sender, to=to,
                    summary=cut(" ".join(summary.split()), SUMMARY_CHARS), detail=cut(detail, DETAIL_CHARS),
                    tool=tool, rule=rule, task=task, created=now,
                    expires=None if timeout is None else now + timeout, pid=os.getpid())
        with file_lock(self._lock()):
            self._save(r)
        return r

    def _lock(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        return self.dir / ".lock"

    # -- reading -------------------------------------------------------------
    def all(self) -> list[Request]:
        """Every readable request, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [r for p in self.dir.glob("*.json") if (r := self._load(p)) is not None]
        return sorted(found, key=lambda r: (r.created, r.id))

    def pending(self) -> list[Request]:
        """The requests still waiting for an answer (a tool request past its time or of a dead
        process is not: it counts as denied)."""
        return [r for r in self.all() if r.status == "pending" and self._stale(r) is None]

    def _stale(self, r: Request) -> str | None:
        """Why a pending tool or budget request can no longer be approved, or None."""
        if r.kind == "plan":
            return None
        if r.expires is not None and self.clock() >= r.expires:
            return f"nobody answered within {r.expires - r.created:.0f}s"
        if r.pid is not None and not procs.alive(r.pid):
            return f"the process that asked (pid {r.pid}) is gone"
        return None

    def get(self, ref: str) -> Request:
        """The request ``ref`` (an id or a unique prefix of one); ``UserError`` naming the pending ones."""
        ref = ref.strip()
        if ref and ref.isalnum():
            exact = self._load(self._path(ref))
            if exact is not None:
                return exact
            matches = [r for r in self.all() if r.id.startswith(ref)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise UserError(f"request {ref!r} is ambiguous: {', '.join(r.id for r in matches)}")
        open_ = self.pending()
        known = ", ".join(f"{r.id} ({r.kind}, {r.sender})" for r in open_) or "none"
        raise UserError(f"no approval request {ref!r}; pending: {known} (`team approve` lists them)")

    # -- deciding ------------------------------------------------------------
    def decide(self, ref: str, approve: bool, *, by: str, reason: str = "", always: bool = False,
               kind: Kind | None = None) -> Request:
        """Answer ``ref`` once: the first answer wins; a decided, expired or stale request is a
        ``UserError`` saying what became of it. ``kind``: refuse a request of another kind."""
        r = self.get(ref)
        with file_lock(self._lock()):
            current = self._load(self._path(r.id)) or r
            if kind is not None and current.kind != kind:
                raise UserError(f"request {current.id} is a {current.kind} request, not a {kind} request")
            if always and current.kind != "tool":
                raise UserError(f"request {current.id} is a plan: 'always' applies to tool requests (an ask rule); "
                                "approve the plan without it")
            if current.status != "pending":
                raise UserError(f"request {current.id} was already {current.verdict()}")
            stale = self._stale(current)
            if stale is not None:
                self._close(current, "expired", by="timeout", reason=stale)
                raise UserError(f"request {current.id} can no longer be answered: {stale}; it was denied")
            return self._close(current, "approved" if approve else "rejected", by=by, reason=reason,
                               always=always and approve)

    def answered(self, rid: str) -> Request | None:
        """``rid`` once it has been decided (or has expired), else None."""
        current = self._load(self._path(rid))
        return current if current is not None and current.status != "pending" else None

    def _close(self, r: Request, status: State, *, by: str, reason: str, always: bool = False) -> Request:
        done = r.model_copy(update={"status": status, "decided_by": by, "reason": reason,
                                    "decided_at": self.clock(), "always": always})
        self._save(done)
        return done

    def expire(self, rid: str, reason: str) -> Request:
        """Close a pending request as ``expired`` (a denial); an answer that came first stands."""
        with file_lock(self._lock()):
            current = self._load(self._path(rid))
            if current is None:
                raise UserError(f"no approval request {rid!r}")
            if current.status != "pending":
                return current
            return self._close(current, "expired", by="timeout", reason=reason)

    def wait(self, rid: str, timeout: float, *, stopped: Callable[[], bool] = lambda: False,
             poll: float = 0.05) -> Request:
        """Block until ``rid`` is decided; past ``timeout`` seconds (or once ``stopped()``) it is
        closed as expired. Returns the closed request."""
        deadline = time.monotonic() + timeout
        while True:
            current = self._load(self._path(rid))
            if current is not None and current.status != "pending":
                return current
            if stopped():
                return self.expire(rid, "the agent was stopped while waiting")
            if time.monotonic() >= deadline:
                return self.expire(rid, f"nobody answered within {timeout:g}s")
            time.sleep(poll)


def answer(requests: Requests, bus: Mailbox, ref: str, approve: bool, *, by: str, reason: str = "",
           always: bool = False) -> Request:
    """Decide ``ref``; a plan request's teammate also gets its ``plan_approval_response``."""
    r = requests.decide(ref, approve, by=by, reason=reason, always=always)
    if r.kind == "plan":
        review_plan(bus, r.sender, r.id, approve, reason, sender=r.to)
    return r
