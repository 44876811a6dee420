"""``team log PLAN`` and ``team diff TASK``: what a plan's tasks did, in git terms.

``plan_log`` puts the task store next to the integration branch's history
(git/history.py): first the steps in merge order (each task's merge commit,
its own commits, the files it changed, its status), then every task that is
not merged, with why: a kept branch and the error that kept it, "changed
nothing" for a completed task without a merge, "landed" once ``team land``
took the result, and for a completed task whose recorded merge integration no
longer holds, that it is missing (run/standing.py: the same rule ``team land``
and ``team run`` apply). ``task_change`` is one task's own change for ``team diff``.
Data only; the CLI renders it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import UserError
from ..core.models import Status, Task
from ..core.text import plural
from ..git.history import Change, History
from ..git.worktrees import Worktrees
from ..run.standing import Standing
from ..tasks.store import TaskStore


def _slug(task: Task) -> str:
    return task.plan_task or task.name or str(task.id)


@dataclass
class Entry:
    """One task of the plan in the log."""

    task: str
    id: int | None
    status: str
    merge: str | None = None  # its merge commit on integration
    commits: list[str] = field(default_factory=list)  # its own commits, "sha subject"
    files: int = 0  # files its merge changed
    note: str = ""  # why it is not merged / landed / kept


@dataclass
class PlanLog:
    plan: str
    branch: str
    base: str | None  # the commit the plan started from
    merged: list[Entry]  # in merge order
    other: list[Entry]  # not merged
    steps: list[str] = field(default_factory=list)  # first-parent commits that are not a task's merge

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def plan_log(root: Path, plan: str) -> PlanLog:
    store = TaskStore(root)
    tasks = [t for t in store.all() if t.plan == plan] if store.exists() else []
    wt = Worktrees(root, plan)
    if not tasks and not wt.has_integration():
        raise UserError(f"no plan named {plan!r} in {root}: `team run PLAN.yaml` creates it "
                        f"(plans here: {', '.join(sorted({t.plan for t in store.all() if t.plan})) or 'none'})")
    by_slug = {_slug(t): t for t in tasks}
    history = History(wt)
    standing = Standing.read(wt)  # what `team land` and `team run` go by too
    merged, steps = [], []
    for s in standing.steps:
        if not (s.is_task_merge and s.task):
            steps.append(f"{s.sha[:10]} {s.subject}")
            continue
        t = by_slug.get(s.task)
        change = Change(s.task, True, s.parents[0], s.sha, history.commits(s.parents[0], s.parents[1]))
        merged.append(Entry(s.task, t.id if t else None, t.status.value if t else "not in the store", s.sha,
                            change.commits, history.files_changed(change)))
    seen = {e.task for e in merged}
    other = []
    for t in tasks:
        if _slug(t) in seen:
            continue
        other.append(Entry(_slug(t), t.id, t.status.value, note=_why(t, wt, standing)))
    base = wt.base()
    return PlanLog(plan, wt.integration, base.commit if base else history.since(), merged, other, steps)


def _why(t: Task, wt: Worktrees, standing: Standing) -> str:
    if t.landed:
        return f"landed in {t.landed[:10]}"
    if standing.state(t) == "missing":
        return standing.missing_note(t)
    kept = wt.kept(_slug(t)) if t.isolation == "worktree" else None
    if kept is not None and (kept.commits or kept.failed or kept.dirty):
        what = (f"{plural(kept.unmerged, 'commit')} not merged" if not kept.failed else
                f"{plural(kept.failed, 'commit')} of a failed attempt, not merged")
        what += ", uncommitted changes" if kept.dirty else ""
        first = (t.error or "").splitlines()[0] if t.error else ""
        return f"branch {kept.branch}: {what}" + (f" ({first})" if first else "")
    if t.status == Status.completed:
        return "changed nothing" if t.isolation == "worktree" else "no worktree isolation"
    if t.error:
        return t.error.splitlines()[0]
    return ""


def task_change(root: Path, ref: str) -> tuple[Task, History, Change]:
    """The task ``ref`` names, and its own change (``team diff``)."""
    store = TaskStore(root)
    task = store.get(ref)
    if task.plan is None or task.isolation != "worktree":
        raise UserError(f"task #{task.id} is not a task of a plan with isolation: worktree: `team diff` shows the "
                        f"change a task made on its own branch, and this one ran in the shared checkout")
    if task.landed:
        raise UserError(f"task #{task.id} {_slug(task)} was landed into your branch in {task.landed[:10]}: "
                        f"`git show {task.landed[:10]}` shows it")
    history = History(Worktrees(root, task.plan))
    return task, history, history.change(_slug(task))
