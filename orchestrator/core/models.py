"""Pydantic records for everything ``team`` keeps on disk.

A task file holding only the seed's six keys (``id``, ``subject``,
``description``, ``status``, ``blockedBy``, ``owner``) is a valid ``Task``;
every other field has a default. Unknown keys are kept (``extra="allow"``)
so a newer or hand-extended file round-trips without loss.

The records other than ``Task`` are built on first use (``defer_build``):
importing this module costs a command only the models it touches.
Statuses, names and message types live in states.py (no pydantic).

Readiness and blocked-ness are *derived* from ``blockedBy`` and the status of
the tasks named there; they are never stored.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .states import MARKERS as MARKERS
from .states import MAX_TASK_ID as MAX_TASK_ID
from .states import MESSAGE_TYPES as MESSAGE_TYPES
from .states import NAME_RE as NAME_RE
from .states import PROTOCOL_TYPES as PROTOCOL_TYPES
from .states import TERMINAL as TERMINAL
from .states import Status as Status


class Task(BaseModel):
    """One task: ``.tasks/task_<id>.json``."""

    model_config = ConfigDict(extra="allow", use_enum_values=False)

    id: int = Field(ge=1, le=MAX_TASK_ID, description="Integer id, unique in the store, from 1.")
    subject: str = Field(description="One-line title.")
    description: str = Field("", description="Longer text: what done means.")
    status: Status = Field(Status.pending, description="pending|in_progress|completed|failed|cancelled.")
    blockedBy: list[int] = Field(default_factory=list, description="Declared dependency ids.")
    owner: str = Field("", description="Member or lead holding the task; empty when unowned.")

    name: str | None = Field(None, description="Slug usable wherever an id is (unique).")
    kind: Literal["manual", "shell", "agent", "command"] = Field(
        "manual", description="How the task is executed (command: by an agent CLI teammate, run/command.py).")
    command: str | None = Field(None, description="Shell command of a shell task.")
    prompt: str | None = Field(None, description="Prompt of an agent task.")
    plan: str | None = Field(None, description="Name of the plan that created this task.")
    plan_task: str | None = Field(None, description="The task's id inside its plan.")
    role: str | None = Field(None, description="Role an agent task wants (coder, tester, ...).")
    assignee: str | None = Field(None, description="Named teammate an agent task goes to.")
    estimate: float | None = Field(None, description="Expected duration in seconds (critical path).")
    timeout: float | None = Field(None, description="Seconds before an attempt is killed.")
    retries: int = Field(0, description="Extra attempts allowed after a failure.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the run.")
    cwd: str | None = Field(None, description="Working directory, relative to the state root (absolute when "
                                              "outside it, or written by an older team).")
    isolation: Literal["none", "worktree"] | None = Field(None, description="Per-task isolation override.")

    attempts: int = Field(0, description="Attempts started so far (claims), however they ended.")
    failures: int = Field(0, description="Attempts that failed since the task was last (re)started by a "
                                        "run; each uses one of its `retries`.")
    interrupted: int = Field(0, description="Attempts stopped from outside (Ctrl-C, SIGTERM, a lead that "
                                           "died, an expired lease): they use no retry.")
    epoch: int = Field(0, description="Incremented on every claim; completions must carry it.")
    lease_expires: float | None = Field(None, description="Unix time the owner's lease runs out.")
    created_at: float | None = Field(None, description="Unix time of creation.")
    created_by: str | None = Field(None, description="The agent whose task_create made it (its 'own' task "
                                                     "while nobody owns it).")
    updated_at: float | None = Field(None, description="Unix time of the last write.")
    started_at: float | None = Field(None, description="Unix time the current/last attempt began.")
    finished_at: float | None = Field(None, description="Unix time the task reached a final state.")
    result: str | None = Field(None, description="What the task produced (agent answer, output tail).")
    error: str | None = Field(None, description="Why the task failed or was cancelled.")
    log: str | None = Field(None, description="Path of the full output log, relative to the root.")
    worktree: str | None = Field(None, description="The task's kept git worktree, relative to the root (a plan "
                                                   "task), or the agent worktree it is bound to (a name).")
    branch: str | None = Field(None, description="git branch holding the task's work.")
    merge_commit: str | None = Field(None, description="Its merge commit on the plan's integration branch.")
    redo: bool = Field(False, description="Run again from scratch: its merge and kept branch are dropped first.")
    landed: str | None = Field(None, description="The commit `team land` brought its work into the user's branch with.")
    usage: dict[str, Any] = Field(default_factory=dict, description="Token usage of agent tasks.")
    outputs: list[str] | None = Field(None, description="Globs (relative to its cwd) of the files the task's "
                                                        "result is made of: with isolation: worktree only changes "
                                                        "to them are committed ([]: none); on backend ray they "
                                                        "are what comes back. None: everything.")
    num_cpus: float | None = Field(None, description="CPUs an attempt reserves on a cluster node (backend ray).")
    resources: dict[str, float] = Field(default_factory=dict, description="Custom cluster resources an attempt "
                                                                          "reserves, e.g. {gpu: 1} (backend ray).")
    lost_retries: int = Field(3, description="Attempts lost with a cluster node that are re-run (use no retry).")
    lost: int = Field(0, description="Attempts lost with a cluster node (infrastructure losses, backend ray).")
    node: str | None = Field(None, description="The cluster node the current/last attempt ran on (backend ray).")
    cli_member: str | None = Field(None, description="The agent CLI teammate (kind: command) running the current "
                                                     "attempt: its own completed/failed update of the task is kept "
                                                     "in `reported`, and the run records it when its process ends.")
    reported: dict[str, Any] | None = Field(None, description="The end an agent CLI reported for its attempt "
                                                              "(status, result, epoch, by, at), not recorded yet.")

    @property
    def ref(self) -> str:
        return f"#{self.id}"

    def label(self) -> str:
        return f"#{self.id} {self.name}" if self.name else f"#{self.id}"

    def to_json(self) -> dict[str, Any]:
        """The on-disk form: seed keys first, then the rest, None/empty omitted."""
        data = self.model_dump(mode="json", exclude_none=True)
        for key in ("env", "usage", "redo", "resources"):  # (``outputs: []`` says "keep nothing": it stays)
            if not data.get(key):
                data.pop(key, None)
        for key, default in (("retries", 0), ("attempts", 0), ("failures", 0), ("interrupted", 0), ("epoch", 0),
                             ("lost", 0), ("lost_retries", 3)):
            if data.get(key) == default:
                data.pop(key)
        if data.get("kind") == "manual":
            data.pop("kind")
        return data


class Event(BaseModel):
    """One line of ``.tasks/events.jsonl``: a transition of a task."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    ts: float = Field(description="Unix time of the event.")
    task: int = Field(description="Task id.")
    event: str = Field(description="created|claimed|status|updated|lease_expired|...")
    actor: str = Field("", description="Who made the change (member name, 'cli', 'lead').")
    from_status: str | None = Field(None, alias="from", description="Status before.")
    to_status: str | None = Field(None, alias="to", description="Status after.")


MemberKind = Literal["llm", "external", "command"]
"""What a roster member is: ``llm`` (the default, and every seed entry), a teammate thread of the lead
running its own agent loop; ``external``, an MCP client that joined as ``team mcp --as NAME``;
``command``, an agent CLI a run starts for each task assigned to it (run/command.py)."""
MEMBER_KINDS: tuple[str, ...] = ("llm", "external", "command")


class Member(BaseModel):
    """One roster entry in ``.team/config.json``."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    name: str
    role: str = "coder"
    status: Literal["working", "idle", "shutdown"] = "idle"
    kind: MemberKind = Field("llm", description="llm: a teammate the lead runs; external: an MCP client; "
                                                "command: an agent CLI a run starts per task.")
    pid: int | None = Field(None, description="Process hosting the member's thread.")
    heartbeat: float | None = Field(None, description="Unix time of the last heartbeat.")
    task: int | None = Field(None, description="Task the member is working on.")
    usage: dict[str, Any] = Field(default_factory=dict, description="Token totals older versions kept here; "
                                  "spend is now read from the ledger (llm/ledger.py).")


class Roster(BaseModel):
    """``.team/config.json``."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    team_name: str = "team"
    members: list[Member] = Field(default_factory=list)


class Message(BaseModel):
    """One line of ``.team/inbox/<name>.jsonl``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    id: str
    type: str = "message"
    sender: str = Field(alias="from")
    to: str | None = None
    content: str = ""
    timestamp: float
    request_id: str | None = None
    approve: bool | None = Field(None, description="The answer of a protocol response (shutdown, plan approval).")
    seq: int | None = Field(None, description="Per-sender sequence number.")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_line(cls, raw: bytes, offset: int, ino: int = 0) -> Message | None:
        """Parse one inbox line found at byte ``offset``; None if it is not a message.

        The seed's ``MessageBus.send`` writes no ``id``. Such a line (a JSON
        object with ``from`` and ``content``) gets ``seed-<hash>``, a hash
        of its bytes, offset and the file's inode (one per inbox generation):
        the same for every read of that line, so cursors and ``seen`` dedupe
        it, and different for two identical lines, also across rotations.
        """
        raw = raw.rstrip(b"\n")
        try:
            return cls.model_validate_json(raw)
        except ValidationError:
            pass
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict) or "id" in data or "from" not in data or "content" not in data:
            return None
        digest = hashlib.sha256(b"%d:%d:" % (ino, offset) + raw).hexdigest()[:16]
        try:
            return cls.model_validate({**data, "id": f"seed-{digest}"})
        except ValidationError:
            return None
