"""Worktree tools (seed s12): agents create, list, inspect, enter, run in, keep, remove and merge
named git worktrees bound to tasks. The git and the two files (index, events) are
git/agentwt.py's; here: the binding to tasks and who may do what.

    worktree_create(name, task?, owner?)   a worktree forked from the integration tip; bound to
                                            the task: its ``worktree`` field is the name while
                                            bound, a pending task becomes in_progress
    worktree_list()                         every agent worktree: status, branch, owner, task
    worktree_status(name)                   its git status, commits of its own, bound task
    worktree_enter(name) / worktree_leave() your file tools and bash work in it / back home
    worktree_run(name, command)             one shell command in it: the bash tool's own path
                                            (shell policy, sandbox with the worktree writable)
    worktree_keep(name)                     leave it for later
    worktree_remove(name, force?, complete_task?)   discard it (unmerged work needs force)
    worktree_merge(names, complete_tasks?)  the ordered merge-back of plans (git/worktrees.py):
                                            in the order given, stops at the first conflict
    worktree_events(limit?)                 the lifecycle log

Permissions (the role's ``permissions.worktrees``, roles/roles.py), checked by each tool's
``authorize`` before anything runs: ``own`` makes worktrees for itself and uses, keeps and
removes the ones it owns; ``any`` (the lead) also makes them for others and merges;
``none`` only lists and inspects. Binding a task needs the right to update it (the task
tools' rules, tools/tasks.py).

A worktree an agent entered that is merged or removed meanwhile sends the agent back to its
own workspace, saying so (the pipeline checks before every call: registry.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pydantic import Field

from ..core.models import Status
from ..git.agentwt import AgentWorktrees, Entry
from .base import MAX_SECONDS, Args, Call, Refused, ToolContext, ToolError, ToolOutput, tool
from .services import TaskStorage
from .shell import bash
from .tasks import REF_HELP, Ref

Name = Field(description="The worktree's name (letters, digits, '.', '_', '-').")


def lanes(ctx: ToolContext) -> AgentWorktrees:
    return AgentWorktrees(ctx.root)


def _refuse(ctx: ToolContext, what: str) -> Refused:
    return Refused(f"{what} (your role's permissions: {ctx.permissions.describe()})", "permission")


def _may_use(ctx: ToolContext, entry: Entry, action: str) -> None:
    if ctx.permissions.worktrees == "any" or entry.owner == ctx.agent:
        return
    raise _refuse(ctx, f"worktree {entry.name!r} is {entry.owner}'s: you may {action} only your own worktrees")


# ---------------------------------------------------------------- create
class CreateArgs(Args):
    name: str = Name
    task: Ref | None = Field(None, description="Bind it to this task (" + REF_HELP + ")")
    owner: str | None = Field(None, description="Who works in it (default: you; the lead may name a teammate).")


def _may_create(call: Call) -> None:
    a, ctx = call.args, call.ctx
    if ctx.permissions.worktrees == "none":
        raise _refuse(ctx, "your role may not create worktrees")
    if a.owner not in (None, ctx.agent) and ctx.permissions.worktrees != "any":
        raise _refuse(ctx, f"only the lead makes worktrees for others: omit owner (it is yours), not {a.owner!r}")
    if a.task is not None:
        task = ctx.store.read(ctx.store.resolve(a.task))
        mine = task.owner in (ctx.agent, a.owner or ctx.agent) or (not task.owner and task.created_by == ctx.agent)
        if not (ctx.permissions.may("update-any") or (mine and ctx.permissions.may("update-own"))):
            raise _refuse(ctx, f"task #{task.id} is owned by {task.owner or 'nobody'}: you may bind only your own "
                               f"tasks to a worktree")
        if task.worktree:
            raise ToolError(f"task #{task.id} is bound to worktree {task.worktree!r} already")


@tool("worktree_create", args=CreateArgs, risk="write", budget=2000, authorize=_may_create)
def worktree_create(call: Call) -> str:
    """Create a git worktree (its own branch, forked from the team's integration branch) to work
    in isolation, optionally bound to a task; merge it back with worktree_merge."""
    a, ctx = call.args, call.ctx
    task_id = ctx.store.resolve(a.task) if a.task is not None else None
    entry = lanes(ctx).create(a.name, owner=a.owner or ctx.agent, actor=ctx.agent, task_id=task_id)
    line = f"created worktree {entry.name} at {entry.path} on branch {entry.branch} (owner {entry.owner})"
    if task_id is not None:
        task = ctx.store.read(task_id)
        status = Status.in_progress if task.status == Status.pending else None
        task = ctx.store.update(task_id, status=status, worktree=entry.name, actor=ctx.agent)
        line += f"; task #{task.id} is bound to it ({task.status.value})"
    who = "you work" if entry.owner == ctx.agent else f"{entry.owner} works"
    return line + f"\n{who} in it with worktree_enter(name={entry.name!r}) or worktree_run"


# ---------------------------------------------------------------- list, status, events
class NoArgs(Args):
    pass


@tool("worktree_list", args=NoArgs, risk="read", budget=8000)
def worktree_list(call: Call) -> str:
    """List the agent worktrees: name [status] branch, owner, bound task."""
    entries = lanes(call.ctx).entries()
    if not entries:
        return "no worktrees yet; worktree_create makes one"
    here = call.ctx.worktree
    return "\n".join(e.line() + ("  <- you are here" if e.name == here else "") for e in entries)


class NameArgs(Args):
    name: str = Name


@tool("worktree_status", args=NameArgs, risk="read", budget=8000)
def worktree_status(call: Call) -> str:
    """Show one worktree: its git status (changed files), its own commits, its bound task."""
    ctx = call.ctx
    reg = lanes(ctx)
    entry = reg.get(call.args.name)
    lines = [entry.line(), f"path: {entry.path}"]
    if entry.live and Path(entry.path).is_dir():
        git = reg.wt.git
        changed = git("status", "--short", "--untracked-files=all", cwd=Path(entry.path)).stdout.rstrip()
        kept = reg.wt.kept(entry.name)
        lines.append(f"commits of its own: {kept.commits if kept else 0}")
        lines.append("changes not committed:" + ("\n" + changed if changed else " none"))
    if entry.task_id is not None:
        t = ctx.store.read(entry.task_id)
        lines.append(f"task #{t.id}: {t.subject} ({t.status.value}{', ' + t.owner if t.owner else ''})")
    return "\n".join(lines)


class EventsArgs(Args):
    limit: int = Field(20, ge=1, le=1000, description="How many of the latest events.")


@tool("worktree_events", args=EventsArgs, risk="read", budget=8000)
def worktree_events(call: Call) -> str:
    """The latest worktree lifecycle events (create, keep, merge, remove, task completed)."""
    events = lanes(call.ctx).events(call.args.limit)
    if not events:
        return "no worktree events yet"
    out = []
    for ev in events:
        wt = ev.get("worktree", {}).get("name", "")
        task = ev.get("task")
        line = f"{ev['event']} {wt}".rstrip() + f" by {ev.get('actor', '?')}"
        if task:
            line += f" task #{task.get('id')}" + (f" {task['status']}" if task.get("status") else "")
        if ev.get("error"):
            line += f": {ev['error'].splitlines()[0]}"
        out.append(line)
    return "\n".join(out)


# ---------------------------------------------------------------- enter, leave, run
def _may_use_named(call: Call, action: str) -> None:
    entry = lanes(call.ctx).get(call.args.name)
    _may_use(call.ctx, entry, action)


@tool("worktree_enter", args=NameArgs, risk="read", budget=1000,
      authorize=lambda call: _may_use_named(call, "enter"))
def worktree_enter(call: Call) -> str:
    """Work in a worktree: from now on your file tools and bash work in its directory, until
    worktree_leave. Its changes reach the others only when it is merged (worktree_merge)."""
    ctx = call.ctx
    entry = lanes(ctx).live(call.args.name)
    path = Path(entry.path)
    if not path.is_dir():
        raise ToolError(f"worktree {entry.name!r} has no directory at {path} (status {entry.status})")
    if ctx.home is None:
        ctx.home = ctx.workspace
    ctx.worktree = entry.name
    ctx.move_to(path)
    return (f"you are in worktree {entry.name} ({entry.branch}) at {path}: paths are relative to it; "
            f"worktree_leave goes back to {ctx.home}")


@tool("worktree_leave", args=NoArgs, risk="read", budget=500)
def worktree_leave(call: Call) -> str:
    """Leave the worktree you entered: your tools work in your own workspace again."""
    ctx = call.ctx
    if ctx.home is None:
        return f"you are not in a worktree; your workspace is {ctx.workspace}"
    left = ctx.worktree
    leave(ctx)
    return f"left worktree {left}; back in {ctx.workspace}"


def leave(ctx: ToolContext) -> None:
    """Back to the workspace the agent had before ``worktree_enter``."""
    ctx.leave_worktree()


class RunArgs(Args):
    name: str = Name
    command: str = Field(description="The shell command (bash) to run in the worktree.")
    timeout: float | None = Field(None, gt=0, le=MAX_SECONDS, description="Seconds before it is killed.")


@tool("worktree_run", args=RunArgs, risk="execute", budget=bash.budget, command="command",
      authorize=lambda call: _may_use_named(call, "run commands in"))
def worktree_run(call: Call) -> str | ToolOutput:
    """Run one shell command in a worktree's directory (as bash does: sandboxed, only the
    worktree and /tmp writable) and return its exit code and output."""
    ctx = call.ctx
    entry = lanes(ctx).live(call.args.name)
    path = Path(entry.path)
    if not path.is_dir():
        raise ToolError(f"worktree {entry.name!r} has no directory at {path} (status {entry.status})")
    # the bash tool's handler on a copy of the context whose workspace is the worktree
    inner = dataclasses.replace(ctx, workspace=path, cwd=None)
    shell_args = bash.args.model_validate({"command": call.args.command, "timeout": call.args.timeout})
    return bash.handler(dataclasses.replace(call, tool=bash, args=shell_args, ctx=inner))


# ---------------------------------------------------------------- keep, remove, merge
@tool("worktree_keep", args=NameArgs, risk="coordinate", budget=1000,
      authorize=lambda call: _may_use_named(call, "keep"))
def worktree_keep(call: Call) -> str:
    """Keep a worktree for later (it stays, with its branch, until merged or removed)."""
    entry = lanes(call.ctx).keep(call.args.name, actor=call.ctx.agent)
    return f"kept worktree {entry.name} at {entry.path}"


def unbind(store: TaskStorage, reg: AgentWorktrees, entry: Entry, *, complete: bool, actor: str) -> str:
    """Clear the bound task's ``worktree``; ``complete``: mark it completed too (a ``task.completed``
    event); the words saying what happened (for the tools and ``team worktree``)."""
    if entry.task_id is None:
        return ""
    task = store.read(entry.task_id)
    done = complete and task.status != Status.completed
    task = store.update(task.id, status=Status.completed if done else None, worktree=None, actor=actor)
    if done:
        reg.emit("task.completed", actor=actor, entry=entry, task={"id": task.id, "status": task.status.value})
        return f"; task #{task.id} completed"
    return f"; task #{task.id} unbound"


class RemoveArgs(Args):
    name: str = Name
    force: bool = Field(False, description="Discard commits and changes that were not merged.")
    complete_task: bool = Field(False, description="Also mark the bound task completed.")


@tool("worktree_remove", args=RemoveArgs, risk="write", budget=1000,
      authorize=lambda call: _may_use_named(call, "remove"))
def worktree_remove(call: Call) -> str:
    """Remove a worktree and its branch. Work not merged is refused unless force=true (it is
    discarded); complete_task=true also completes the bound task."""
    a, ctx = call.args, call.ctx
    reg = lanes(ctx)
    entry = reg.remove(a.name, actor=ctx.agent, force=a.force)
    return f"removed worktree {entry.name}" + unbind(ctx.store, reg, entry, complete=a.complete_task,
                                                      actor=ctx.agent)


class MergeArgs(Args):
    names: list[str] = Field(min_length=1, description="Worktrees to merge, in this order.")
    complete_tasks: bool = Field(False, description="Also mark each merged worktree's task completed.")


def _may_merge(call: Call) -> None:
    if call.ctx.permissions.worktrees != "any":
        raise _refuse(call.ctx, "only the lead merges worktrees: tell the lead yours is ready (send_message)")


@tool("worktree_merge", args=MergeArgs, risk="write", budget=6000, authorize=_may_merge)
def worktree_merge(call: Call) -> str:
    """Merge worktrees back, in the order given, into the team's integration branch (one merge
    commit each, as plans merge their tasks); each merged worktree and branch is then removed.
    Stops at the first conflict, naming the files. `team worktree land` takes the result into
    the user's branch."""
    a, ctx = call.args, call.ctx
    reg = lanes(ctx)
    subjects = {}
    for name in a.names:
        entry = reg.live(name)
        if entry.task_id is not None:
            subjects[name] = f"{ctx.store.read(entry.task_id).subject} (task #{entry.task_id}, worktree {name})"
    report = reg.merge(a.names, actor=ctx.agent, messages=subjects)
    lines = []
    for entry, result in report.merged:
        what = f"merged {entry.name} ({result.commit[:10]})" if result.commit else f"{entry.name}: nothing to merge"
        lines.append(what + unbind(ctx.store, reg, entry, complete=a.complete_tasks, actor=ctx.agent))
        if ctx.worktree == entry.name:
            leave(ctx)
    if report.conflict is not None:
        lines.append(f"stopped: {report.conflict}")
        left = [n for n in a.names if n not in {e.name for e, _ in report.merged}]
        lines.append(f"not merged: {', '.join(left)}")
        raise ToolError("\n".join(lines))
    lines.append(f"integration branch: {reg.wt.integration}")
    return "\n".join(lines)


WORKTREE_TOOLS = [worktree_create, worktree_list, worktree_status, worktree_events, worktree_enter, worktree_leave,
                  worktree_run, worktree_keep, worktree_remove, worktree_merge]
