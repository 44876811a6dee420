"""``team run PLAN`` and ``team plan schema|check``.

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
progress sinks stop writing (``common.write_guarded``), the run goes on to its
end and the exit code is the run's.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..core.errors import CorruptFile, Signalled, UserError
from ..core.text import plural, shown
from .common import JsonOpt, RootOpt, err, out, root_of

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_cmd(
    ctx: typer.Context,
    plan_file: Annotated[Path, typer.Argument(help="The plan (YAML).", show_default=False)],
    workers: Annotated[int | None, typer.Option("--workers", "-w", min=1, help="Max tasks at once (default: the plan's `workers`).")] = None,
    keep_going: Annotated[bool, typer.Option("--keep-going", "-k", help="After a failure, run every branch not downstream of it.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Delete this plan's tasks (and its branches, with isolation: worktree) and start over.")] = False,
    redo: Annotated[list[str] | None, typer.Option("--redo", help="Run TASK again, and every task that needs it; with isolation: worktree its merge is taken out of the integration branch first (repeatable).", metavar="TASK")] = None,
    include_uncommitted: Annotated[bool, typer.Option("--include-uncommitted", help="isolation: worktree: start the plan from your checkout as it is (a snapshot commit of your uncommitted changes), not from your last commit.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print waves, critical path and parallelism; run and write nothing.")] = False,
    model: Annotated[str | None, typer.Option("--model", help="Model for agent tasks (else the plan's, else $TEAM_MODEL).")] = None,
    ask: Annotated[bool, typer.Option("--ask", help="A teammate that reaches its budget asks for more (answered with `team approve ID` or `team deny ID`; `team approve` lists the requests) instead of failing its task.")] = False,
    board: Annotated[bool, typer.Option("--board", help="Serve the live web board (`team board`) while the run lasts; prints its URL.")] = False,
    backend: Annotated[str | None, typer.Option("--backend", help="Where tasks run: local (this machine) or ray (a Ray cluster; docs/scale.md). Default: the plan's `backend`, else local.", metavar="local|ray")] = None,
    address: Annotated[str | None, typer.Option("--address", help="--backend ray: the cluster, `auto` (this machine is a node) or HOST:PORT of its head; without it an embedded local Ray instance on 127.0.0.1 is started.", metavar="auto|HOST:PORT")] = None,
    json_out: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Run a plan: every unblocked task in parallel, resumable after a crash."""
    from ..plan.load import load_plan
    from ..status import usage
    from . import progress

    lp = load_plan(plan_file, model=model, need_model=not dry_run)  # a dry run calls no model
    state_root = root_of(root, ctx)
    if dry_run and board:
        raise UserError("--board shows a run as it goes: leave out --dry-run (or run `team board` on its own)")
    if dry_run:
        _dry_run(lp, state_root, workers, json_out)
        return
    from ..run.runner import Backend, check_redo, run_plan
    from ..run.stop import RunStop

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
    tokens = usage.run_usage(state_root, [i for i, r in result.runs.items() if r.finished is not None])
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
    if not result.ok:
        raise typer.Exit(code=1)


def _isolation_check(lp, state_root: Path) -> list[str]:
    """With isolation: worktree, refuse (exit 2) what would fail every task; return warnings."""
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


def _dry_run(lp, state_root: Path, workers: int | None, json_out: bool) -> None:
    from ..core.paths import creation_record, tasks_dir
    from ..plan.analysis import analyse
    from ..tasks.index import read_rows

    warnings = _isolation_check(lp, state_root)
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


def schema_cmd() -> None:
    """Print the plan file's JSON Schema (for editors)."""
    from ..plan.model import json_schema

    out(json.dumps(json_schema(), indent=2))


def check_cmd(
    ctx: typer.Context,
    plan_file: Annotated[Path, typer.Argument(help="The plan (YAML).", show_default=False)],
    model: Annotated[str | None, typer.Option("--model", help="Model for agent tasks.")] = None,
    root: RootOpt = None,
) -> None:
    """Validate a plan without running it (exit 2 with file:line: field: problem).

    With isolation: worktree it also checks the git repository holding the state
    root (--root, $TEAM_ROOT or the current directory): every task must run inside it.
    With `backend: ray`, that every shell task brings its work back (outputs: or a worktree)."""
    from ..core.errors import PlanError
    from ..plan.load import load_plan
    from ..run.runner import ray_problems

    lp = load_plan(plan_file, model=model)
    if lp.plan.backend == "ray" and (problems := ray_problems(lp)):
        raise PlanError("\n".join(problems))
    for w in _isolation_check(lp, root_of(root, ctx)):
        err(w)
    out(f"{plan_file}: ok ({plural(len(lp.plan.tasks), 'task')})")


def register(app: typer.Typer) -> None:
    """Add ``run`` and the ``plan`` group to ``app``."""
    app.command("run")(run_cmd)
    plan_app = typer.Typer(no_args_is_help=True, help="Plan files: schema and validation.")
    plan_app.command("schema")(schema_cmd)
    plan_app.command("check")(check_cmd)
    app.add_typer(plan_app, name="plan")
