"""The integration branch's history: one merge per task, read and rebuilt.

``git log --first-parent team/<plan>/integration`` since the plan's base lists
one *step* per merged task (a ``--no-ff`` merge carrying a ``Team-Task:``
trailer), plus the snapshot commit of ``--include-uncommitted`` if there is
one, and anything a user committed there by hand. ``History`` reads that
(``steps``, ``change`` for ``team diff``) and rewrites it without some tasks
(``rebuild_without``, for ``team run --redo``)::

    base ─ M(a) ─ M(b) ─ M(c) ─ M(d)        redo b; c needs b
    base ─ M(a) ─ M'(d)                     b and c dropped, d's change replayed onto M(a)

Replaying a step applies the change it brought into integration
(``cherry-pick -m 1`` of a merge) onto the new tip, in a scratch worktree
(``_rebuild``), and records it in the same shape: a task commit with the old
task commit's message and a ``--no-ff`` merge of it with the old merge's
message and trailer, so the first-parent history still holds one merge per
task. A replay that conflicts (d edited lines b had changed) drops that task
too, with its dependents: they will run again. The branch moves once, at the
end, by a compare-and-set ``update-ref`` under the plan's lock: killed at any
instant, integration is either the old history or the new one, never half.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import UserError, WorkFailed
from .worktrees import TRAILER, Worktrees


@dataclass(frozen=True)
class Step:
    """One first-parent commit of the integration branch."""

    sha: str
    parents: tuple[str, ...]
    task: str | None  # the Team-Task trailer of a task's merge; None for any other commit
    subject: str

    @property
    def is_task_merge(self) -> bool:
        return self.task is not None and len(self.parents) == 2


@dataclass(frozen=True)
class Change:
    """What one task changed: its merge on integration, or its unmerged branch."""

    task: str
    merged: bool
    old: str  # the commit the change applies to
    new: str  # the commit holding the change
    commits: list[str]  # the task's own commits, oldest first ("sha subject")
    dirty: bool = False  # an unmerged branch with uncommitted changes in its worktree (not shown)


@dataclass
class Rebuilt:
    """What ``rebuild_without`` did."""

    old_tip: str | None
    new_tip: str | None
    dropped: list[str] = field(default_factory=list)  # tasks whose merges were taken out
    replayed: dict[str, str] = field(default_factory=dict)  # task -> its new merge commit
    conflicted: list[str] = field(default_factory=list)  # tasks dropped because their replay conflicted

    @property
    def changed(self) -> bool:
        return self.old_tip != self.new_tip


class History:
    """Read and rebuild the first-parent history of one plan's integration branch."""

    def __init__(self, wt: Worktrees):
        self.wt = wt
        self.git = wt.git

    def since(self) -> str | None:
        """The commit the plan's history starts after: its recorded base, else the merge-base with HEAD."""
        base = self.wt.base()
        if base is not None and self.git.rev(base.commit):
            return base.commit
        if self.git.rev(self.wt.integration) is None:
            return None
        proc = self.git("merge-base", "HEAD", self.wt.integration, check=False)
        return proc.stdout.strip() or None

    def steps(self) -> list[Step]:
        """First-parent commits of integration after its base, oldest first."""
        if self.git.rev(self.wt.integration) is None:
            return []
        since = self.since()
        fmt = f"--format=%H%x1f%P%x1f%s%x1f%(trailers:key={TRAILER},valueonly,separator=%x2C)%x1e"
        args = ["log", "--first-parent", "--reverse", fmt, self.wt.integration]
        if since:
            args.append(f"^{since}")
        out = self.git(*args).stdout
        steps = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            sha, parents, subject, trailer = (record.split("\x1f") + ["", "", ""])[:4]
            ps = tuple(parents.split())
            task = trailer.split(",")[-1].strip() or None
            steps.append(Step(sha, ps, task if len(ps) == 2 else None, subject))
        return steps

    def change(self, task: str) -> Change:
        """The task's own change: what its merge brought into integration, else its branch's work."""
        merge = self.wt.merges().get(task)
        if merge is not None:
            first, second = self.git("rev-parse", f"{merge}^1", f"{merge}^2").stdout.split()
            return Change(task, True, first, merge, self.commits(first, second))
        kept = self.wt.kept(task)
        if kept is None:
            raise UserError(f"task '{task}' of plan {self.wt.plan} has no change to show: it is not merged into "
                            f"{self.wt.integration} and has no branch (it changed nothing, or has not run yet)")
        fork = self.wt.fork(task) or self.git("merge-base", self.wt.integration, kept.branch).stdout.strip()
        return Change(task, False, fork, kept.tip, self.commits(fork, kept.tip), kept.dirty)

    def diff(self, change: Change, *options: str) -> str:
        """``git diff`` of the change (``options``: ``--stat``, ``--color=always``...)."""
        return self.git("diff", *options, change.old, change.new).stdout

    def files_changed(self, change: Change) -> int:
        return len(self.git("diff", "--name-only", change.old, change.new).stdout.split("\n")) - 1

    def commits(self, old: str, new: str) -> list[str]:
        out = self.git("log", "--reverse", "--format=%h %s", f"{old}..{new}").stdout
        return [line for line in out.splitlines() if line]

    # ---------------------------------------------------------------- rebuild
    def rebuild_without(self, drop: Iterable[str],
                        dependents: Callable[[str], Iterable[str]] = lambda t: ()) -> Rebuilt:
        """Take the merges of ``drop`` out of integration (see the module docstring).

        ``dependents(task)``: every task downstream of ``task``; when a replay
        conflicts, that task and those are dropped as well.
        """
        drop = set(drop)
        wt = self.wt
        with wt.locked() as fd:
            wt.setup_integration(fd)
            old = self.git.rev(wt.integration)
            steps = self.steps()
            first = next((i for i, s in enumerate(steps) if s.is_task_merge and s.task in drop), None)
            done = Rebuilt(old, old)
            if first is None or old is None:
                return done
            new = steps[first].parents[0]
            work = wt.scratch("rebuild", new, fd)
            try:
                for s in steps[first:]:
                    if s.is_task_merge and s.task in drop:
                        done.dropped.append(s.task)
                        continue
                    replayed = self._replay(s, new, work, fd)
                    if replayed is None:  # only task merges come back None: they run again
                        assert s.task is not None
                        done.conflicted.append(s.task)
                        done.dropped.append(s.task)
                        drop |= {s.task, *dependents(s.task)}
                        continue
                    new = replayed
                    if s.task is not None and s.is_task_merge:
                        done.replayed[s.task] = new
                self.git("update-ref", f"refs/heads/{wt.integration}", new, old, fd=fd)
            finally:
                wt.drop_worktree(work, fd)
                self.git("worktree", "prune", fd=fd)
            wt.follow_integration(fd)
            done.new_tip = new
            return done

    def _replay(self, s: Step, onto: str, work: Path, fd: int) -> str | None:
        """Apply step ``s``'s change on ``onto`` in the scratch worktree; the new commit, or None
        when a task merge conflicts (any other commit that conflicts is an error)."""
        pick = ["cherry-pick", "--no-commit", *(["-m", "1"] if len(s.parents) == 2 else []), s.sha]
        proc = self.git(*pick, cwd=work, check=False, fd=fd)
        if proc.returncode:
            self.git("reset", "-q", "--hard", onto, cwd=work, fd=fd)
            self.git("cherry-pick", "--quit", cwd=work, check=False, fd=fd)
            if s.is_task_merge:
                return None
            raise WorkFailed(f"cannot rebuild {self.wt.integration}: commit {s.sha[:10]} ({s.subject}) is not a "
                             f"task's merge and does not apply without the tasks taken out; start over with "
                             f"`team run PLAN --fresh`")
        tree = self.git("write-tree", cwd=work, fd=fd).stdout.strip()
        message = self.git("log", "-1", "--format=%B", s.sha).stdout
        if s.is_task_merge:
            task_message = self.git("log", "-1", "--format=%B", s.parents[1]).stdout
            commit = self._commit_tree(tree, [onto], task_message, fd)
            new = self._commit_tree(tree, [onto, commit], message, fd)
        else:
            new = self._commit_tree(tree, [onto], message, fd)
        self.git("reset", "-q", "--hard", new, cwd=work, fd=fd)
        return new

    def _commit_tree(self, tree: str, parents: list[str], message: str, fd: int) -> str:
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self.git(*args, "-F", "-", input=message, fd=fd).stdout.strip()
