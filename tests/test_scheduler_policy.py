"""The scheduler's policy with the synchronous in-process executor: no process, no fsync.

Priorities, the worker limit, retries, fail-fast, keep-going, cancellation
downstream, stale completions and deadlock, each in milliseconds. The same
behaviours are tested with real processes in test_run.py.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from orchestrator.core.models import Status
from orchestrator.run.executor import Outcome
from orchestrator.run.scheduler import RunOptions, RunResult, Scheduler
from orchestrator.run.sync import SyncExecutor
from orchestrator.tasks.store import TaskStore


@pytest.fixture
def store(tmp_path):
    return TaskStore(tmp_path, durable=False)


def plan(store: TaskStore, shape: dict[str, list[str]], **fields: dict) -> dict[str, int]:
    """Create shell tasks named as ``shape``'s keys, each blocked by the names it lists."""
    order = list(shape)
    specs = [dict(subject=name, name=name, kind="shell", command="true", plan="p", plan_task=name,
                  blockedBy=[("new", order.index(d)) for d in shape[name]], **fields.get(name, {}))
             for name in order]
    return {t.name: t.id for t in store.create_many(specs)}


def run(store: TaskStore, ids: dict[str, int], decide, *, workers: int = 4, keep_going: bool = False,
        priority: dict[str, float] | None = None, events: list | None = None) -> tuple[RunResult, SyncExecutor]:
    ex = SyncExecutor("shell", decide)
    tasks = [store.read(i) for i in ids.values()]
    prio = {ids[n]: v for n, v in (priority or {}).items()}
    opts = RunOptions(workers=workers, keep_going=keep_going, retry_delay={i: 0.0 for i in ids.values()})
    result = Scheduler(store, tasks, prio, {"shell": ex}, opts, (events if events is not None else []).append).run()
    return result, ex


def names(ids: dict[str, int], started: list[tuple[int, int]]) -> list[str]:
    by_id = {v: k for k, v in ids.items()}
    return [by_id[tid] for tid, _ in started]


def test_dependencies_first_then_the_longest_remaining_path(store):
    ids = plan(store, {"a": [], "b": [], "c": ["a"], "d": ["c"]})
    result, ex = run(store, ids, lambda t: "completed", workers=1, priority={"a": 3, "b": 1, "c": 2, "d": 1})
    assert result.ok
    assert names(ids, ex.started) == ["a", "c", "b", "d"]  # c (path 2) beats b (path 1) once a is done
    assert {t.status for t in store.all()} == {Status.completed}


def test_ties_keep_plan_order_and_the_worker_limit_holds(store):
    ids = plan(store, {f"t{i}": [] for i in range(6)})
    events: list[dict] = []
    result, ex = run(store, ids, lambda t: "completed", workers=2, events=events)
    assert result.ok and names(ids, ex.started) == [f"t{i}" for i in range(6)]
    running = peak = 0
    for ev in events:
        running += {"started": 1, "completed": -1}.get(ev["event"], 0)
        peak = max(peak, running)
    assert peak == 2


def test_a_failed_attempt_is_retried_until_its_budget_runs_out(store):
    ids = plan(store, {"flaky": [], "after": ["flaky"]}, flaky={"retries": 2})
    tries: Counter[str] = Counter()

    def decide(task):
        tries[task.name] += 1
        return "failed" if task.name == "flaky" and tries["flaky"] < 3 else "completed"

    result, ex = run(store, ids, decide)
    assert result.ok
    assert store.read(ids["flaky"]).attempts == 3 and store.read(ids["after"]).status == Status.completed
    assert names(ids, ex.started) == ["flaky", "flaky", "flaky", "after"]


def test_a_final_failure_cancels_what_needs_it_and_stops_new_starts(store):
    ids = plan(store, {"bad": [], "child": ["bad"], "grandchild": ["child"], "other": []})
    result, ex = run(store, ids, lambda t: "failed" if t.name == "bad" else "completed", workers=1)
    assert not result.ok and result.stopped == f"#{ids['bad']} (bad) failed"
    assert names(ids, ex.started) == ["bad"]  # fail-fast: "other" never started
    child, grandchild = store.read(ids["child"]), store.read(ids["grandchild"])
    assert child.status == grandchild.status == Status.cancelled
    assert child.error == f"needs #{ids['bad']} (bad), which failed"
    assert grandchild.error == (f"needs #{ids['child']} (child), which was cancelled after "
                                f"#{ids['bad']} (bad) failed")
    assert store.read(ids["other"]).status == Status.pending


def test_keep_going_runs_every_branch_not_downstream_of_a_failure(store):
    ids = plan(store, {"bad": [], "child": ["bad"], "other": [], "after-other": ["other"]})
    result, ex = run(store, ids, lambda t: "failed" if t.name == "bad" else "completed", workers=1, keep_going=True)
    assert not result.ok and result.stopped is None
    assert sorted(names(ids, ex.started)) == ["after-other", "bad", "other"]
    assert result.counts == {"failed": 1, "cancelled": 1, "completed": 2}


def test_a_completion_is_refused_once_another_owner_holds_the_task(store):
    """Epoch fencing: while the attempt ran, its claim was taken over (a reclaimed lease): the
    scheduler's completion carries the old epoch and the store refuses it."""
    ids = plan(store, {"a": []})
    events: list[dict] = []

    def decide(task):
        store.release(task.id, task.epoch, reason="lease expired")  # as reclaim_expired would
        store.claim(task.id, "intruder")
        return "completed"

    result, ex = run(store, ids, decide, events=events)
    task = store.read(ids["a"])
    assert (task.status, task.owner, task.epoch) == (Status.in_progress, "intruder", 2)
    assert {"event": "stale", "task": ids["a"], "epoch": 1} in events
    assert result.runs[ids["a"]].status == "lost" and not result.ok


@pytest.mark.parametrize("verdict,retries", [("failed", 1), ("failed", 0), ("completed", 0)])
def test_a_task_cancelled_by_another_process_while_it_ran_is_cancelled_with_what_needs_it(store, verdict, retries):
    """`team task update --status cancelled` during the attempt: the scheduler's retry (release) or its
    record of the end is refused; the task is cancelled in the run, and so is what needs it (the
    retry's refusal crashed the run; a refused completion had unlocked its dependent: a deadlock)."""
    ids = plan(store, {"a": [], "child": ["a"], "other": []}, a={"retries": retries})
    events: list[dict] = []

    def decide(task):
        if task.name == "a":
            store.update(task.id, status="cancelled", actor="cli")
        return verdict if task.name == "a" else "completed"

    result, ex = run(store, ids, decide, workers=1, events=events)
    assert names(ids, ex.started) == ["a", "other"]
    reason = f"cancelled by another process while attempt 1 ran; its end ({verdict}" + \
        (" (decided by the test)" if verdict == "failed" else "") + ") was not recorded"
    assert {"event": "cancelled", "task": ids["a"], "name": "a", "reason": reason} in events
    assert result.counts == {"cancelled": 2, "completed": 1} and not result.deadlock
    assert store.read(ids["child"]).error == f"needs #{ids['a']} (a), which was cancelled"


def test_a_dependency_outside_the_plan_that_never_completes_is_a_deadlock_not_a_wait(store):
    outside = store.create("outside, never done").id
    ids = plan(store, {"a": []})
    store.update(ids["a"], add_blocked_by=[outside])
    result, ex = run(store, ids, lambda t: "completed")
    assert ex.started == [] and not result.ok
    assert result.deadlock is not None and f"waits on #{outside} (outside this plan, not completed)" in result.deadlock


def test_a_settling_attempt_takes_no_worker_slot_and_its_dependents_wait_for_its_outcome(store):
    """An attempt whose command has ended and whose outcome comes later (worktree isolation: its merge
    waits its turn) says so (``Scheduler.settle``): with one worker, another ready task starts while its
    outcome is held, and what needs it starts only after that outcome."""
    ids = plan(store, {"a": [], "b": [], "c": ["a"]})
    by_id = {v: k for k, v in ids.items()}
    started: list[str] = []
    held: list = []
    delivered = threading.Event()

    class Settler(SyncExecutor):
        def start(self, task, epoch, done):
            started.append(f"{by_id[task.id]} ({'after' if delivered.is_set() else 'before'} a's outcome)")
            if by_id[task.id] != "a":
                done(Outcome(task.id, epoch, "completed", exit_code=0))
                if held:  # b ran while a settled: a's outcome now
                    deliver()
                return
            sched.settle(task.id, epoch)  # its command ended; its outcome (its merge) comes later
            held.append((task.id, epoch, done))
            timer.start()  # without settle nothing else could start: do not hang

    def deliver():
        if held and not delivered.is_set():
            tid, epoch, done = held[0]
            delivered.set()
            done(Outcome(tid, epoch, "completed", exit_code=0))

    timer = threading.Timer(5.0, deliver)
    tasks = [store.read(i) for i in ids.values()]
    opts = RunOptions(workers=1, retry_delay={i: 0.0 for i in ids.values()})
    sched = Scheduler(store, tasks, {}, {"shell": Settler("shell", lambda t: "completed")}, opts, [].append)
    try:
        result = sched.run()
    finally:
        timer.cancel()
    assert result.ok
    assert started == ["a (before a's outcome)", "b (before a's outcome)", "c (after a's outcome)"]
