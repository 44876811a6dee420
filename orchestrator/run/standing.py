"""Where each task of a worktree plan stands against its integration branch: one answer for
``team log``, ``team land`` and the check after ``team run``.

The integration branch's first-parent history since the plan's base (git/history.py:
one ``--no-ff`` merge per task, found by its ``Team-Task:`` trailer) is read once and
put next to the store's tasks of the plan::

    merged     its merge is on integration (the last one, if a task was merged twice)
    missing    completed, with a merge recorded (``merge_commit``) that integration no longer
               holds: the branch was reset or rebuilt behind team's back. The next ``team
               run`` runs it again (reconcile.py); ``team land`` refuses until then; ``team
               log`` says so, never "changed nothing"
    unchanged  completed with no merge recorded and none on integration: it changed nothing
    landed     taken into the user's branch by ``team land`` (its branches are gone)
    open       anything else: pending, running, failed, cancelled, or to be redone

plus ``extra``: merges on integration of tasks the plan (as the caller knows it) does
not have. Reads only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..core.models import Status, Task
from ..git.history import History, Step
from ..git.worktrees import Worktrees
from .reconcile import slug


@dataclass(frozen=True)
class Standing:
    """One plan's tasks against its integration branch (module docstring)."""

    wt: Worktrees
    steps: list[Step]  # first-parent commits of integration since the plan's base, oldest first
    merged: dict[str, Step]  # task slug -> its merge

    @classmethod
    def read(cls, wt: Worktrees) -> Standing:
        steps = History(wt).steps()
        return cls(wt, steps, {s.task: s for s in steps if s.is_task_merge and s.task is not None})

    def state(self, task: Task) -> str:
        """``merged``, ``missing``, ``unchanged``, ``landed`` or ``open`` (module docstring)."""
        if task.landed:
            return "landed"
        if slug(task) in self.merged and task.isolation == "worktree":
            return "merged"
        if task.status != Status.completed or task.redo:
            return "open"
        if task.isolation == "worktree" and task.merge_commit:
            return "missing"
        return "unchanged"

    def missing(self, tasks: Iterable[Task]) -> list[Task]:
        return [t for t in tasks if self.state(t) == "missing"]

    def extra(self, tasks: Iterable[Task]) -> list[str]:
        """Tasks merged into integration that are not among ``tasks``."""
        have = {slug(t) for t in tasks}
        return [s for s in self.merged if s not in have]

    def missing_note(self, task: Task) -> str:
        """What ``team log`` says of a missing merge (``team land`` and ``team run`` name the same)."""
        return (f"its merge {(task.merge_commit or '')[:10]} is no longer on {self.wt.integration} (the branch was "
                f"reset or rebuilt): the next `team run` runs it again")


def missing_merges(tasks: Iterable[Task], wt: Worktrees) -> list[str]:
    """``#ID slug (merge SHA)`` of each of ``tasks`` whose recorded merge integration no longer holds."""
    return [f"#{t.id} {slug(t)} (merge {(t.merge_commit or '')[:10]})" for t in Standing.read(wt).missing(tasks)]
