"""``kind: agent`` tasks on ``team run --backend ray``: teammates as Ray actors on the cluster's nodes.

``RayAgentExecutor`` is an ``Executor`` like agents.py's ``AgentExecutor``;
the scheduler, its epochs, retries and recovery are unchanged. Three pieces:

* the lead's service (ray_service.py ``LeadService``): a Ray actor pinned to
  the lead's own node (``NodeAffinitySchedulingStrategy(soft=False)``, no CPU)
  that holds the lead's task store, bus and roster; every store and inbox
  operation of a remote teammate (claim, create, task list/get/update,
  hand-over, send, read_inbox, broadcast) is a call to it, so ``.tasks/`` and
  ``.team/`` keep one writer's rules, on the lead's machine;
* one actor per teammate (ray_teammate.py ``RemoteTeammate``), started when
  the run starts (the plan's ``team:``) or when a task needs a new one (its
  ``assignee``, else ``<role>-<n>``), on a node other than the lead's when
  the cluster has one (the node with the fewest teammates; the lead's node
  when it is the only one), with no CPU reserved (a teammate mostly waits
  on the model; the commands it runs are its own). The model is called from
  there;
* this executor, on the lead: it places each attempt on a teammate, ships the
  task's workspace as for a shell task (ray_backend.py ``Workspaces``: the
  ``outputs`` archive of its folder, or a bundle of its worktree's base
  commit), and lands the attempt's end in completion order on one thread: a
  result not of the attempt in flight for its task is dropped; the
  teammate's private files (transcript, call log, saved outputs, background
  jobs) are written under the lead's ``.team/``, scrubbed of the lead's
  secrets; the work comes back as a shell task's does (``bring_back``, then
  the usual merge-back); the ``Outcome`` carries the result, the usage and
  the node, and the scheduler's commit refuses it if its epoch went stale.

A teammate whose actor died with its node or process loses its attempt
(``Outcome(lost=True)``, re-run without using a retry, as for shell tasks);
the next task for that name starts it again, on another node, from its
transcript at the lead. An attempt that does not end by its ``timeout`` plus
``TIMEOUT_GRACE`` is reported as timed out and cancelled.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import queue
import tarfile
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.transcript import transcript_path
from ..core import threads
from ..core.errors import TeamError, UserError
from ..core.fsutil import atomic_write
from ..core.models import Task
from ..core.paths import team_dir
from ..core.redact import Secrets
from ..jobs.records import JobRecord
from ..llm.endpoints import Endpoints
from ..llm.pricing import Usage
from ..roles.roles import Role, check_tools, get_role
from ..runtime.budgets import Spend
from ..team.roster import LEAD, Team, check_name
from ..tools.coordination import agent_registry
from .agents import STATUS, TIMEOUT_GRACE, max_steps_from_env, run_config
from .executor import DoneCallback, ExecutorContext, Outcome
from .ray_backend import (
    NodeNames,
    RayExecutor,
    bring_back,
    drop_caches,
    first_line,
    git_identity,
    open_journal,
    settle_outputs,
)
from .ray_connect import connect, disconnect, head_lost
from .ray_remote import AttemptSpec
from .ray_service import LeadService
from .ray_ship import Workspaces
from .ray_teammate import PRIVATE, AgentAttemptResult, MateSpec, RemoteTeammate

CLAIM_LEASE = 60.0
"""Lease (seconds) of a claim a remote teammate makes with ``claim_task``; the lead's service renews it."""
SERVICE_THREADS = 256
"""Calls the lead's service serves at once (an idle teammate keeps one waiting on its inbox)."""
HEARTBEAT_EVERY = 2.0
"""Seconds between the lead's roster heartbeats for its remote teammates (``team status``)."""


@dataclass
class _Mate:
    name: str
    role: Role
    actor: Any  # ray.actor.ActorHandle of a RemoteTeammate
    node_id: str  # where it was placed (the attempt's result says where it ran)
    busy: int = 0  # attempts placed on it and not landed


@dataclass
class _Flight:
    task: Task
    epoch: int
    done: DoneCallback
    ref: Any
    mate: _Mate
    started: float
    timer: threading.Timer | None = None


class RayAgentExecutor:
    """``kind: agent`` on a Ray cluster (see the module docstring)."""

    kind = "agent"
    inline_start = False  # placing an attempt may start a teammate's actor: not inside the store's commit

    def __init__(self, ctx: ExecutorContext, address: str | None = None, peer: RayExecutor | None = None):
        """``peer``: the run's shell executor on the same cluster, whose workspace cache and node names
        are shared (a folder that outputs came back into is archived again for either kind)."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.endpoints = Endpoints(ctx.model_specs)  # a model's own endpoint, key and price (llm/endpoints.py)
        self.config = run_config(ctx.model, ctx.model_specs)
        self.max_steps = max_steps_from_env()
        self.ctx, self._ray, self._affinity = ctx, ray, NodeAffinitySchedulingStrategy
        said, watch = connect(address, ctx.stop.fail)
        try:
            if ctx.note is not None and peer is None:
                ctx.note(f"backend ray: running tasks on {said}")
            self.peer = peer
            self.workspaces = peer.workspaces if peer is not None else Workspaces(uuid.uuid4().hex[:12])
            self.outputs = peer.outputs if peer is not None else open_journal(ctx)
            self.nodes = peer.nodes if peer is not None else NodeNames(ray)
            if peer is None:
                self.nodes.refresh()
            self.secrets = Secrets.from_environ()
            self.spend = ctx.spend if ctx.spend is not None else Spend()
            self.root = Path(ctx.root)
            self.workspace = Path(ctx.workspace or ctx.root)
            self.team = Team(self.root)
            if not self.team.config.exists():
                self.team.set_team_name(ctx.plan)
            self.registry = agent_registry()
            self.ident = git_identity(self.root)
            self.lead_node = str(ray.get_runtime_context().get_node_id())
            service: Any = ray.remote(LeadService)
            self.service: Any = service.options(
                num_cpus=0, max_concurrency=SERVICE_THREADS, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(self.lead_node, soft=False),
            ).remote(str(self.root.absolute()), self.secrets, CLAIM_LEASE)
            ray.get(self.service.ready.remote())
            self._say(f"backend ray: the lead's service runs on node {self.nodes.label(self.lead_node)}; "
                      f"teammates run on the other nodes")
            self._lock = threading.RLock()
            self.mates: dict[str, _Mate] = {}
            self._lost_on: set[str] = set()  # nodes a teammate was lost with
            self._running: dict[int, _Flight] = {}
            self._stop = threading.Event()
            self._landing: queue.SimpleQueue[tuple[int, int, Future[AgentAttemptResult]] | None] = queue.SimpleQueue()
            self._lander = threads.start("team-ray-agents-landing", self._land_loop, on_crash=ctx.stop.fail)
            self._beats = threads.start("team-ray-agents-heartbeats", self._heartbeats, on_crash=ctx.stop.fail)
            for name, role in ctx.team:
                self._spawn(name, role)
            if watch is not None:
                watch.on_lost(self._head_lost)
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        """The executor could not be built: what it started so far goes (its threads, actors, connection)."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            self._landing.put(None)
        for mate in list(getattr(self, "mates", {}).values()):
            self._ray.kill(mate.actor)
        if getattr(self, "service", None) is not None:
            self._ray.kill(self.service)
        disconnect()

    def _head_lost(self, text: str) -> None:
        """The head stopped answering (ray_connect.HeadWatch): every attempt in flight fails with that."""
        if self.peer is None:
            self._say(f"backend ray: {text}")
        with self._lock:
            flights, self._running = list(self._running.values()), {}
            for f in flights:
                f.mate.busy -= 1
        for f in flights:
            if f.timer is not None:
                f.timer.cancel()
            f.done(Outcome(f.task.id, f.epoch, "failed", duration=time.monotonic() - f.started, error=text))

    # ------------------------------------------------------------------ teammates
    def _spawn(self, name: str, role_name: str) -> _Mate:
        """Start teammate ``name``'s actor (its roster entry at the lead first: messages may reach it)."""
        check_name(name)
        if name == LEAD:
            raise UserError("'lead' is the lead's own name; pick another teammate name")
        role = get_role(role_name, self.workspace)
        check_tools(role, self.registry.names())
        own_model, own_budget = self.ctx.models.get(name), self.ctx.budgets.get(name)
        role = dataclasses.replace(role, model=own_model or role.model, budget=own_budget or role.budget)
        refused = ray_role_problem(role, plan_mode=name in self.ctx.plan_mode, mcp=bool(self.ctx.mcp_servers))
        if refused:
            raise UserError(f"teammate {name} ({role.name}) {refused}: run this plan with --backend local")
        model = role.model or self.config.model
        config = self.endpoints.config(model, self.endpoints.spec(model, role.model_spec(model)))
        self.spend.set_budget(name, role.budget)
        self.team.add(name, role.name, status="idle", exist_ok=True, pid=os.getpid(), task=None, plan_mode=False,
                      model=config.model, enrolled=None,
                      budget=role.budget.model_dump(exclude_none=True) if role.budget is not None else None)
        past = transcript_path(self.root, name)
        spec = MateSpec(name, role, config, self.ctx.plan, self.max_steps,
                        (self.ctx.sandbox.enabled, self.ctx.sandbox.opted_out_by), self.secrets, CLAIM_LEASE,
                        past.read_bytes() if past.is_file() else b"")
        node = self._place()
        actor = self._ray.remote(RemoteTeammate).options(
            num_cpus=0, max_concurrency=16, max_restarts=0, name=None,
            scheduling_strategy=self._affinity(node, soft=False),
        ).remote(spec, self.service)
        mate = _Mate(name, role, actor, node)
        self._say(f"backend ray: teammate {name} ({role.name}) starts on node {self.nodes.label(node)}")
        with self._lock:
            self.mates[name] = mate
        return mate

    def _place(self) -> str:
        """The node for a new teammate: of the live nodes other than the lead's, the one with the fewest
        teammates (the lead's own node when it is the only one)."""
        nodes: list[dict[str, Any]] = self._ray.nodes()  # type: ignore[no-untyped-call]
        self.nodes.update(nodes)
        alive = sorted(n["NodeID"] for n in nodes if n.get("Alive"))
        with self._lock:  # a node that lost a teammate may not be known dead yet: others first
            fresh = [n for n in alive if n not in self._lost_on]
        others = ([n for n in fresh if n != self.lead_node] or [n for n in alive if n != self.lead_node]
                  or [self.lead_node])
        with self._lock:
            load = {n: 0 for n in others}
            for m in self.mates.values():
                if m.node_id in load:
                    load[m.node_id] += 1
        return str(min(others, key=lambda n: (load[n], others.index(n))))

    def _choose(self, task: Task) -> _Mate:
        """The task's assignee (started if absent), else a free teammate of its role, else a new one."""
        with self._lock:
            if task.assignee:
                mate = self.mates.get(task.assignee)
                if mate is not None:
                    return mate
                known = next((m for m in self.team.members() if m.name == task.assignee), None)
                return self._spawn(task.assignee, task.role or (known.role if known else "coder"))
            role = task.role or "coder"
            for mate in self.mates.values():
                if mate.role.name == role and mate.busy == 0:
                    return mate
            n = next(i for i in itertools.count(1) if f"{role}-{i}" not in self.mates)
            return self._spawn(f"{role}-{n}", role)

    # ------------------------------------------------------------------ executor seam
    def reap_orphans(self) -> list[JobRecord]:
        """Nothing to reap: Ray kills the actors of a driver (a lead) that died."""
        return []

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.start(task, epoch, done)

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        if self._stop.is_set():
            done(Outcome(task.id, epoch, "killed", error="the run is shutting down"))
            return
        if (lost := head_lost()) is not None:
            done(Outcome(task.id, epoch, "failed", error=lost))
            return
        try:
            mate = self._choose(task)
            ws, rel = self.workspaces.get(task)
        except (OSError, TeamError) as e:
            done(Outcome(task.id, epoch, "failed", error=f"cannot start task #{task.id}: {e}"))
            return
        spec = AttemptSpec(task.id, epoch, task.attempts, "", rel, {}, task.timeout, list(task.outputs or []),
                           f"{task.subject}\n\nteam task #{task.id}, attempt {task.attempts}", self.ident)
        ref = mate.actor.run.remote(spec, task, ws)
        flight = _Flight(task, epoch, done, ref, mate, time.monotonic())
        if task.timeout:
            flight.timer = threading.Timer(task.timeout + TIMEOUT_GRACE, self._abandon, (task.id, epoch))
            flight.timer.daemon = True
        with self._lock:
            mate.busy += 1
            self._running[task.id] = flight
        if flight.timer is not None:
            flight.timer.start()
        fut: Future[AgentAttemptResult] = ref.future()
        fut.add_done_callback(lambda f: self._landing.put((task.id, epoch, f)))

    def _take(self, task_id: int, epoch: int) -> _Flight | None:
        """The attempt in flight for ``task_id`` if it is this one, no longer in flight; else None."""
        with self._lock:
            flight = self._running.get(task_id)
            if flight is None or flight.epoch != epoch:
                return None
            del self._running[task_id]
            flight.mate.busy -= 1
        if flight.timer is not None:
            flight.timer.cancel()
        return flight

    def _abandon(self, task_id: int, epoch: int) -> None:
        """The agent did not stop by its timeout + the grace: report the timeout, cancel the attempt."""
        flight = self._take(task_id, epoch)
        if flight is None:
            return
        flight.mate.actor.cancel.remote(task_id)
        flight.done(Outcome(task_id, epoch, "timeout", duration=time.monotonic() - flight.started,
                            error=f"timed out after {flight.task.timeout:g}s; the agent did not stop within the "
                                  f"{TIMEOUT_GRACE:g}s grace and was abandoned (its late answer is ignored)"))

    def cancel(self, task_id: int) -> None:
        with self._lock:
            flight = self._running.get(task_id)
        if flight is not None:
            flight.mate.actor.cancel.remote(task_id)

    def close(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            mates = list(self.mates.values())
        from ray import exceptions as rx

        if head_lost() is not None:  # any Ray call would wait on the head: the actors went with the cluster
            for m in mates:
                self.team.update(m.name, status="shutdown", task=None)
            self._landing.put(None)
            self._lander.join(timeout=30)
            settle_outputs(self.outputs, self.ctx)
            disconnect()
            return
        why = "the run is shutting down"
        stops = {m.name: m.actor.stop.remote(why) for m in mates}
        for name, ref in stops.items():
            try:
                self._land_private(self._ray.get(ref, timeout=30))
            except (rx.RayError, OSError, TeamError) as e:
                self._say(f"backend ray: stopping teammate {name}: {first_line(e)}")
        try:
            released = self._ray.get(self.service.close.remote("stopped before finishing it (its team was shut "
                                                               "down)"), timeout=30)
            for task in released:
                self._say(f"#{task.id} ({task.subject}) was claimed by a teammate during the run and not "
                          f"finished: released to pending ({task.error})")
        except rx.RayError as e:
            self._say(f"backend ray: closing the lead's service: {first_line(e)}")
        for m in mates:
            self.team.update(m.name, status="shutdown", task=None)
            self._ray.kill(m.actor)
        self._ray.kill(self.service)
        self._landing.put(None)
        self._lander.join(timeout=30)
        settle_outputs(self.outputs, self.ctx)
        if self.peer is None:
            drop_caches(self._ray, self.workspaces.cache)
        disconnect()

    def _say(self, text: str) -> None:
        if self.ctx.note is not None:
            self.ctx.note(text)

    # ------------------------------------------------------------------ completions
    def _land_loop(self) -> None:
        while True:
            item = self._landing.get()
            if item is None:
                return
            task_id, epoch, fut = item
            flight = self._take(task_id, epoch)
            if flight is None:
                continue  # an attempt no longer ours (reported timed out, or superseded)
            if self._stop.is_set():
                continue  # the run stopped: the scheduler gives the task back itself
            flight.done(self._outcome(flight, fut))

    def _outcome(self, flight: _Flight, fut: Future[AgentAttemptResult]) -> Outcome:
        from ray import exceptions as rx

        task, epoch, mate = flight.task, flight.epoch, flight.mate
        took = time.monotonic() - flight.started
        try:
            res = fut.result()
        except (rx.RayActorError, rx.NodeDiedError, rx.WorkerCrashedError, rx.LocalRayletDiedError,
                rx.ObjectLostError, rx.RaySystemError) as e:
            with self._lock:  # the teammate is gone: the next task for its name starts it again, elsewhere
                if self.mates.get(mate.name) is mate:
                    del self.mates[mate.name]
                self._lost_on.add(mate.node_id)
            node = self.nodes.of_error(e) or self.nodes.label(mate.node_id)
            return Outcome(task.id, epoch, "lost", duration=took, error=f"teammate {mate.name}: {first_line(e)}",
                           node=node, lost=True)
        except rx.TaskCancelledError:
            return Outcome(task.id, epoch, "killed", duration=took, error="cancelled")
        except rx.RayError as e:
            return Outcome(task.id, epoch, "failed", duration=took, error=f"the cluster could not run it: {first_line(e)}")
        node = self.nodes.label(res.node_id)
        try:
            self._land_private(res.private)
        except (OSError, TeamError, tarfile.TarError) as e:
            self._say(f"#{task.id}: the files of teammate {mate.name} from node {node} were not kept: {e}")
        if res.task_id != task.id or res.epoch != epoch:
            return Outcome(task.id, epoch, "failed", node=node,
                           error=f"a result for #{res.task_id} epoch {res.epoch} came back for this attempt")
        usage = Usage(**res.usage)
        if usage.calls:  # the attempt's calls, as one line of the ledger (llm/ledger.py)
            self.spend.add(mate.name, usage, task=task.id, model=mate.role.model or self.config.model)
        status = STATUS.get(res.status, "failed")
        error = res.error if status != "completed" else None
        if status == "timeout":
            error = f"timed out after {task.timeout:g}s; the agent was stopped {res.error}"
        elif status == "failed" and not error:
            error = f"the agent ended with {res.status!r}"
        if status == "completed":
            try:
                bring_back(task, epoch, res.outputs, res.bundle, self.workspaces, self.outputs)
            except (OSError, TeamError, tarfile.TarError) as e:
                status, error = "failed", f"bringing its work back from node {node} failed: {e}"
        return Outcome(task.id, epoch, status, duration=res.duration, error=error, log=res.log,
                       result=res.result or None, usage=usage.model_dump() if usage.calls else None, node=node)

    def _land_private(self, data: bytes) -> None:
        """A teammate's private files from its node, under the lead's ``.team/`` (scrubbed); only regular
        files of the ``PRIVATE`` folders are taken."""
        d = team_dir(self.root)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if (not member.isfile() or len(parts) < 3 or parts[0] != d.name or parts[1] not in PRIVATE
                        or any(p in ("..", "") for p in parts) or Path(member.name).is_absolute()):
                    continue
                f = tar.extractfile(member)
                if f is None:
                    continue
                path = d.joinpath(*parts[1:])
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, self.secrets.scrub_bytes(f.read()), durable=False)

    def _heartbeats(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY):
            with self._lock:
                names = list(self.mates)
            for name in names:
                self.team.heartbeat(name)


def ray_role_problem(role: Role, *, plan_mode: bool, mcp: bool) -> str:
    """Why a teammate of ``role`` cannot run on a Ray node yet ("" when it can)."""
    if role.ask:
        return "has tools that ask a person first (`ask:` in its role), which teammates on Ray nodes cannot do yet"
    if plan_mode or role.plan_mode:
        return "starts in plan mode, which teammates on Ray nodes cannot do yet"
    if mcp or role.mcp_servers:
        return "would use MCP servers, which teammates on Ray nodes cannot reach yet"
    return ""

