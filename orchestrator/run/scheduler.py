"""``team run``'s scheduler: run a plan's tasks in parallel, durably.

State (one ``Scheduler``; only the lead thread touches it, dask-style)::

    waiting   pending task -> its dependencies that have not completed
    ready     heap of runnable tasks, longest remaining path first
    running   task -> (epoch, start time): claimed in the store, executing
    settling  running tasks whose command has ended, waiting on the executor's side for
              their outcome (worktree isolation: their merge's turn); they take no slot
    delayed   heap of (due time, task): failed attempts waiting out a backoff
    finished  completed | failed | cancelled, with why
    feeding   the run's tasks not created yet are still coming (a ``Feed``)

A big plan's tasks are created while it runs (run/materialise.py): the
scheduler starts with the tasks that exist and, after its first commit,
starts the ``Feed``, which delivers each further batch of tasks once it is
durable, through the event queue (an ``Arrival``). An arrival is admitted
before the outcomes of its batch are handled: each of its tasks waits on
its dependencies not completed yet, or is cancelled if one failed or was
cancelled. A task that exists may wait on one still to come (a resumed
creation: ``Feed.ids``). The loop does not end while the feed is feeding,
also after a failure stopped new starts, so the store ends with every task.

Policy: fill free worker slots (``workers`` minus the running tasks not
settling) from ``ready`` (priority = the task's
remaining path to the end of the plan, weighted by ``estimate``; ties keep
plan order), claim them in one store batch (``store.commit``: a CAS that
bumps the epoch and sets a lease) and hand each to the executor for its kind.

The loop sleeps on one event queue fed by every executor's ``done`` callback
(shell jobs: the job manager's watcher thread, ``on_notify``), so a
dependent is claimed and started as soon as its last dependency's
notification is handled — there is no polling. All outcomes queued at that
moment are handled as one batch: one ``store.commit`` that records the
finished attempts and claims what became ready. Shell jobs of the batch are
started as soon as the batch is decided and its claims are in the event
log (``commit(on_logged=...)``; a lead killed before the claim reached the
task file leaves a logged claim that the next lead counts and releases).
The run is ``pipelined``: the batches' files are written and fsynced by a
group-commit writer thread (``tasks.pipeline``), so the loop does not wait
for the disk between an outcome and the next start. Shell jobs are started
and watched by a forked job server (``jobserver``), so a start costs the
lead one request line.

A failed attempt with retries left goes back to ``pending`` (``release``)
and waits ``retry_delay * 2**(n-1)`` seconds (at most ``MAX_RETRY_DELAY``). A final failure cancels
everything downstream ("needs #4 (build), which failed"); without
``keep_going`` it also stops new starts while running tasks finish. When
nothing runs, nothing is ready or delayed and work is left, the run reports
a deadlock (naming what each leftover task waits on) instead of waiting.

A task changed by another process while its attempt ran (``team task update
--status cancelled``) makes the store refuse the run's record of the end (a
retry's ``release``, or the batch's completion or failure): a cancelled one is
cancelled in the run too, with what needs it (dependents its completion had
unlocked wait again first); a claim taken over is a stale completion
(``_refused``). A pick the store refuses to claim leaves its slot free: the
loop fills it from ``ready`` at once rather than ending the run.

Leases: a heartbeat thread renews the running tasks' leases
(``renew_many``, every ``lease``/3 seconds: one batch queued for the group
commit like the loop's own, so it does not stall the loop while its files
are written). The store refuses a completion whose epoch is stale.
Recovery after a crash is ``prepare``'s job (see ``materialise``): the new
lead holds the lead lock, so the old lead is dead and its in-progress tasks
are released at once; their attempts stay counted.

Stopping from outside (stop.py): a signal (Ctrl-C, SIGTERM) or a failure on
another thread (the store's writer, the heartbeat, an executor's thread)
reaches the loop through its ``RunStop``, which wakes it; at the top of its
next turn the loop raises it. ``run`` then aborts: it closes the executors
(their jobs are stopped: TERM, grace, KILL) and gives every running task
back (``pending``), counting the attempt as *interrupted*, not failed: an
interrupted attempt consumes no retry. Attempts, failures and interruptions
are three counters of a task (``attempts``, ``failures``, ``interrupted``).
A write that fails while giving tasks back (a full disk) does not stop the
others; the ones left ``in_progress`` are named in the error (a storage
failure becomes one line: ``core.errors.storage_error``) and ``team doctor``
reports them.
"""

from __future__ import annotations

import heapq
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core import threads
from ..core.errors import (
    ConflictError,
    CorruptFile,
    Signalled,
    TeamError,
    UnknownRef,
    storage_error,
)
from ..core.models import Status, Task
from ..core.threads import Crash
from ..tasks.store import TaskStore
from .executor import Executor, Outcome
from .stop import RunStop

MAX_RETRY_DELAY = 3600.0
"""The backoff doubles per failure up to this (an hour)."""
WAIT_MAX = 0.25
"""The loop's longest sleep on its event queue. A signal is taken by Python on the main thread only:
when the kernel hands it to another thread of ours while this one sleeps in the queue (a lock wait
is cut short only by a signal delivered to the waiting thread), its handler (``RunStop.request``,
which wakes the loop) waits until this thread runs again; this bounds that wait, so Ctrl-C is
answered within a quarter of a second (``tests/hostile/test_signals.py``
``…hands_to_another_thread…`` aims the signal at another thread with tgkill; the same cause
explains the hang make flaky saw once before, c4d10a3)."""
Emit = Callable[[dict[str, Any]], None]
Final = tuple[int, int, str, dict[str, Any]]  # (task id, epoch, status, fields) for store.commit
_WAKE = Outcome(-1, -1, "wake")  # put on the event queue by the RunStop; never handled


class Feed(Protocol):
    """More tasks of the run, created while it runs (``count`` of them; run/materialise.py ``Creation``)."""

    @property
    def count(self) -> int:
        """How many tasks it has still to deliver."""

    @property
    def ids(self) -> frozenset[int]:
        """The ids of the tasks it delivers (reserved up front): a task may wait on one before it arrives."""

    def start(self, deliver: Callable[[list[Task], bool], None], on_crash: Crash) -> None:
        """Start making them; ``deliver(tasks, last)`` each durable batch, from another thread."""

    def stop(self) -> None:
        """Stop after the batch being made, and wait for that (the next run makes the rest)."""


@dataclass
class Arrival:
    """Tasks a ``Feed`` delivered (durable); ``last``: the feed is done."""

    tasks: list[Task]
    last: bool


@dataclass(frozen=True)
class Settling:
    """An attempt whose command has ended and whose outcome comes later (``Scheduler.settle``)."""

    task_id: int
    epoch: int


@dataclass
class RunOptions:
    workers: int = 4
    keep_going: bool = False
    owner: str = "lead"
    lease: float = 30.0
    retry_delay: dict[int, float] = field(default_factory=dict)  # task id -> first backoff


@dataclass
class TaskRun:
    """What happened to one task in this run (for the summary)."""

    id: int
    name: str
    status: str = "pending"
    attempts: int = 0  # started, ever (the task's ``attempts``)
    failures: int = 0  # of them, failed (count against ``retries``)
    interrupted: int = 0  # of them, stopped from outside (Ctrl-C, a dead lead, ...): no retry used
    lost: list[str] = field(default_factory=list)  # nodes attempts were lost with this run (backend ray)
    node: str | None = None  # where the last attempt ran (backend ray)
    finished: float | None = None
    duration: float = 0.0
    log: str | None = None
    error: str | None = None
    deps: list[int] = field(default_factory=list)


@dataclass
class RunResult:
    plan: str
    wall: float
    runs: dict[int, TaskRun]
    counts: dict[str, int]
    stopped: str | None = None  # why new starts stopped (fail-fast)
    deadlock: str | None = None
    worktrees: dict[str, Any] | None = None  # isolation: where the result is (worktree.Summary as a dict)
    incomplete: str | None = None  # the result branch lacks work the store says is done; a hook's last word was no
    warnings: list[dict[str, Any]] = field(default_factory=list)  # isolation: tasks that committed build junk
    spend: list[dict[str, Any]] = field(default_factory=list)  # per teammate: usage and budget (runner.spend_rows)
    run_id: str = ""  # this run's id in the ledger of spend (llm/ledger.py): its summary counts its lines

    @property
    def ok(self) -> bool:
        return self.counts.get("completed", 0) == len(self.runs) and not self.deadlock and not self.incomplete


class Scheduler:
    def __init__(self, store: TaskStore, tasks: list[Task], priority: dict[int, float],
                 executors: dict[str, Executor], opts: RunOptions, emit: Emit,
                 clock: Callable[[], float] = time.time, stop: RunStop | None = None, feed: Feed | None = None):
        """``stop``: how signals and failures on other threads reach the loop (stop.py). ``feed``: the
        run's tasks not created yet, delivered while it runs (the module docstring)."""
        self.store, self.opts, self.emit, self.clock = store, opts, emit, clock
        self.stop = stop if stop is not None else RunStop()
        self.executors = executors
        self.tasks = {t.id: t for t in tasks}
        """The latest ``Task`` of every task this run has not finished; a finished one is dropped, so the
        lead's memory is what is open, not the whole plan (100k tasks held twice cost 0.9 GB)."""
        self.plan = tasks[0].plan or "" if tasks else ""
        self.feed = feed if feed is not None and feed.count else None
        self.feeding = self.feed is not None  # until its last batch arrived
        self._fed = False  # the feed was started
        self.total = len(tasks) + (self.feed.count if self.feed is not None else 0)
        self.order = {t.id: i for i, t in enumerate(tasks)}
        self.priority = priority
        self.dependents: dict[int, list[int]] = {tid: [] for tid in self.tasks}
        self.waiting: dict[int, set[int]] = {}
        self.ready: list[tuple[float, int, int]] = []
        self.running: dict[int, tuple[int, float]] = {}
        self.delayed: list[tuple[float, int]] = []
        self.failures: dict[int, int] = {t.id: t.failures for t in tasks}
        self.lost: dict[int, int] = {t.id: t.lost for t in tasks}
        self.unclaimable: dict[int, str] = {}
        self.events: queue.SimpleQueue[Outcome | Arrival | Settling] = queue.SimpleQueue()
        self.settling: set[int] = set()
        self.stopped: str | None = None
        self.runs = {t.id: TaskRun(t.id, t.plan_task or t.name or str(t.id), t.status.value,
                                   t.attempts, t.failures, t.interrupted, deps=list(t.blockedBy))
                     for t in tasks}
        self._leases: dict[int, int] = {}
        self._hb_stop = threading.Event()

    # ------------------------------------------------------------------ state
    def _init_state(self) -> None:
        coming = self.feed.ids if self.feed is not None else frozenset()
        external = {d for t in self.tasks.values() for d in t.blockedBy if d not in self.tasks and d not in coming}
        done_outside = {d for d in external if self._completed_outside(d)}
        for t in self.tasks.values():
            for d in t.blockedBy:
                if d in self.dependents or d in coming:  # one to come: its dependents wait for it
                    self.dependents.setdefault(d, []).append(t.id)
            if t.status != Status.pending:
                continue
            open_deps = {d for d in t.blockedBy if d not in done_outside
                         and (d not in self.tasks or self.tasks[d].status != Status.completed)}
            if open_deps:
                self.waiting[t.id] = open_deps
            else:
                self._push_ready(t.id)
        for tid in [t.id for t in self.tasks.values() if t.status in (Status.completed, Status.cancelled)]:
            del self.tasks[tid]  # never started again in this run

    def _admit(self, tasks: list[Task]) -> None:
        """Tasks a feed delivered: each waits on its dependencies not completed yet (created before it,
        so known to this run, or outside the plan); one that needs a failed or cancelled task is
        cancelled, as ``_cancel_downstream`` would have done had it existed then."""
        coming = self.feed.ids if self.feed is not None else frozenset()
        for t in tasks:
            self.tasks[t.id] = t
            self.order[t.id] = len(self.order)
            self.dependents.setdefault(t.id, [])  # tasks made earlier may wait on it already
            self.failures[t.id], self.lost[t.id] = t.failures, t.lost
            self.runs[t.id] = TaskRun(t.id, t.plan_task or t.name or str(t.id), t.status.value, t.attempts,
                                      t.failures, t.interrupted, deps=list(t.blockedBy))
            open_deps: set[int] = set()
            for d in t.blockedBy:
                if d in self.runs or d in coming:
                    self.dependents.setdefault(d, []).append(t.id)
                    if d not in self.runs or self.runs[d].status != "completed":
                        open_deps.add(d)
                elif not self._completed_outside(d):
                    open_deps.add(d)
            dead = [d for d in sorted(open_deps) if d in self.runs and self.runs[d].status in ("failed", "cancelled")]
            if dead:
                via = self.runs[dead[0]]
                reason = f"needs #{dead[0]} ({via.name}), which {'failed' if via.status == 'failed' else 'was cancelled'}"
                self.store.cancel(t.id, reason, actor=self.opts.owner)
                del self.tasks[t.id]
                self.runs[t.id].status, self.runs[t.id].error = "cancelled", reason
                self.emit({"event": "cancelled", "task": t.id, "name": self.runs[t.id].name, "reason": reason})
                self._cancel_downstream(t.id, "was cancelled")  # tasks made earlier that wait on it
            elif open_deps:
                self.waiting[t.id] = open_deps
            else:
                self._push_ready(t.id)

    def _completed_outside(self, tid: int) -> bool:
        try:
            return self.store.read(tid).status == Status.completed
        except (UnknownRef, CorruptFile) as e:  # it blocks its dependents; reported as a deadlock
            self.unclaimable[tid] = str(e)
            return False

    def _push_ready(self, tid: int) -> None:
        heapq.heappush(self.ready, (-self.priority.get(tid, 1.0), self.order[tid], tid))

    # ------------------------------------------------------------------ loop
    def run(self) -> RunResult:
        t0 = self.clock()
        self._init_state()
        self.emit({"event": "run_started", "total": self.total, "workers": self.opts.workers,
                   "completed": sum(1 for r in self.runs.values() if r.status == "completed")})
        self.stop.attach(lambda: self.events.put(_WAKE))
        hb = threads.start("team-heartbeat", self._heartbeat, on_crash=self.stop.fail)
        try:
            try:
                with self.store.pipelined(on_error=self.stop.fail):  # batches made durable by a writer thread
                    try:
                        self._loop()
                    finally:
                        if self.feed is not None:
                            self.feed.stop()  # its chunk in progress ends durable (or the run stops with its error)
            finally:
                self._hb_stop.set()
                hb.join(timeout=10)  # no lease write after the final flush
        except BaseException as e:
            self.stop.stopping()  # a second Ctrl-C must not cut the giving back short
            left = self._abort(e)
            storage = storage_error(e, self._left_text(left)) if isinstance(e, OSError) else None
            if storage is not None:
                raise storage from e  # one line: the path, the errno, what to do
            raise
        finally:
            self.stop.detach()
        deadlock = None
        if not self.stopped and (self.waiting or self.ready or self.unclaimable):
            deadlock = self._deadlock()
        counts: dict[str, int] = {}
        for r in self.runs.values():
            counts[r.status] = counts.get(r.status, 0) + 1
        return RunResult(self.plan, self.clock() - t0, self.runs, counts, self.stopped, deadlock)

    def _loop(self) -> None:
        """Commit, wait for outcomes, handle them; until nothing runs and nothing can start."""
        finals: list[Final] = []
        while True:
            self.stop.check()  # a signal or a failure elsewhere: stop here, at a safe point
            self._promote_delayed()
            self._commit(finals)
            if self.feed is not None and not self._fed:  # after the first starts: they need no more tasks
                self._fed = True
                self.feed.start(lambda tasks, last: self.events.put(Arrival(tasks, last)), self.stop.fail)
            free = len(self.running) - len(self.settling) < self.opts.workers and not self.stopped
            if not self.running and not (free and (self.delayed or self.ready)) and not self.feeding:
                break
            timeout = WAIT_MAX
            if free and self.ready:  # a pick was unclaimable (or its slot given back, ``_refused``): fill it
                timeout = 0
            elif self.delayed and not self.stopped:
                timeout = min(WAIT_MAX, max(0.0, self.delayed[0][0] - self.clock()))
            try:
                batch: list[Outcome | Arrival | Settling] = [self.events.get(timeout=timeout)]
            except queue.Empty:
                finals = []
                continue
            while True:
                try:
                    batch.append(self.events.get_nowait())
                except queue.Empty:
                    break
            self.stop.check()  # before handling anything
            for item in batch:  # first: an outcome of the batch may complete what an arrival needs
                if isinstance(item, Arrival):
                    self._admit(item.tasks)
                    self.feeding = self.feeding and not item.last
                elif isinstance(item, Settling) and self.running.get(item.task_id, (None,))[0] == item.epoch:
                    self.settling.add(item.task_id)
            finals = self._handle([item for item in batch if isinstance(item, Outcome)])

    def _promote_delayed(self) -> None:
        now = self.clock()
        while self.delayed and self.delayed[0][0] <= now and not self.stopped:
            _, tid = heapq.heappop(self.delayed)
            self._push_ready(tid)

    def _handle(self, batch: list[Outcome]) -> list[Final]:
        """Outcomes -> the store writes to make; retries are released here (rare path)."""
        now = self.clock()
        finals: list[Final] = []
        for out in batch:
            entry = self.running.get(out.task_id)
            if entry is None or entry[0] != out.epoch:
                self.emit({"event": "stale", "task": out.task_id, "epoch": out.epoch})
                continue
            del self.running[out.task_id]
            self.settling.discard(out.task_id)
            self._leases.pop(out.task_id, None)
            run = self.runs[out.task_id]
            run.finished, run.log = now, out.log
            run.duration += out.duration
            if out.node:
                run.node = out.node
            task = self.tasks[out.task_id]
            if out.lost and self._lost(task, out, run):
                continue
            if out.ok:
                result = out.result if out.result is not None else out.tail[-500:]
                fields = {"log": out.log, "result": result, **self._usage(task, out), **(out.fields or {})}
                if out.node:
                    fields["node"] = out.node
                finals.append((out.task_id, out.epoch, "completed", fields))
                self._unlock_dependents(out.task_id)
                continue
            self.failures[out.task_id] += 1
            n = self.failures[out.task_id]
            reason = out.describe()
            if out.lost:
                reason = (f"lost with node {out.node or 'an unknown node'} ({reason}); its lost_retries "
                          f"({task.lost_retries}) are used up")
            run.error, run.failures = reason, n
            node: dict[str, Any] = {"node": out.node} if out.node else {}
            if n <= task.retries and not self.stopped:
                delay = min(self.opts.retry_delay.get(out.task_id, 1.0) * 2.0 ** min(n - 1, 30), MAX_RETRY_DELAY)
                try:
                    released = self.store.release(out.task_id, out.epoch,
                                                  reason=f"attempt {task.attempts} {reason}; retrying",
                                                  actor=self.opts.owner, failures=n, log=out.log,
                                                  **self._usage(task, out), **(out.fields or {}), **node)
                except ConflictError:  # changed by another process while it ran
                    self._refused(out.task_id, out.epoch, reason)
                    continue
                self.tasks[out.task_id] = released
                heapq.heappush(self.delayed, (now + delay, out.task_id))
                run.status = "retrying"
                self.emit({"event": "retry", "task": out.task_id, "name": run.name, "error": reason,
                           "delay": delay, "log": out.log, "attempt": task.attempts})
                continue
            finals.append((out.task_id, out.epoch, "failed",
                           {"log": out.log, "error": reason, "failures": n,
                            "result": out.result if out.result is not None else out.tail[-2000:],
                            **self._usage(task, out), **(out.fields or {}), **node}))
            if not self.opts.keep_going and not self.stopped:
                self.stopped = f"#{out.task_id} ({run.name}) failed"
        return finals

    def _lost(self, task: Task, out: Outcome, run: TaskRun) -> bool:
        """An attempt lost with its node: re-run at once without using a retry (True), unless the task's
        ``lost_retries`` are used up (False: it fails like any attempt, saying where it was lost)."""
        n = self.lost[task.id] = self.lost[task.id] + 1
        where = out.node or "an unknown node"
        run.lost.append(where)
        if n > task.lost_retries:
            return False
        fields: dict[str, Any] = {"node": out.node} if out.node else {}
        reason = f"attempt {task.attempts} lost with node {where} ({out.describe()})"
        self.tasks[task.id] = self.store.release(task.id, out.epoch, reason=f"{reason}; re-running elsewhere",
                                                 actor=self.opts.owner, interrupted=True, lost=n, **fields)
        run.interrupted += 1
        run.status = "pending"
        if not self.stopped:
            self._push_ready(task.id)
        self.emit({"event": "lost", "task": task.id, "name": run.name, "node": where, "attempt": task.attempts,
                   "error": out.describe(), "again": not self.stopped})
        return True

    @staticmethod
    def _usage(task: Task, out: Outcome) -> dict[str, Any]:
        """Token usage summed over every attempt of the task (retries included)."""
        if not out.usage:
            return {}
        from ..llm.pricing import Usage

        total = Usage.model_validate(out.usage)
        if task.usage:
            total = Usage.model_validate(task.usage) + total
        return {"usage": total.model_dump()}

    def _unlock_dependents(self, tid: int) -> None:
        for dep in self.dependents[tid]:
            waits = self.waiting.get(dep)
            if waits is not None:
                waits.discard(tid)
                if not waits:
                    del self.waiting[dep]
                    self._push_ready(dep)

    def _commit(self, finals: list[Final]) -> None:
        """One store batch: record the finished attempts and claim what fits in the free slots."""
        free = self.opts.workers - len(self.running) + len(self.settling)
        picked: list[int] = []
        if free > 0 and self.ready and not self.stopped:
            picked = [heapq.heappop(self.ready)[2] for _ in range(min(free, len(self.ready)))]
        if not finals and not picked:
            return
        early: set[int] = set()

        def start_early(claimed: list[Task]) -> None:
            # Shell jobs start once the batch is decided and its claims are in
            # the event log, while its files are written and fsynced
            # (store.commit). A lone claim (a chain) is started right here,
            # saving a thread hop; in-process, a wave goes to the starter thread.
            inline = len(claimed) == 1
            for task in claimed:
                if self.executors[task.kind].inline_start:
                    self._start(task, inline=inline)
                    early.add(task.id)

        written, claimed = self.store.commit(finals, picked, self.opts.owner, lease=self.opts.lease,
                                             actor=self.opts.owner, on_logged=start_early)
        done = {t.id: t for t in written}
        refused: list[tuple[int, int, str]] = []
        for tid, epoch, status, fields in finals:
            run = self.runs[tid]
            if tid not in done:
                refused.append((tid, epoch, fields.get("error") or status))
                continue
            del self.tasks[tid]  # finished: the store has it
            run.status = status
            ev = {"event": status, "task": tid, "name": run.name, "duration": round(run.duration, 3),
                  "log": fields.get("log"), "error": fields.get("error")}
            if fields.get("node"):
                ev["node"] = fields["node"]
            self.emit(ev)
            if status == "failed":
                self._cancel_downstream(tid)
                if self.stopped and self.stopped.startswith(f"#{tid} "):
                    self.emit({"event": "stopping", "reason": self.stopped, "running": len(self.running)})
        won = {t.id for t in claimed}
        for tid in picked:
            if tid not in won:
                self.unclaimable[tid] = self._why_unclaimable(tid)
        for tid, epoch, ended in refused:  # after unclaimable: a dependent it unlocked may be there
            self._refused(tid, epoch, ended)
        for task in claimed:
            if task.id not in early:
                self._start(task)
        for task in claimed:
            run = self.runs[task.id]
            self.emit({"event": "started", "task": task.id, "name": run.name, "attempt": task.attempts})

    def _start(self, task: Task, *, inline: bool = False) -> None:
        now = self.clock()
        self.tasks[task.id] = task
        self.running[task.id] = (task.epoch, now)
        self._leases[task.id] = task.epoch
        run = self.runs[task.id]
        run.status, run.attempts = "running", task.attempts
        executor = self.executors[task.kind]
        (executor.start_now if inline else executor.start)(task, task.epoch, self.events.put)

    def settle(self, task_id: int, epoch: int) -> None:
        """Any thread: the attempt's command has ended and its outcome comes later (worktree isolation: its
        work is committed and waits for its merge's turn). It keeps its task running and its claim, but
        not its worker slot: another ready task may start meanwhile. Its dependents still wait for its
        outcome."""
        self.events.put(Settling(task_id, epoch))

    def _refused(self, tid: int, epoch: int, ended: str) -> None:
        """The store refused this run's record of how an attempt of ``tid`` ended (``ended``): the task
        changed while the attempt ran. Cancelled by another process (`team task update --status
        cancelled`): it is cancelled in this run too, saying so, with what needs it. Otherwise (its claim
        taken over): a stale completion, the task "lost" to this run."""
        run = self.runs[tid]
        try:
            now: Task | None = self.store.read(tid)
        except (UnknownRef, CorruptFile):
            now = None
        if now is None or now.status != Status.cancelled:
            run.status, run.error = "lost", f"completion refused: epoch {epoch} is stale"
            self.emit({"event": "stale", "task": tid, "epoch": epoch})
            return
        self.tasks.pop(tid, None)
        if self.stopped and self.stopped.startswith(f"#{tid} "):
            self.stopped = None  # its failure, not said yet ("stopping"), was no failure of the plan's
        reason = (f"cancelled by another process while attempt {run.attempts} ran; its end ({ended}) was not "
                  f"recorded")
        run.status, run.error = "cancelled", reason
        self.emit({"event": "cancelled", "task": tid, "name": run.name, "reason": reason})
        self._wait_again(tid)
        self._cancel_downstream(tid, "was cancelled")

    def _wait_again(self, tid: int) -> None:
        """Dependents a completion of ``tid`` unlocked (``_handle``) before the store refused it wait on it
        again: out of ``ready`` (or ``unclaimable``, when picked in the same batch), back in ``waiting``."""
        deps = set(self.dependents.get(tid, ()))
        unlocked = {e[2] for e in self.ready if e[2] in deps} | {d for d in deps if d in self.unclaimable}
        if not unlocked:
            return
        self.ready = [e for e in self.ready if e[2] not in unlocked]
        heapq.heapify(self.ready)
        for d in unlocked:
            self.unclaimable.pop(d, None)
            self.waiting.setdefault(d, set()).add(tid)

    def _why_unclaimable(self, tid: int) -> str:
        try:
            task = self.store.read(tid)
        except (UnknownRef, CorruptFile) as e:
            return str(e)
        if task.status != Status.pending or task.owner:
            return f"it is {task.status.value}" + (f", owned by {task.owner}" if task.owner else "")
        return "a dependency is not completed on disk (changed by another process?)"

    def _cancel_downstream(self, failed: int, what: str = "failed") -> None:
        root = f"#{failed} ({self.runs[failed].name})"
        stack = [(d, failed, True) for d in self.dependents[failed]]
        while stack:
            tid, via, direct = stack.pop()
            if tid not in self.waiting:
                continue
            del self.waiting[tid]
            via_name = self.runs[via].name
            reason = (f"needs #{via} ({via_name}), which {what}" if direct
                      else f"needs #{via} ({via_name}), which was cancelled after {root} failed")
            self.store.cancel(tid, reason, actor=self.opts.owner)
            run = self.runs[tid]
            run.status, run.error = "cancelled", reason
            self.emit({"event": "cancelled", "task": tid, "name": run.name, "reason": reason})
            stack.extend((d, tid, False) for d in self.dependents[tid])

    def _deadlock(self) -> str:
        lines = []
        for tid, why in self.unclaimable.items():
            if tid in self.runs:
                lines.append(f"#{tid} ({self.runs[tid].name}) could not be claimed: {why}")
        for tid, deps in sorted(self.waiting.items()):
            names = ", ".join(f"#{d}" + (f" ({self.runs[d].name}, {self.runs[d].status})" if d in self.runs
                                         else " (outside this plan, not completed)") for d in sorted(deps))
            lines.append(f"#{tid} ({self.runs[tid].name}) waits on {names}")
        return "nothing is running or ready, but work is left:\n  " + "\n  ".join(lines[:20])

    def _abort(self, cause: BaseException) -> list[int]:
        """The run stops (``cause``): stop the running attempts and give their tasks back (pending).

        The attempts count as interrupted, not failed. Returns the tasks that could not be
        given back (their write failed too: a full disk); they stay ``in_progress`` and
        ``team doctor`` reports them."""
        if isinstance(cause, Signalled):
            why = f"interrupted ({cause.word.rstrip('.').lower()} by signal {cause.signum})"
        else:
            why = f"the run stopped ({type(cause).__name__})"
            self.stop.fail(cause)  # what stops the run, for the executors closing below
        for ex in self.executors.values():
            ex.close()
        left: list[int] = []
        for tid, (epoch, _) in sorted(self.running.items()):
            try:
                self.store.release(tid, epoch, reason=f"{why}; will re-run", actor=self.opts.owner,
                                   interrupted=True)
            except ConflictError:
                continue  # finished or taken meanwhile: nothing of ours to give back
            except (OSError, TeamError):  # the disk failed too: said below, and `team doctor` reports it
                left.append(tid)
                continue
            self.runs[tid].status = "pending"
            self.runs[tid].interrupted += 1
        self.running.clear()
        self.settling.clear()
        return left

    def _left_text(self, left: list[int]) -> str:
        what = "the run stopped"
        if left:
            names = ", ".join(f"#{tid} ({self.runs[tid].name})" for tid in left)
            what += f" and left {names} in_progress (`team doctor` lists them; the next run re-runs them)"
        return what

    def _heartbeat(self) -> None:
        every = max(0.05, self.opts.lease / 3)
        while not self._hb_stop.wait(every):
            leases = dict(self._leases)
            if leases:
                try:
                    self.store.renew_many(leases, self.opts.lease)
                except (OSError, TeamError) as e:  # the disk failed (or the store writer did)
                    self.stop.fail(e)
                    return
