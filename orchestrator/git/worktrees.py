"""Per-task git worktrees and serialised merge-back (``isolation: worktree``).

Layout for a user repository at ``<root>`` and a plan ``<plan>``::

    team/<plan>/integration               branch: the plan's result, forked from HEAD
    <root>/.team/worktrees/<plan>/_integration   its worktree, only with a git older than 2.38
    team/<plan>/<task>                    branch of one task, forked from integration
    <root>/.team/worktrees/<plan>/<task>  its worktree, where the task runs
    <root>/.team/worktrees/<plan>/.lock   flock serialising prepare/merge/cleanup

The user's working tree, index and current branch are never touched: the
integration branch is made with ``git branch``, never checked out there, and
``.tasks/`` and ``.team/`` go to ``.git/info/exclude`` so ``git status`` stays
clean. Every git call goes through ``gitcmd.Git`` (no hooks, no signing, a
fallback identity through the environment, never through git config).

The scheduler calls, around each task::

    path = wt.prepare(slug)       # after the task's dependencies were merged
    ... run the task with cwd=path ...
    wt.commit(slug, "subject")    # git add -A; no-op when clean
    wt.merge(slug)                # -> MergeResult, or raises MergeConflict

``merge`` merges under the lock, so merges land one at a time in completion
order: in memory with git ≥ 2.38 (merge.py: ``merge-tree --write-tree``,
``commit-tree``, then one ref transaction moving the branch by compare-and-set
and deleting the task's branch; ``in_memory``, asked of git once per object),
else ``git merge --no-ff`` in the integration worktree. Each merge commit
carries a ``Team-Task: <slug>`` trailer. On success the task's worktree *and
branch* are deleted (the merge commit's second parent keeps the history), so a
surviving ``team/<plan>/<task>`` branch always means work not merged yet. On a
conflict nothing is merged (in a checkout, the merge is aborted), the branch
and worktree are kept and ``MergeConflict`` lists the files. In memory, the
integration branch must not be checked out anywhere (the refs would move under
that checkout): refused once per object, as git itself refused it while the
integration worktree held the branch.

Crash safety. Git children started under the lock inherit the lock's file
descriptor, so if the lead is SIGKILLed mid-merge the orphaned ``git merge``
keeps the lock until it exits and nobody races it. A merge in memory writes only
objects before its ref transaction, so it leaves nothing to repair but, when
killed after the transaction, the task's worktree without its branch (removed
by the next ``merge`` or ``drop_merged``). Whoever takes the lock next
repairs what a dead holder left: stale ``*.lock`` files of the integration
worktree and of the integration branch (``reset`` also those of the task branches), a ``MERGE_HEAD`` (``git merge --abort``), a half-written tree
(``reset --hard`` + ``clean``). A task branch that is already an ancestor of
integration is "up-to-date" (never merged twice); a deleted branch whose merge
commit is found by its trailer is "up-to-date" too. ``prepare`` likewise
reuses a healthy worktree, and rebuilds a half-created one (``git worktree
add`` killed mid-checkout leaves it ``locked initializing``) or a stray dir;
a ``.removing-<task>`` marker makes an interrupted removal finish next time.
Leftovers nobody will come back for are found by orphans.py (``team doctor``), through this
class's public methods; only a person removes them.

Kept work. When a task branch is made, its fork point is recorded
(``.fork-<task>``); the commits after it are the task's own (``kept``). Such
commits are never deleted unless the caller says so: ``prepare(fresh=True)``
refuses without ``discard=True``; ``discard`` is the explicit way
(``--redo``). Counting from the fork point, not from what integration lacks,
matters after a rebuild (history.py): history taken out of integration is
not the task's work. One exception: the commits a *failed* attempt made
itself (a command that runs ``git commit``, then exits non-zero) are not
finished work. ``failed_attempt`` records the branch tip when an attempt
failed (``.failed-<task>``), before the failure is recorded anywhere else;
while the branch still ends there, ``kept`` counts those commits as
``failed``, not ``commits``, and the next attempt starts afresh without
them. A commit made on top (a person fixing the work by hand) makes the
branch finished work again, like a conflict's resolution.

The plan's base. ``ensure_integration`` records where the integration branch
started (``base.json``: the user's commit and branch) and, asked to
(``--include-uncommitted``), forks it from a snapshot commit of the user's
working tree made through a scratch index; ``uncommitted`` lists what a
plain start leaves out. history.py and land.py read the base.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..core import procs
from ..core.errors import InvalidName, UserError, WorkFailed
from ..core.fsutil import TMP_PREFIX, LockTimeout, atomic_write, file_lock
from ..core.text import plural
from . import merge as tree_merge
from . import relink
from .command import Git, GitError
from .refs import Refs, Unreadable

SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
INTEGRATION = "integration"
TRAILER = "Team-Task"
EXCLUDES = (".tasks/", ".team/")


class MergeConflict(WorkFailed):
    """A task's branch conflicts with the integration branch; nothing was merged."""

    def __init__(self, task: str, branch: str, integration: str, files: list[str], worktree: Path):
        super().__init__(
            f"merge conflict: task '{task}' ({branch}) conflicts with {integration} in "
            f"{', '.join(files)}; nothing was merged, the branch and its worktree {worktree} are kept.\n"
            f"to resolve it: cd {worktree} && git merge {integration}; fix {', '.join(files)}; "
            f"git add -A && git commit --no-edit; the next run merges your resolution without running "
            f"the task again")
        self.task, self.branch, self.files, self.worktree = task, branch, files, worktree


@dataclass(frozen=True)
class MergeResult:
    task: str
    branch: str
    status: str  # "merged" | "up-to-date" (already merged, or nothing to merge)
    commit: str | None = None  # the new merge commit
    recovered: tuple[str, ...] = ()  # repairs done first (a dead merger's leftovers)


@dataclass(frozen=True)
class Kept:
    """A task branch that exists, and what it holds that the integration branch does not."""

    task: str
    branch: str
    tip: str
    commits: int  # the branch's own commits (since its fork point): finished or hand-made work
    dirty: bool  # uncommitted work in its worktree (an attempt cut short, a hand edit, a merge under way)
    unmerged: int = 0  # of ``commits``, those integration lacks: the task's work and a resolution made on
    # the branch, not the integration commits such a resolution merged in (what messages count)
    failed: int = 0  # own commits a failed attempt made, nothing committed on top: not work to merge (then
    # ``commits`` is 0); the task's next attempt, ``--redo`` and ``--fresh`` drop them, saying so


@dataclass(frozen=True)
class Base:
    """Where the integration branch started (``base.json`` in the plan's worktree folder)."""

    commit: str  # the user's HEAD when the plan started
    branch: str | None = None  # the user's branch then (refs/heads/...), None when detached
    snapshot: str | None = None  # a commit on ``commit`` holding the uncommitted changes (--include-uncommitted)

    @property
    def fork(self) -> str:
        """The commit the integration branch was forked from."""
        return self.snapshot or self.commit


@dataclass(frozen=True)
class Start:
    """What ``ensure_integration`` found or made."""

    created: bool  # the integration branch was made now (the plan's base was fixed now)
    base: Base | None
    uncommitted: list[str] = field(default_factory=list)  # the user's uncommitted paths when it was made
    repairs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Summary:
    plan: str
    branch: str
    base: str  # merge-base of the user's HEAD and the integration branch
    ahead: int  # commits on the integration branch not in the user's HEAD
    merged: list[str] = field(default_factory=list)
    unmerged: list[str] = field(default_factory=list)  # task branches still present
    commands: list[str] = field(default_factory=list)
    finished: bool = True  # every task completed and merged: the land is offered (else only the review)

    def text(self) -> str:
        merged = plural(len(self.merged), "task")
        land = self.commands[-1] if self.commands else f"team land {self.plan}"
        unfinished = "not finished: `team land` takes the result once every task completed; run the plan again"
        if self.ahead == 0:  # nothing merged yet, or the user's branch has it all (their own merge)
            lines = [f"result: branch {self.branch} ({merged} merged): your HEAD has all of it already"
                     if self.merged else f"result: branch {self.branch}: nothing merged into it yet"]
            if self.unmerged:
                lines.append(f"not merged (branches kept): {', '.join(self.unmerged)}")
            if self.merged:
                lines.append(f"nothing to take; `{land}` removes the plan's branches and worktrees"
                             if self.finished else unfinished)
            return "\n".join(lines)
        lines = [f"result: branch {self.branch} ({plural(self.ahead, 'commit')} ahead of your HEAD; {merged} merged)"]
        if self.unmerged:
            lines.append(f"not merged (branches kept): {', '.join(self.unmerged)}")
        commands = self.commands if self.finished else self.commands[:-1]
        lines.append("to review and take the result into your current branch:" if self.finished else
                     "to review the result so far:")
        width = max((len(c) for c in commands), default=0)
        lines += [f"  {c:<{width}}  # {why}" if why else f"  {c}"
                  for c, why in zip(commands, self.WHY + [""] * len(commands), strict=False)]
        if not self.finished:
            lines.append(unfinished)
        return "\n".join(lines)

    WHY = ["the tasks in merge order, with their commits", "one task's own change", "everything at once",
           "into your branch: one commit (--per-task: one per task); removes the plan's branches"]

    @staticmethod
    def commands_for(plan: str, branch: str, plan_file: str | None = None) -> list[str]:
        """The review commands, then the land: with the plan file when known (``team land NAME`` lands
        what the file the plan last ran from says, and needs it still there)."""
        return [f"team log {plan}", f"team diff {plan}.TASK", f"git diff HEAD...{branch}",
                f"team land {plan_file or plan}"]


def check_slug(name: str, what: str) -> str:
    if not SLUG.match(name) or ".." in name or name.endswith((".lock", ".")):
        raise InvalidName(f"{what} {name!r} cannot name a git branch: use letters, digits, '.', '_' "
                          f"and '-', starting with a letter or digit")
    return name


LOCK_NAME = ".lock"
PACKED_REFS_STALE = 2.0
"""Seconds a ``packed-refs.lock`` open in no process must have existed before ``reset`` removes it
(``_clear_packed_refs_lock``); git itself waits 1 s for that lock (``core.packedRefsTimeout``)."""
"""The flock of a group of worktrees (a plan's, the agents'), in the group's folder."""


@contextmanager
def worktree_locked(worktree: Path) -> Iterator[int]:
    """Hold the lock of the group ``worktree`` belongs to (what ``Worktrees.locked`` takes), for git
    commands run in one task's worktree outside a ``Worktrees``: a ``git fetch`` there walks every
    worktree's HEAD, which another worktree's add or removal (done under this lock) changes midway
    ("fatal: bad object worktrees/NAME/HEAD")."""
    with file_lock(worktree.parent / LOCK_NAME) as fd:
        yield fd


def drop_unheld(lock: Path) -> bool:
    """Remove a git ``*.lock`` file no process has open (a git holding one keeps its descriptor
    until it renames it into place): one a killed git left. True if it was removed."""
    if not lock.exists() or procs.open_anywhere(lock):
        return False
    lock.unlink(missing_ok=True)
    return True


class Worktrees:
    """Worktrees and branches of one plan in the git repository holding ``root``."""

    def __init__(self, root: str | os.PathLike, plan: str, in_memory: bool | None = None):
        """``in_memory``: merge with ``git merge-tree`` (merge.py), no integration worktree; by default
        when git is 2.38 or later (asked once, here), else in the integration worktree as before."""
        self.plan = check_slug(plan, "plan name")
        self.root = Path(root).absolute()
        self.git = Git(self.root)
        probe = self.git("rev-parse", "--show-prefix", "--git-common-dir", cwd=self.root, check=False) \
            if self.root.is_dir() else None
        if probe is None or probe.returncode:
            raise UserError(f"isolation: worktree needs a git repository at {self.root} "
                            f"(run `git init && git add -A && git commit -m init` there, "
                            f"or set `isolation: none` in the plan)")
        self.prefix, common = probe.stdout.splitlines()[:2]
        self.common_dir = (self.root / common).resolve()
        self.refs = Refs(self.common_dir)
        self.git.ensure_identity()
        self.base_dir = self.root / ".team" / "worktrees" / self.plan
        self.integration = f"team/{self.plan}/{INTEGRATION}"
        self.integration_dir = self.base_dir / "_integration"
        self.in_memory = tree_merge.supported(self.git) if in_memory is None else in_memory
        self._checked_out_nowhere = False
        self.relinked: list[str] = []  # worktrees whose links were rewritten: the repository moved (relink.py)
        if relink.moved(self.base_dir, self.common_dir, self.toplevel):
            with self.locked():
                self.relinked = relink.relink(relink.moved(self.base_dir, self.common_dir, self.toplevel))

    # -- names ----------------------------------------------------------------
    def branch(self, task: str) -> str:
        check_slug(task, "task id")
        if task == INTEGRATION:
            raise InvalidName(f"task id {task!r} is reserved by worktree isolation "
                              f"(branch {self.integration}); rename the task")
        return f"team/{self.plan}/{task}"

    def path(self, task: str) -> Path:
        self.branch(task)
        return self.base_dir / task

    @property
    def toplevel(self) -> Path:
        """The repository's top directory (``root`` minus its offset ``prefix``)."""
        top = self.root.resolve()
        for _ in Path(self.prefix).parts:
            top = top.parent
        return top

    def tip(self, branch: str) -> str | None:
        """The commit ``branch`` (``team/<plan>/...``) is at, None when there is no such branch: read from git's
        files (refs.py), asked of git when they cannot say."""
        try:
            return self.refs.get(f"refs/heads/{branch}")
        except Unreadable:
            return self.git.rev(f"refs/heads/{branch}")

    def head(self, path: Path) -> str | None:
        """The commit the worktree at ``path`` has checked out (refs.py, else git)."""
        try:
            return self.refs.head(path)
        except Unreadable:
            return self.git.rev("HEAD", cwd=path)

    def workdir(self, task: str) -> Path:
        """Where the task runs: its worktree plus ``root``'s offset inside the repository."""
        return self.path(task) / self.prefix

    # -- the scheduler's API --------------------------------------------------
    def ensure_integration(self, include_uncommitted: bool = False) -> Start:
        """Create (or repair) the integration branch and its worktree now.

        A new branch forks from the user's ``HEAD`` commit; with ``include_uncommitted``
        from a snapshot commit on it holding the user's uncommitted changes (untracked
        files included, ignored ones not), made through a scratch index: the user's
        index and files are not touched. ``Start.uncommitted`` lists what was left
        out (or snapshotted) when the branch was made now.

        A run starts here, so the ref locks a killed run's git left are removed first: those of
        the plan's branches no process holds, and a stale ``packed-refs.lock`` (a merge's ref
        transaction and a branch deletion take it; left there, every later deletion fails); and the
        temporary file of a write to the plan's folder a kill cut short.
        """
        with self.locked() as fd:
            self._exclude()
            repairs = [f"removed stale {lock}" for lock in self._clear_ref_locks(unheld=True)]
            if self._clear_packed_refs_lock():
                repairs.append("removed stale packed-refs.lock")
            for part in self.base_dir.glob(f"{TMP_PREFIX}*.part"):  # a write of .fork-* or base.json a kill cut
                part.unlink(missing_ok=True)                        # (nothing else writes here while no run goes)
                repairs.append(f"removed {part.name}")
            created = self.tip(self.integration) is None
            uncommitted = self.uncommitted() if created else []
            if created:
                self._create_integration(fd, include_uncommitted and bool(uncommitted))
            repairs += self.setup_integration(fd)
            return Start(created, self.base(), uncommitted, repairs)

    def uncommitted(self) -> list[str]:
        """Paths with uncommitted changes in the user's checkout (untracked included, ignored not;
        ``.tasks/`` and ``.team/`` left out). Reads only: nothing is written."""
        out = self.git("status", "--porcelain=v1", "-z", "--untracked-files=all", cwd=self.toplevel).stdout
        paths, entries = [], out.split("\0")
        i = 0
        while i < len(entries):
            entry = entries[i]
            if len(entry) > 3 and not {".team", ".tasks"} & set(Path(entry[3:]).parts):
                paths.append(entry[3:])
            i += 2 if entry[:1] in ("R", "C") else 1  # a rename's source path follows it
        return paths

    def base(self) -> Base | None:
        """Where the integration branch started; None for a branch made before this was recorded."""
        try:
            data = json.loads(self._base_path().read_text())
            return Base(**data) if data.get("commit") else None
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def _base_path(self) -> Path:
        return self.base_dir / "base.json"

    def _create_integration(self, fd: int, snapshot: bool) -> None:
        head = self.git.rev("HEAD")
        if head is None:
            raise UserError(f"isolation: worktree needs at least one commit in {self.root} "
                            f"(commit your files first)")
        ref = self.git("symbolic-ref", "-q", "HEAD", check=False).stdout.strip() or None
        fork = self._snapshot(head, ref) if snapshot else None
        base = Base(head, ref, fork)
        atomic_write(self._base_path(), json.dumps(dataclasses.asdict(base)) + "\n")
        self.git("branch", self.integration, base.fork, fd=fd)

    def _snapshot(self, head: str, ref: str | None) -> str | None:
        """A commit on ``head`` with the user's working tree as it is, through a scratch index."""
        index = self.base_dir / "snapshot.index"
        index.unlink(missing_ok=True)
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            self.git("read-tree", head, cwd=self.toplevel, env=env)
            self.git("add", "-A", "--", ".", ":(exclude,glob)**/.team/**", ":(exclude,glob)**/.tasks/**",
                     cwd=self.toplevel, env=env)
            tree = self.git("write-tree", cwd=self.toplevel, env=env).stdout.strip()
        finally:
            index.unlink(missing_ok=True)
        if tree == self.git("rev-parse", f"{head}^{{tree}}").stdout.strip():
            return None
        where = ref.removeprefix("refs/heads/") if ref else "a detached HEAD"
        msg = (f"team: uncommitted changes of {where} when plan {self.plan} started\n\n"
               f"Snapshot made by `team run --include-uncommitted`; your checkout still has them uncommitted.\n")
        return self.git("commit-tree", tree, "-p", head, "-m", msg).stdout.strip()

    def prepare(self, task: str, fresh: bool = False, discard: bool = False) -> Path:
        """Create (or reuse, or repair) the task's worktree; return its ``workdir``.

        A new branch forks from the integration tip *now*. ``fresh=True`` drops an
        existing branch and worktree first (an attempt cut short), but never commits
        the integration branch lacks: that is kept work, dropped only with
        ``discard=True`` (the user said so). A branch whose work is already merged
        and whose worktree is clean is re-forked too.
        """
        branch, path = self.branch(task), self.path(task)
        with self.locked() as fd:
            self.setup_integration(fd)
            self.finish_removal(task, fd)
            tip = self.tip(self.integration)
            if self.tip(branch) is not None:
                stale = tip is not None and self.tip(branch) != tip and self.git.is_ancestor(branch, tip)
                kept = self.kept(task)
                if fresh and kept is not None and kept.commits and not discard:
                    raise WorkFailed(f"task '{task}': {branch} holds {plural(kept.unmerged, 'commit')} not on "
                                     f"{self.integration}; refusing to delete them (merge them, or discard "
                                     f"them explicitly)")
                if fresh or (stale and not self.git.dirty(path)):
                    self.remove_task(task, fd)
            self._ensure_checkout(path, branch, tip, fd)
        return self.workdir(task)

    def commit(self, task: str, message: str) -> str | None:
        """Commit everything the task changed (``git add -A``); the new sha, or None if clean."""
        path = self.path(task)
        # not `git worktree list`: it fails while another thread's `git worktree add` is half done
        # (the run's prepare thread adds worktrees while its merge thread commits, without the lock)
        if not (path / ".git").is_file():
            raise UserError(f"task '{task}' has no worktree at {path}; call prepare() first")
        self.git("add", "-A", cwd=path)
        if self.git("diff", "--cached", "--quiet", cwd=path, check=False).returncode == 0:
            return None
        self.git("commit", "-q", "--no-verify", "-m", message, cwd=path)
        return self.git.rev("HEAD", cwd=path)

    def merge(self, task: str) -> MergeResult:
        """Merge the task's branch into integration (serialised); see the module docstring."""
        branch, path = self.branch(task), self.path(task)
        with self.locked() as fd:
            recovered = tuple(self.setup_integration(fd) + self.finish_removal(task, fd))
            tip = self.tip(branch)
            if tip is None:
                if task in self.merged_tasks():
                    if (path / ".git").is_file():  # an in-memory merge deletes the branch first: a kill left this
                        self.remove_task(task, fd)
                    return MergeResult(task, branch, "up-to-date", None, recovered)
                raise UserError(f"task '{task}' has no branch {branch} to merge; call prepare() first")
            if self.git.dirty(path):
                raise UserError(f"task '{task}' has uncommitted changes in {path}; call commit() first")
            commit = None
            if not self.git.is_ancestor(tip, self.integration):
                msg = f"team: merge {task} into {self.plan}\n\n{TRAILER}: {task}\n"
                commit = (self._merge_in_memory if self.in_memory else self._merge_in_checkout)(task, tip, msg, fd)
            self.remove_task(task, fd)
        return MergeResult(task, branch, "merged" if commit else "up-to-date", commit, recovered)

    def _merge_in_memory(self, task: str, tip: str, message: str, fd: int) -> str:
        """merge.py: the merge commit made and the branch moved (compare-and-set) with the task's
        branch deleted in the same ref transaction; ``MergeConflict`` changes nothing."""
        old = self.tip(self.integration)
        assert old is not None  # setup_integration made it
        branch = self.branch(task)
        new = tree_merge.TreeMerge(self.git, unlock=self.unlock_stale).merge(f"refs/heads/{self.integration}", old, tip, message,
                                                   drop=f"refs/heads/{branch}", fd=fd)
        if isinstance(new, tree_merge.Conflict):
            raise MergeConflict(task, branch, self.integration, new.files, self.path(task))
        return new

    def _merge_in_checkout(self, task: str, tip: str, message: str, fd: int) -> str | None:
        """``git merge --no-ff`` in the integration worktree (a git older than 2.38)."""
        branch = self.branch(task)
        proc = self.git("merge", "--no-ff", "--no-edit", "-m", message, tip,
                        cwd=self.integration_dir, check=False, fd=fd)
        if proc.returncode:
            files = self.git("diff", "--name-only", "--diff-filter=U",
                             cwd=self.integration_dir, fd=fd).stdout.split()
            self._recover_integration(fd)
            if files:
                raise MergeConflict(task, branch, self.integration, files, self.path(task))
            raise GitError(["merge", branch], self.integration_dir, proc.returncode,
                           proc.stderr + proc.stdout)
        return self.tip(self.integration)

    def finish(self, task: str, message: str) -> MergeResult:
        """``commit`` then ``merge``."""
        self.commit(task, message)
        return self.merge(task)

    def has_integration(self) -> bool:
        return self.tip(self.integration) is not None

    def has_branch(self, task: str) -> bool:
        return self.tip(self.branch(task)) is not None

    def kept(self, task: str) -> Kept | None:
        """The task's branch, if it exists: its commits not on integration and whether its worktree is dirty.

        ``commit`` runs only after a successful attempt, so commits on a clean branch are
        finished work whose merge did not happen (the lead died, a merge conflicted, or a
        conflict was resolved by hand). Such work is never deleted without being merged,
        unless the user says so (``--redo``, ``--fresh``). Unless a failed attempt made them
        and the branch still ends where it failed (``failed_attempt``): then they are ``failed``.
        """
        branch = self.branch(task)
        tip = self.tip(branch)
        if tip is None:
            return None
        # Its own commits: since its recorded fork point. Counting what integration lacks would
        # count history a rebuild (--redo) took out of integration as this task's work.
        since = self.fork(task) or (self.integration if self.tip(self.integration) else None)
        commits = int(self.git("rev-list", "--count", f"{since}..{branch}").stdout) if since else 0
        dirty = self.git.dirty(self.path(task))
        if commits and self._failed_tip(task) == tip:
            return Kept(task, branch, tip, 0, dirty, 0, failed=commits)
        unmerged = int(self.git("rev-list", "--count", f"{since}..{branch}", f"^{self.integration}").stdout) \
            if commits and self.tip(self.integration) else commits
        return Kept(task, branch, tip, commits, dirty, unmerged)

    def failed_attempt(self, task: str, tip: str | None = None) -> Kept | None:
        """An attempt of the task failed: what its branch holds now is that attempt's, not finished work
        (``Kept.failed``); recorded before the failure is, so a kill in between is read the same way.
        What the branch holds then (None: no branch). ``tip``: the commit the branch is about to be made
        at (pool.py ``keep``: recorded first, so a kill before the branch is made is read the same way)."""
        tip = tip or self.tip(self.branch(task))
        if tip is None:
            return None
        atomic_write(self._failed_path(task), tip + "\n")
        return self.kept(task)

    def _failed_path(self, task: str) -> Path:
        return self.base_dir / f".failed-{task}"

    def _failed_tip(self, task: str) -> str | None:
        try:
            return self._failed_path(task).read_text().strip() or None
        except FileNotFoundError:
            return None

    def discard(self, task: str) -> Kept | None:
        """Delete the task's branch and worktree, kept work included (the user said so); what was there."""
        with self.locked() as fd:
            kept = self.kept(task)
            if kept is not None or self.path(task).exists() or self._removing(task).exists():
                self.remove_task(task, fd)
            return kept

    def drop_merged(self, task: str) -> bool:
        """Delete the task's branch and worktree when everything on the branch is on integration
        (a lead killed between a merge and the removal that follows it); whether it did."""
        with self.locked() as fd:
            self.finish_removal(task, fd)
            tip = self.tip(self.branch(task))
            if tip is None:  # an in-memory merge deleted the branch with the merge: its worktree was clean
                if not (self.path(task) / ".git").is_file():  # (a pooled one went back before the merge)
                    self.forget_fork(task)
                    return False
            elif not self.git.is_ancestor(tip, self.integration) or self.git.dirty(self.path(task)):
                return False
            self.remove_task(task, fd)
            return True

    def merges(self) -> dict[str, str]:
        """Task slug -> its merge commit on integration (first parents, by trailer; the last one wins)."""
        if self.tip(self.integration) is None:
            return {}
        out = self.git("log", "--first-parent", "--merges", "--reverse",
                        f"--format=%H%x1f%(trailers:key={TRAILER},valueonly)%x1e", self.integration,
                        *self._since()).stdout
        found: dict[str, str] = {}
        for record in out.split("\x1e"):
            sha, _, task = record.strip().partition("\x1f")
            if task.strip():
                found[task.strip()] = sha
        return found

    def merged_tasks(self) -> list[str]:
        """Task slugs merged into integration, oldest first, from the merge trailers."""
        if self.tip(self.integration) is None:
            return []
        out = self.git("log", "--first-parent", "--merges", "--reverse",
                        f"--format=%(trailers:key={TRAILER},valueonly)%x00", self.integration,
                        *self._since()).stdout
        return [t.strip() for t in out.split("\0") if t.strip()]

    def _since(self) -> list[str]:
        """``^BASE`` to stop a walk of integration's history where the plan started (when recorded)."""
        base = self.base()
        return [f"^{base.commit}"] if base is not None and self.git.rev(base.commit) == base.commit else []

    def task_branches(self) -> list[str]:
        """Slugs of the task branches that exist (work not merged, or in flight)."""
        out = self.git("for-each-ref", "--format=%(refname)", f"refs/heads/team/{self.plan}/").stdout
        names = [r.rsplit("/", 1)[1] for r in out.split()]
        return [n for n in names if n != INTEGRATION]

    def summary(self) -> Summary:
        """Where the result is and the exact commands to take it into the user's branch."""
        if self.tip(self.integration) is None:
            raise UserError(f"plan '{self.plan}' has no integration branch {self.integration} yet")
        base = self.git("merge-base", "HEAD", self.integration).stdout.strip()
        ahead = int(self.git("rev-list", "--count", f"HEAD..{self.integration}").stdout)
        b = self.integration
        cmds = Summary.commands_for(self.plan, b)
        return Summary(self.plan, b, base, ahead, self.merged_tasks(), self.task_branches(), cmds)

    def release(self) -> None:
        """Remove the integration worktree (the branch stays) so the user can check it out."""
        with self.locked() as fd:
            self.drop_worktree(self.integration_dir, fd)

    def reset(self) -> None:
        """Delete every worktree and branch of the plan, integration included (``--fresh``, ``land``)."""
        with self.locked() as fd:
            self._clear_ref_locks()
            self._clear_packed_refs_lock()
            for task in self.task_names(self.git.worktrees()):
                self.remove_task(task, fd)
            for scratch in self.base_dir.glob("_*"):
                self.drop_worktree(scratch, fd)
            for record in [*self.base_dir.glob(".fork-*"), *self.base_dir.glob(".failed-*")]:
                record.unlink()
            if self.tip(self.integration) is not None:
                self.git("branch", "-D", self.integration, fd=fd)
            self._base_path().unlink(missing_ok=True)

    # -- the lock and repairs (orphans.py uses locked and task_names) --
    @contextmanager
    def locked(self, timeout: float | None = None) -> Iterator[int]:
        """Hold the plan's flock (its fd, for git children to inherit); ``UserError`` on timeout."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        try:
            with file_lock(self.base_dir / LOCK_NAME, timeout=timeout) as fd:
                yield fd
        except LockTimeout:
            if timeout == 0:
                raise
            raise UserError(f"another process holds {self.base_dir / '.lock'} (a `team run` "
                            f"merging?); wait for it to finish and retry") from None

    def task_names(self, wts: dict[Path, dict[str, str]]) -> set[str]:
        """Tasks with a branch, a registered worktree or an interrupted removal."""
        base = self.base_dir.resolve()
        names = set(self.task_branches()) | {p.name for p in wts if p.parent == base}
        if self.base_dir.is_dir():
            names |= {p.name[len(".removing-"):] for p in self.base_dir.glob(".removing-*")}
        return {n for n in names if not n.startswith("_")}  # _integration, _rebuild, _land: ours

    def setup_integration(self, fd: int) -> list[str]:
        """Create the integration branch and worktree if missing; repair a dead merger's state."""
        self._exclude()
        notes = [f"removed stale {name}" for name in self._clear_ref_locks(integration_only=True)]
        rebuild = self.base_dir / "_rebuild"  # history.py's scratch: a rebuild holds the flock from its
        if rebuild.exists() or rebuild.is_symlink():  # start to the scratch's removal, so one seen here
            self.drop_worktree(rebuild, fd)           # is what a killed --redo left
            self.git("worktree", "prune", fd=fd)
            notes.append("removed the scratch worktree of a killed --redo")
        if self.tip(self.integration) is None:
            self._create_integration(fd, snapshot=False)
        if self.in_memory:  # merges need no checkout: one an older team or git left goes
            if self.integration_dir.exists() or self.integration_dir.is_symlink():
                self.drop_worktree(self.integration_dir, fd)
            if not self._checked_out_nowhere:
                self._refuse_checked_out()
            return notes
        self._ensure_checkout(self.integration_dir, self.integration, None, fd)
        return notes + self._recover_integration(fd)

    def merge_note(self) -> str | None:
        """What to say once, at a run's start, when merges cannot happen in memory (git < 2.38)."""
        if self.in_memory:
            return None
        have = ".".join(map(str, tree_merge.version(self.git))) or "of unknown version"
        return (f"git {have} cannot merge without a checkout (`git merge-tree --write-tree` needs git "
                f"{'.'.join(map(str, tree_merge.MIN_VERSION))}): the plan's merges happen in the worktree "
                f"{self.integration_dir}, one at a time, as before (slower)")

    def _refuse_checked_out(self) -> None:
        """Merges move the integration branch with ``update-ref``: under a checkout of it (yours) the
        files would stay behind and look like changes undoing the plan. Asked once per object; git
        refused such a checkout itself while the integration worktree held the branch."""
        ref = f"refs/heads/{self.integration}"
        for where, info in self.git.worktrees().items():
            if info.get("branch") == ref:
                raise UserError(f"{self.integration} is checked out in {where}: the plan's merges would move it "
                                f"under that checkout; check out another branch there (`git switch -`), then "
                                f"run again")
        self._checked_out_nowhere = True

    def follow_integration(self, fd: int) -> None:
        """After the integration branch moved by ``update-ref`` (a rebuild): its worktree, when merges
        use one, follows it."""
        if self.integration_dir.is_dir():
            self.git("reset", "-q", "--hard", "HEAD", cwd=self.integration_dir, fd=fd)

    def _clear_ref_locks(self, *, integration_only: bool = False, unheld: bool = False) -> list[str]:
        """Remove ``*.lock`` files a git killed mid-write left under the plan's refs (``git branch -D``
        of a killed ``team land``): each would refuse every later write of its ref ("cannot lock
        ref"). The caller holds the plan's flock. The integration branch is written only under it
        (merges, its creation, ``reset``), so its lock is stale whenever we hold the flock. A task's
        branch is also written by the task's own commits, which run in parallel without the flock
        (``commit``): its lock is cleared only by ``reset``, which drops every branch of the plan
        when none of its tasks runs (``--fresh`` before the run starts, ``team land`` after it), and, at a
        run's start (``unheld``), those no process holds open."""
        heads = self.common_dir / "refs" / "heads"
        if integration_only:
            locks = [heads / f"{self.integration}.lock"]
        else:
            top = heads / "team" / self.plan
            locks = sorted(top.rglob("*.lock")) if top.is_dir() else []
        removed = []
        for lock in locks:
            if lock.exists() and (not unheld or drop_unheld(lock)):
                lock.unlink(missing_ok=True)
                removed.append(str(lock.relative_to(heads)))
        return removed

    def _clear_packed_refs_lock(self) -> bool:
        """Remove a ``packed-refs.lock`` a killed git left; True if it did. git takes that lock to
        delete any ref (``git branch -D`` of a killed ``team land``), and while it is there every ref
        deletion of the repository fails ("Unable to create '.../packed-refs.lock': File exists").
        It is shared with every git of the repository, the user's own too, so only a stale one is
        removed: at least ``PACKED_REFS_STALE`` seconds old (waited for) and open in no process (a git
        holding it keeps its descriptor until it renames it into place). Called by ``reset`` and by
        ``finish_removal``."""
        lock = self.common_dir / "packed-refs.lock"
        try:
            first = lock.stat()
            wait = first.st_mtime + PACKED_REFS_STALE - time.time()
            if wait > 0:
                time.sleep(min(wait, PACKED_REFS_STALE))
            again = lock.stat()
        except FileNotFoundError:
            return False
        if (again.st_ino, again.st_mtime_ns) != (first.st_ino, first.st_mtime_ns):
            return False  # a live git's: git waits for it, or says so
        return drop_unheld(lock)

    def unlock_stale(self, lock: Path) -> bool:
        """Remove a lock file of this repository a killed git left (merge.py's ``unlock``): the shared
        ``packed-refs.lock`` only when stale (``_clear_packed_refs_lock``), any other one of ours when
        no process holds it. True if it was removed."""
        if lock.resolve() == (self.common_dir / "packed-refs.lock").resolve():
            return self._clear_packed_refs_lock()
        return lock.resolve().is_relative_to(self.common_dir) and drop_unheld(lock)

    def _recover_integration(self, fd: int) -> list[str]:
        notes: list[str] = []
        wt = self.integration_dir
        gitdir = self.git.gitdir(wt)
        if gitdir is None:
            raise WorkFailed(f"{wt} is not a git worktree any more; run `team doctor --fix` to repair it")
        for lock in sorted(gitdir.glob("*.lock")):
            if lock.exists():  # every git writing here holds our flock: its holder is dead
                lock.unlink()
                notes.append(f"removed stale {lock.name}")
        if (gitdir / "MERGE_HEAD").exists():
            self.git("merge", "--abort", cwd=wt, check=False, fd=fd)
            notes.append("aborted an unfinished merge")
        if self.git.dirty(wt) or (gitdir / "MERGE_HEAD").exists():
            self.git("reset", "-q", "--hard", "HEAD", cwd=wt, fd=fd)
            self.git("clean", "-q", "-ffdx", cwd=wt, fd=fd)
            notes.append("reset the integration worktree to its branch")
        return notes

    def checkout(self, task: str, fd: int) -> Path:
        """The task's worktree at its path, on its branch (made when missing; the caller holds the flock)."""
        self._ensure_checkout(self.path(task), self.branch(task), None, fd)
        return self.path(task)

    def _ensure_checkout(self, path: Path, branch: str, base: str | None, fd: int) -> None:
        wts = self.git.worktrees()
        info = wts.get(path.resolve())
        healthy = (info is not None and info.get("branch") == f"refs/heads/{branch}"
                   and "locked" not in info and (path / ".git").is_file())
        if healthy:
            return
        self.drop_worktree(path, fd, wts)
        if self.tip(branch) is None:
            if base is not None and path.parent == self.base_dir:  # a task branch: remember where it forked
                self.record_fork(path.name, base)
            self.git("branch", branch, *([base] if base else []), fd=fd)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.git("worktree", "add", "-q", str(path), branch, fd=fd)

    def _fork_path(self, task: str) -> Path:
        return self.base_dir / f".fork-{task}"

    def record_fork(self, task: str, sha: str, durable: bool = True) -> None:
        """Remember the integration commit the task's branch forks from (before the branch is made); a
        failed attempt's mark on an earlier branch no longer applies."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self._fork_path(task), sha + "\n", durable=durable)
        self._failed_path(task).unlink(missing_ok=True)

    def forget_fork(self, task: str) -> None:
        """The task's branch is gone (merged, removed): so are its fork point and a failed attempt's mark."""
        self._fork_path(task).unlink(missing_ok=True)
        self._failed_path(task).unlink(missing_ok=True)

    def fork(self, task: str) -> str | None:
        """The integration commit the task's branch was forked from (recorded when it was made)."""
        try:
            sha = self._fork_path(task).read_text().strip()
        except FileNotFoundError:
            return None
        return sha if sha and self.git.rev(sha) == sha else None

    def scratch(self, name: str, commit: str, fd: int) -> Path:
        """A fresh detached worktree ``_<name>`` at ``commit`` for work off to the side (history.py, land.py)."""
        path = self.base_dir / f"_{name}"
        self.drop_worktree(path, fd)
        self.git("worktree", "add", "-f", "-q", "--detach", str(path), commit, fd=fd)
        return path

    def drop_worktree(self, path: Path, fd: int, wts: dict[Path, dict[str, str]] | None = None) -> None:
        """Remove the worktree (or a stray directory or file) at ``path``; missing is fine. ``wts``: git's
        listing, when the caller read it under the same flock."""
        if path.resolve() in (self.git.worktrees() if wts is None else wts):
            self.git("worktree", "remove", "-f", "-f", str(path), fd=fd)
        if path.is_dir() and not path.is_symlink():  # a directory git does not know: ours
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()

    def remove_task(self, task: str, fd: int) -> None:
        """Discard the task's worktree and branch; a marker makes a killed removal resumable."""
        marker = self._removing(task)
        marker.touch()
        self.drop_worktree(self.path(task), fd)
        if self.tip(self.branch(task)) is not None:
            self.git("branch", "-D", self.branch(task), fd=fd)
        self.forget_fork(task)
        marker.unlink()

    def _removing(self, task: str) -> Path:
        return self.base_dir / f".removing-{task}"

    def finish_removal(self, task: str, fd: int) -> list[str]:
        """Finish a removal of the task's worktree and branch a kill cut short (its marker is there). Killed
        with its git in the ``git branch -D``, it left ``packed-refs.lock``, which fails every later ref
        deletion: a stale one is removed first (``_clear_packed_refs_lock``)."""
        if self._removing(task).exists():
            self._clear_packed_refs_lock()
            self.remove_task(task, fd)
            return [f"finished removing task {task}'s worktree"]
        return []

    def _exclude(self) -> None:
        exclude = self.common_dir / "info" / "exclude"
        text = exclude.read_text() if exclude.exists() else ""
        missing = [p for p in EXCLUDES if p not in text.splitlines()]
        if missing:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            sep = "" if not text or text.endswith("\n") else "\n"
            atomic_write(exclude, text + sep + "".join(f"{p}\n" for p in missing))
