"""``team log PLAN``, ``team diff TASK``, ``team land PLAN``: review a plan's result and take it.

All three are for plans with ``isolation: worktree``. ``log`` lists the tasks
in merge order with their commits and status, then the tasks not merged and
why; ``diff`` prints one task's own change (what its merge brought into the
integration branch, or its kept branch's work); ``land`` brings the finished
result into your current branch (git/land.py says how it refuses rather than
lose work) and removes the plan's branches and worktrees. PLAN is a plan
name or a plan file; ``team land NAME`` lands what the plan file the last
``team run`` of NAME ran from says now, so both forms refuse the same things. Formatting only: the data comes from status/planlog.py
and run/land.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..core.errors import UserError
from ..core.text import plural, shown
from .common import JsonOpt, RootOpt, out, print_json, root_of

PlanArg = Annotated[str, typer.Argument(help="Plan name, or the plan file.", show_default=False)]


def _is_file(plan: str) -> bool:
    path = Path(plan)
    return path.suffix in (".yaml", ".yml") or path.is_file()


def _plan(plan: str) -> tuple[str, list[str], str | None]:
    """(name, task ids, description) of the plan file PLAN."""
    from ..plan.load import load_plan

    lp = load_plan(Path(plan))
    first = lp.plan.description.strip().splitlines()
    return lp.plan.name, [t.id for t in lp.plan.tasks], first[0] if first else None


def _shown(path: Path) -> str:
    """``path`` relative to the current directory when under it (as a user would type it)."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _name(plan: str) -> str:
    """The plan's name: PLAN itself, or the name a plan file gives."""
    return _plan(plan)[0] if _is_file(plan) else plan


def log_cmd(ctx: typer.Context, plan: PlanArg, as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """The plan's tasks in merge order (merge commit, own commits, files, status), then the rest."""
    from ..status.planlog import plan_log

    log = plan_log(root_of(root, ctx), _name(plan))
    if as_json:
        print_json(log.to_json())
        return
    base = f" since {log.base[:10]}" if log.base else ""
    out(f"plan {log.plan}: {log.branch}, {plural(len(log.merged), 'task')} merged{base}")
    for step in log.steps:
        out(f"        {shown(step)}")
    for n, e in enumerate(log.merged, 1):
        who = f"#{e.id} {e.task}" if e.id is not None else e.task
        out(f"  {n:>3}. {(e.merge or '')[:10]}  {who}  [{e.status}]  {plural(len(e.commits), 'commit')}, "
            f"{plural(e.files, 'file')}")
        for c in e.commits:
            out(f"         {shown(c)}")
    if log.other:
        out("not merged:")
        for e in log.other:
            who = f"#{e.id} {e.task}" if e.id is not None else e.task
            out(f"       {who}  [{e.status}]" + (f"  {shown(e.note)}" if e.note else ""))


def diff_cmd(
    ctx: typer.Context,
    ref: Annotated[str, typer.Argument(help="Task id (4 or #4), name (plan.task), or the plan's id of the task "
                                            "when one plan has it.", show_default=False)],
    stat: Annotated[bool, typer.Option("--stat", help="Only the files changed and their line counts.")] = False,
    root: RootOpt = None,
) -> None:
    """One task's own change: what its merge brought into the integration branch, or its kept branch."""
    from ..status.planlog import task_change

    task, history, change = task_change(root_of(root, ctx), ref)
    where = (f"merged in {change.new[:10]}" if change.merged else
             f"not merged: branch {history.wt.branch(change.task)}")
    out(f"# #{task.id} {change.task} (plan {task.plan}): {where}, {plural(len(change.commits), 'commit')}")
    for c in change.commits:
        out(f"#   {shown(c)}")
    if change.dirty:
        out(f"# its worktree {history.wt.path(change.task)} also has uncommitted changes (not shown)")
    options = ["--stat"] if stat else []
    options.append("--color=always" if sys.stdout.isatty() else "--color=never")
    sys.stdout.write(history.diff(change, *options))


def land_cmd(
    ctx: typer.Context,
    plan: PlanArg,
    squash: Annotated[bool, typer.Option("--squash", help="One commit for the whole plan (the default).")] = False,
    per_task: Annotated[bool, typer.Option("--per-task", help="One commit per task, in merge order, with the task's subject and a Team-Task: trailer.")] = False,
    message: Annotated[str | None, typer.Option("--message", "-m", help="Title of the --squash commit.")] = None,
    root: RootOpt = None,
) -> None:
    """Bring the plan's finished result into your current branch, then delete its branches and worktrees.

    Refuses, changing nothing, when a task is not completed, when your branch moved
    and conflicts with the result, or when your checkout has changes the land would
    overwrite. Killed, `team land` again finishes it."""
    from ..run.land import land_plan, recorded_plan_file

    if squash and per_task:
        raise UserError("--squash and --per-task exclude each other: pick one (--squash is the default)")
    state_root = root_of(root, ctx)
    file = plan if _is_file(plan) else _shown(recorded_plan_file(state_root, plan))  # one rule for both forms
    name, ids, description = _plan(file)
    if name != plan and not _is_file(plan):
        raise UserError(f"plan {plan!r} ran from {file}, which now names plan {name!r}: land it with the plan "
                        f"file that names it, `team land PATH/TO/PLAN.yaml`")
    title = message or (f"{name}: {description}" if description else None)
    done = land_plan(state_root, name, mode="per-task" if per_task else "squash", task_ids=ids, title=title,
                     plan_file=plan if _is_file(plan) else file)
    if done.landing is None:
        out(f"plan {name} was landed already (commit {(done.already or '')[:10]}): nothing to do")
        return
    intent = done.landing.intent
    into = intent.branch.removeprefix("refs/heads/")
    again = (f" (finishing the --{intent.mode} land a killed `team land` left)" if done.landing.resumed else "")
    if done.landing.empty:
        out(f"plan {name} changed nothing: nothing to land into {into}{again}")
    else:
        out(f"landed plan {name} into {into}: {plural(len(intent.commits), 'commit')}, "
            f"{intent.old[:10]}..{intent.new[:10]}{again}")
        for c in intent.commits:
            sha, _, subject = c.partition(" ")
            out(f"  {sha[:10]} {shown(subject)}")
    out(f"removed the plan's branches and worktrees (team/{name}/*)")


def register(app: typer.Typer) -> None:
    """Add ``team log``, ``team diff`` and ``team land`` to ``app``."""
    app.command("log")(log_cmd)
    app.command("diff")(diff_cmd)
    app.command("land")(land_cmd)
