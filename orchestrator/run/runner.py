"""The library behind ``team run``: materialise a plan, recover, run it.

Order of a run (``run_plan``):

1. The plan was validated whole (``plan.load.load_plan``) before anything is written.
2. Take the lead lock (``lead.LeadLock``): a second lead exits 2 naming us.
   A plan with agent tasks records its sandbox there (``on``, ``off (...)``
   or ``unavailable: ...``; core/sandbox.py) for ``team status``, and tells
   the user at the start when it is not on.
3. Build the executors the plan needs (``build_executors``: shell first, so
   its job server forks while this process has one thread) and reap orphaned
   jobs of a dead lead (they are killed and marked ``lost``) so nothing from
   the old run keeps going.
4. ``materialise``: the plan's tasks become store tasks. A store task
   belongs to the plan through its ``plan`` and ``plan_task`` fields and is
   named ``<plan>.<id>`` (so ``team task show demo.build`` works). The match
   is made once per run from one directory scan.

   * ``--fresh`` deletes the plan's tasks first (other plans are untouched).
   * Some but not all tasks exist and none was ever claimed: the last lead
     died while creating them; they are deleted and created again.
   * Missing tasks are created in one ``create_many`` batch.
   * ``completed`` tasks stay done (even if their command changed: use
     ``--fresh`` to redo them).
   * ``failed`` and ``cancelled`` tasks go back to ``pending`` with a fresh
     retry budget: a new run retries them.
   * ``in_progress`` tasks were being run by a lead that is now dead (we hold
     its lock): they are released to ``pending`` at once; the attempt stays
     counted and the event log says why. So are claims the event log has
     but the task file never got (the lead starts a job once its claim is
     logged, before the file is written: ``TaskStore.commit``).
   * A pending task whose command/env/timeout changed in the plan is updated.
     Changed ``needs`` of an existing task are refused: use ``--fresh``.
   * Tasks of this plan no longer in the file are cancelled ("removed from
     the plan").
5. ``Scheduler.run``; with ``isolation: worktree`` the executors are wrapped
   by ``isolation.Isolation`` (a worktree per task, merged back in completion
   order) and the result carries ``worktrees``: the integration branch and
   how to merge it (``Worktrees.summary``). The Worktrees are set up (and
   ``--fresh`` resets them) before any task is written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import PlanError
from ..core.models import Status, Task
from ..core.sandbox import Sandbox
from ..plan.analysis import analyse
from ..plan.model import LoadedPlan, PlanTask
from ..tasks.store import TaskStore
from ..team.lead import LeadLock
from .executor import Executor, ExecutorContext
from .isolation import Isolation
from .scheduler import Emit, RunOptions, RunResult, Scheduler
from .shell import ShellExecutor


@dataclass
class Materialised:
    tasks: list[Task]
    priority: dict[int, float]
    retry_delay: dict[int, float]


def _spec(lp: LoadedPlan, t: PlanTask) -> dict[str, Any]:
    d = lp.plan.defaults
    first = (t.description or t.run or t.prompt or "").strip().splitlines()
    subject = f"{t.id}: {first[0][:80]}" if first else t.id
    return dict(
        subject=subject, description=t.description, name=lp.store_name(t), kind=t.kind,
        command=t.run, prompt=t.prompt, plan=lp.plan.name, plan_task=t.id, role=t.role,
        assignee=t.assignee, estimate=t.estimate,
        timeout=t.timeout if t.timeout is not None else d.timeout,
        retries=t.retries if t.retries is not None else d.retries,
        env={**d.env, **t.env}, cwd=str(lp.task_cwd(t)),
        isolation=t.isolation or (lp.plan.isolation if lp.plan.isolation != "none" else None),
    )


_MUTABLE = ("subject", "description", "command", "prompt", "role", "assignee", "estimate", "timeout",
            "retries", "env", "cwd", "isolation")


def materialise(store: TaskStore, lp: LoadedPlan, *, fresh: bool = False, owner: str = "lead",
                note: Callable[[str], None] = lambda s: None) -> Materialised:
    plan = lp.plan
    existing = [t for t in store.all() if t.plan == plan.name] if store.exists() else []
    if fresh and existing:
        store.delete_many([t.id for t in existing], actor=owner, reason=f"team run --fresh {plan.name}")
        note(f"--fresh: removed {len(existing)} task(s) of plan {plan.name}")
        existing = []
    if existing and len(existing) < len(plan.tasks) and all(t.attempts == 0 for t in existing):
        # A lead died while creating the tasks (create_many is not one atomic write): nothing ran yet.
        store.delete_many([t.id for t in existing], actor=owner, reason="incomplete materialisation")
        note(f"plan {plan.name}: the last run stopped while creating its tasks; creating them again")
        existing = []
    by_key = {t.plan_task: t for t in existing}
    wanted = {t.id for t in plan.tasks}
    new = [t for t in plan.tasks if t.id not in by_key]
    new_index = {t.id: i for i, t in enumerate(new)}

    for t in plan.tasks:  # refuse changed dependencies before writing anything
        old = by_key.get(t.id)
        if old is not None and not any(n in new_index for n in t.needs):
            if sorted(by_key[n].id for n in t.needs) != sorted(old.blockedBy):
                raise PlanError(f"{lp.path}: tasks.{t.id}.needs: changed since the last run of plan "
                                f"{plan.name!r}; run again with --fresh to start over")
        elif old is not None:
            raise PlanError(f"{lp.path}: tasks.{t.id}.needs: now names a task added since the last run "
                            f"of plan {plan.name!r}; run again with --fresh to start over")

    specs = []
    for t in new:
        spec = _spec(lp, t)
        spec["blockedBy"] = [by_key[n].id if n in by_key else ("new", new_index[n]) for n in t.needs]
        specs.append(spec)
    created = store.create_many(specs, actor=owner) if specs else []
    if created and existing:
        note(f"plan {plan.name}: {len(created)} new task(s) added")

    plan_tasks = {t.id: t for t in plan.tasks}
    for old in existing:
        if old.plan_task not in wanted:
            if old.status not in (Status.completed, Status.cancelled):
                store.cancel(old.id, "removed from the plan", actor=owner)
            continue
        t = plan_tasks[old.plan_task]
        fields: dict[str, Any] = {}
        if old.status != Status.completed:
            spec = _spec(lp, t)
            fields = {k: spec[k] for k in _MUTABLE if getattr(old, k) != spec[k]}
        if old.status == Status.in_progress:
            store.release(old.id, old.epoch, actor=owner,
                          reason=f"the previous lead died during attempt {old.attempts}; re-running")
            note(f"#{old.id} ({old.plan_task}) was running when the last lead died: re-running it")
        if old.status in (Status.failed, Status.cancelled):
            store.update(old.id, status=Status.pending, owner="", actor=owner, failures=0, error=None,
                         **fields)
            note(f"#{old.id} ({old.plan_task}) was {old.status.value}: retrying it")
        elif fields:
            store.update(old.id, actor=owner, **fields)
    for tid, (epoch, attempt) in store.unfiled_claims(existing).items():
        store.release_unfiled(tid, epoch, attempt, actor=owner,
                              reason=f"the previous lead died during attempt {attempt} (before the claim "
                                     "reached the task file); re-running")
        note(f"#{tid} was starting when the last lead died: re-running it")

    tasks_by_key = {t.plan_task: t for t in store.all() if t.plan == plan.name}
    tasks = [tasks_by_key[t.id] for t in plan.tasks]
    remaining = analyse(plan).remaining
    d = plan.defaults
    return Materialised(
        tasks=tasks,
        priority={tasks_by_key[k].id: v for k, v in remaining.items()},
        retry_delay={tasks_by_key[t.id].id: t.retry_delay if t.retry_delay is not None else d.retry_delay
                     for t in plan.tasks},
    )


def kinds_of(lp: LoadedPlan) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t in lp.plan.tasks:
        out.setdefault(t.kind, []).append(t.id)
    return out


def run_plan(lp: LoadedPlan, root: Path, *, workers: int | None = None, keep_going: bool = False,
             fresh: bool = False, emit: Emit, note: Callable[[str], None]) -> RunResult:
    """Everything ``team run`` does after parsing its options (see the module docstring)."""
    kinds = kinds_of(lp)
    sandbox = Sandbox.choose(lp.plan.sandbox, os.environ, plan_file=str(lp.path))
    agents = "agent" in kinds
    # Only agents' shell commands run in the sandbox: a shell-only plan neither probes nor shows it.
    info = {"sandbox": sandbox.state()} if agents else {}
    with LeadLock(root, plan=lp.plan.name, plan_file=str(lp.path.absolute()), **info):
        if agents and (said := sandbox.note()) is not None:
            note(said)
        store = TaskStore(root)
        cwd = lp.plan.defaults.cwd
        ctx = ExecutorContext(root=root, plan=lp.plan.name, model=lp.model,
                              workspace=(lp.base / cwd).resolve() if cwd else lp.base,
                              team=[(m.name, m.role) for m in lp.plan.team],
                              plan_mode={m.name for m in lp.plan.team if m.plan_mode}, note=note,
                              store=store,  # one store object: the scheduler's pipeline serves the teammates too
                              sandbox=sandbox)
        iso = _isolation(lp, root, fresh)
        execs = build_executors(set(kinds), ctx)
        if iso is not None:
            execs = {kind: iso.wrap(ex) for kind, ex in execs.items()}
        try:
            for ex in execs.values():
                for job in ex.reap_orphans():
                    note(f"job {job.id} of a dead lead (task #{job.task}) was still running: killed")
            prep = materialise(store, lp, fresh=fresh, note=note)
            opts = RunOptions(workers=workers or lp.plan.workers, keep_going=keep_going,
                              retry_delay=prep.retry_delay)
            result = Scheduler(store, prep.tasks, prep.priority, execs, opts, emit).run()
            if iso is not None:
                iso.close()
                summary = iso.finish()
                result.worktrees = {**dataclasses.asdict(summary), "text": summary.text()}
            return result
        finally:
            for ex in execs.values():
                ex.close()
            if iso is not None:
                iso.close()


def build_executors(kinds: set[str], ctx: ExecutorContext) -> dict[str, Executor]:
    """The executors for these task kinds. The shell executor first: it forks its job
    server while this process has a single thread; the agent executor starts threads."""
    built: dict[str, Executor] = {}
    try:
        if "shell" in kinds:
            built["shell"] = ShellExecutor(ctx)
        if "agent" in kinds:
            from .agents import (
                AgentExecutor,  # imports openai: only plans with agent tasks pay for it
            )

            built["agent"] = AgentExecutor(ctx)
    except BaseException:
        for ex in built.values():
            ex.close()
        raise
    unknown = kinds - set(built)
    if unknown:
        raise PlanError(f"no executor runs tasks of kind {', '.join(sorted(unknown))}")
    return built


def _isolation(lp: LoadedPlan, root: Path, fresh: bool) -> Isolation | None:
    """The plan's ``Isolation`` when any task wants a worktree; None (and no git call) otherwise."""
    if lp.plan.isolation != "worktree" and not any(t.isolation == "worktree" for t in lp.plan.tasks):
        return None
    from ..git.worktrees import Worktrees

    return Isolation(Worktrees(root, lp.plan.name), fresh=fresh)
