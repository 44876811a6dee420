"""The library behind ``team run``: materialise a plan, recover, run it.

Order of a run (``run_plan``):

1. The plan was validated whole (``plan.load.load_plan``) before anything is
   written; with worktree isolation ``worktrees_for`` also refuses a plan
   whose tasks would run outside the repository (``isolation_problems``),
   still before anything is written; ``--redo`` names are checked too, and
   ``preflight`` refuses what else can be refused without state (the model
   service's settings of agent tasks), so a refused run leaves no ``.team/``,
   no lead lock and no job log. From here on signals are held back to safe
   points (``RunStop.deferred``; stop.py).
2. Take the lead lock (``lead.LeadLock``): a second lead exits 2 naming us.
   A ``team land`` of the plan that was interrupted must be finished first.
   A plan with agent tasks records its sandbox there (``on``, ``off (...)``
   or ``unavailable: ...``; core/sandbox.py) for ``team status``, and tells
   the user at the start when it is not on.
3. Build the executors the plan needs (``build_executors``: shell first, so
   its job server forks while this process has one thread) and reap orphaned
   jobs of a dead lead (they are killed and marked ``lost``) so nothing from
   the old run keeps going. On ``--backend ray`` (``Backend``; the plan's
   ``backend:``) shell tasks run on a Ray cluster (ray_backend.py); a plan
   whose shell tasks would bring nothing back from another machine was
   refused in step 1 (``ray_problems``).
4. ``start_fresh``: ``--fresh`` (or the marker of an interrupted one) deletes
   the plan's branches, worktrees and tasks between writing a marker and
   removing it, so a kill in between is finished by the next run. A kept
   worktree with uncommitted work (a conflict resolution under way) refuses
   it first, right after the lead lock, before anything changed (keptwork.py).
5. With worktree isolation: a plan whose every task was landed runs nothing;
   otherwise the integration branch is made or repaired
   (``Worktrees.ensure_integration``), warning about uncommitted changes it
   leaves out, or snapshotting them with ``--include-uncommitted``.
6. ``request_redo`` flags the ``--redo`` tasks and their dependents in the
   store before anything else changes (reconcile.py).
7. ``prepare`` (materialise.py): the plan's tasks that exist are brought in
   line with the plan (completed stay done, failed and cancelled are retried,
   in-flight ones of a dead lead are released, removed ones cancelled,
   changed ``needs`` applied, flagging the completed work they invalidate:
   rewire.py); the missing ones get their ids reserved and a
   creation record, and the first chunk of them is created. The scheduler
   starts with it and is given the other chunks as a thread makes them
   durable; a lead killed meanwhile leaves the record, and the next run
   creates exactly the missing tasks at their reserved ids. With worktree
   isolation every task is created before the run starts (``materialise``).
8. ``reconcile``: the store and the integration branch are made to agree
   (redo flags, a merge gone missing, a task reopened after its merge).
Hooks (docs/hooks.md): the plan's ``hooks:`` and ``.team/hooks.yaml`` are
read before the lead lock (a bad file is refused with nothing written); with
any hook, one ``HookDispatcher`` serves the run: the store tells it about
created, claimed and failed tasks (``TaskStore.observer``), the teammates
ask it before a completion or going idle, shell completions pass it first
(hooked.py), and ``run_finished`` is its last event, after the executors
closed; once the work is done the runner calls the executors' ``settlers`` (the agent executor's
waits for teammates answering a ``teammate_idle`` veto; hooks still refusing make the run
incomplete). Budgets: one ``Spend`` (runtime/budgets.py) with the plan's
``budget:`` and the ``team:`` members' own, writing every model call to the
ledger of spend (llm/ledger.py) under this run's id (``RunResult.run_id``);
``RunResult.spend`` holds each teammate's spend in this run, read back from
the ledger, against its budget for the summary.

9. ``Scheduler.run``; with ``isolation: worktree`` the executors are wrapped
   by ``isolation.Isolation`` (a worktree per task, merged back in completion
   order), and after the run every merge the store records is checked to be
   on the integration branch (``missing_merges``: else the run is
   ``incomplete``, exit 1); the result carries ``worktrees``: the
   integration branch and how to review and take it (``Worktrees.summary``).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import PlanError, UnknownRef, UserError
from ..core.fsutil import atomic_write
from ..core.hooks import Hooks, NoHooks
from ..core.models import Status
from ..core.paths import team_dir
from ..core.sandbox import Sandbox
from ..core.text import plural
from ..git.land import Land
from ..git.pool import WorktreePool, rescue
from ..git.worktrees import Start, Summary, Worktrees
from ..hooks.config import run_hooks
from ..hooks.dispatch import HookDispatcher
from ..llm.ledger import Ledger, new_run_id
from ..llm.pricing import Usage
from ..plan.model import LoadedPlan, PlanTask
from ..runtime.budgets import Spend
from ..tasks.store import TaskStore
from ..team.lead import LeadLock
from . import rewire
from .command import CommandExecutor
from .executor import Executor, ExecutorContext, Rooted
from .hooked import Hooked
from .isolation import Isolation, warmed_pool
from .keptwork import refuse_unsaved
from .land import remember_plan_file
from .materialise import materialise, prepare, remove_record, tasks_of
from .reconcile import kept_work_notes, reconcile, refuse_unsafe, request_redo
from .scheduler import Emit, RunOptions, RunResult, Scheduler
from .shell import ShellExecutor
from .standing import missing_merges
from .stop import RunStop


def kinds_of(lp: LoadedPlan) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t in lp.plan.tasks:
        out.setdefault(t.kind, []).append(t.id)
    return out


@dataclass(frozen=True)
class Backend:
    """Where tasks run: ``local`` (this machine) or ``ray`` (a Ray cluster at ``address``: ``auto``,
    ``HOST:PORT``, or None for an embedded local instance; ray_backend.py)."""

    name: str = "local"
    address: str | None = None

    @classmethod
    def choose(cls, lp: LoadedPlan, backend: str | None, address: str | None) -> Backend:
        name = backend or lp.plan.backend
        if name not in ("local", "ray"):
            raise UserError(f"--backend {name}: unknown backend; use local or ray")
        if address is not None and name != "ray":
            raise UserError("--address names a Ray cluster: use it with --backend ray (or `backend: ray` in the plan)")
        return cls(name, address)


def run_plan(lp: LoadedPlan, root: Path, *, workers: int | None = None, keep_going: bool = False,
             fresh: bool = False, redo: Iterable[str] = (), include_uncommitted: bool = False,
             emit: Emit, note: Callable[[str], None], stop: RunStop | None = None, ask: bool = False,
             backend: Backend | None = None) -> RunResult:
    """Everything ``team run`` does after parsing its options (see the module docstring).

    ``stop``: how signals reach the run (the CLI's handler calls ``stop.request``) and how the
    threads of the executors report their death (stop.py). ``ask``: a teammate that reaches its
    budget asks the lead for more instead of failing its task (runtime/teammate.py). ``backend``:
    where tasks run (default: the plan's ``backend``, else this machine)."""
    stop = stop if stop is not None else RunStop()
    backend = backend if backend is not None else Backend.choose(lp, None, None)
    with stop.deferred():  # a signal is taken at a safe point (stop.check(), the scheduler's turns)
        result = _run(lp, root, workers, keep_going, fresh, redo, include_uncommitted, emit, note, stop, ask,
                      backend)
    stop.check()  # a signal during the last cleanup: the run's work is saved; say it was stopped
    return result


def _run(lp: LoadedPlan, root: Path, workers: int | None, keep_going: bool, fresh: bool, redo: Iterable[str],
         include_uncommitted: bool, emit: Emit, note: Callable[[str], None], stop: RunStop,
         ask: bool = False, backend: Backend | None = None) -> RunResult:
    backend = backend if backend is not None else Backend()
    kinds = kinds_of(lp)
    preflight(lp, kinds, backend)  # every refusal that needs no state comes before any state
    hook_config = run_hooks(root, lp.plan.hooks)  # a bad .team/hooks.yaml is refused here: nothing written
    if backend.name == "ray" and hook_config.tool_call and "agent" in kinds:  # a guard that would not run
        raise PlanError(f"{lp.path}: hooks.tool_call: teammates on Ray nodes do not run tool_call hooks yet, and a "
                        "guard must not be skipped silently: run this plan with --backend local")
    redo = check_redo(lp, redo)
    rerun = f"team run {lp.path}"
    wt = worktrees_for(lp, root)  # refuses a plan whose tasks would run outside the repository: nothing written
    sandbox = Sandbox.choose(lp.plan.sandbox, os.environ, plan_file=str(lp.path))
    agents = "agent" in kinds
    # Only agents' shell commands run in the sandbox: a shell-only plan neither probes nor shows it.
    info = {"sandbox": sandbox.state()} if agents else {}
    if backend.name == "ray":  # `team status` says where the lead runs its tasks
        info["backend"] = f"ray ({backend.address or os.environ.get('RAY_ADDRESS') or 'embedded, 127.0.0.1'})"
    with LeadLock(root, plan=lp.plan.name, plan_file=str(lp.path.absolute()), **info):
        if agents and (said := sandbox.note()) is not None:
            note(said)
        if lp.plan.command_members():  # a budget that does not see the agent CLIs' spend
            from .teammodels import spend_warnings

            for text in spend_warnings(lp):
                note(text)
        store = TaskStore(root)
        cwd = lp.plan.defaults.cwd
        workspace = (lp.base / cwd).resolve() if cwd else lp.base
        hooks: Hooks = NoHooks()
        dispatcher: HookDispatcher | None = None
        if hook_config:
            dispatcher = HookDispatcher(hook_config, root, plan=lp.plan.name, workspace=workspace,
                                        report=lambda text: note(f"hook: {text}"), on_crash=stop.fail)
            hooks = dispatcher
            store.observer = dispatcher.task_observer
        try:
            result = _run_locked(lp, root, workers, keep_going, fresh, redo, include_uncommitted, emit, note, stop,
                                 ask, store, wt, kinds, workspace, hooks, rerun, sandbox, backend)
        except BaseException as e:
            hooks.fire("run_finished", ok=False, stopped=f"{type(e).__name__}: {e}")
            raise
        else:  # after the executors closed: the last event of a run
            hooks.fire("run_finished", ok=result.ok, counts=result.counts, stopped=result.stopped,
                       deadlock=result.deadlock, incomplete=result.incomplete, spend=result.spend)
            return result
        finally:
            if dispatcher is not None:
                dispatcher.close()  # every fired hook has run (run_finished too)


def _run_locked(lp: LoadedPlan, root: Path, workers: int | None, keep_going: bool, fresh: bool, redo: list[str],
                include_uncommitted: bool, emit: Emit, note: Callable[[str], None], stop: RunStop, ask: bool,
                store: TaskStore, wt: Worktrees | None, kinds: dict[str, list[str]], workspace: Path, hooks: Hooks,
                rerun: str, sandbox: Sandbox, backend: Backend) -> RunResult:
    """``_run`` once the lead lock is held and the hooks are set up."""
    for text in wt.relinked if wt is not None else ():
        note(text)
    if wt is not None and Land(wt).pending() is not None:
        raise UserError(f"a `team land` of plan {lp.plan.name} was interrupted: run `team land "
                        f"{lp.plan.name}` to finish it before running the plan again")
    if wt is not None and (fresh or fresh_marker(root, lp.plan.name).exists()):
        refuse_unsaved(wt, "--fresh", f"{rerun} --fresh" if fresh else rerun)  # before anything is changed
    spend = Spend(lp.plan.budget, ask=ask, ask_timeout=ask_timeout_from_env(), on_ask=note, ledger=Ledger(root),
                  run_id=new_run_id())
    ctx = ExecutorContext(root=root, plan=lp.plan.name, model=lp.model, workspace=workspace,
                          team=[(m.name, m.role) for m in lp.plan.team if m.kind == "llm"],
                          plan_mode={m.name for m in lp.plan.team if m.plan_mode}, note=note,
                          store=store,  # one store object: the scheduler's pipeline serves the teammates too
                          sandbox=sandbox, stop=stop, hooks=hooks, spend=spend,
                          models={m.name: m.model for m in lp.plan.team if m.model},
                          budgets={m.name: m.budget for m in lp.plan.team if m.budget},
                          mcp_servers=list(lp.plan.mcp_servers), model_specs=dict(lp.plan.models),
                          command_members=lp.plan.command_members())
    execs = build_executors(set(kinds), ctx, backend)
    iso: Isolation | None = None
    pool: WorktreePool | None = None  # made when the integration branch is, handed to ``iso``
    try:
        stop.check()
        for ex in execs.values():
            for job in ex.reap_orphans():
                note(f"job {job.id} of a dead lead (task #{job.task}) was still running: killed")
        if wt is not None:
            rescue(wt)  # commits a shell task made itself in a worktree a killed run left: kept work
        start_fresh(store, lp, wt, fresh=fresh, note=note)
        if wt is not None and _landed(store, lp):
            note(f"plan {lp.plan.name} was landed into your branch by `team land` "
                 f"(commit {_landed(store, lp)[:10]}): nothing to run (--fresh starts over)")
            wt = None
        if wt is not None:
            if (older_git := wt.merge_note()) is not None:
                note(older_git)
            start = wt.ensure_integration(include_uncommitted)
            _started(start, wt, include_uncommitted, rerun, note)
            remember_plan_file(root, lp.plan.name, lp.path)  # `team land NAME` lands what this file says
            pool = warmed_pool(wt, lp.plan, workers or lp.plan.workers, started=start.created)
        asked = request_redo(store, tasks_of(store, lp.plan.name), wt, redo, rerun=rerun)
        for text in asked.notes:
            note(text)
        # what becomes of kept work is said once per task, by kept_work_notes, not also by materialise
        ids_of_plan = {t.id for t in lp.plan.tasks}
        kept = kept_work_notes([t for t in tasks_of(store, lp.plan.name) if t.plan_task in ids_of_plan], wt,
                               rerun) if wt is not None else {}
        # with worktree isolation every task exists before reconcile; else the run starts with the first chunk
        witness = rewire.ByTime() if wt is None else rewire.ByHistory(wt)  # what completed work saw (changed needs)
        before = tasks_of(store, lp.plan.name)  # a redo changed needs make is refused as reconcile would
        prep = (prepare if wt is None else materialise)(
            store, lp, note=note, quiet=kept, witness=witness, rerun=rerun,
            refuse=lambda todo: refuse_unsafe(wt, before, todo, rerun))  # (before anything is written)
        agreed = reconcile(store, prep.tasks, wt, redo=[*asked.ids, *prep.redo], rerun=rerun)
        for text in agreed.notes:
            note(text)
        # reconcile writes only for a redo or with worktree isolation: else the tasks are as materialised
        tasks = [store.read(t.id) for t in prep.tasks] if agreed.redone or wt is not None else prep.tasks
        if prep.creation is not None:
            stop.check()
            tasks += prep.creation.next_chunk()  # the rest is made while the run goes (materialise.py)
        if wt is not None:
            for tid, text in kept.items():
                if tid not in agreed.redone:
                    note(text)
            iso = Isolation(wt, rerun=rerun, emit=emit, pool=pool)
            execs = {kind: iso.wrap(ex) for kind, ex in execs.items()}
        opts = RunOptions(workers=workers or default_workers(lp, ctx, note), keep_going=keep_going,
                          retry_delay=prep.retry_delay)
        stop.check()
        rooted: dict[str, Executor] = {kind: Rooted(ex, root) for kind, ex in execs.items()}  # stored cwds made absolute
        scheduler = Scheduler(store, tasks, prep.priority, rooted, opts, emit, stop=stop, feed=prep.creation)
        if iso is not None:
            iso.settle = scheduler.settle
        ids = [t.id for t in tasks]
        del tasks, prep  # from here the scheduler holds the tasks still open, and drops each one it finishes
        result = scheduler.run()
        if stop.signum is None and stop.error is None:  # the work is done: what must still happen in the run
            refused = [line for settle in ctx.settlers for line in settle()]
            if refused:
                result.incomplete = "; ".join(refused)
        if iso is not None and wt is not None:
            iso.close()
            result.warnings = iso.warn_junk(lambda slug: _task_id(store, f"{lp.plan.name}.{slug}"))
            missing = missing_merges([store.read(i) for i in ids], wt)
            if missing:
                result.incomplete = (f"{wt.integration} lacks the merges of {', '.join(missing)} that the "
                                     f"task store records: run the plan again to redo them")
            summary = dataclasses.replace(  # suggest landing with the plan file, and only a finished plan
                iso.finish(), finished=result.ok,
                commands=Summary.commands_for(wt.plan, wt.integration, plan_file=str(lp.path)))
            result.worktrees = {**dataclasses.asdict(summary), "text": summary.text()}
        result.spend = spend_rows(spend, [m.name for m in lp.plan.team])
        result.run_id = spend.run_id
        return result
    finally:
        for ex in execs.values():
            ex.close()
        if iso is not None:
            iso.close()
        elif pool is not None:  # the run stopped before its tasks: what was made ahead goes
            pool.drain()


def _task_id(store: TaskStore, name: str) -> int | None:
    """The id of the task named ``name``, or None when there is none (a merge's task is named by it)."""
    try:
        return store.resolve(name)
    except UnknownRef:
        return None


def default_workers(lp: LoadedPlan, ctx: ExecutorContext, note: Callable[[str], None]) -> int:
    """The plan's ``workers``; on a cluster, when the plan does not set it, the cluster's CPU slots (said)."""
    if "workers" in lp.plan.model_fields_set or not ctx.slots:
        return lp.plan.workers
    note(f"backend ray: workers {ctx.slots}, the cluster's CPU slots (the plan sets no `workers:`; it or "
         f"--workers sets how many tasks run at once)")
    return ctx.slots


def ask_timeout_from_env(env: Mapping[str, str] = os.environ) -> float:
    """``TEAM_BUDGET_ASK_TIMEOUT``: seconds a teammate waits for the lead's answer with ``--ask`` (600)."""
    raw = env.get("TEAM_BUDGET_ASK_TIMEOUT", "").strip()
    if not raw:
        return 600.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise UserError(f"TEAM_BUDGET_ASK_TIMEOUT={raw!r} must be a number of seconds > 0")
    return value


def spend_rows(spend: Spend, team: list[str]) -> list[dict[str, Any]]:
    """Per teammate of the run: what the ledger says it spent in this run, and its budget (the run
    summary); the row ``run``: the run's total against the plan's ``budget:``."""
    totals = spend.ledger.totals(spend.run_id) if spend.ledger is not None else None
    names = list(dict.fromkeys([*team, *spend.names(), *(totals.members if totals is not None else ())]))
    rows = []
    for name in names:
        used = totals.members.get(name, Usage()) if totals is not None else spend.used(name)
        budget = spend.budget_of(name)
        if used.calls or budget is not None:
            rows.append({"name": name, **used.model_dump(),
                         "budget": budget.model_dump(exclude_none=True) if budget is not None else None})
    run_cap = spend.run_budget()
    if run_cap is not None:
        total = totals.total if totals is not None else spend.total()
        rows.append({"name": "run", **total.model_dump(), "budget": run_cap.model_dump(exclude_none=True)})
    return rows


def preflight(lp: LoadedPlan, kinds: dict[str, list[str]], backend: Backend | None = None) -> None:
    """Refuse what can be refused before the lead lock, executors or tasks exist (a refused run
    leaves no state): the model service's settings of agent tasks (a missing model or key, a bad
    ``TEAM_AGENT_MAX_STEPS``), which the agent executor would otherwise refuse after the job
    server had started; on ``--backend ray``, tasks that could not bring their work back
    (``ray_problems``); a teammate's model that a dollar budget could not hold, or whose key
    variable is not set (teammodels.py)."""
    if backend is not None and backend.name == "ray":
        problems = ray_problems(lp)
        if problems:
            raise PlanError("\n".join(problems))
    if "agent" in kinds:
        from .agents import max_steps_from_env, run_config
        from .teammodels import mcp_problems, model_problems

        # an unpriced model under a dollar budget, a key variable or an MCP header's variable not set
        problems = model_problems(lp) + mcp_problems(lp)
        if problems:
            raise PlanError("\n".join(problems))
        run_config(lp.model, lp.plan.models)
        max_steps_from_env()
        ask_timeout_from_env()


def ray_problems(lp: LoadedPlan) -> list[str]:
    """``file:line: field: problem`` for tasks ``--backend ray`` cannot run: a shell task on another
    machine must say what comes back (``outputs:`` globs, ``[]`` for nothing but its exit and log) or
    run in a git worktree (its commits come back); an agent task the same (its teammate works on a
    node). What teammates on nodes cannot do yet is refused too: the plan's MCP servers, a ``team:``
    member in plan mode (a role's ``ask:`` rules are refused when its teammate starts: ray_agents.py)."""
    d = lp.plan.defaults
    out = []
    agents = [t.id for t in lp.plan.tasks if t.kind == "agent"]
    if agents and lp.plan.mcp_servers:
        out.append(f"{lp.path}:{lp.lines.get(('mcp_servers',), 1)}: mcp_servers: teammates on Ray nodes cannot "
                   f"reach MCP servers yet ({', '.join(agents)} are agent tasks): run this plan with --backend local")
    for i, m in enumerate(lp.plan.team):
        if m.kind == "command":
            out.append(f"{lp.path}:{lp.lines.get(('team', i), 1)}: team[{i}].kind: {m.name} is an agent CLI (kind: "
                       f"command), which runs on the lead's machine only for now: run this plan with --backend local")
        if m.plan_mode:
            out.append(f"{lp.path}:{lp.lines.get(('team', i), 1)}: team[{i}].plan_mode: {m.name} would start in "
                       f"plan mode, which teammates on Ray nodes cannot do yet: run this plan with --backend local")
    for i, t in enumerate(lp.plan.tasks):
        line = lp.lines.get(("tasks", i), 1)
        if (t.isolation or lp.plan.isolation) != "worktree" and t.outputs is None and d.outputs is None:
            out.append(f"{lp.path}:{line}: tasks[{i}].outputs: {t.id} would run on another machine with "
                       f"nothing coming back: declare `outputs:` (globs of the files to bring back to "
                       f"{lp.task_cwd(t)}; `outputs: []` for none) or use isolation: worktree")
    return out


def check_redo(lp: LoadedPlan, redo: Iterable[str]) -> list[str]:
    """``--redo`` names: task ids of the plan (a store name ``plan.id`` is accepted too)."""
    ids = [t.id for t in lp.plan.tasks]
    out = []
    for name in redo:
        slug = name.removeprefix(f"{lp.plan.name}.")
        if slug not in ids:
            near = difflib.get_close_matches(slug, ids, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise UserError(f"--redo {name}: plan {lp.plan.name} has no task {slug!r}; {hint}its tasks: "
                            f"{', '.join(ids)}")
        out.append(slug)
    return out


def fresh_marker(root: Path, plan: str) -> Path:
    """Exists while a ``--fresh`` start of ``plan`` is under way (it survives a kill)."""
    return team_dir(root) / "fresh" / plan


def start_fresh(store: TaskStore, lp: LoadedPlan, wt: Worktrees | None, *, fresh: bool,
                note: Callable[[str], None], owner: str = "lead") -> None:
    """``--fresh``: the plan's branches, worktrees and tasks go, as one step for the user.

    A marker is written first and removed last: a run killed in between leaves it,
    and the next run (with or without ``--fresh``) finishes the fresh start instead
    of finding old tasks marked completed over an emptied integration branch.
    """
    marker = fresh_marker(store.root, lp.plan.name)
    if not fresh and not marker.exists():
        return
    if not fresh:
        note(f"the last `team run --fresh` of plan {lp.plan.name} was interrupted: finishing the fresh start "
             f"(every task runs again)")
    marker.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(marker, f"{time.time()}\n")
    if wt is not None:
        for task in wt.task_branches():
            kept = wt.kept(task)
            if kept is not None and (kept.commits or kept.failed):
                what = (f"{plural(kept.unmerged, 'commit')} not merged" if kept.commits
                        else f"{plural(kept.failed, 'commit')} of a failed attempt")
                note(f"--fresh: dropping {kept.branch} at {kept.tip[:10]} ({what}; "
                     f"`git branch {kept.branch} {kept.tip}` brings it back)")
        wt.reset()
    existing = tasks_of(store, lp.plan.name)
    if existing:
        store.delete_many([t.id for t in existing], actor=owner, reason=f"team run --fresh {lp.plan.name}")
        note(f"--fresh: removed {plural(len(existing), 'task')} of plan {lp.plan.name}")
    remove_record(store.root, lp.plan.name)  # an interrupted creation of them (materialise.py)
    marker.unlink()


def _landed(store: TaskStore, lp: LoadedPlan) -> str:
    """The commit ``team land`` took the plan in with, when every task of it was landed; else ""."""
    tasks = tasks_of(store, lp.plan.name)
    ids = {t.plan_task for t in tasks if t.status == Status.completed and t.landed}
    if tasks and ids >= {t.id for t in lp.plan.tasks}:
        return next(t.landed for t in tasks if t.landed) or ""
    return ""


def _started(start: Start, wt: Worktrees, include: bool, rerun: str, note: Callable[[str], None]) -> None:
    """Say what the plan's base leaves out (or took in) when the integration branch was made now."""
    if include and not start.created:
        note(f"--include-uncommitted: ignored, plan {wt.plan} started earlier from "
             f"{start.base.fork[:10] if start.base else 'its base'}; `{rerun} --fresh --include-uncommitted` "
             f"starts over from your checkout as it is")
    if not start.created or not start.uncommitted:
        return
    shown = ", ".join(start.uncommitted[:5]) + (f" and {len(start.uncommitted) - 5} more"
                                                 if len(start.uncommitted) > 5 else "")
    if start.base is not None and start.base.snapshot:
        note(f"--include-uncommitted: your uncommitted changes ({shown}) are in the plan's base, commit "
             f"{start.base.snapshot[:10]} on {start.base.commit[:10]}; your checkout keeps them uncommitted")
    else:
        base = start.base.commit[:10] if start.base else "HEAD"
        note(f"warning: your checkout has uncommitted changes the tasks will not see ({shown}): they start "
             f"from your last commit {base}. Commit them first, or start over with "
             f"`{rerun} --fresh --include-uncommitted` to put them in the plan's base")


def build_executors(kinds: set[str], ctx: ExecutorContext, backend: Backend | None = None) -> dict[str, Executor]:
    """The executors for these task kinds. The shell executor first: it forks its job
    server while this process has a single thread; the agent executor starts threads.
    On ``--backend ray`` shell tasks run on the cluster (ray_backend.py, which imports ray), and agent
    tasks' teammates on its nodes (ray_agents.py)."""
    built: dict[str, Executor] = {}
    ray_shell = None  # the shell executor on the cluster, which agent tasks' executor shares workspaces with
    clis: CommandExecutor | None = None
    hooked = ctx.hooks.wants("task_completed")
    try:
        local_shell = None  # jobs of this machine: shell tasks', and agent CLIs' (kind: command)
        if "shell" in kinds or "command" in kinds:
            shell: Executor
            if backend is not None and backend.name == "ray" and "shell" in kinds:
                from .ray_backend import (
                    RayExecutor,  # imports ray: only runs on a cluster pay for it
                )

                shell = ray_shell = RayExecutor(ctx, backend.address)
            else:
                shell = local_shell = ShellExecutor(ctx)
            # a shell task's completion passes the task_completed hooks first (agents' teammates ask themselves)
            if "shell" in kinds:
                built["shell"] = Hooked(shell, ctx.hooks, on_crash=ctx.stop.fail) if hooked else shell
        if "command" in kinds and local_shell is not None:  # (refused on ray before: runner.ray_problems)
            clis = CommandExecutor(ctx, local_shell, ctx.command_members)
            built["command"] = Hooked(clis, ctx.hooks, on_crash=ctx.stop.fail) if hooked else clis
        if "agent" in kinds and backend is not None and backend.name == "ray":
            from .ray_agents import RayAgentExecutor  # teammates as actors on the cluster's nodes

            remote = RayAgentExecutor(ctx, backend.address, peer=ray_shell)
            # its teammates run no hooks on their nodes: task_completed hooks decide at the lead, as for shell tasks
            built["agent"] = Hooked(remote, ctx.hooks, on_crash=ctx.stop.fail) if ctx.hooks.wants("task_completed") \
                else remote
        elif "agent" in kinds:
            from .agents import (
                AgentExecutor,  # imports openai: only plans with agent tasks pay for it
            )

            built["agent"] = AgentExecutor(ctx, others=clis)  # its control channel reaches the agent CLIs too
        if clis is not None and "agent" not in built:
            clis.serve_control()  # `team shutdown NAME` of an agent CLI, with no teammate runtime to ask
    except BaseException:
        for ex in built.values():
            ex.close()
        raise
    unknown = kinds - set(built)
    if unknown:
        raise PlanError(f"no executor runs tasks of kind {', '.join(sorted(unknown))}")
    return built


def worktrees_for(lp: LoadedPlan, root: Path) -> Worktrees | None:
    """The plan's ``Worktrees`` when any task wants one (None, and no git call, otherwise);
    a plan whose tasks would run outside the repository is refused here (``isolation_problems``)."""
    if not isolated(lp):
        return None
    wt = Worktrees(root, lp.plan.name)
    problems = isolation_problems(lp, wt)
    if problems:
        raise PlanError("\n".join(problems))
    return wt


def isolated(lp: LoadedPlan) -> bool:
    return lp.plan.isolation == "worktree" or any(t.isolation == "worktree" for t in lp.plan.tasks)


def isolation_problems(lp: LoadedPlan, wt: Worktrees) -> list[str]:
    """``file:line: field: problem`` for tasks with ``isolation: worktree`` whose folder lies outside
    the repository holding the state root (each would fail with "cwd ... outside the git repository")."""
    top = wt.toplevel
    outside: dict[Path, list[tuple[int, PlanTask]]] = {}
    for i, t in enumerate(lp.plan.tasks):
        if (t.isolation or lp.plan.isolation) != "worktree":
            continue
        cwd = lp.task_cwd(t)
        try:
            cwd.resolve().relative_to(top)
        except ValueError:
            outside.setdefault(cwd, []).append((i, t))
    out = []
    for cwd, tasks in outside.items():
        ids = ", ".join(t.id for _, t in tasks)
        i, first = tasks[0]
        loc: tuple[str | int, ...]
        if first.cwd:
            loc, field, fix = ("tasks", i, "cwd"), f"tasks[{i}].cwd", f"set `cwd:` to a folder inside {top}"
        elif lp.plan.defaults.cwd:
            loc, field, fix = ("defaults", "cwd"), "defaults.cwd", f"set it to a folder inside {top}"
        else:
            loc, field = ("tasks",), "tasks"
            fix = (f"move {lp.path.name} into {top} (tasks run in the plan file's folder), or set "
                   f"`defaults.cwd` to a folder inside it")
        line = lp.lines.get(loc, 1)
        out.append(f"{lp.path}:{line}: {field}: {ids} would run in {cwd}, outside the git repository {top} "
                   f"holding the state root, and isolation: worktree runs tasks only inside it: {fix}")
    return out
