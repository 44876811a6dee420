"""Uncommitted work in a plan's task worktrees: found before anything deletes it, and how to save it.

A task's worktree is deleted by ``team run --fresh`` (every one of the plan),
``--redo`` and ``team task retry`` (the task's: reconcile.py) and ``team land``
(every one, once the result is in your branch). What a person did there and did
not commit has no other copy: edits, or a merge of the integration branch with
its conflicts resolved or not (``Git.dirty`` counts a merge, cherry-pick, revert
or rebase in progress even when its result equals ``HEAD``). So these commands
refuse before they change anything, naming each such worktree and the commands
that save the work: commit it on the task's branch (``--fresh`` then prints the
``git branch`` command that brings the branch back; a later run merges it), stash
it (the stash is the repository's, it outlives the worktree; not while a merge
has unmerged paths), or copy the folder away.

Which worktrees count:

    team run --fresh, --redo   a branch with commits of its own and uncommitted work: work kept for a
                               later merge, and a person's changes on top of it. A branch without
                               commits of its own holds what a failed or cut-short attempt left; the
                               task's next attempt starts afresh (isolation.py), and --fresh drops it
    team land                  any task worktree with uncommitted work: a land needs every task
                               completed, and a completed task's worktree is gone after its merge,
                               so whatever is uncommitted there is a person's

And which task branches the next run comes back for (``comes_back``): those of
every task not completed, cancelled ones too (a run retries them, merging what
their branches keep), except a task cancelled because the plan file no longer
has it. ``team doctor`` reports only the others as orphans.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UserError
from ..core.models import Status, Task
from ..git.worktrees import Worktrees

REMOVED = "removed from the plan"
"""Why materialise cancels a task the plan file no longer has (its ``error``)."""


def comes_back(task: Task) -> bool:
    """Whether the next run of the task's plan comes back for its branch (module docstring)."""
    return task.status != Status.completed and not (task.status == Status.cancelled and task.error == REMOVED)


@dataclass(frozen=True)
class Unsaved:
    """A task worktree with uncommitted work."""

    task: str
    branch: str
    path: Path
    doing: str | None  # a merge, cherry-pick, revert or rebase in progress there
    files: list[str]  # what `git status` lists there

    def what(self) -> str:
        shown = ", ".join(self.files[:5]) + (f" and {len(self.files) - 5} more" if len(self.files) > 5 else "")
        parts = [f"a {self.doing} in progress"] if self.doing else []
        if shown:
            parts.append(f"changes in {shown}")
        return " with ".join(parts) if self.doing else parts[0] if parts else "uncommitted changes"

    def save(self) -> str:
        """The commands that save the work, in words."""
        where = f"cd {self.path} && "
        if self.doing == "merge":
            commit = f"`{where}git add -A && git commit --no-edit`"
        else:
            commit = f"`{where}git add -A && git commit -m 'my changes'`"
        stash = "" if self.doing else f", stash it (`git -C {self.path} stash push -u`; `git stash list` shows it)"
        return (f"commit it on its branch {self.branch} ({commit}){stash}, or copy the folder away "
                f"(`cp -a {self.path} SOMEWHERE`)")


def unsaved(wt: Worktrees, tasks: Iterable[str] | None = None, *, kept_only: bool = True) -> list[Unsaved]:
    """The worktrees of ``tasks`` (default: every task branch of the plan) with uncommitted work;
    ``kept_only``: only those whose branch has commits of its own (module docstring)."""
    found = []
    for task in sorted(wt.task_branches() if tasks is None else set(tasks)):
        kept = wt.kept(task)
        if kept is None or not kept.dirty or (kept_only and not kept.commits):
            continue
        path = wt.path(task)
        status = wt.git("status", "--porcelain", "-z", "--untracked-files=all", cwd=path).stdout.split("\0")
        files = [e[3:] for e in status if len(e) > 3]
        found.append(Unsaved(task, kept.branch, path, wt.git.in_progress(path), files))
    return found


def refuse_unsaved(wt: Worktrees, doing: str, again: str, tasks: Iterable[str] | None = None, *,
                   kept_only: bool = True) -> None:
    """Raise ``UserError`` naming every worktree ``unsaved`` finds: ``doing`` would delete them,
    ``again`` is the command to run once the work is saved."""
    found = unsaved(wt, tasks, kept_only=kept_only)
    if not found:
        return
    each = "; ".join(f"task {u.task}'s worktree {u.path} has {u.what()}: {u.save()}" for u in found)
    raise UserError(f"{doing} would delete uncommitted work: {each}; then `{again}` again. Nothing was changed")
