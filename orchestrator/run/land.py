"""``team land PLAN``: the plan's finished result into the user's branch, then its branches go.

Under the lead lock (no run of this root goes on meanwhile):

1. Find the plan's tasks in the store: the task ids of the plan file as it
   is now. ``team land NAME`` is the same as ``team land FILE`` with the
   file the last ``team run`` of the plan ran from (``remember_plan_file``,
   ``.team/plans/<plan>.json``), so both forms refuse the same things: a
   task not completed (a failed, pending or cancelled task would be left
   out: exit 0 with less than the plan is never what the user meant), a task
   that never ran, a merge on integration of a task the file no longer has,
   a merge the store records that integration lacks (standing.py, what
   ``team log`` shows too). Refuse while a task worktree holds
   uncommitted work (step 3 deletes the worktrees; keptwork.py).
2. ``git.land.Land``: build the commits off to the side, check the user's
   checkout, record the intent, write the files, move the branch.
3. Record in each task the commit that landed it (``landed``), then delete
   the plan's branches, worktrees and the intent (``Land.finish``).

A ``team land`` killed at any instant is finished by the next one (the
intent says how far it got); ``team run`` refuses to start meanwhile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UserError
from ..core.fsutil import atomic_write
from ..core.models import Status, Task
from ..core.paths import team_dir
from ..core.text import plural
from ..git.land import Land, Landing
from ..git.worktrees import Worktrees
from ..tasks.store import TaskStore
from ..team.lead import LeadLock
from .keptwork import refuse_unsaved
from .reconcile import slug
from .standing import Standing


@dataclass(frozen=True)
class Landed:
    """What ``land_plan`` did."""

    plan: str
    landing: Landing | None  # None: it had been landed before
    tasks: list[Task]
    already: str | None = None  # the commit of an earlier land


def land_plan(root: Path, plan: str, *, task_ids: list[str], mode: str = "squash", title: str | None = None,
              plan_file: str = "PLAN.yaml") -> Landed:
    """Land ``plan`` (see the module docstring): ``task_ids`` are the plan file's tasks, as it is now
    (``plan_file``, for messages; the name form finds it with ``recorded_plan_file``)."""
    with LeadLock(root, plan=plan, command="land"):
        store = TaskStore(root)
        tasks = [t for t in store.all() if t.plan == plan and t.plan_task in set(task_ids)] if store.exists() else []
        if not tasks:
            raise UserError(f"no task of plan {plan!r} in {root}: run it first (`team run {plan_file}`)")
        wt = Worktrees(root, plan)
        land = Land(wt)
        if land.pending() is None:
            if all(t.landed for t in tasks):
                return Landed(plan, None, tasks, already=tasks[0].landed)
            _refuse_unfinished(tasks, wt, task_ids, plan_file)
        refuse_unsaved(wt, "team land", f"team land {plan_file}", kept_only=False)  # finish() deletes the worktrees
        subjects = {slug(t): t.subject for t in tasks}
        landing = land.land(mode, subjects, title or f"{plan}: land {plural(len(tasks), 'task')} of plan {plan}")
        for t in tasks:
            if not t.landed:
                store.update(t.id, actor="cli", landed=landing.intent.tasks.get(slug(t), landing.intent.new),
                             branch=None, worktree=None)
        land.finish()
        return Landed(plan, landing, [store.read(t.id) for t in tasks])


def _refuse_unfinished(tasks: list[Task], wt: Worktrees, task_ids: list[str], plan_file: str) -> None:
    """The one rule of what a land may take: every task of the plan file completed, and the integration
    branch holding exactly their merges (standing.py: what `team log` shows)."""
    rerun = f"team run {plan_file}"
    left = [t for t in tasks if t.status != Status.completed or t.redo]
    if left:
        shown = ", ".join(f"#{t.id} {slug(t)} ({t.status.value}{', to redo' if t.redo else ''})" for t in left[:10])
        more = f" and {len(left) - 10} more" if len(left) > 10 else ""
        raise UserError(f"plan {wt.plan} is not finished: {shown}{more}; landing now would leave them out. Finish "
                        f"it (`{rerun}`), or take those tasks out of the plan file, then land again")
    if len(tasks) < len(task_ids):
        found = {t.plan_task for t in tasks}
        raise UserError(f"plan {wt.plan} has tasks that never ran: {', '.join(i for i in task_ids if i not in found)}; "
                        f"run it first (`{rerun}`)")
    standing = Standing.read(wt)
    extra = sorted(standing.extra(tasks))
    if extra:
        raise UserError(f"{wt.integration} holds the merges of {', '.join(extra)}, which plan {wt.plan} no longer "
                        f"has: landing would bring them in. Put them back in the plan, or start over with "
                        f"`{rerun} --fresh`")
    missing = standing.missing(tasks)
    if missing:
        shown = ", ".join(f"#{t.id} {slug(t)} (merge {(t.merge_commit or '')[:10]})" for t in missing)
        raise UserError(f"{wt.integration} lacks the merges of {shown}: run the plan again (`{rerun}`) to redo "
                        f"them, then land")


def _record(root: Path, plan: str) -> Path:
    return team_dir(root) / "plans" / f"{plan}.json"


def remember_plan_file(root: Path, plan: str, path: Path) -> None:
    """Record the plan file ``team run`` ran ``plan`` from (relative to ``root`` when inside it), for
    ``team land NAME``."""
    full = path.absolute()
    try:
        shown = str(full.relative_to(root.absolute()))
    except ValueError:
        shown = str(full)
    record = _record(root, plan)
    if record.exists() and _read(record) == shown:
        return
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(record, json.dumps({"file": shown}) + "\n")


def _read(record: Path) -> str | None:
    try:
        file = json.loads(record.read_text()).get("file")
    except (FileNotFoundError, ValueError, AttributeError):
        return None
    return file if isinstance(file, str) else None


def recorded_plan_file(root: Path, plan: str) -> Path:
    """The plan file the last ``team run`` of ``plan`` ran from, as it is now: ``team land NAME`` lands
    what that file says, so the name refuses what the file would (a task taken out since the run)."""
    file = _read(_record(root, plan))
    if file is None:
        raise UserError(f"plan {plan!r} has no plan file on record in {root} (`team run` records it): land it with "
                        f"its plan file, `team land PATH/TO/PLAN.yaml`")
    path = root / file
    if not path.is_file():
        raise UserError(f"plan {plan!r} ran from {file}, which is no longer there: land it with its plan file as it "
                        f"is now, `team land PATH/TO/PLAN.yaml`")
    return path
