"""Task tools over ``TaskStore``: task_create, task_update, task_list, task_get,
claim_task.

They are thin: the store does the locking, the cycle checks and the
compare-and-set claim; its errors (unknown ref, cycle, claim conflict, bad
status) are ``TeamError``s that the pipeline turns into error observations
the model can act on ("task #3 is already owned by bob"). The acting agent is
``ctx.agent``; every change is logged in the store's event log under that
name. ``task_list`` prints the seed's line format, as ``team task list``
does (``tasks.render.list_line``: ``[>] #2: subject (owner)``,
``(blocked by: [3, 4])`` listing only unfinished blockers).

Who may change what is the role's ``permissions.tasks`` (roles/roles.py),
checked by each tool's ``authorize`` in the pipeline's ``permit`` stage,
before the store is touched:

* ``task_create`` needs ``create``; a task for someone else (``owner`` not
  empty and not the agent) needs ``assign``. The task records
  ``created_by`` (the agent).
* ``task_update`` on a task the agent owns, or created while nobody owns it,
  or is working on (``ctx.task_id``), needs ``update-own``; on any other task ``update-any``. Changing the owner
  away from or to someone other than the agent or nobody needs ``assign``.

A refusal is a tool error that says whose the task is and what to do
instead (ask the lead), so a coder that tries to reassign another's task
learns why at once.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..core.errors import ConflictError
from ..core.jsonutil import dumps
from ..core.models import MAX_TASK_ID, Status
from ..tasks import graph
from ..tasks.render import list_line
from .base import Args, Call, Refused, ToolError, tool

Ref = Annotated[int, Field(ge=1, le=MAX_TASK_ID)] | str
StatusName = Literal["pending", "in_progress", "completed", "failed", "cancelled"]
REF_HELP = "Task id (3 or '#3') or task name."


class CreateArgs(Args):
    subject: str = Field(min_length=1, description="One-line title.")
    description: str = Field("", description="What done means.")
    blocked_by: list[Ref] = Field(default_factory=list, description="Tasks that must complete first.")
    owner: str = Field("", description="Who should do it (empty: unassigned).")


def _refuse(call: Call, what: str) -> Refused:
    return Refused(f"{what} (your role's permissions: {call.ctx.permissions.describe()}); ask the lead with "
                   f"send_message if it should change", "permission")


def _may_create(call: Call) -> None:
    why = call.ctx.permissions.refuse_create(call.ctx.agent, call.args.owner)
    if why is not None:
        raise _refuse(call, why)


def _may_update(call: Call) -> None:
    a, ctx = call.args, call.ctx
    perms = ctx.permissions
    if perms.may("update-any") and perms.may("assign"):
        return
    task = ctx.store.read(ctx.store.resolve(a.task))
    why = perms.refuse_update(ctx.agent, task, a.owner, ctx.task_id)  # the attempt it was given is its own
    if why is not None:
        raise _refuse(call, why)


@tool("task_create", args=CreateArgs, risk="coordinate", budget=2000, authorize=_may_create)
def task_create(call: Call) -> str:
    """Create a task in the shared task graph, optionally blocked by other tasks."""
    a, ctx = call.args, call.ctx
    task = ctx.store.create(a.subject, a.description, a.blocked_by, a.owner, actor=ctx.agent,
                            created_by=ctx.agent)
    deps = f" (blocked by {task.blockedBy})" if task.blockedBy else ""
    return f"created task #{task.id}: {task.subject}{deps}"


class UpdateArgs(Args):
    task: Ref = Field(description=REF_HELP)
    status: StatusName | None = Field(None, description="New status.")
    owner: str | None = Field(None, description="New owner ('' to clear).")
    add_blocked_by: list[Ref] = Field(default_factory=list, description="Dependencies to add.")
    remove_blocked_by: list[Ref] = Field(default_factory=list, description="Dependencies to remove.")
    result: str | None = Field(None, description="What the task produced (when completing it).")


@tool("task_update", args=UpdateArgs, risk="coordinate", budget=2000, authorize=_may_update)
def task_update(call: Call) -> str:
    """Change a task's status, owner, dependencies or result. Mark your task completed
    with a result when it is done."""
    a, ctx = call.args, call.ctx
    extra = {"result": a.result} if a.result is not None else {}
    if a.status is None and a.owner is None and not a.add_blocked_by and not a.remove_blocked_by and not extra:
        raise ToolError("nothing to update: give status, owner, add_blocked_by, remove_blocked_by or result")
    task = ctx.store.update(
        a.task,
        status=a.status,
        owner=a.owner,
        add_blocked_by=a.add_blocked_by,
        remove_blocked_by=a.remove_blocked_by,
        actor=ctx.agent,
        **extra,
    )
    return "updated: " + list_line(task, graph.index(ctx.store.all()))


class ListArgs(Args):
    status: StatusName | None = Field(None, description="Only tasks with this status.")
    owner: str | None = Field(None, description="Only tasks owned by this name.")
    ready: bool = Field(False, description="Only tasks ready to start (pending, every blocker completed).")


@tool("task_list", args=ListArgs, risk="read", budget=12_000)
def task_list(call: Call) -> str:
    """List tasks, one line each: [ ] pending, [>] in progress (owner), [x] completed,
    [!] failed, [-] cancelled, with unfinished blockers. An owner on a pending task means it
    is assigned to them."""
    a, ctx = call.args, call.ctx
    tasks = ctx.store.all()
    by_id = graph.index(tasks)
    want = Status(a.status) if a.status else None
    shown = graph.TaskFilter(status=want, owner=a.owner, ready=a.ready).select(tasks)
    if not shown:
        return "no tasks match" if tasks else "no tasks yet"
    return "\n".join(list_line(t, by_id) for t in shown)


class GetArgs(Args):
    task: Ref = Field(description=REF_HELP)


@tool("task_get", args=GetArgs, risk="read", budget=8000)
def task_get(call: Call) -> str:
    """Show one task in full (JSON): description, status, owner, dependencies, result."""
    task = call.ctx.store.read(call.ctx.store.resolve(call.args.task))
    return dumps(task.to_json())


class ClaimArgs(Args):
    task: Ref = Field(description=REF_HELP)


@tool("claim_task", args=ClaimArgs, risk="coordinate", budget=2000)
def claim_task(call: Call) -> str:
    """Claim a ready task (pending, unowned, all blockers completed) for yourself. Fails
    with the reason if someone else got it first or it is blocked."""
    ctx = call.ctx
    try:
        task = ctx.store.claim(call.args.task, ctx.agent, lease=ctx.claim_lease, actor=ctx.agent)
    except ConflictError as e:
        raise ToolError(f"could not claim: {e}; task_list with ready=true shows claimable tasks") from None
    if ctx.claims is not None:
        ctx.claims.claimed(task)
    return f"claimed task #{task.id}: {task.subject} (attempt {task.attempts}); it is yours, in progress"


TASK_TOOLS = [task_create, task_update, task_list, task_get, claim_task]
