"""What runs on a Ray node for agent tasks (``team run --backend ray``): one actor per teammate.

``RemoteTeammate`` (ray_agents.py makes one per teammate, ``ray.remote``) is
the teammate of runtime/teammate.py, unchanged, running its agent loop in a
thread of the actor's process on a worker node: the model is called from
there (the ``LLMConfig``, its API key with it, arrived through Ray's object
store as an argument of the actor). Everything the teammate shares with the
team goes to the lead's service (ray_service.py) through typed proxies that
implement the same Protocols as the local objects, so mypy holds them to it:

    proxy          Protocols                          the lead's object
    RemoteStore    TaskStorage (tools), HandOver      tasks.store.TaskStore
    RemoteBus      MessageBus (tools), TeammateBus    team.inbox.Bus
    RemoteRoster   Roster                             team.roster.Team
    RemoteClaims   ClaimTracker                       runtime.claims.ClaimLedger (leases renewed there)

What stays on the node, in a scratch folder of the actor (``ray_remote.scratch_root``,
registered with the machine's reaper, ray_reaper.py: removed if the actor dies):
a state root of its own for the teammate's private files (its transcript, the
call log, saved tool outputs, its background jobs, which run on the node next
to the workspace), and each attempt's workspace. A teammate started again
under the same name gets its transcript from the lead, so it resumes.

One attempt (``run``): the workspace the lead shipped (ray_remote.Workspace:
an archive of the task's folder, or a bundle of its worktree's base commit) is
unpacked, the attempt is queued on the teammate with that workspace and a
deadline (the task's ``timeout``, counted on this node), and when it ends the
work goes back as for a shell task (the ``outputs`` files, or the new commits
as a bundle) with the ``LoopResult`` (status, result, usage), the task's id
and epoch, the node's id, and the teammate's private files (a tar, under
``.team/{transcripts,calls,outputs,jobs}``), which the lead writes under its
root, scrubbed. ``cancel`` interrupts an attempt, ``stop`` ends the teammate
and returns its private files one last time.

Not on a node (yet): autonomous claiming by idle teammates, hooks, ``ask``
approvals, plan mode, MCP servers, subagents and spawning (the plan or the
role is refused on the lead, or the tool says it is not available).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.loop import LoopResult
from ..core import errors
from ..core.errors import TeamError
from ..core.hooks import NoHooks
from ..core.models import Member, Message, Status, Task
from ..core.paths import team_dir
from ..core.redact import Secrets
from ..core.sandbox import Sandbox
from ..jobs.manager import JobManager
from ..llm.client import LLMClient
from ..llm.types import LLMConfig
from ..roles.roles import Role
from ..runtime.budgets import Spend
from ..runtime.teammate import Assignment, Teammate, TeamServices
from ..tools import FileTruth, ToolContext
from ..tools.coordination import agent_registry
from . import ray_reaper
from .ray_remote import (
    AttemptSpec,
    Workspace,
    commits_bundle,
    head_commit,
    node_id,
    outputs_tar,
    scratch_root,
    unpack,
)

PRIVATE = ("transcripts", "calls", "outputs", "jobs")
"""The folders of ``.team/`` a remote teammate writes on its node and the lead gets back."""
IDLE_SLICE = 0.25
"""Seconds an idle remote teammate waits on its inbox (at the lead) between looks at its queue."""


# -- the proxies: one call to the lead's service each ---------------------------------------------
class Lead:
    """The lead's service (a Ray actor handle) as the proxies call it: errors come back typed."""

    def __init__(self, handle: Any):
        self.handle = handle

    def call(self, target: str, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._unwrap(self.handle.call.remote(target, method, args, kwargs))

    def _unwrap(self, ref: Any) -> Any:
        import ray

        reply = ray.get(ref)
        if reply[0] == "ok":
            return reply[1]
        raise _error(reply[1], reply[2])


def _error(name: str, message: str) -> TeamError:
    """The lead's ``TeamError`` again, as its own type (its message is what a tool shows)."""
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, TeamError)):
        cls = TeamError
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    return e


class RemoteStore:
    """``TaskStorage`` and ``HandOver``: the lead's task store, through its service."""

    def __init__(self, lead: Lead):
        self.lead = lead

    def read(self, task_id: int) -> Task:
        return self.lead.call("store", "read", task_id)  # type: ignore[no-any-return]

    def resolve(self, ref: int | str) -> int:
        return self.lead.call("store", "resolve", ref)  # type: ignore[no-any-return]

    def all(self) -> list[Task]:
        return self.lead.call("store", "all")  # type: ignore[no-any-return]

    def create(self, subject: str, description: str = "", blocked_by: Iterable[int | str] = (), owner: str = "",
               *, actor: str = "cli", **fields: Any) -> Task:
        return self.lead.call("store", "create", subject, description, list(blocked_by), owner,  # type: ignore[no-any-return]
                              actor=actor, **fields)

    def update(self, ref: int | str, *, status: str | Status | None = None, owner: str | None = None,
               add_blocked_by: Iterable[int | str] = (), remove_blocked_by: Iterable[int | str] = (),
               actor: str = "cli", **fields: Any) -> Task:
        return self.lead.call("store", "update", ref, status=status, owner=owner,  # type: ignore[no-any-return]
                              add_blocked_by=list(add_blocked_by), remove_blocked_by=list(remove_blocked_by),
                              actor=actor, **fields)

    def claim(self, ref: int | str, owner: str, *, lease: float | None = None, actor: str | None = None) -> Task:
        return self.lead.call("store", "claim", ref, owner, lease=lease, actor=actor)  # type: ignore[no-any-return]

    def hand_over(self, ref: int | str, epoch: int, owner: str, *, actor: str | None = None) -> Task:
        return self.lead.call("store", "hand_over", ref, epoch, owner, actor=actor)  # type: ignore[no-any-return]


class RemoteBatch:
    """``Fetched``: messages taken from an inbox at the lead, whose consumer lock the service holds."""

    def __init__(self, lead: Lead, batch_id: int, messages: list[Message]):
        self.lead, self.batch_id, self.messages = lead, batch_id, messages
        self._settled = batch_id == 0  # an empty batch: the service gave the lock back already

    def ack(self) -> None:
        self._settle(True)

    def release(self) -> None:
        self._settle(False)

    def _settle(self, ack: bool) -> None:
        if self._settled:
            return
        self._settled = True
        self.lead._unwrap(self.lead.handle.settle.remote(self.batch_id, ack))


class RemoteBus:
    """``MessageBus`` and ``TeammateBus``: the lead's inboxes, through its service."""

    def __init__(self, lead: Lead):
        self.lead = lead

    def send(self, to: str, content: str, *, sender: str, type: str = "message",
             request_id: str | None = None, **extra: Any) -> Message:
        return self.lead.call("bus", "send", to, content, sender=sender, type=type,  # type: ignore[no-any-return]
                              request_id=request_id, **extra)

    def broadcast(self, content: str, *, sender: str) -> list[Message]:
        return self.lead.call("bus", "broadcast", content, sender=sender)  # type: ignore[no-any-return]

    def peek(self, name: str) -> list[Message]:
        return self.lead.call("bus", "peek", name)  # type: ignore[no-any-return]

    def fetch(self, name: str, *, seen: Container[str] = (), limit: int | None = None) -> RemoteBatch:
        wanted = list(seen) if isinstance(seen, Iterable) else []
        bid, messages = self.lead._unwrap(self.lead.handle.fetch.remote(name, wanted, limit))
        return RemoteBatch(self.lead, bid, messages)

    def wait_unread(self, name: str, timeout: float | None = None) -> bool:
        return self.lead.call("bus", "wait_unread", name, timeout=timeout)  # type: ignore[no-any-return]


class RemoteRoster:
    """``Roster``: the lead's ``.team/config.json``, through its service."""

    def __init__(self, lead: Lead):
        self.lead = lead

    def members(self) -> list[Member]:
        return self.lead.call("roster", "members")  # type: ignore[no-any-return]

    def update(self, name: str, **fields: Any) -> Member:
        return self.lead.call("roster", "update", name, **fields)  # type: ignore[no-any-return]


class RemoteClaims:
    """``ClaimTracker``: a ``claim_task`` claim is kept alive (its lease renewed) by the lead's service."""

    def __init__(self, lead: Lead):
        self.lead = lead

    def claimed(self, task: Task) -> None:
        import ray

        ray.get(self.lead.handle.claimed.remote(task.id, task.epoch, task.owner))


# -- the actor ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MateSpec:
    """A teammate as the node needs it (no path of the lead's machine is used on the node)."""

    name: str
    role: Role
    config: LLMConfig  # carries the model API key: it travels through Ray's object store (docs/scale.md)
    team_name: str
    max_steps: int
    sandbox: tuple[bool, str]  # Sandbox(enabled, opted_out_by=...) of the run
    secrets: Secrets  # the lead's: scrubbed from every file the teammate writes and every tool result
    claim_lease: float
    transcript: bytes = b""  # its transcript so far at the lead (a teammate started again resumes)


@dataclass
class AgentAttemptResult:
    task_id: int
    epoch: int
    node_id: str
    status: str  # the LoopResult's: completed | failed | idle | interrupted | timeout
    result: str
    error: str | None
    steps: int
    usage: dict[str, Any]
    log: str | None  # the transcript, relative to the state root
    duration: float
    private: bytes  # a tar of the teammate's private files (``PRIVATE`` under .team/)
    outputs: bytes | None = None
    bundle: bytes | None = None


class RemoteTeammate:
    """One teammate on this node (see the module docstring); calls arrive concurrently (a threaded actor)."""

    def __init__(self, spec: MateSpec, service: Any):
        self.spec, self.lead = spec, Lead(service)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"team-mate-{spec.name}-", dir=scratch_root(0)))
        self.root = self.scratch / "root"
        team_dir(self.root).mkdir(parents=True)
        if spec.transcript:
            path = team_dir(self.root) / "transcripts" / f"{spec.name}.jsonl"
            path.parent.mkdir(parents=True)
            path.write_bytes(spec.transcript)
        home = self.scratch / "home"
        home.mkdir()
        self.jobs = JobManager(self.root, secrets=spec.secrets)
        store, bus, roster = RemoteStore(self.lead), RemoteBus(self.lead), RemoteRoster(self.lead)
        spend = Spend()
        spend.set_budget(spec.name, spec.role.budget)
        registry = agent_registry()
        services = TeamServices(root=self.root, team_name=spec.team_name, roster=roster, bus=bus, jobs=self.jobs,
                                store=store, registry=registry, claim=lambda mate: None, max_steps=spec.max_steps,
                                idle_slice=IDLE_SLICE, hooks=NoHooks(), spend=spend, secrets=spec.secrets)
        d = team_dir(self.root)
        ctx = ToolContext(workspace=home, root=self.root, agent=spec.name, truth=FileTruth(), store=store,
                          outputs_dir=d / "outputs" / spec.name, call_log=d / "calls" / f"{spec.name}.jsonl",
                          sandbox=Sandbox(spec.sandbox[0], opted_out_by=spec.sandbox[1]),
                          network=spec.role.network, secrets=spec.secrets, bus=bus, jobs=self.jobs,
                          claims=RemoteClaims(self.lead), claim_lease=spec.claim_lease,
                          permissions=spec.role.permissions)
        self.model = LLMClient(spec.config)
        self.mate = Teammate(spec.name, spec.role, self.model, None, ctx=ctx, services=services)
        self.mate.start()
        self.node = node_id()
        # its scratch goes with this actor's process, whatever ends it (ray_reaper.py)
        folder = ray_reaper.registry(scratch_root(0))
        ray_reaper.ensure_watcher(folder)
        pid = os.getpid()
        self.registered = ray_reaper.register(folder, ray_reaper.Entry(
            "mate", spec.name, 0, 0, spec.name, 0, 0, pid, ray_reaper.start_time(pid) or 0, str(self.scratch), ""))

    def ready(self) -> str:
        """The node this teammate runs on."""
        return self.node

    def run(self, spec: AttemptSpec, task: Task, ws: Workspace) -> AgentAttemptResult:
        t0 = time.monotonic()
        # inside the teammate's own scratch: whatever ends this actor, the reaper removes both (ray_reaper.py)
        scratch = Path(tempfile.mkdtemp(prefix=f"team-t{spec.task_id}e{spec.epoch}-", dir=self.scratch))
        try:
            try:
                top = unpack(ws, scratch)
                base = head_commit(top) if ws.is_git else ""
                cwd = (top / spec.rel_cwd).resolve()
                cwd.mkdir(parents=True, exist_ok=True)
            except (OSError, tarfile.TarError, subprocess.CalledProcessError) as e:
                return self._result(spec, LoopResult("failed", "", f"workspace on node failed: {e}"), t0)
            ended = threading.Event()
            box: list[LoopResult] = []

            def done(r: LoopResult) -> None:
                box.append(r)
                ended.set()

            deadline = time.monotonic() + spec.timeout if spec.timeout else None
            self.mate.enqueue(Assignment(task, spec.epoch, done, workspace=cwd, deadline=deadline))
            while not ended.wait(1.0):
                if not self.mate.alive:  # its thread ended (halted, or crashed: its log says why)
                    self.mate.drop(f"teammate {self.spec.name} is no longer running", spec.task_id)
                    if not ended.is_set():
                        done(LoopResult("failed", "", f"teammate {self.spec.name} is no longer running"))
            r = box[0]
            out = self._result(spec, r, t0)
            if r.status == "completed":
                if not ws.is_git:
                    out.outputs = outputs_tar(cwd, spec.outputs)
                else:
                    out.bundle = commits_bundle(top, base, spec)
            return out
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _result(self, spec: AttemptSpec, r: LoopResult, t0: float) -> AgentAttemptResult:
        return AgentAttemptResult(spec.task_id, spec.epoch, self.node, r.status, r.result, r.error, r.steps,
                                  r.usage.model_dump(), r.log, time.monotonic() - t0, self.private())

    def cancel(self, task_id: int) -> None:
        self.mate.drop("cancelled before it started", task_id)
        self.mate.interrupt(task_id)

    def private(self) -> bytes:
        """The teammate's private files (``PRIVATE`` folders of its node-local ``.team/``) as a tar."""
        buf = io.BytesIO()
        d = team_dir(self.root)
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in PRIVATE:
                if (d / name).is_dir():
                    tar.add(d / name, arcname=f"{d.name}/{name}")
        return buf.getvalue()

    def stop(self, reason: str) -> bytes:
        """End the teammate (a running attempt ends as interrupted); its private files, one last time."""
        self.mate.halt(reason)
        self.mate.join(10)
        self.mate.drop(reason)
        self.jobs.shutdown()
        self.model.close()
        try:
            return self.private()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.registered.unlink(missing_ok=True)
