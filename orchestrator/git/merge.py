"""Merges without a checkout (git ≥ 2.38): the integration branch needs no worktree.

One task's merge into its plan's integration branch, as three git commands
that touch no working tree and no index::

    git merge-tree --write-tree --name-only -z OLD TIP   the merged tree, or the conflicted paths
    git commit-tree TREE -p OLD -p TIP -F -              the --no-ff merge commit NEW (message on stdin)
    git update-ref --stdin                               one ref transaction:
        update refs/heads/INTEGRATION NEW OLD              the branch moves only if it is still at OLD
        delete refs/heads/TASK TIP                         and the task's branch goes in the same step

``merge-tree --write-tree`` merges with the ort strategy, as ``git merge``
does, so a clean merge makes the tree ``git merge --no-ff`` made in a
checkout, and a conflict names the same paths ``git diff --diff-filter=U``
listed there (``Conflict.files``). Nothing but objects is written before the
transaction: killed at any instant, the integration branch is at OLD with the
task branch still there, or at NEW with it gone, never between (today's
merge in a checkout could also leave a ``MERGE_HEAD``, a half-written index
or tree, which the next merge repaired). The objects a killed merge wrote are
unreachable and gc drops them. The compare-and-set is the same guard the
plan's flock already gives (merges are serialised under it); it also makes a
merge refuse, rather than overwrite, a branch someone moved by hand meanwhile.

``supported(git)`` answers once whether this git has ``--write-tree``
(2.38); with an older git ``Worktrees`` keeps merging in the integration
worktree, as before, and ``team run`` says so once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .command import Git, GitError

MIN_VERSION = (2, 38)
"""``git merge-tree --write-tree`` appeared in git 2.38."""

_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists")
STALE_LOCKS = 4
"""Tries of a ref transaction that met a lock a killed git left (each try removes one)."""


def version(git: Git) -> tuple[int, ...]:
    """git's version as numbers (``git version 2.39.5`` → (2, 39, 5)); () when it says something else."""
    out = git("version", check=False).stdout.split()
    numbers = re.match(r"\d+(\.\d+)*", out[2]) if len(out) >= 3 else None
    return tuple(int(p) for p in numbers.group(0).split(".")) if numbers else ()


def supported(git: Git) -> bool:
    """Whether this git merges in memory (``merge-tree --write-tree``)."""
    return version(git) >= MIN_VERSION


@dataclass(frozen=True)
class Conflict:
    """The merge does not apply cleanly; nothing was written but unreachable objects."""

    files: list[str]  # the conflicted paths, sorted, each once


class RefMoved(GitError):
    """The integration branch was not at the commit the merge was made on (someone moved it meanwhile)."""


class TreeMerge:
    """Merge commits into a branch with no checkout (see the module docstring).

    ``unlock(path)``: remove a git lock file if no process holds it (a killed git's), True if it did.
    The ref transaction locks the refs it changes and, to delete a branch, ``packed-refs``: a merge
    killed inside it leaves those locks, and every later merge would fail on them ("Unable to create
    '.../packed-refs.lock': File exists"). When git names such a lock and ``unlock`` removes it, the
    transaction is tried again; a lock a live git holds is left to it (git says so)."""

    def __init__(self, git: Git, unlock: Callable[[Path], bool] = lambda path: False):
        self.git = git
        self.unlock = unlock

    def tree(self, ours: str, theirs: str, fd: int | None = None) -> str | Conflict:
        """The tree of merging ``theirs`` into ``ours``, or the conflict."""
        args = ["merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", ours, theirs]
        proc = self.git(*args, check=False, fd=fd)
        fields = proc.stdout.split("\0")
        if proc.returncode == 0 and _SHA.match(fields[0]):
            return fields[0]
        if proc.returncode == 1 and _SHA.match(fields[0]):  # a conflict: the tree, then the paths
            return Conflict(sorted({f for f in fields[1:] if f}))
        raise GitError(args, self.git.cwd, proc.returncode, proc.stderr or proc.stdout)

    def commit(self, tree: str, parents: list[str], message: str, fd: int | None = None) -> str:
        """A commit of ``tree`` with these parents and ``message`` (taken as it is)."""
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self.git(*args, "-F", "-", input=message, fd=fd).stdout.strip()

    def move(self, ref: str, new: str, old: str, drop: tuple[str, str] | None = None, fd: int | None = None) -> None:
        """``ref`` from ``old`` to ``new``, and ``drop`` = (ref, its value) deleted, in one transaction.
        ``RefMoved`` when ``ref`` was not at ``old`` (nothing changed then)."""
        lines = [f"update {ref} {new} {old}"]
        if drop is not None:
            lines.append(f"delete {drop[0]} {drop[1]}")
        for _ in range(STALE_LOCKS):
            proc = self.git("update-ref", "--stdin", input="\n".join(lines) + "\n", check=False, fd=fd)
            lock = _LOCKED.search(proc.stderr) if proc.returncode else None
            if lock is None or not self.unlock(Path(lock.group(1))):
                break
        if proc.returncode:
            cls = RefMoved if "but expected" in proc.stderr or "is at" in proc.stderr else GitError
            raise cls(["update-ref", "--stdin", *lines], self.git.cwd, proc.returncode, proc.stderr)

    def merge(self, ref: str, old: str, tip: str, message: str, drop: str | None = None,
              fd: int | None = None) -> str | Conflict:
        """Merge commit ``tip`` into ``ref`` (at ``old``) as a --no-ff merge with ``message``; the new
        commit, or the conflict (then nothing changed). ``drop``: a branch at ``tip`` deleted with the move."""
        tree = self.tree(old, tip, fd)
        if isinstance(tree, Conflict):
            return tree
        new = self.commit(tree, [old, tip], message, fd)
        self.move(ref, new, old, (drop, tip) if drop else None, fd)
        return new
