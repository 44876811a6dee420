"""``team run --backend ray``: shell tasks as Ray tasks on a cluster; the lead stays the single writer.

``RayExecutor`` is an ``Executor`` (executor.py) like the local shell one: the
scheduler, its group commit, epochs, retries and recovery are unchanged. Only
the ``ray_*`` modules import ``ray``, and only when a run uses the backend, so
no other command pays for it.

Connecting: ray_connect.py (which cluster; a wrong address, a lead that is
not a node, a head lost mid-run). The start check (``check_nodes``): one tiny
task per CPU of every live node, pinned to it, before anything runs: each says
which version of team the node runs (a node that cannot run team's code, or
runs another version, is refused by name with the install line), kills what
attempts of a dead lead of this state root left running there
(ray_reaper.py), and starts the run's worker processes, so the first
attempts find them ready (a run is a new Ray job, whose workers start on
demand); the run waits for them at most ``WARM_WAIT`` seconds. A plan without
``workers:`` runs with the cluster's CPU slots (``ctx.slots``).

Per attempt (``start``, non-blocking, so it may run inside the store's
commit): the task's workspace is made once and shared by every attempt that
starts from it (ray_ship.py ``Workspaces``: inline when small, else layers put
into the object store once, which a node fetches only when its cache lacks
them: ray_cache.py); the attempt is
submitted as one Ray task (``num_cpus``: the task's, default 1;
``resources``: the plan's custom resources such as ``{gpu: 1}``; Ray's own
retries off: the lead decides what runs again, under a new epoch). Its
completion comes back through the reference's future callback: no thread
per task and no polling. One landing thread then, in completion order:

* checks the result carries the epoch of the attempt still in flight for its
  task (else it is dropped: its outputs never reach the tree);
* writes the log under ``.team/ray/`` (scrubbed of the lead's secrets, as
  every file under the root is);
* brings the work back: the ``outputs`` files into the task's folder (outputs
  mode; behind an undo record, kept only once the store holds the attempt's
  completion: ray_outputs.py), or the returned commits into the task's worktree, fast-forwarded
  (``isolation: worktree``; ``isolation.py`` then merges them back as it
  merges local work, conflicts handled as today);
* hands the ``Outcome`` (with the node it ran on) to the scheduler, whose
  store commit refuses it if its epoch went stale meanwhile.

Placement: Ray's scheduler decides on the node the lead's lease request
reaches first, from its view of the other nodes' free resources, which the
nodes report every 100 ms (``raylet_report_resources_period_milliseconds``);
a slot freed on another node is invisible to it until then, so a dependent
submitted right after its dependency finished there waited ~30 ms on average
(up to 100). The lead, which starts every attempt of its run, knows which
slots its attempts hold: while it has fewer attempts in flight than the
cluster has room for, it sends each to the node with the most CPUs left by
its own count (``Placement``) with a soft node affinity that spills: the
request goes straight to that node's raylet, which knows its own resources
exactly; if the slot is taken after all (another job), that raylet passes
the attempt on as Ray would have, and a node gone meanwhile is skipped.
Once more attempts are in flight than the lead counts room for (``workers``
above the cluster's slots), Ray's own queue places them, as before.

Faults: an attempt whose node died (``NodeDiedError``), whose worker process
died, or whose object was lost comes back as ``Outcome(lost=True)`` naming
the node; the scheduler re-runs it elsewhere without using a retry, up to the
task's ``lost_retries`` (scheduler.py). A dead lead's attempts die with its
Ray driver (Ray ends the workers of a driver that exited, and a worker ending
kills its command's process group; what survives is killed by ray_reaper.py
before the task runs again); the next lead releases their tasks
(``materialise``) and claims them again under new epochs, so nothing completes
twice. The nodes are read on a thread (``Placement``, which also labels them:
``NodeNames``): placing, starting or landing an attempt never waits on Ray's
control store.
"""

from __future__ import annotations

import queue
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import threads
from ..core.environ import expand_env
from ..core.errors import TeamError, UserError
from ..core.fsutil import atomic_write
from ..core.models import Task
from ..core.paths import team_dir
from ..core.redact import Secrets
from ..core.threads import Crash
from ..git.worktrees import worktree_locked
from ..jobs.records import JobRecord
from ..tasks.store import TaskStore
from .executor import DoneCallback, ExecutorContext, Outcome
from .ray_connect import connect, disconnect, head_lost
from .ray_outputs import OutputsJournal
from .ray_reaper import root_key
from .ray_remote import AttemptResult, AttemptSpec, NodeReport, run_attempt, start_check
from .ray_ship import Workspaces, _git_out

NODES_EVERY = 1.0
"""Seconds between two reads of the cluster's nodes and their resources (``Placement``): a node that
joins gets attempts this soon (one read is a request to Ray's control store, a few ms)."""
SHUN_FOR = 60.0
"""Seconds the lead places nothing on a node an attempt was lost with (Ray lists a dead node as alive
until its health checks give up on it; the node is dropped from placement then anyway)."""
SILENT_GRACE = 3.0
"""Seconds the start check waits for a node that has not answered at all once the others have."""
WARM_WAIT = 10.0
"""Seconds the lead waits, at most, for every node to answer its start check (and the run's worker
processes to start) before running tasks; a node that died and that Ray still lists takes that long."""


@dataclass
class _Flight:
    task: Task
    epoch: int
    done: DoneCallback
    ref: Any  # ray.ObjectRef
    node: str | None = None  # where the lead placed it (None: Ray chose)
    layers: str = ""  # which layered workspace it starts from (ray_ship.py; "": an inline one)


class RayExecutor:
    """``kind: shell`` on a Ray cluster (see the module docstring)."""

    kind = "shell"
    inline_start = True  # start() only submits: safe inside store.commit's on_logged

    def __init__(self, ctx: ExecutorContext, address: str | None = None):
        import ray

        self.ctx = ctx
        self._ray = ray
        said, watch = connect(address, ctx.stop.fail)
        if ctx.note is not None:
            ctx.note(f"backend ray: running tasks on {said}")
        self._remote = ray.remote(run_attempt)
        self.run_id = uuid.uuid4().hex[:12]
        self.root_key = root_key(socket.gethostname(), str(Path(ctx.root).resolve()))
        self.nodes = NodeNames(ray)
        try:
            ctx.slots = check_nodes(ray, self.nodes, self.root_key, self.run_id, ctx.note)
        except BaseException:
            disconnect()
            raise
        self.workspaces = Workspaces(self.run_id)
        self.outputs = open_journal(ctx)
        self.secrets = Secrets.from_environ()
        self.logs = team_dir(ctx.root) / "ray"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ident = git_identity(ctx.root)
        self._lock = threading.Lock()
        self._running: dict[int, _Flight] = {}
        self._warm: dict[str, frozenset[str]] = {}  # a layered workspace -> the nodes whose caches hold it
        self._submitters: dict[tuple[tuple[tuple[str, float], ...], str | None, bool], Any] = {}
        self.placement = Placement(ray, ctx.stop.fail, self.nodes)
        self._stop = threading.Event()
        self._landing: queue.SimpleQueue[tuple[int, int, Future[AttemptResult]] | None] = queue.SimpleQueue()
        self._lander = threads.start("team-ray-landing", self._land_loop, on_crash=ctx.stop.fail)
        if watch is not None:
            watch.on_lost(self._head_lost)

    def _head_lost(self, text: str) -> None:
        """The head stopped answering (ray_connect.HeadWatch): every attempt in flight fails with that."""
        if self.ctx.note is not None:
            self.ctx.note(f"backend ray: {text}")
        with self._lock:
            flights, self._running = list(self._running.values()), {}
        for f in flights:
            f.done(Outcome(f.task.id, f.epoch, "failed", error=text, node=f.node and self.nodes.label(f.node)))

    # ------------------------------------------------------------------ executor seam
    def reap_orphans(self) -> list[JobRecord]:
        """Nothing to reap: Ray cancels the tasks of a driver (a lead) that died."""
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
            ws, rel = self.workspaces.get(task)
        except (OSError, TeamError) as e:
            done(Outcome(task.id, epoch, "failed", error=f"cannot start: {e}"))
            return
        need = {"CPU": task.num_cpus if task.num_cpus is not None else 1.0, **task.resources}
        lacking = self.placement.infeasible(need)
        if lacking:
            done(Outcome(task.id, epoch, "failed", error=f"cannot start: no node of the cluster has {lacking} "
                                                          f"(ray start --num-cpus/--resources on a node gives it)"))
            return
        env = {k: expand_env(v) for k, v in task.env.items()}
        env.update(TEAM_TASK_ID=str(task.id), TEAM_PLAN=task.plan or "", TEAM_PLAN_TASK=task.plan_task or "",
                   TEAM_ATTEMPT=str(task.attempts))
        spec = AttemptSpec(task.id, epoch, task.attempts, task.command or "", rel, env, task.timeout,
                           list(task.outputs or []), f"{task.subject}\n\nteam task #{task.id}, attempt {task.attempts}",
                           self.ident, self.root_key, self.run_id)
        key = ws.layers[0].digest if ws.layers else ""  # the folder's or repository's first layer names it
        with self._lock:
            warm = self._warm.get(key, frozenset())
        node, spill = self.placement.place(need, warm)
        try:
            ref = self._submitter(need, node, spill).remote(spec, ws)
        except BaseException:
            self.placement.done(node, need)
            raise
        with self._lock:
            self._running[task.id] = _Flight(task, epoch, done, ref, node, key)
        fut: Future[AttemptResult] = ref.future()

        def landed(f: Future[AttemptResult]) -> None:
            self.placement.done(node, need)  # every submitted attempt ends here once, ours or stale
            self._landing.put((task.id, epoch, f))

        fut.add_done_callback(landed)

    def _submitter(self, need: dict[str, float], node: str | None, spill: bool) -> Any:
        """The remote function with these resources, sent to ``node`` (None: where Ray chooses; ``spill``:
        on elsewhere if it has no room); one per distinct ask and node: Ray validates options each time
        they are set, so they are set once."""
        key = (tuple(sorted(need.items())), node, spill)
        with self._lock:
            fn = self._submitters.get(key)
        if fn is None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            custom = {k: v for k, v in need.items() if k != "CPU"}
            where: dict[str, Any] = {}
            if node is not None:
                # soft: a node gone meanwhile is not an error; spill: if its slot is taken after all (another
                # job), the node's raylet, which knows, sends the attempt on as Ray would have
                where["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True,
                                                                              _spill_on_unavailable=spill)
            fn = self._remote.options(num_cpus=need["CPU"], max_retries=0, retry_exceptions=False,
                                      **({"resources": custom} if custom else {}), **where)
            with self._lock:
                self._submitters[key] = fn
        return fn

    def cancel(self, task_id: int) -> None:
        with self._lock:
            flight = self._running.get(task_id)
        if flight is not None:
            self._ray.cancel(flight.ref, force=False)  # the worker kills the command's process group

    def close(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            flights = list(self._running.values())
        from ray import exceptions as rx

        for flight in flights if head_lost() is None else []:  # (a lost head: any Ray call would wait on it)
            try:
                self._ray.cancel(flight.ref, force=False)
            except (rx.RayError, ConnectionError, ValueError) as e:  # the cluster is gone, its tasks with it
                if self.ctx.note is not None:
                    self.ctx.note(f"backend ray: cancelling #{flight.task.id}: {type(e).__name__}: {e}")
        self._landing.put(None)
        self._lander.join(timeout=30)
        settle_outputs(self.outputs, self.ctx)
        if head_lost() is None:
            self.placement.stop()
            drop_caches(self._ray, self.run_id)
        disconnect()

    # ------------------------------------------------------------------ completions
    def _land_loop(self) -> None:
        while True:
            item = self._landing.get()
            if item is None:
                return
            task_id, epoch, fut = item
            with self._lock:
                flight = self._running.get(task_id)
                if flight is None or flight.epoch != epoch:
                    continue  # an attempt no longer ours: its result never reaches the tree
                del self._running[task_id]
            if self._stop.is_set():
                continue  # the run stopped: the scheduler gives the task back itself
            flight.done(self._outcome(flight, fut))

    def _outcome(self, flight: _Flight, fut: Future[AttemptResult]) -> Outcome:
        from ray import exceptions as rx

        task, epoch = flight.task, flight.epoch
        try:
            res = fut.result()
        except rx.NodeDiedError as e:
            self._shun(flight, e)
            return Outcome(task.id, epoch, "lost", error=first_line(e), node=self._node_of_error(e), lost=True)
        except (rx.WorkerCrashedError, rx.LocalRayletDiedError, rx.ObjectLostError, rx.RaySystemError) as e:
            self._shun(flight, e)
            return Outcome(task.id, epoch, "lost", error=first_line(e), node=self._node_of_error(e), lost=True)
        except rx.TaskCancelledError:
            return Outcome(task.id, epoch, "killed", error="cancelled")
        except rx.RayError as e:
            return Outcome(task.id, epoch, "failed", error=f"the cluster could not run it: {first_line(e)}")
        node = self.node_label(res.node_id)
        if flight.layers:  # the next attempts from that workspace go there first: its cache holds the layers
            with self._lock:
                self._warm[flight.layers] = self._warm.get(flight.layers, frozenset()) | {res.node_id}
        if res.task_id != task.id or res.epoch != epoch:
            return Outcome(task.id, epoch, "failed", node=node,
                           error=f"a result for #{res.task_id} epoch {res.epoch} came back for this attempt")
        log = self._write_log(task, res)
        tail = self.secrets.scrub(res.log[-4000:].decode(errors="replace"))
        error = res.error
        if res.status == "timeout" and task.timeout:
            error = f"timed out after {task.timeout:g}s (process group killed on node {node})"
        status = res.status
        if status == "completed":
            try:
                self._bring_back(task, res)
            except (OSError, TeamError, tarfile.TarError) as e:
                status, error = "failed", f"bringing its work back from node {node} failed: {e}"
        return Outcome(task.id, epoch, status, res.exit_code, res.duration, log, tail, error=error, node=node)

    def _shun(self, flight: _Flight, e: BaseException) -> None:
        """An attempt was lost with its node (or its worker): place nothing more there for a while (Ray
        takes seconds to declare a node dead; until then it is listed alive, and an attempt sent there
        would wait for that), before the lost attempt is placed again."""
        for node in {n for n in (flight.node, self.nodes.id_of_error(e)) if n is not None}:
            self.placement.shun(node)
        self.placement.refresh(force=True)

    def _write_log(self, task: Task, res: AttemptResult) -> str | None:
        if not res.log:
            return None  # it printed nothing: no file to keep
        path = self.logs / f"{task.id}-{task.attempts}.log"
        # Like a local job's log: not fsynced (the store's record of the attempt is the durable part).
        atomic_write(path, self.secrets.scrub_bytes(res.log), durable=False)
        return str(path.relative_to(self.ctx.root)) if path.is_relative_to(self.ctx.root) else str(path)

    def _bring_back(self, task: Task, res: AttemptResult) -> None:
        bring_back(task, res.epoch, res.outputs, res.bundle, self.workspaces, self.outputs)

    # ------------------------------------------------------------------ nodes
    def node_label(self, node_id: str) -> str:
        return self.nodes.label(node_id)

    def _node_of_error(self, e: BaseException) -> str | None:
        return self.nodes.of_error(e)


def check_nodes(ray: Any, nodes: NodeNames, root: str, run: str, note: Callable[[str], None] | None) -> int:
    """The start check (``ray_remote.start_check``) on every live node, before anything runs: one per CPU
    of the node, pinned to it (the run's worker processes start now, and the first attempts find them
    ready), answered within ``WARM_WAIT`` seconds. A node that cannot run team's code, or runs another
    version of it, is refused with its name and the line that installs the lead's; attempts a dead lead
    of this root left running were killed there (said). Returns the cluster's CPU slots."""
    from ray import exceptions as rx
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .. import __version__

    every = ray.nodes()
    nodes.update(every)
    alive = [n for n in every if n.get("Alive")]
    check = ray.remote(start_check)
    refs: dict[Any, str] = {}
    slots = 0
    for n in alive:
        cpus = float(dict(n.get("Resources", {})).get("CPU", 0.0))
        slots += int(cpus)
        where = NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        for _ in range(max(1, min(int(cpus), 64))):
            refs[check.options(num_cpus=min(1.0, cpus), max_retries=0, scheduling_strategy=where)
                 .remote(root, run)] = n["NodeID"]
    ready, late = _answers(ray, refs)
    problems: dict[str, str] = {}
    gone: set[str] = set()
    install = f"pip install 'team-orchestrator[ray]=={__version__}'"
    for ref in ready:
        node = refs[ref]
        try:
            report: NodeReport = ray.get(ref)
        except (rx.TaskUnschedulableError, rx.NodeDiedError, rx.WorkerCrashedError, rx.LocalRayletDiedError):
            gone.add(node)  # a node that died (Ray lists it alive for a while): nothing to check there
            continue
        except rx.RayError as e:
            if node not in problems:
                problems[node] = (f"node {nodes.label(node)} cannot run team's code ({_cause(e)}): install the "
                                  f"lead's version there, {install}, and start the node again")
            continue
        if report.version != __version__ and node not in problems:
            problems[node] = (f"node {nodes.label(node)} runs team {report.version}, the lead {__version__}: "
                              f"install the lead's version there, {install}, and start the node again")
        for task, attempt, name, n in report.reaped:
            if note is not None:
                note(f"backend ray: node {nodes.label(node)}: killed what attempt {attempt} of #{task}"
                     f"{f' ({name})' if name else ''} left running ({n} process{'es' if n != 1 else ''}): "
                     f"its lead died; the task runs again")
    if problems:
        raise UserError("--backend ray: " + "; ".join(problems.values()) + " (every node needs the lead's team: "
                        "docs/scale.md)")
    silent = sorted({nodes.label(refs[r]) for r in late if refs[r] not in gone})
    if silent and note is not None:
        note(f"backend ray: node{'s' if len(silent) > 1 else ''} {', '.join(silent)} did not answer the start check "
             f"within {WARM_WAIT:g}s (busy, or dead and not yet noticed by Ray): attempts may wait there")
    return slots


def _answers(ray: Any, refs: dict[Any, str]) -> tuple[list[Any], list[Any]]:
    """The start checks that answered, and those that did not: waited for at most ``WARM_WAIT`` seconds,
    and no more than ``SILENT_GRACE`` seconds after the last answer for nodes that gave none at all (a
    node that died, which Ray lists as alive until its health checks give up on it)."""
    pending, ready = list(refs), []
    deadline = time.monotonic() + WARM_WAIT
    last = time.monotonic()
    while pending and time.monotonic() < deadline:
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.2)
        if done:
            ready += done
            last = time.monotonic()
        answered = {refs[r] for r in ready}
        if ready and not {refs[r] for r in pending} & answered and time.monotonic() - last > SILENT_GRACE:
            break
    return ready, pending


DROP_WAIT = 10.0
"""Seconds the lead waits, at most, for the nodes to remove its run's cache when it closes."""


def drop_caches(ray: Any, run: str) -> None:
    """Remove run ``run``'s layer cache on every live node (ray_cache.py); a node that does not answer in
    ``DROP_WAIT`` seconds leaves it to its machine's watcher."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .ray_cache import drop

    remote = ray.remote(drop)
    refs = [remote.options(num_cpus=0, max_retries=0,
                           scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(run)
            for n in ray.nodes() if n.get("Alive")]
    ray.wait(refs, num_returns=len(refs), timeout=DROP_WAIT)


def _cause(e: BaseException) -> str:
    """The last line of a Ray error that says what went wrong on the node (``ModuleNotFoundError: ...``)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    found = [line for line in lines if "Error:" in line and not line.startswith("ray.")]
    return (found or lines or [type(e).__name__])[-1]


class NodeNames:
    """How nodes are shown: a node's name (``ray start --node-name``; a node started again under its name is
    shown by that name), else its address, with the start of its id when several live nodes share that
    address (several unnamed nodes on one machine).

    Labels come from the nodes as last read (``update``: the start check, then ``Placement``'s reader
    every second): showing a node never waits on Ray (whose control store may be gone with the head:
    ray_connect.py). A node not seen yet (joined in the last second) is shown by the start of its id."""

    def __init__(self, ray: Any):
        self._ray = ray
        self._lock = threading.Lock()
        self._nodes: dict[str, str] = {}

    def update(self, nodes: list[dict[str, Any]]) -> None:
        addresses: dict[str, int] = {}
        for n in nodes:
            if n.get("Alive"):
                address = n.get("NodeManagerAddress", "?")
                addresses[address] = addresses.get(address, 0) + 1
        labels = {}
        for n in nodes:
            address = n.get("NodeManagerAddress", "?")
            name = n.get("NodeName") or address
            if name != address:  # named by `ray start --node-name`: that name, also after a restart
                labels[str(n["NodeID"])] = name
            else:
                labels[str(n["NodeID"])] = address if addresses.get(address, 0) <= 1 else f"{address}/{n['NodeID'][:8]}"
        with self._lock:
            self._nodes.update(labels)

    def refresh(self) -> None:
        """Read the nodes now (an executor without ``Placement``'s reader: agent tasks only)."""
        self.update(self._ray.nodes())

    def label(self, node_id: str) -> str:
        with self._lock:
            return self._nodes.get(node_id, node_id[:8])

    def of_error(self, e: BaseException) -> str | None:
        """The node a Ray error names (a node that died), if it names one."""
        node = self.id_of_error(e)
        return self.label(node) if node else None

    @staticmethod
    def id_of_error(e: BaseException) -> str | None:
        import re

        m = re.search(r"node ID: ([0-9a-f]{16,})", str(e))
        return m.group(1) if m else None


class Placement:
    """Which node the lead sends an attempt to (see "Placement" in the module docstring).

    The lead counts the resources of the attempts it placed on each node and still has in flight; a new
    attempt goes to the node with the most CPUs left by that count whose totals hold its ask, as long as
    every attempt in flight was placed (None otherwise, and when no node has room by the count: Ray's
    own scheduler then chooses, as it would without the lead). A node an attempt was just lost with is
    skipped (``shun``). The nodes' totals are read again at most every ``NODES_EVERY`` seconds, and at
    once after a node was lost."""

    def __init__(self, ray: Any, on_crash: Crash | None = None, names: NodeNames | None = None):
        self._ray = ray
        self._names = names
        self._lock = threading.Lock()
        self._totals: dict[str, dict[str, float]] = {}  # live node id -> its resources
        self._placed: dict[str, dict[str, float]] = {}  # node id -> resources of our attempts there
        self._unplaced = 0  # attempts in flight that Ray placed
        self._shunned: dict[str, float] = {}  # node id -> until when nothing is placed there
        self._poke = threading.Event()
        self._stopped = threading.Event()
        self._read()
        # The nodes are read on a thread of their own: a scheduler that places an attempt never waits on
        # Ray's control store (which may be slow to answer, or gone with the head: ray_connect.py).
        self._thread = threads.start("team-ray-nodes", self._reader, on_crash=on_crash)

    def _read(self) -> None:
        nodes: list[dict[str, Any]] = self._ray.nodes()
        if self._names is not None:
            self._names.update(nodes)
        totals = {str(n["NodeID"]): {k: float(v) for k, v in dict(n.get("Resources", {})).items()}
                  for n in nodes if n.get("Alive")}
        now = time.monotonic()
        with self._lock:
            self._totals = totals
            self._shunned = {n: t for n, t in self._shunned.items() if n in totals and t > now}

    def _reader(self) -> None:
        while True:
            self._poke.wait(NODES_EVERY)
            self._poke.clear()
            if self._stopped.is_set() or head_lost() is not None:
                return
            self._read()

    def stop(self) -> None:
        """No more reads (the run is closing: the connection goes next)."""
        self._stopped.set()
        self._poke.set()
        self._thread.join(timeout=30)

    def refresh(self, force: bool = False) -> None:
        """Read the nodes again soon (``force``: now, on the reader's thread); placement uses what was read
        last, at most ``NODES_EVERY`` seconds ago."""
        if force:
            self._poke.set()

    def infeasible(self, need: dict[str, float]) -> str:
        """What no live node of the cluster has (``""`` when some node has all of ``need``): such an
        attempt would wait in Ray forever."""
        self.refresh()
        with self._lock:
            if any(all(t.get(k, 0.0) >= v for k, v in need.items()) for t in self._totals.values()):
                return ""
        return ", ".join(f"{k}: {v:g}" for k, v in need.items() if v > 0)

    def place(self, need: dict[str, float], warm: frozenset[str] = frozenset()) -> tuple[str | None, bool]:
        """Where an attempt asking ``need`` goes (counted as in flight there): ``(node, True)``, a node
        with room by the lead's count, one of ``warm`` (whose caches hold the attempt's layers) first
        (the attempt may spill elsewhere if it has none after all);
        ``(node, False)``, no node has room but one was lost lately: the node with the most room, to
        wait there (Ray still lists a lost node as alive, with its slots free, and would send it
        there); ``(None, True)``: Ray chooses."""
        self.refresh()
        with self._lock:
            now = time.monotonic()
            shunned = any(t > now for t in self._shunned.values())
            best, rank, fits = None, (False, False, -1e18), False
            if not self._unplaced or shunned:
                for node, total in self._totals.items():
                    if self._shunned.get(node, 0.0) > now or not all(total.get(k, 0.0) >= v for k, v in need.items()):
                        continue
                    used = self._placed.get(node, {})
                    left = {k: total.get(k, 0.0) - used.get(k, 0.0) for k in need}
                    ok = all(left[k] >= v - 1e-9 for k, v in need.items())
                    mine = (ok, node in warm, left.get("CPU", 0.0))
                    if mine > rank:
                        best, rank, fits = node, mine, ok
            if best is None or not (fits and not self._unplaced) and not shunned:
                self._unplaced += 1
                return None, True
            used = self._placed.setdefault(best, {})
            for k, v in need.items():
                used[k] = used.get(k, 0.0) + v
            return best, fits and not self._unplaced

    def shun(self, node: str) -> None:
        """An attempt was lost with ``node``: nothing is placed there for ``SHUN_FOR`` seconds."""
        with self._lock:
            self._shunned[node] = time.monotonic() + SHUN_FOR

    def done(self, node: str | None, need: dict[str, float]) -> None:
        """An attempt placed by ``place`` has ended (whatever its outcome)."""
        with self._lock:
            if node is None:
                self._unplaced = max(0, self._unplaced - 1)
                return
            used = self._placed.get(node, {})
            for k, v in need.items():
                used[k] = max(0.0, used.get(k, 0.0) - v)


def open_journal(ctx: ExecutorContext) -> OutputsJournal:
    """The run's undo records of outputs (ray_outputs.py), settled now: outputs a killed lead brought back
    for attempts the store never recorded as done are taken back before anything runs again."""
    journal = OutputsJournal(ctx.root, ctx.store if ctx.store is not None else TaskStore(ctx.root))
    settle_outputs(journal, ctx, start=True)
    return journal


def settle_outputs(journal: OutputsJournal, ctx: ExecutorContext, *, start: bool = False) -> None:
    """Take back the outputs of attempts not accepted (at the start: a dead lead's; at the end: a stopped
    run's, landed but given back), and say so."""
    for u in journal.settle():
        if ctx.note is not None:
            why = "the last lead died before recording it" if start else "the run stopped before recording it"
            ctx.note(f"backend ray: #{u.task_id}: took back the outputs of its attempt at epoch {u.epoch} "
                     f"({u.paths} path{'s' if u.paths != 1 else ''}): {why}; the task runs again from the "
                     f"folder as it was")


def bring_back(task: Task, epoch: int, outputs: bytes | None, bundle: bytes | None, workspaces: Workspaces,
               journal: OutputsJournal) -> None:
    """An attempt's work into the lead's tree: the ``outputs`` files into the task's folder (behind an
    undo record: kept only if the attempt is accepted, ray_outputs.py), or the new commits
    fast-forwarded into its worktree (merged back later by isolation.py)."""
    if outputs:
        folder = Path(task.cwd or ".").resolve()
        if journal.bring(task.id, epoch, folder, outputs):
            workspaces.changed(folder, outputs)
    if bundle and task.worktree:
        top = Path(task.worktree)
        with tempfile.TemporaryDirectory(prefix="team-bundle-") as tmp:
            path = Path(tmp) / "work.bundle"
            path.write_bytes(bundle)
            with worktree_locked(top):  # not while another worktree of the plan is added or removed
                _git_out(top, "fetch", "-q", str(path), "work")
                _git_out(top, "merge", "-q", "--ff-only", "FETCH_HEAD")


def first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def git_identity(root: Path) -> tuple[str, str]:
    """Who the nodes' commits are by: the lead's git identity (else ``team``)."""
    git = shutil.which("git")
    if git is None:
        return ("team", "team@localhost")
    r = subprocess.run([git, "var", "GIT_AUTHOR_IDENT"], cwd=root, capture_output=True, text=True)
    if r.returncode != 0 or "<" not in r.stdout:
        return ("team", "team@localhost")
    name, rest = r.stdout.split("<", 1)
    return (name.strip() or "team", rest.split(">", 1)[0].strip() or "team@localhost")
