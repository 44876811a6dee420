"""``team land PLAN``: the plan's finished result into the user's branch, then its branches go.

Under the lead lock (no run of this root goes on meanwhile):

1. Find the plan's tasks in the store (by plan name, or by the plan file's
   name and task ids). Refuse unless every one is completed (a failed,
   pending or cancelled task would be left out: exit 0 with less than the
   plan is never what the user meant) and the integration branch holds
   every merge the store records. Refuse while a task worktree holds
   uncommitted work (step 3 deletes the worktrees; keptwork.py).
2. ``git.land.Land``: build the commits off to the side, check the user's
   checkout, record the intent, write the files, move the branch.
3. Record in each task the commit that landed it (``landed``), then delete
   the plan's branches, worktrees and the intent (``Land.finish``).

A ``team land`` killed at any instant is finished by the next one (the
intent says how far it got); ``team run`` refuses to start meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UserError
from ..core.models import Status, Task
from ..core.text import plural
from ..git.land import Land, Landing
from ..git.worktrees import Worktrees
from ..tasks.store import TaskStore
from ..team.lead import LeadLock
from .keptwork import refuse_unsaved
from .reconcile import missing_merges, slug

REMOVED = "removed from the plan"


@dataclass(frozen=True)
class Landed:
    """What ``land_plan`` did."""

    plan: str
    landing: Landing | None  # None: it had been landed before
    tasks: list[Task]
    already: str | None = None  # the commit of an earlier land


def land_plan(root: Path, plan: str, *, mode: str = "squash", task_ids: list[str] | None = None,
              title: str | None = None) -> Landed:
    """Land ``plan`` (see the module docstring); ``task_ids``: the plan file's tasks, when given."""
    with LeadLock(root, plan=plan, command="land"):
        store = TaskStore(root)
        tasks = [t for t in store.all() if t.plan == plan] if store.exists() else []
        if task_ids is not None:
            tasks = [t for t in tasks if t.plan_task in set(task_ids)]
        else:
            tasks = [t for t in tasks if not (t.status == Status.cancelled and t.error == REMOVED)]
        if not tasks:
            raise UserError(f"no task of plan {plan!r} in {root}: run it first (`team run PLAN.yaml`), or name "
                            f"the plan as `team run` did")
        wt = Worktrees(root, plan)
        land = Land(wt)
        if land.pending() is None:
            if all(t.landed for t in tasks):
                return Landed(plan, None, tasks, already=tasks[0].landed)
            _refuse_unfinished(tasks, wt, store, task_ids)
        refuse_unsaved(wt, "team land", f"team land {plan}", kept_only=False)  # finish() deletes the worktrees
        subjects = {slug(t): t.subject for t in tasks}
        landing = land.land(mode, subjects, title or f"{plan}: land {plural(len(tasks), 'task')} of plan {plan}")
        for t in tasks:
            if not t.landed:
                store.update(t.id, actor="cli", landed=landing.intent.tasks.get(slug(t), landing.intent.new),
                             branch=None, worktree=None)
        land.finish()
        return Landed(plan, landing, [store.read(t.id) for t in tasks])


def _refuse_unfinished(tasks: list[Task], wt: Worktrees, store: TaskStore, task_ids: list[str] | None) -> None:
    left = [t for t in tasks if t.status != Status.completed or t.redo]
    if left:
        shown = ", ".join(f"#{t.id} {slug(t)} ({t.status.value}{', to redo' if t.redo else ''})" for t in left[:10])
        more = f" and {len(left) - 10} more" if len(left) > 10 else ""
        raise UserError(f"plan {wt.plan} is not finished: {shown}{more}; landing now would leave them out. Finish "
                        f"it (`team run PLAN.yaml`), or take those tasks out of the plan file, then land again")
    if task_ids is not None and len(tasks) < len(task_ids):
        found = {t.plan_task for t in tasks}
        raise UserError(f"plan {wt.plan} has tasks that never ran: {', '.join(i for i in task_ids if i not in found)}; "
                        f"run it first (`team run PLAN.yaml`)")
    extra = sorted(set(wt.merges()) - {slug(t) for t in tasks})
    if extra:
        raise UserError(f"{wt.integration} holds the merges of {', '.join(extra)}, which plan {wt.plan} no longer "
                        f"has: landing would bring them in. Put them back in the plan, or start over with "
                        f"`team run PLAN.yaml --fresh`")
    missing = missing_merges(store, [t.id for t in tasks], wt)
    if missing:
        raise UserError(f"{wt.integration} lacks the merges of {', '.join(missing)}: run the plan again "
                        f"(`team run PLAN.yaml`) to redo them, then land")
