"""The team runtime: the lead-side owner of every teammate thread (teammate.py).

``TeamRuntime`` (one per lead) holds the shared services -- roster
(``team.roster.Team``), bus (``team.inbox.Bus``), task store (its own, or
the one passed in: ``team run`` shares the scheduler's), job manager, tool
registry -- and one ``Teammate`` per name. Who depends on whom, one way::

    runtime.py ─┬─► teammate.py ──► handshakes.py   given TeamServices and a ToolContext
                ├─► subagents.py                    given root, workspace, registry, model_for, context
                └─► autoclaim.py                    given the store and reclaim_leases

The runtime builds one ``TeamServices`` record (teammate.py: root, roster,
bus, jobs, store, registry, ``claim``, step budget, idle slice; each
service a small Protocol) and hands it to every teammate with the
teammate's own ``ToolContext``; the subagent runner gets its collaborators
as constructor arguments. None of them imports runtime.py.
A teammate guards its own work queue; the runtime places, drops and
interrupts work only through its methods (``enqueue``, ``drop``,
``interrupt``, ``free``, ``halt``, ``join``), and its own lock guards only
``mates``.

* Roster (``.team/config.json``): status working/idle/shutdown, current task,
  pid, usage totals (across restarts). A heartbeat thread beats for every
  live teammate every ``heartbeat_every`` seconds, so ``team status`` can tell
  a live idle teammate from a dead one, even during a long model call.
* Choosing a teammate for a task (``assign``): the task's ``assignee``
  (spawned if absent), else a free teammate of the task's role, else a new
  one named ``<role>-<n>``. A name reused after a crash resumes its transcript.
* Autonomous claiming (autoclaim.py, ``autoclaim=True``): an idle teammate
  with nothing queued asks ``claim_for`` (its ``TeamServices.claim``) for a
  ready non-plan task matching its name/role (store CAS) and records its end
  with ``TaskStore.finish`` and the claim's epoch; the runtime's heartbeat
  renews those leases.
* Lease recovery (``reclaim_leases``): a teammate's claim outlives its
  process when the lead is killed (``team chat`` has no scheduler to
  recover it), so at start-up and on the autoclaimer's rescans the runtime
  returns to ``pending`` (``TaskStore.reclaim_expired``) every in-progress
  *non-plan* task whose lease expired and whose owner is gone: not a live
  teammate of this runtime, not a member alive in another process (roster
  liveness), not ``lead`` while another process is the lead. Plan tasks are
  the ``team run`` scheduler's: an owner holding any in-progress plan task
  is left alone (a dead run's plan tasks are recovered by the next
  ``team run`` of that plan, or ``team doctor --fix``).
* Shutdown handshake (team/protocols.py, ``request_shutdown``): approved,
  the runtime waits for the teammate's thread to end. ``cancel`` drops a
  task's queued attempts and interrupts its running one. ``close`` halts
  every teammate; running attempts end as interrupted, queued ones are
  handed back (interrupted, unstarted).
* ``team spawn`` and ``team shutdown`` reach a running lead through
  team/control.py (``serve_control``). ``team shutdown NAME`` runs the
  shutdown handshake for a person (``shutdown``): the teammate's answer is
  the reply; ``force`` stops it anyway (``force_stop``: its running attempt
  ends as interrupted) when it refused or did not answer in time.
* Approvals (approvals.py): a teammate whose role marks tools ``ask`` gets an
  ``ApprovalGate`` whose requests go to the request store
  (team/requests.py) and wait for ``team approve``/``team deny``; each new
  request is told to ``on_approval`` (default: an ``approval_request``
  message in the lead's inbox, ``tell_lead``). A plan-mode teammate's plan
  is a ``plan`` request in the same store (its message to the lead is the
  protocol's ``plan_approval_request``); ``on_approval`` hears of it too.
* Models and budgets (``members``: ``MemberSettings`` by name, from a plan's
  ``team:``): a teammate's own ``model``/``budget`` win over its role's;
  ``model_for`` gets the role with them filled in; the budget goes to the
  shared ``Spend`` (budgets.py) and the roster. ``hooks``: the run's
  dispatcher; the bus tells it every message sent (``message_sent``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..agent.loop import DEFAULT_MAX_STEPS, LoopResult
from ..core import threads
from ..core.budget import Budget
from ..core.errors import UserError
from ..core.hooks import Hooks, NoHooks
from ..core.mcpspec import SEP, McpServerSpec
from ..core.models import Status, Task
from ..core.paths import tasks_dir, team_dir
from ..core.sandbox import Sandbox
from ..core.threads import Crash
from ..jobs.manager import JobManager
from ..llm.endpoints import unpriced
from ..llm.types import ChatModel
from ..mcpclient.hub import McpHub
from ..roles.roles import Permissions, Role, check_tools, get_role
from ..tasks.store import TaskStore
from ..team import protocols
from ..team.control import ControlServer
from ..team.inbox import Bus
from ..team.lead import lead_info
from ..team.requests import Request, Requests
from ..team.roster import LEAD, Team, check_name
from ..tools import FileTruth, Tool, ToolContext
from ..tools.coordination import agent_registry
from ..tools.mcptools import mcp_tools
from .approvals import StoreAsk, approval_line, gate_for, timeout_from_env
from .autoclaim import AutoClaimer
from .budgets import Spend
from .claims import ClaimLedger
from .subagents import SubagentRunner
from .teammate import MAX_IDLE_VETOES, Assignment, Done, Teammate, TeamServices

log = logging.getLogger("orchestrator.teammates")


class OtherMembers(Protocol):
    """Members of the run that are not teammate threads of this runtime: agent CLIs (run/command.py).
    ``team shutdown NAME`` of one of them reaches it through the runtime's control channel."""

    def names(self) -> list[str]: ...

    def shutdown(self, name: str, reason: str = "") -> dict[str, Any]: ...


@dataclasses.dataclass(frozen=True)
class MemberSettings:
    """A teammate's own settings (a plan's ``team:`` entry): they win over its role's."""

    model: str | None = None
    budget: Budget | None = None


class TeamRuntime:
    """The lead-side owner of every teammate thread (see the module docstring)."""

    def __init__(self, root: Path, *, model_for: Callable[[Role], ChatModel], workspace: Path | None = None,
                 team_name: str = "team", max_steps: int = DEFAULT_MAX_STEPS, subagent_steps: int = 20,
                 idle_slice: float = 0.05, heartbeat_every: float = 2.0, jobs: JobManager | None = None,
                 store: TaskStore | None = None, autoclaim: bool = False, claim_lease: float = 60.0,
                 claim_rescan: float = 5.0, sandbox: Sandbox | None = None, on_crash: Crash | None = None,
                 hooks: Hooks | None = None, spend: Spend | None = None,
                 members: Mapping[str, MemberSettings] | None = None, approval_timeout: float | None = None,
                 on_approval: Callable[[Request], None] | None = None,
                 mcp_servers: Sequence[McpServerSpec] = (), priced: Callable[[Role], bool] | None = None,
                 others: OtherMembers | None = None):
        """``sandbox``: where every teammate's shell commands run (default: on, core/sandbox.py);
        ``team run`` and ``team chat`` pass the session's choice. ``on_crash``: told when a thread
        of the team dies of an exception (its heartbeats, the control server, a teammate, the job
        watcher): ``team run`` stops (core/threads.py). ``hooks``: the run's hook dispatcher
        (hooks/dispatch.py; default: none); ``spend``: usage against budgets (budgets.py);
        ``members``: a teammate's own model and budget by name (a plan's ``team:``).
        ``approval_timeout``: seconds an ``ask`` call waits for a person (default
        ``TEAM_APPROVAL_TIMEOUT``, approvals.py); ``on_approval``: told of each new request, tool or
        plan (default: ``tell_lead`` for a tool request; a plan's message reaches the lead by the
        protocol). ``mcp_servers``: the plan's MCP servers (mcpclient/hub.py), started when a
        teammate that may use them is spawned. ``priced``: whether a teammate of a role has a known
        price (llm/endpoints.py); one under a dollar budget without one is refused at spawn.
        ``others``: the run's members that are not teammate threads (agent CLIs, run/command.py):
        ``team shutdown`` of one of them is theirs."""
        self.priced = priced
        self.on_crash = on_crash
        self.others = others
        self.hooks: Hooks = hooks if hooks is not None else NoHooks()
        self.spend = spend if spend is not None else Spend()
        self.members: dict[str, MemberSettings] = dict(members or {})
        self.root = Path(root).absolute()
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.workspace = Path(workspace or root).absolute()
        if store is not None and store.dir.resolve() != tasks_dir(self.root).resolve():
            raise ValueError(f"the task store of {store.root} cannot serve a runtime of {self.root}")
        self.model_for, self.team_name = model_for, team_name
        self.max_steps, self.subagent_steps, self.idle_slice = max_steps, subagent_steps, idle_slice
        self.team = Team(self.root)
        self.bus = Bus(self.root, team=self.team, poll_interval=0.01)
        if hooks is not None:
            self.bus.observer = lambda m: self.hooks.fire("message_sent", teammate=m.sender, message=m.to_json())
        self.requests = Requests(self.root)
        self.asker = StoreAsk(self.requests, timeout=approval_timeout or timeout_from_env(),
                              notify=on_approval or self.tell_lead)
        self.on_approval = on_approval
        self.store = store if store is not None else TaskStore(self.root)
        self._own_jobs = jobs is None
        self.jobs = jobs or JobManager(self.root, on_crash=on_crash)
        self.registry = agent_registry()
        self.mcp = McpHub(mcp_servers, root=self.root, workspace=self.workspace)
        self.subagents = SubagentRunner(
            root=self.root, workspace=self.workspace, registry=self.registry, model_for=model_for,
            context=lambda name, network, perms: self.tool_context(name, network=network, subagent=True,
                                                                   permissions=perms),
            guard=lambda role, ctx: gate_for(role, self.registry, self.asker.with_stop(lambda: self._stop.is_set())),
            team_name=team_name,
            max_steps=subagent_steps, spend=self.spend)
        self.claims = ClaimLedger(self.store, lease=claim_lease)
        self.claimer = AutoClaimer(self.store, self.claims, rescan_every=claim_rescan,
                                   recover=self.reclaim_leases) if autoclaim else None
        self._services = TeamServices(
            root=self.root, team_name=team_name, roster=self.team, bus=self.bus, jobs=self.jobs,
            store=self.store, registry=self.registry, claim=self.claim_for, max_steps=max_steps,
            idle_slice=idle_slice, hooks=self.hooks, spend=self.spend, requests=self.requests,
            on_request=self._plan_submitted)
        self.mates: dict[str, Teammate] = {}
        self._lock = threading.RLock()  # guards mates (each teammate guards its own queue)
        self._stop = threading.Event()
        self._control: ControlServer | None = None
        if not self.team.config.exists():
            self.team.set_team_name(team_name)
        self.reclaim_leases()
        self._hb = threads.start("team-heartbeats", lambda: self._heartbeats(heartbeat_every), on_crash=on_crash)

    def tool_context(self, name: str, *, network: bool = False, subagent: bool = False,
                     permissions: Permissions | None = None) -> ToolContext:
        """Agent ``name``'s tools: the runtime's workspace, store and sandbox; ``network``: its
        shell commands may use the network (its role says so); ``permissions``: what its role lets
        its task and worktree tools change (None: everything, as for a context without a role). Its calls
        pass the runtime's ``tool_call`` hooks (tools/hookgate.py), a subagent's too."""
        d = team_dir(self.root)
        return ToolContext(
            workspace=self.workspace, root=self.root, agent=name, truth=FileTruth(), store=self.store,
            outputs_dir=d / "outputs" / name, call_log=d / "calls" / f"{name}.jsonl",
            sandbox=self.sandbox, network=network,
            bus=None if subagent else self.bus, jobs=None if subagent else self.jobs,
            spawner=None if subagent else self, subagents=None if subagent else self.subagents,
            claims=self.claims, claim_lease=self.claims.lease, hooks=self.hooks,
            permissions=permissions if permissions is not None else Permissions.full())

    # -- teammates --------------------------------------------------------------
    def spawn(self, name: str, role: str = "coder", prompt: str | None = None, *,
              plan_mode: bool = False) -> Teammate:
        """Start teammate ``name`` (idempotent for a live one: a prompt is sent as a message).

        ``plan_mode``: its write/execute tools are refused until the lead approves its plan."""
        check_name(name)
        if name == LEAD:
            raise UserError("'lead' is the lead's own name; pick another teammate name")
        with self._lock:
            self.team.check_startable(name)  # an MCP client on the roster is never started as a teammate
            mate = self.mates.get(name)
            if mate is not None and mate.alive:
                if mate.role.name != role:
                    raise UserError(f"{name} is already on the team as a {mate.role.name}; pick another name")
                if prompt:
                    self.bus.send(name, prompt, sender=LEAD)
                return mate
            r = get_role(role, self.workspace)
            check_tools(r, self.registry.names())
            gate_for(r, self.registry, self.asker)  # a bad ask entry: refused before anything starts
            own = self.members.get(name)
            if own is not None:  # a plan's `team:` entry: its own model and budget win over the role's
                r = dataclasses.replace(r, model=own.model or r.model, budget=own.budget or r.budget)
            model = self.model_for(r)
            if self.priced is not None and self.spend.dollar_capped(r.budget) and not self.priced(r):
                raise UserError(unpriced(name, str(getattr(model, "model", r.model))))
            self.spend.set_budget(name, r.budget)
            plan_mode = plan_mode or r.plan_mode
            extra = self._mcp_tools(r)  # its MCP servers started first: one that cannot start stops the spawn
            self.team.add(name, role, status="working" if prompt else "idle", exist_ok=True, pid=os.getpid(),
                          task=None, plan_mode=plan_mode, model=getattr(model, "model", None),
                          budget=r.budget.model_dump(exclude_none=True) if r.budget is not None else None,
                          enrolled=None)  # started: no longer waiting (enrol.py)
            mate = Teammate(name, r, model, prompt,
                            ctx=self.tool_context(name, network=r.network, permissions=r.permissions),
                            on_crash=self.on_crash,
                            services=self._services, plan_mode=plan_mode, extra_tools=extra)
            mate.ctx.approvals = gate_for(r, self.registry, self.asker.with_stop(
                lambda: mate.stopping or mate.agent.cancelled.is_set()))
            self.mates[name] = mate
            self.team.heartbeat(name)
            mate.start()
            return mate

    def _mcp_tools(self, role: Role) -> list[Tool]:
        """The MCP tools a teammate of ``role`` gets: those of the plan's servers and the role's own,
        narrowed by its ``mcp_tools`` allow-list; a server none of whose tools it may use is not started."""
        tools: list[Tool] = []
        specs = {s.name: s for s in self.mcp.specs.values()}
        for spec in role.mcp_servers:
            specs.setdefault(spec.name, spec)
        for spec in specs.values():
            if role.mcp_tools is not None and not any(_may_use(p, spec.name) for p in role.mcp_tools):
                continue
            tools += mcp_tools(self.mcp.connect(spec), role.mcp_tools, reconnect=functools.partial(self.mcp.connect, spec))
        return tools

    def add_teammate(self, name: str, role: str, prompt: str | None) -> str:
        """The spawn_teammate tool (``tools.services.Spawner``): start ``name``, say what happened."""
        mate = self.spawn(name, role, prompt)
        return f"spawned {mate.name} ({mate.role.name}); message it with send_message"

    def assign(self, task: Task, epoch: int, done: Done, *, workspace: Path | None = None,
               deadline: float | None = None) -> None:
        """Queue a task attempt on the right teammate; failures to place it go to ``done``.

        ``workspace``: where this attempt's tools work (its git worktree), else the runtime's;
        ``deadline``: ``time.monotonic()`` at which the attempt times out (teammate.py)."""
        try:
            mate = self._choose(task)
        except UserError as e:
            done(LoopResult("failed", "", f"cannot start task #{task.id}: {e}"))
            return
        mate.enqueue(Assignment(task, epoch, done, workspace, deadline))

    def _choose(self, task: Task) -> Teammate:
        with self._lock:
            if task.assignee:
                mate = self.mates.get(task.assignee)
                if mate is not None and mate.alive:
                    return mate
                known = next((m for m in self.team.members() if m.name == task.assignee), None)
                return self.spawn(task.assignee, task.role or (known.role if known else "coder"))
            role = task.role or "coder"
            for mate in self.mates.values():
                if mate.role.name == role and mate.free:
                    return mate
            n = next(i for i in itertools.count(1) if f"{role}-{i}" not in self.mates)
            return self.spawn(f"{role}-{n}", role)

    def claim_for(self, mate: Teammate) -> Assignment | None:
        """Autonomous claiming (autoclaim.py; each teammate's ``TeamServices.claim``): the next
        ready task ``mate`` may take, claimed; None when there is none or ``mate`` is stopping."""
        if self.claimer is None or mate.stopping:
            return None
        claimed = self.claimer.claim(mate.name, mate.role.name)
        if claimed is None:
            return None
        task, done = claimed
        return Assignment(task, task.epoch, done)

    def _live(self) -> list[Teammate]:
        with self._lock:
            return [m for m in self.mates.values() if m.alive]

    def reclaim_leases(self, tasks: list[Task] | None = None) -> list[Task]:
        """Return the expired non-plan tasks of owners that are gone to pending (module docstring)."""
        if not self.store.exists():
            return []
        tasks = self.store.all() if tasks is None else tasks
        now = self.store.clock()
        expired = [t for t in tasks if t.status == Status.in_progress and t.owner and not t.plan
                   and t.lease_expires is not None and t.lease_expires <= now]
        if not expired:
            return []
        keep = {t.owner for t in tasks if t.plan and t.status == Status.in_progress}
        keep |= {m.name for m in self._live()}
        keep |= {s.name for s in self.team.states() if s.liveness in ("working", "idle")}
        lead = lead_info(self.root)
        if lead is not None and lead.get("pid") != os.getpid():
            keep.add(LEAD)
        gone = {t.owner for t in expired} - keep
        if not gone:
            return []
        # the store re-checks status and lease under its lock: a claim renewed meanwhile stays
        back = self.store.reclaim_expired(actor=LEAD, owner_filter=lambda owner: owner in gone)
        for t in back:
            log.info("task #%s: the lease of its owner expired and the owner is gone; back to pending", t.id)
        return back

    def request_shutdown(self, name: str, *, reason: str = "", timeout: float = 30.0,
                         request_id: str | None = None) -> protocols.Response:
        """The shutdown handshake (team/protocols.py); approved: waits for the thread to end."""
        check_name(name)
        resp = protocols.request_shutdown(self.bus, name, reason=reason, timeout=timeout, request_id=request_id)
        mate = self.mates.get(name)
        if resp.approve and mate is not None:
            mate.join(timeout)
        return resp

    def shutdown(self, name: str, *, reason: str = "", timeout: float = 30.0, force: bool = False) -> dict[str, Any]:
        """``team shutdown NAME`` (a person, through the control channel): the handshake, and with
        ``force`` a stop anyway when the teammate refused or did not answer. The reply's fields:
        ``request_id``, ``approved``, ``text`` (its answer), ``timed_out``, ``forced``, ``stopped``."""
        check_name(name)
        if self.others is not None and name in self.others.names():
            return self.others.shutdown(name, reason)
        with self._lock:
            mate = self.mates.get(name)
            running = sorted(n for n, m in self.mates.items() if m.alive)
        if mate is None or not mate.alive:
            what = "has already shut down" if mate is not None else "is not a teammate of"
            raise UserError(f"{name} {what} the running lead (pid {os.getpid()}); running teammates: "
                            f"{', '.join(running) or 'none'}")
        rid = protocols.new_request_id()
        reply: dict[str, Any] = {"name": name, "request_id": rid, "approved": False, "text": "",
                                 "timed_out": False, "forced": False}
        try:
            resp = self.request_shutdown(name, reason=reason, timeout=timeout, request_id=rid)
            reply.update(approved=resp.approve, text=resp.text)
        except protocols.ProtocolTimeout as e:
            reply.update(timed_out=True, text=str(e))
        if not reply["approved"] and force:
            self.force_stop(name)
            reply["forced"] = True
        reply["stopped"] = not mate.alive
        return reply

    def force_stop(self, name: str, timeout: float = 10.0) -> None:
        """Stop ``name`` without its consent: its running attempt ends as interrupted, queued ones
        are handed back, its thread ends (the roster says ``shutdown``)."""
        mate = self.mates.get(name)
        if mate is None:
            return
        mate.halt(f"{name} was shut down by `team shutdown --force`")
        mate.drop(f"{name} was shut down")
        mate.join(timeout)

    def _plan_submitted(self, r: Request) -> None:
        if self.on_approval is not None:
            self.on_approval(r)

    def tell_lead(self, r: Request) -> None:
        """The default ``on_approval``: an ``approval_request`` message in the lead's inbox."""
        self.bus.send(LEAD, approval_line(r), sender=r.sender, type="approval_request", request_id=r.id)

    def cancel(self, task_id: int) -> None:
        """Stop every attempt of ``task_id``: queued ones end unstarted, a running one as interrupted."""
        with self._lock:
            mates = list(self.mates.values())
        for mate in mates:
            mate.drop("cancelled before it started", task_id)
            mate.interrupt(task_id)

    def describe(self) -> str:
        states = self.team.states()
        if not states:
            return "no teammates yet; spawn one with spawn_teammate"
        return "\n".join(f"{s.name} ({s.role}): {s.liveness}" + (f", task #{s.task}" if s.task else "")
                         for s in states)

    # -- control, heartbeats, shutdown ---------------------------------------------
    def serve_control(self) -> None:
        """Take ``team spawn`` and ``team shutdown`` requests from other processes (team/control.py)."""
        def handle(op: str, args: dict[str, Any]) -> dict[str, Any]:
            if op == "shutdown":
                return self.shutdown(str(args.get("name", "")), reason=str(args.get("reason") or ""),
                                     timeout=float(args.get("timeout") or 30.0), force=bool(args.get("force")))
            if op != "spawn":
                raise UserError(f"unknown control request {op!r}")
            mate = self.spawn(str(args.get("name", "")), str(args.get("role") or "coder"), args.get("prompt"),
                              plan_mode=bool(args.get("plan_mode")))
            return {"name": mate.name, "role": mate.role.name, "pid": os.getpid()}

        self._control = ControlServer(self.root, handle, ["spawn", "shutdown"], on_crash=self.on_crash,
                                      slow=frozenset({"shutdown"})).start()

    def _heartbeats(self, every: float) -> None:
        while not self._stop.wait(every):
            for mate in self._live():
                self.team.heartbeat(mate.name)
            self.claims.renew()

    def settle(self, stopped: Callable[[], bool], slice: float = 0.1) -> list[str]:
        """The work is done (``team run``'s last task ended): wait until every live teammate has
        passed its ``teammate_idle`` hooks, working on what a veto asked for (teammate.py), or
        ``stopped()`` says to give up (a signal). What is left refused, one line per teammate."""
        for mate in self._live():
            while not mate.settle(slice):
                if stopped():
                    return []
        return [f"{m.name}'s teammate_idle hooks refused to let it go idle {MAX_IDLE_VETOES} times in a row: "
                f"{m.idle_refused}" for m in self._live() if m.idle_refused]

    def close(self, timeout: float = 10.0) -> list[Task]:
        """Stop every teammate (running attempts end as interrupted) and the services.

        Returns the tasks teammates had claimed themselves (``claim_task``, autoclaim) and not
        finished: they are released to pending (claims.py), so the caller can say so."""
        self._stop.set()
        if self._control is not None:
            self._control.close()
        with self._lock:
            mates = list(self.mates.values())
        for m in mates:
            m.halt()
        for m in mates:
            m.join(timeout)
        for m in mates:
            m.drop("the run is shutting down")
        released = self.claims.release_all("stopped before finishing it (its team was shut down)")
        self.mcp.close()  # after the teammates: no call is in flight; the SDK stops each server's processes
        if self._own_jobs:
            self.jobs.shutdown()
        return released


def _may_use(pattern: str, server: str) -> bool:
    """Whether an ``mcp_tools`` entry could name a tool of ``server``."""
    return pattern == "*" or pattern.startswith((server + ".", server + SEP))
