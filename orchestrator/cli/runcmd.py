"""``team run PLAN`` (its body: runcore.py) and ``team plan schema|check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..core.text import plural
from .common import JsonOpt, RootOpt, err, exit_with, out, root_of
from .runcore import isolation_check, run_plan_file


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
    exit_with(run_plan_file(root_of(root, ctx, creates=True), plan_file, workers=workers, keep_going=keep_going, fresh=fresh,
                        redo=redo, include_uncommitted=include_uncommitted, dry_run=dry_run, model=model, ask=ask,
                        board=board, backend=backend, address=address, json_out=json_out))


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
    With `backend: ray`, that every shell task brings its work back (outputs: or a worktree).
    With agent tasks, that each teammate's model has a price when a dollar budget covers it,
    and that a key variable named under `models:` is set. A `budget:` with agent CLI members
    (kind: command) is warned about: their own spend is not counted against it."""
    from ..core.errors import PlanError
    from ..plan.load import load_plan
    from ..run.runner import ray_problems
    from ..run.teammodels import mcp_problems, model_problems, spend_warnings

    lp = load_plan(plan_file, model=model)
    if lp.plan.backend == "ray" and (problems := ray_problems(lp)):
        raise PlanError("\n".join(problems))
    if problems := model_problems(lp) + mcp_problems(lp):  # an unpriced model under a dollar budget, a variable not set
        raise PlanError("\n".join(problems))
    for w in isolation_check(lp, root_of(root, ctx, creates=True)) + spend_warnings(lp):  # a plan check needs no store
        err(w)
    out(f"{plan_file}: ok ({plural(len(lp.plan.tasks), 'task')})")


def register(app: typer.Typer) -> None:
    """Add ``run`` and the ``plan`` group to ``app``."""
    app.command("run")(run_cmd)
    plan_app = typer.Typer(no_args_is_help=True, help="Plan files: schema and validation.")
    plan_app.command("schema")(schema_cmd)
    plan_app.command("check")(check_cmd)
    app.add_typer(plan_app, name="plan")
