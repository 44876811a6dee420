"""Orphans of worktree isolation, for ``team doctor``: found (``find_orphans``), never removed here.

An orphan is what a plan's worktree directory holds that no live task will
come back for (``live``: the task slugs still expected to run or merge)::

    task               a task branch and/or worktree not in ``live`` (with its unmerged commit count)
    stray-dir          a directory under .team/worktrees/<plan>/ that git does not know as a worktree
    stale-entry        a git worktree entry whose directory is gone (prunable)
    merge-in-progress  MERGE_HEAD left in the integration worktree by a killed merge
    stale-lock         a *.lock file left there by a killed git

The last two are only reported when the plan's flock can be taken at once:
if a merge holds it, its MERGE_HEAD and locks are live, not leftovers.

Nothing here removes them. A task branch no live task names may still hold
work (its own commits, a worktree with uncommitted changes: run/keptwork.py
keeps both from ``--fresh``, ``--redo`` and ``team land``), so only a person
removes one, after looking (``team doctor`` prints how); the merge's
leftovers are repaired by the next merge (``Worktrees.setup_integration``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..core.fsutil import LockTimeout
from ..core.text import plural
from .worktrees import Worktrees


@dataclass(frozen=True)
class Orphan:
    kind: str  # task | stray-dir | stale-entry | merge-in-progress | stale-lock
    name: str
    detail: str


def find_orphans(wt: Worktrees, live: Iterable[str] = ()) -> list[Orphan]:
    """Leftovers: task branches/worktrees not in ``live``, stray dirs, stale entries,
    and (when no merge holds the lock) a half-done merge in the integration worktree."""
    live, out = set(live), []
    wts = wt.git.worktrees()
    for task in sorted(wt.task_names(wts) - live):
        detail = []
        if wt.git.rev(wt.branch(task)) is not None:
            n = int(wt.git("rev-list", "--count", f"{wt.integration}..{wt.branch(task)}").stdout)
            detail.append(f"branch {wt.branch(task)} ({plural(n, 'unmerged commit')})")
        if wt.path(task).resolve() in wts:
            detail.append(f"worktree {wt.path(task)}")
        out.append(Orphan("task", task, ", ".join(detail)))
    if wt.base_dir.is_dir():
        for p in sorted(wt.base_dir.iterdir()):
            if p.is_dir() and p.resolve() not in wts:
                out.append(Orphan("stray-dir", p.name, f"{p} is not a registered worktree"))
    for p, info in wts.items():
        if "prunable" in info or not p.exists():
            out.append(Orphan("stale-entry", p.name, f"git worktree entry for missing {p}"))
    if not wt.base_dir.is_dir():
        return out
    try:
        with wt.locked(timeout=0):
            gitdir = wt.git.gitdir(wt.integration_dir)
            if gitdir and (gitdir / "MERGE_HEAD").exists():
                out.append(Orphan("merge-in-progress", "_integration",
                                  f"MERGE_HEAD left in {wt.integration_dir}"))
            for lock in sorted(gitdir.glob("*.lock")) if gitdir else ():
                out.append(Orphan("stale-lock", lock.name, f"{lock} left by a killed git"))
    except LockTimeout:
        pass  # a merge is running right now: its MERGE_HEAD and locks are live
    return out
