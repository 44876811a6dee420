"""``team run --backend ray``: shell tasks as Ray tasks on a cluster; the lead stays the single writer.

``RayExecutor`` is an ``Executor`` (executor.py) like the local shell one: the
scheduler, its group commit, epochs, retries and recovery are unchanged. Only
this module (and ``ray_remote``, which runs on the nodes) imports ``ray``, and
only when a run uses the backend, so no other command pays for it.

Connecting (``connect``): ``--address auto`` joins the cluster this machine
is a node of, ``--address HOST:PORT`` a given head, and no address starts an
embedded local Ray instance bound to 127.0.0.1 (no dashboard), for trying the
backend on a laptop. The driver's own address is 127.0.0.1 when the head is
on loopback.

A run is a new Ray job, whose worker processes start on demand: the executor
starts one per CPU of the cluster as soon as it is built (``ray_remote.warm``)
and waits for them (at most ``WARM_WAIT`` seconds) before the run starts.

Per attempt (``start``, non-blocking, so it may run inside the store's
commit): the task's workspace is made once and shared by every attempt that
starts from it (``Workspaces``: put into the object store, or, under
``INLINE_MAX``, sent inline with each attempt); the attempt is
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
  mode), or the returned commits into the task's worktree, fast-forwarded
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
Ray driver (Ray cancels the tasks of a driver that exited); the next lead
releases their tasks (``materialise``) and claims them again under new
epochs, so nothing completes twice.
"""

from __future__ import annotations

import gzip
import io
import os
import queue
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
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
from ..git.worktrees import worktree_locked
from ..jobs.records import JobRecord
from .executor import DoneCallback, ExecutorContext, Outcome
from .ray_remote import AttemptResult, AttemptSpec, Workspace, open_tar, run_attempt, warm

ARCHIVE_CAP = 512 * 1024 * 1024
"""The largest folder shipped to the nodes for an outputs-mode task (bytes, before compression)."""
INLINE_MAX = 64 * 1024
"""A workspace smaller than this (bytes) goes with each attempt's task instead of through the object
store: Ray inlines small arguments, while one in the store is a dependency each attempt's node resolves
(~0.2 ms an attempt here)."""
COMPRESS_OVER = 8 * 1024 * 1024
"""A folder archive bigger than this (bytes) is shipped gzipped (tarfile reads either)."""
NODES_EVERY = 1.0
"""Seconds between two reads of the cluster's nodes and their resources (``Placement``): a node that
joins gets attempts this soon (one read is a request to Ray's control store, a few ms)."""
SHUN_FOR = 60.0
"""Seconds the lead places nothing on a node an attempt was lost with (Ray lists a dead node as alive
until its health checks give up on it; the node is dropped from placement then anyway)."""
WARM_WAIT = 20.0
"""Seconds the lead waits, at most, for the run's worker processes to start before running tasks."""
SKIP = frozenset({".git", ".tasks", ".team", "__pycache__", ".venv", "node_modules"})
"""Folders never put into a shipped workspace archive."""


def connect(address: str | None) -> str:
    """Join the cluster at ``address`` (``auto`` or ``HOST:PORT``), or start an embedded local instance
    bound to 127.0.0.1 when it is None. Returns how the run is connected, for the user."""
    import logging

    import ray

    global _users
    if ray.is_initialized():
        _users += 1
        return "ray (already connected)"
    quiet: dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=False, namespace="team",
                                 configure_logging=True)
    try:
        if address is None:
            ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, **quiet)
            _users = 1
            return "an embedded local Ray instance on 127.0.0.1"
        host = address.rsplit(":", 1)[0]
        local = host in ("127.0.0.1", "localhost", "::1")
        if local:
            quiet["_node_ip_address"] = "127.0.0.1"
        ray.init(address=address, **quiet)
        _users = 1
        return f"the Ray cluster at {address}"
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = "start an embedded Ray instance" if address is None else f"connect to the Ray cluster at {address}"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"--backend ray: cannot {where}: {first} (start one with `ray start --head`, "
                        f"see docs/scale.md)") from None


_users = 0
"""Executors of this process using the connection (shell and agent tasks share it); the last to close
disconnects (``disconnect``)."""


def disconnect() -> None:
    """One user of the connection is done; the last one shuts the driver down."""
    import ray

    global _users
    _users = max(0, _users - 1)
    if _users == 0:
        ray.shutdown()


@dataclass
class _Flight:
    task: Task
    epoch: int
    done: DoneCallback
    ref: Any  # ray.ObjectRef
    node: str | None = None  # where the lead placed it (None: Ray chose)


class Workspaces:
    """Each workspace a task starts from, made once and shared by its attempts (through the object store,
    or inline when small).

    A git workspace is keyed by its base commit (a bundle whose HEAD is that commit); an outputs-mode
    folder by its path and how many times outputs landed in it since (a dependent sees its needs'
    outputs: the folder is archived again after files came back into it)."""

    def __init__(self) -> None:
        import ray

        self._ray = ray
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str, int], Any] = {}
        self._generation: dict[str, int] = {}

    def get(self, task: Task) -> tuple[Any, str]:
        """``task``'s workspace (an object reference, or the ``Workspace`` itself when it is smaller than
        ``INLINE_MAX``) and the folder to run in, relative to its top."""
        if task.worktree:
            top = Path(task.worktree)
            base = _git_out(top, "rev-parse", "HEAD")
            key = ("bundle", base, 0)
            rel = os.path.relpath(Path(task.cwd or top).resolve(), top.resolve())
            make: Callable[[], Workspace] = lambda: Workspace("bundle", _bundle(top))  # noqa: E731
        else:
            folder = Path(task.cwd or ".").resolve()
            with self._lock:
                gen = self._generation.get(str(folder), 0)
            key, rel = ("archive", str(folder), gen), "."
            make = lambda: Workspace("archive", _archive(folder))  # noqa: E731
        with self._lock:
            ref = self._cache.get(key)
        if ref is None:
            ws = make()
            ref = ws if len(ws.data) < INLINE_MAX else self._ray.put(ws)
            with self._lock:
                if key[0] == "archive":  # an older archive of the folder is not needed again
                    for old in [k for k in self._cache if k[0] == "archive" and k[1] == key[1]]:
                        del self._cache[old]
                self._cache.setdefault(key, ref)
        return ref, rel

    def changed(self, folder: Path) -> None:
        """Files came back into ``folder``: archives of it, or of a folder holding it, are stale."""
        folder = folder.resolve()
        with self._lock:
            for name in list(self._generation) + [str(folder)]:
                if folder == Path(name) or Path(name) in folder.parents or folder in Path(name).parents:
                    self._generation[name] = self._generation.get(name, 0) + 1


def _git_out(cwd: Path, *args: str) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise UserError(f"git {' '.join(args)} in {cwd}: {r.stderr.strip()}")
    return r.stdout.strip()


def _bundle(top: Path) -> bytes:
    with tempfile.TemporaryDirectory(prefix="team-bundle-") as tmp:
        out = Path(tmp) / "base.bundle"
        _git_out(top, "bundle", "create", "-q", str(out), "HEAD")
        return out.read_bytes()


def _archive(folder: Path) -> bytes:
    if not folder.is_dir():
        raise UserError(f"the task's folder {folder} does not exist")
    buf = io.BytesIO()
    total = 0

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal total
        if Path(info.name).name in SKIP:
            return None
        total += info.size
        if total > ARCHIVE_CAP:
            raise UserError(f"{folder} holds more than {ARCHIVE_CAP >> 20} MB to ship to the nodes: run the task "
                            f"in a smaller folder (`cwd:`), or use isolation: worktree")
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".", filter=keep)
    if total < COMPRESS_OVER:
        return buf.getvalue()  # unpacked once per attempt: a small one is not worth inflating each time
    return gzip.compress(buf.getvalue(), compresslevel=1)


class RayExecutor:
    """``kind: shell`` on a Ray cluster (see the module docstring)."""

    kind = "shell"
    inline_start = True  # start() only submits: safe inside store.commit's on_logged

    def __init__(self, ctx: ExecutorContext, address: str | None = None):
        import ray

        self.ctx = ctx
        self._ray = ray
        said = connect(address)
        if ctx.note is not None:
            ctx.note(f"backend ray: running tasks on {said}")
        self._remote = ray.remote(run_attempt)
        # A run is a new Ray job, whose worker processes start on demand (a second or more each): start
        # one per CPU of the cluster now, and give them up to WARM_WAIT seconds to come up, so the first
        # attempts (and the scheduler's first turns) do not wait on process start-up one by one.
        cpus = int(ray.cluster_resources().get("CPU", 0))  # type: ignore[no-untyped-call]
        warming = [ray.remote(warm).options(num_cpus=1, max_retries=0).remote() for _ in range(min(cpus, 256))]
        if warming:
            ray.wait(warming, num_returns=len(warming), timeout=WARM_WAIT)
        self.workspaces = Workspaces()
        self.secrets = Secrets.from_environ()
        self.logs = team_dir(ctx.root) / "ray"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ident = git_identity(ctx.root)
        self._lock = threading.Lock()
        self._running: dict[int, _Flight] = {}
        self.nodes = NodeNames(ray)
        self._submitters: dict[tuple[tuple[tuple[str, float], ...], str | None, bool], Any] = {}
        self.placement = Placement(ray)
        self._stop = threading.Event()
        self._landing: queue.SimpleQueue[tuple[int, int, Future[AttemptResult]] | None] = queue.SimpleQueue()
        self._lander = threads.start("team-ray-landing", self._land_loop, on_crash=ctx.stop.fail)

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
                           self.ident)
        node, spill = self.placement.place(need)
        try:
            ref = self._submitter(need, node, spill).remote(spec, ws)
        except BaseException:
            self.placement.done(node, need)
            raise
        with self._lock:
            self._running[task.id] = _Flight(task, epoch, done, ref, node)
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

        for flight in flights:
            try:
                self._ray.cancel(flight.ref, force=False)
            except (rx.RayError, ConnectionError, ValueError) as e:  # the cluster is gone, its tasks with it
                if self.ctx.note is not None:
                    self.ctx.note(f"backend ray: cancelling #{flight.task.id}: {type(e).__name__}: {e}")
        self._landing.put(None)
        self._lander.join(timeout=30)
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
        bring_back(task, res.outputs, res.bundle, self.workspaces)

    # ------------------------------------------------------------------ nodes
    def node_label(self, node_id: str) -> str:
        return self.nodes.label(node_id)

    def _node_of_error(self, e: BaseException) -> str | None:
        return self.nodes.of_error(e)


class NodeNames:
    """How nodes are shown: a node's name (``ray start --node-name``, else its address), with the start of
    its id when several nodes share that name (several nodes on one machine)."""

    def __init__(self, ray: Any):
        self._ray = ray
        self._lock = threading.Lock()
        self._nodes: dict[str, str] = {}

    def label(self, node_id: str) -> str:
        with self._lock:
            known = self._nodes.get(node_id)
        if known is not None:
            return known
        nodes: list[dict[str, Any]] = self._ray.nodes()
        names: dict[str, int] = {}
        for n in nodes:
            names[n.get("NodeName") or n.get("NodeManagerAddress", "?")] = \
                names.get(n.get("NodeName") or n.get("NodeManagerAddress", "?"), 0) + 1
        labels = {}
        for n in nodes:
            name = n.get("NodeName") or n.get("NodeManagerAddress", "?")
            labels[n["NodeID"]] = name if names[name] == 1 else f"{name}/{n['NodeID'][:8]}"
        with self._lock:
            self._nodes.update(labels)
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

    def __init__(self, ray: Any):
        self._ray = ray
        self._lock = threading.Lock()
        self._totals: dict[str, dict[str, float]] = {}  # live node id -> its resources
        self._at = -1e9
        self._placed: dict[str, dict[str, float]] = {}  # node id -> resources of our attempts there
        self._unplaced = 0  # attempts in flight that Ray placed
        self._shunned: dict[str, float] = {}  # node id -> until when nothing is placed there

    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._at <= NODES_EVERY:
            return
        nodes: list[dict[str, Any]] = self._ray.nodes()
        totals = {str(n["NodeID"]): {k: float(v) for k, v in dict(n.get("Resources", {})).items()}
                  for n in nodes if n.get("Alive")}
        with self._lock:
            self._totals, self._at = totals, now
            self._shunned = {n: t for n, t in self._shunned.items() if n in totals and t > now}

    def infeasible(self, need: dict[str, float]) -> str:
        """What no live node of the cluster has (``""`` when some node has all of ``need``): such an
        attempt would wait in Ray forever."""
        self.refresh()
        with self._lock:
            if any(all(t.get(k, 0.0) >= v for k, v in need.items()) for t in self._totals.values()):
                return ""
        return ", ".join(f"{k}: {v:g}" for k, v in need.items() if v > 0)

    def place(self, need: dict[str, float]) -> tuple[str | None, bool]:
        """Where an attempt asking ``need`` goes (counted as in flight there): ``(node, True)``, a node
        with room by the lead's count (the attempt may spill elsewhere if it has none after all);
        ``(node, False)``, no node has room but one was lost lately: the node with the most room, to
        wait there (Ray still lists a lost node as alive, with its slots free, and would send it
        there); ``(None, True)``: Ray chooses."""
        self.refresh()
        with self._lock:
            now = time.monotonic()
            shunned = any(t > now for t in self._shunned.values())
            best, room, fits = None, -1e18, False
            if not self._unplaced or shunned:
                for node, total in self._totals.items():
                    if self._shunned.get(node, 0.0) > now or not all(total.get(k, 0.0) >= v for k, v in need.items()):
                        continue
                    used = self._placed.get(node, {})
                    left = {k: total.get(k, 0.0) - used.get(k, 0.0) for k in need}
                    ok = all(left[k] >= v - 1e-9 for k, v in need.items())
                    if (ok, left.get("CPU", 0.0)) > (fits, room):
                        best, room, fits = node, left.get("CPU", 0.0), ok
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


def bring_back(task: Task, outputs: bytes | None, bundle: bytes | None, workspaces: Workspaces) -> None:
    """An attempt's work into the lead's tree: the ``outputs`` files into the task's folder, or the new
    commits fast-forwarded into its worktree (merged back later by isolation.py)."""
    if outputs:
        folder = Path(task.cwd or ".").resolve()
        with open_tar(outputs) as tar:
            if tar.getmembers():
                tar.extractall(folder, filter="data")
                workspaces.changed(folder)
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
