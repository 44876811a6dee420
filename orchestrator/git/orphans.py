"""Orphans of worktree isolation, for ``team doctor``: find them (``find_orphans``), remove them (``clean_up``).

An orphan is what a plan's worktree directory holds that no live task will
come back for (``live``: the task slugs still expected to run or merge)::

    task               a task branch and/or worktree not in ``live`` (with its unmerged commit count)
    stray-dir          a directory under .team/worktrees/<plan>/ that git does not know as a worktree
    stale-entry        a git worktree entry whose directory is gone (prunable)
    merge-in-progress  MERGE_HEAD left in the integration worktree by a killed merge
    stale-lock         a *.lock file left there by a killed git

The last two are only reported when the plan's flock can be taken at once:
if a merge holds it, its MERGE_HEAD and locks are live, not leftovers.
``clean_up`` removes every orphan under the lock (unmerged orphan branches
included), repairing the integration worktree first; it works through
``Worktrees``' own lock and removal (``locked``, ``remove_task``...), so a
removal killed halfway finishes on the next call like any other.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from ..core.fsutil import LockTimeout
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
            detail.append(f"branch {wt.branch(task)} ({n} unmerged commits)")
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


def clean_up(wt: Worktrees, live: Iterable[str] = (), timeout: float = 30) -> list[str]:
    """Remove what ``find_orphans(wt, live)`` reports (unmerged orphan branches included); what was done."""
    live, done = set(live), []
    with wt.locked(timeout=timeout) as fd:
        done += wt.setup_integration(fd) if wt.git.rev(wt.integration) else []
        for o in find_orphans(wt, live):
            if o.kind == "task":
                wt.remove_task(o.name, fd)
                done.append(f"removed task {o.name}: {o.detail}")
            elif o.kind == "stray-dir" and o.name != "_integration":
                shutil.rmtree(wt.base_dir / o.name)
                done.append(f"removed stray directory {wt.base_dir / o.name}")
        for p, info in wt.git.worktrees().items():
            if "prunable" in info or not p.exists():
                wt.git("worktree", "remove", "-f", "-f", str(p), fd=fd)
                done.append(f"removed the git worktree entry for missing {p}")
    return done
