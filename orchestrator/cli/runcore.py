"""What ``team run PLAN`` does, without typer: called by the typer command (runcmd.py) and by
the fast path (fast.py), with the state root resolved; returns the exit code.

Exit codes: 0 every task completed · 1 a task failed, was cancelled, or the
run deadlocked · 2 bad plan/usage or another lead holds the root · 130
(Ctrl-C), 143 (SIGTERM), 129 (SIGHUP): the run was stopped, its jobs killed
and its running tasks given back (``pending``).

Signals: SIGINT, SIGTERM and SIGHUP go to a ``run.stop.RunStop``; inside
``run_plan`` they are taken at safe points only (the scheduler stops at its
next turn and gives every claim back; start-up and cleanup check between
steps), before it the handler raises ``Signalled`` where it is. The CLI's
``main`` prints ``Interrupted.`` / ``Terminated.`` / ``Hung up.``, never a
traceback.

A closed stdout (``team run --json | head -3``) does not stop the run: the
progress sinks stop writing (``output.write_guarded``), the run goes on to its
end and the exit code is the run's.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from ..core.errors import CorruptFile, Signalled, UserError
from ..core.text import plural, shown
from .output import out

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_plan_file(state_root: Path, plan_file: Path, *, workers: int | None = None, keep_going: bool = False,
                  fresh: bool = False, redo: list[str] | None = None, include_uncommitted: bool = False,
                  dry_run: bool = False, model: str | None = None, ask: bool = False, board: bool = False,
                  backend: str | None = None, address: str | None = None, json_out: bool = False) -> int:
    """``team run``: 0 every task completed, 1 not (module docstring)."""
    from ..plan.load import load_plan

    lp = load_plan(plan_file, model=model, need_model=not dry_run)  # a dry run calls no model
    if dry_run and board:
        raise UserError("--board shows a run as it goes: leave out --dry-run (or run `team board` on its own)")
    if dry_run:  # (before the imports of a run: the runner, the store, progress sinks)
        dry_run_of(lp, state_root, workers, json_out)
        return 0
    from ..run.runner import Backend, check_redo, run_plan
    from ..run.stop import RunStop
    from ..status import usage
    from . import progress

    check_redo(lp, redo or [])
    where = Backend.choose(lp, backend, address)

    sink: progress.JsonProgress | progress.LiveProgress | progress.PlainProgress
    if json_out:
        sink = progress.JsonProgress(sys.stdout)
    elif sys.stdout.isatty():
        from rich.console import Console

        sink = progress.LiveProgress(Console(), lp.plan.name)
    else:
        sink = progress.PlainProgress(sys.stdout)

    def note(text: str) -> None:
        sink({"event": "note", "text": text}) if json_out else sys.stderr.write(shown(text, lines=True) + "\n")

    web = None
    if board:  # a child process serving the root; started before the run forks its job server
        from ..board.launch import BoardProcess

        web = BoardProcess(state_root).start()
        note(f"board: {web.url} (stops with the run; `team board` serves it again)")
    stop = RunStop()

    def on_signal(signum: int, frame: object) -> None:
        if not stop.request(signum):  # no loop to stop at a safe point: unwind from here
            raise Signalled(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    try:
        result = run_plan(lp, state_root, workers=workers, keep_going=keep_going, fresh=fresh, redo=redo or [],
                          include_uncommitted=include_uncommitted, emit=sink, note=note, stop=stop, ask=ask,
                          backend=where)
    finally:
        sink.close()
        if web is not None:
            web.stop()
    summary = progress.summarise(result, workers or lp.plan.workers, state_root)
    # what this run spent, from the ledger (llm/ledger.py): every call of the run, in or out of a task
    tokens = usage.run_usage(state_root, result.run_id) if result.run_id else None
    if tokens is not None:
        summary["usage"] = tokens
    if result.spend:
        summary["spend"] = result.spend
    if json_out:
        sink({"event": "summary", **summary})
    else:
        for line in (progress.render_summary(summary) + usage.render(tokens or {}, "tokens this run")
                     + usage.render_spend(result.spend)):
            out(line)
    return 0 if result.ok else 1


def isolation_check(lp, state_root: Path) -> list[str]:
    """With isolation: worktree, refuse (exit 2) what would fail every task; return warnings."""
    if lp.plan.isolation != "worktree" and all(t.isolation != "worktree" for t in lp.plan.tasks):
        return []  # (runner.isolated: a dry run without worktrees does not import the runner)
    from ..run.runner import worktrees_for

    wt = worktrees_for(lp, state_root)  # PlanError/UserError: no repository, a task outside it
    if wt is None or wt.has_integration():
        return []
    left = wt.uncommitted()
    if not left:
        return []
    shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    return [f"warning: your checkout has uncommitted changes the tasks will not see ({shown}): commit them "
            f"first, or run with --include-uncommitted to put them in the plan's base"]


def dry_run_of(lp, state_root: Path, workers: int | None, json_out: bool) -> None:
    from ..core.paths import creation_record, tasks_dir
    from ..plan.analysis import analyse
    from ..tasks.index import read_rows

    warnings = isolation_check(lp, state_root)
    if lp.plan.command_members():
        from ..run.teammodels import spend_warnings

        warnings += spend_warnings(lp)
    agents = [t.id for t in lp.plan.tasks if t.kind == "agent"]
    if agents and not lp.model:
        warnings.append(f"warning: agent tasks need a model to run ({', '.join(agents)}): set `model:` in the "
                        "plan, pass --model or set $TEAM_MODEL")
    a = analyse(lp.plan)
    rows, bad = read_rows(tasks_dir(state_root), update=False)  # a 10k-task store: no pydantic per task
    if bad:
        path, why = bad[0]
        raise CorruptFile(path, why.replace(f"{path}: ", "", 1).split(" (run `team doctor`")[0])
    done = {r.data.get("plan_task") for r in rows if r.data.get("plan") == lp.plan.name and r.status == "completed"}
    w = workers or lp.plan.workers
    cut = creation_record(state_root, lp.plan.name).exists()  # a lead died while creating the tasks
    if json_out:
        out(json.dumps({"plan": lp.plan.name, "tasks": len(lp.plan.tasks), "workers": w, "waves": a.waves,
                        "critical_path": a.critical_path, "critical_length": a.critical_length,
                        "total_work": a.total_work, "max_parallelism": a.max_parallelism,
                        "completed": sorted(done), "creation_interrupted": cut, "warnings": warnings}, indent=2))
        return
    out(f"plan {lp.plan.name} ({lp.path}): {plural(len(lp.plan.tasks), 'task')}, workers {w}")
    for i, wave in enumerate(a.waves, 1):
        marks = [f"{t} (done)" if t in done else t for t in wave]
        out(f"  wave {i}: {', '.join(marks)}")
    out(f"critical path ({plural(len(a.critical_path), 'task')}, length {a.critical_length:g}): "
        + " → ".join(a.critical_path))
    avg = a.total_work / a.critical_length if a.critical_length else 0
    out(f"max useful parallelism: {a.max_parallelism} (widest wave); "
        f"average {avg:.1f} (work {a.total_work:g} / critical path {a.critical_length:g})")
    if done:
        out(f"resume: {plural(len(done), 'task')} already completed in {state_root}")
    if cut:
        made = sum(1 for r in rows if r.data.get("plan") == lp.plan.name)
        out(f"resume: the last run stopped while creating the plan's tasks ({made} of {len(lp.plan.tasks)} "
            f"made): `team run` creates the others")
    for w in warnings:
        out(w)
    out("dry run: nothing was run or written")
