"""Reused worktrees for a run's shell tasks: moved and reset, not added and removed.

A ``git worktree add`` writes every file of the repository and a ``git
worktree remove`` deletes them all; per task they were most of what worktree
isolation cost (on this machine's disk ~1 ms a file). ``WorktreePool`` gives
a task a worktree at the same place as before, ``.team/worktrees/<plan>/<task>``,
but takes it from the plan's free ones and gives it back once its work is committed::

    prepare   under the flock: move _pool-N <task>                  (a rename, ``_move``)
                   (none free: git worktree add --no-checkout --detach <task> FORK)
              then: git checkout -q -f --detach FORK                (writes only what differs; skipped
                                                                     when the worktree is known at FORK)
                    git clean -q -ffdx                              (only when its last task left
                                                                     untracked or ignored files)
    ... the task runs, detached at FORK ...
    commit    git status                                            (changed nothing: no branch)
              changed: [git add -A, when there are new files;] git commit -a (on the detached HEAD);
                       git update-ref team/<plan>/<task>
              then, under the flock: move <task> _pool-N            (back to the free ones)
    merge     under the flock: merge.py (the branch deleted in the merge's transaction)
    keep      a failed attempt: git checkout -q -b team/<plan>/<task> (its changes stay)
              a conflict: git worktree add <task> team/<plan>/<task> (made again, for the resolution)
    drain     the run's end: every _pool-N removed, git worktree prune

A task that changed nothing costs one git process (its ``status``), plus a
checkout when the integration branch moved since its worktree's last task
and a clean when that task left build output; one that changed something
two more (three when it made new files), and the three of its merge. Refs and ``HEAD`` are read from git's
files (refs.py), not asked of ``git rev-parse``.

After ``prepare`` the worktree is what ``git worktree add`` at FORK makes:
tracked files as FORK has them (``-f`` throws away what the last task left),
nothing untracked and nothing ignored (a fresh checkout has no
``.ruff_cache`` or build output either). The task runs on a detached HEAD,
and its branch is made when its work is committed: a task that changed
nothing never has one. A task whose attempt fails is left as before: its
worktree at its path, on its branch, with what it left, out of the pool
(``keep``). A merge needs only the branch, so the worktree is back among the
free ones while the merge waits its turn; a merge that conflicts makes the
task's worktree again, at its path, on its branch, for the person resolving
it. A run holds at most as many
worktrees as it runs tasks at once, plus the kept ones; the first tasks of a
run get new ones (``--no-checkout``, filled outside the flock, in parallel).
Agent tasks do not use the pool: an agent sees its worktree on its branch
(``Worktrees.prepare``), and runs for minutes anyway.

What the pool knows of a free worktree (``Known``: the commit it is at, and
whether its last task left untracked or ignored files, from that task's
``status``) lets ``prepare`` skip the checkout and the clean; it is this
run's, in memory, and only for worktrees this run gave back or filled: one
a killed run left is reset in full. ``status`` counts ignored files too
(``--ignored=matching``: an ignored folder is one entry, not walked), so build
output a task leaves is cleaned before the next task, as before.

The commit commits exactly what ``add -A`` stages (``bench/refactor_bench.py
--commit-cost``, a worktree of 5,000 files, 5 edited, 1 added, ignored
output; three runs at load 4–4.5: ``add -A`` plus ``write-tree`` 23–37 ms
(median), against 37–61 ms for the ``add -A``, ``diff --cached``,
``commit`` of before; ``status`` then ``update-index`` of its paths,
27–39 ms; ``core.untrackedCache`` 22–31 ms, within the noise, so it is left
to the user's config). ``status`` first costs a scan, and saves ``add -A``,
``write-tree`` and ``rev-parse`` for a task that changed nothing and the
clean (a scan as well) for one that left no build output. The scan never
uses an fsmonitor daemon (command.py turns it off).

What runs under the plan's flock: what changes git's list of worktrees (add,
move, remove, prune: a concurrent reader of a half-made entry fails) and the
merge. Checkouts, cleans and commits run in the task's own worktree without
it, in parallel, as commits always did.

Crash safety (a kill -9 at any instant; the next run resumes):

* before its ``git commit`` the task has no branch: a worktree found at its
  path (half moved, half reset, the task's uncommitted work) is an attempt
  cut short, reset in place and run again, as an attempt whose branch had no
  commits of its own was re-forked before; but commits on top of the fork
  ``prepare`` recorded are work: those the task made itself (it ran ``git
  commit``) and the commit of its work when a kill came before its branch
  was made. ``rescue``, at the next run's start, puts them on the task's
  branch, and they are merged without running the task again, as before;
* once the branch is made it holds the task's commit: the next run merges it
  without running the task again (isolation.py), whether its worktree was
  still at its path (clean at the commit) or already among the free ones;
* the merge's transaction moves integration and deletes the branch at once;
  a worktree left at the path of a merged task is removed, and its fork
  record in any case (``drop_merged``);
* a move is a rename plus git's pointer back to the directory (``_move``, done
  as git does it): a kill between the two leaves a folder whose admin entry
  points elsewhere, which the next run's ``Worktrees`` relinks (relink.py)
  before anything looks at it; a registered worktree whose folder is gone is
  moved over by git itself (``worktree move -f`` drops that entry);
* free worktrees a killed run left are adopted when healthy (registered, not
  locked, ``.git`` in place), else removed.

The free list is this process's (one lead runs a plan at a time); a lock
guards it between the run's threads.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import TeamError, WorkFailed
from ..core.fsutil import atomic_write
from ..core.text import plural
from .command import GitError
from .merge import Conflict, TreeMerge
from .worktrees import SLUG, TRAILER, Kept, MergeConflict, MergeResult, Worktrees, drop_unheld

log = logging.getLogger("orchestrator.pool")

PREFIX = "_pool-"
LOCK_WAIT = 30.0
"""Seconds ``prepare`` waits for a git a killed lead left running in a task's worktree to let go of its lock."""


@dataclass(frozen=True)
class Lease:
    """A worktree the pool gave a task: where, and the integration commit it was reset to."""

    task: str
    path: Path
    fork: str


@dataclass(frozen=True)
class Known:
    """What a free worktree is known to hold, from the steps that gave it back (this run's only): ``HEAD``
    detached at ``head``, the index and the tracked files as that commit has them, and, unless
    ``leftovers``, nothing else (nothing untracked, nothing ignored). ``prepare`` skips the checkout
    when ``head`` is already the fork, and the clean when there are no leftovers."""

    head: str
    leftovers: bool


@dataclass(frozen=True)
class Status:
    """A task's worktree after its attempt (``git status --porcelain=v2 --branch``, ``_status``)."""

    head: str | None  # the commit HEAD is at (None: an unborn branch)
    detached: bool
    changes: bool  # what ``add -A`` stages: tracked files changed, untracked files
    untracked: bool  # untracked files among them (``commit -a`` would leave them out)
    leftovers: bool  # what ``add -A`` leaves and ``clean -ffdx`` removes: ignored files, untracked folders


STATUS = ("status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all", "--ignored=matching",
          "--no-renames", "--ignore-submodules=dirty")
"""A submodule's own untracked or changed files are not the task's change (``add -A`` does not stage
them); a submodule moved to another commit is."""


def parse_status(out: str) -> Status:
    head: str | None = None
    detached = changes = untracked = leftovers = False
    fields = iter(out.split("\0"))
    for entry in fields:
        if entry.startswith("# branch.oid "):
            oid = entry[len("# branch.oid "):]
            head = None if oid == "(initial)" else oid
        elif entry == "# branch.head (detached)":
            detached = True
        elif entry.startswith("! "):
            leftovers = True
        elif entry.startswith("? "):
            changes = untracked = True
            leftovers = leftovers or entry.endswith("/")  # a repository of its own: add -A adds it as a link
        elif entry[:2] in ("1 ", "u "):
            changes = True
        elif entry.startswith("2 "):
            changes = True
            next(fields, None)  # a rename's source path
    return Status(head, detached, changes, untracked, leftovers)


def rescue(wt: Worktrees) -> list[str]:
    """Tasks whose worktree a killed run left detached, holding commits the task made itself (a shell
    task may run ``git commit``) on top of the fork ``prepare`` recorded: the task's branch is made at
    them and the worktree put on it, so they are kept work like any other (the run merges them without
    running the task again, ``--fresh`` says how to bring them back), never reset away. Run at a
    run's start, before anything looks at kept work. The tasks rescued."""
    if not wt.base_dir.is_dir():
        return []
    found = []
    with wt.locked() as fd:
        for path in sorted(wt.base_dir.iterdir()):
            if path.name.startswith(("_", ".")) or not (path / ".git").is_file() or not SLUG.match(path.name):
                continue
            branch = wt.branch(path.name)
            fork, head = wt.fork(path.name), wt.git.rev("HEAD", cwd=path)
            if (fork is None or head is None or head == fork or wt.git.rev(branch) is not None
                    or not wt.git.is_ancestor(fork, head) or wt.git.is_ancestor(head, wt.integration)):
                continue  # nothing of its own (integration's commits are nobody's own work)
            wt.git("update-ref", f"refs/heads/{branch}", head, "", fd=fd)  # "": only if there is none
            wt.git("symbolic-ref", "HEAD", f"refs/heads/{branch}", cwd=path, fd=fd)
            found.append(path.name)
    return found


class WorktreePool:
    """The task worktrees of one plan's run (see the module docstring)."""

    def __init__(self, wt: Worktrees):
        self.wt = wt
        self.git = wt.git
        self._free: list[Path] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a free one came, or a promised one will not
        self._promised = 0  # worktrees ``warm`` is still making
        self._warmer: threading.Thread | None = None
        self._adopted = False
        self._serial = 0
        self._ready = False  # setup_integration done for this run
        self._known: dict[Path, Known] = {}  # free worktree -> what it holds (one dict operation at a time)

    def warm(self, count: int) -> None:
        """Make ``count`` free worktrees ahead of the first tasks, in the background, while the run is still
        starting (a run's first tasks would each make one, then wait for its files). ``prepare`` waits for
        them rather than making more."""
        if count <= 0 or self._warmer is not None:
            return
        with self._lock:
            self._promised = count
        self._warmer = threading.Thread(target=self._warm, args=(count,), name="team-wt-warm", daemon=True)
        self._warmer.start()

    # ---------------------------------------------------------------- a task's turn
    def prepare(self, task: str, kept: Kept | None) -> Lease:
        """The task's worktree at ``wt.path(task)``, detached at the integration tip, as fresh as a new one.
        ``kept``: ``wt.kept(task)`` as the caller found it; a branch without commits of its own goes (an
        attempt cut short, or failed), one with commits is refused (kept work: merge it, never reset it)."""
        path = self.wt.path(task)
        with self._changed:  # outside the flock (warm needs it to add what it promised): one is this task's
            self._changed.wait_for(lambda: bool(self._free) or not self._promised)
            reserved = self._free.pop() if self._free else None
        try:
            return self._prepare(task, kept, path, reserved)
        finally:
            if reserved is not None and reserved.is_dir():  # not used (it stayed where it was): free again
                with self._changed:
                    self._free.append(reserved)
                    self._changed.notify_all()

    def _prepare(self, task: str, kept: Kept | None, path: Path, reserved: Path | None) -> Lease:
        wt = self.wt
        with wt.locked() as fd:
            if not self._ready:
                wt.setup_integration(fd)
                self._ready = True
            wt.finish_removal(task, fd)
            fork = wt.tip(wt.integration)
            assert fork is not None  # setup_integration made it
            if self._unlock(path, task):  # a killed git's locks: what it was doing may have finished since
                kept = wt.kept(task)
            if kept is not None and kept.commits:
                raise WorkFailed(f"task '{task}': {kept.branch} holds {plural(kept.commits, 'commit')} not on "
                                 f"{wt.integration}; refusing to reset its worktree (run again: the next run "
                                 f"merges them)")
            wts = self.git.worktrees() if path.exists() or path.is_symlink() or not self._adopted else {}
            here = wts.get(path.resolve())
            in_place = (here is not None and "locked" not in here and "prunable" not in here
                        and (path / ".git").is_file())
            known: Known | None = None  # in place: an attempt cut short, nothing known of it
            if not in_place:
                wt.drop_worktree(path, fd, wts)
                taken = self._take(path, wts, fd, reserved)
                if taken is not None:
                    with self._lock:
                        known = self._known.pop(taken, None)
                    if known is None:
                        self._unlock(path, task)  # a free one a killed run left (its fill or reset cut short)
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self.git("worktree", "add", "-f", "-q", "--no-checkout", "--detach", str(path), fork, fd=fd)
                    known = Known("", leftovers=False)  # a new, empty folder: all to check out, nothing to clean
        # in the task's own worktree, in parallel with the others: no list of worktrees changes here
        if known is None or known.head != fork:
            self.git("checkout", "-q", "-f", "--detach", fork, cwd=path)
        if known is None or known.leftovers:
            self.git("clean", "-q", "-ffdx", cwd=path)
        if kept is not None:  # its branch, without commits of its own: an attempt cut short, or failed
            self.git("update-ref", "-d", f"refs/heads/{kept.branch}", kept.tip)
        wt.record_fork(task, fork, durable=False)  # what ``rescue`` counts a task's own commits from (last:
        return Lease(task, path, fork)              # a failed attempt's mark goes with the branch it is on)

    def commit(self, lease: Lease, message: str) -> str | None:
        """Commit everything the task changed (``add -A``: ignored files stay out) on a new branch
        ``team/<plan>/<task>``; the commit, or None when the task changed nothing (no branch then).
        A commit the task made itself is kept: the new one goes on top of it.

        One ``git status`` says whether there is anything to commit (a task that changed nothing costs
        that one process) and what is left for the next task's reset to clean. Otherwise ``add -A`` and
        ``git commit`` on the detached HEAD, then the branch is made at it: a kill between the two
        leaves a commit on top of the recorded fork and no branch, which ``rescue`` puts on the branch
        at the next run's start, as it does a commit the task made itself."""
        path = lease.path
        st = self._status(path)
        if not st.changes and st.detached and st.head == lease.fork:
            self._give_back(path, Known(lease.fork, st.leftovers))
            return None
        if st.head is None:
            raise WorkFailed(f"task '{lease.task}' left HEAD on a branch without commits in {path}; "
                             f"nothing of it can be merged")
        self.wt.record_fork(lease.task, lease.fork)  # durable, before HEAD moves: rescue counts from it
        if not st.detached:  # it switched to a branch of its own: that branch stays where it left it
            self.git("update-ref", "--no-deref", "HEAD", st.head, cwd=path)
        new = st.head
        if st.changes:
            if st.untracked:  # else ``commit -a`` stages the same: what changed of the tracked files
                self.git("add", "-A", cwd=path)
            proc = self.git("commit", "-q", "-a", "--no-verify", "--cleanup=whitespace", "-F", "-", cwd=path,
                            input=message, check=False)
            if proc.returncode == 0:
                new = self.wt.head(path) or ""
            elif "nothing to commit" not in proc.stdout:  # (what status saw stages to nothing: a mode
                raise GitError(["commit"], path, proc.returncode, proc.stderr or proc.stdout)  # git ignores)
        if new == lease.fork:
            self._give_back(path, Known(lease.fork, st.leftovers))
            return None
        self.git("update-ref", f"refs/heads/{self.wt.branch(lease.task)}", new, "", cwd=path)  # "": made now
        self._give_back(path, Known(new, st.leftovers))
        return new

    def _status(self, path: Path) -> Status:
        """The worktree's status; it may refresh the index (no one else uses this worktree), so a file
        the checkout wrote in the same second as the index is hashed once, not at every status."""
        return parse_status(self.git(*STATUS, cwd=path, env={"GIT_OPTIONAL_LOCKS": "1"}).stdout)

    def _give_back(self, path: Path, known: Known) -> None:
        """The task's worktree back to the free ones once its work is on its branch (or it had none): its
        merge needs only the branch, so the next task may take it while the merge waits its turn."""
        with self.wt.locked() as fd:
            self._give(path, fd, known)

    def merge(self, lease: Lease, commit: str | None) -> MergeResult:
        """Merge what ``commit`` returned into integration (merge.py); a task that changed nothing has
        nothing to merge. Its worktree went back to the free ones with the commit. ``MergeConflict``:
        nothing merged, the task kept on its branch, its worktree made again at its path, on its
        branch, for the person resolving it (``checkout``)."""
        wt, task = self.wt, lease.task
        branch = wt.branch(task)
        with wt.locked() as fd:
            if commit is None:
                wt.forget_fork(task)
                return MergeResult(task, branch, "up-to-date")
            old = wt.tip(wt.integration)
            assert old is not None
            msg = f"team: merge {task} into {wt.plan}\n\n{TRAILER}: {task}\n"
            new = TreeMerge(self.git, unlock=wt.unlock_stale).merge(f"refs/heads/{wt.integration}", old, commit, msg,
                                            drop=f"refs/heads/{branch}", fd=fd)
            if isinstance(new, Conflict):
                wt.checkout(task, fd)
                raise MergeConflict(task, branch, wt.integration, new.files, lease.path)
            wt.forget_fork(task)
        return MergeResult(task, branch, "merged", new)

    def keep(self, lease: Lease) -> None:
        """A failed attempt's worktree leaves the pool: on its branch (made at its HEAD) with what it left."""
        wt = self.wt
        wt.record_fork(lease.task, lease.fork)
        with wt.locked() as fd:
            if wt.tip(wt.branch(lease.task)) is None:
                head = wt.head(lease.path)
                if head is not None and head != lease.fork:  # it committed itself: no result (failed_attempt),
                    wt.failed_attempt(lease.task, tip=head)    # said before its branch exists
                self.git("checkout", "-q", "-b", wt.branch(lease.task), cwd=lease.path, fd=fd)
            else:  # committed before it failed (a merge that could not run): the branch is its commit
                self.git("symbolic-ref", "HEAD", f"refs/heads/{wt.branch(lease.task)}", cwd=lease.path, fd=fd)

    def drain(self) -> list[Path]:
        """Remove every free worktree (the run's end), and the entries of any a kill left half moved."""
        if self._warmer is not None:
            self._warmer.join()
        with self.wt.locked() as fd, self._lock:
            slots = sorted(set(self._free) | set(self.wt.base_dir.glob(f"{PREFIX}*")))
            self._free.clear()
            self._known.clear()
            self._adopted = False
            for slot in slots:
                if slot.is_dir() and not slot.is_symlink():
                    shutil.rmtree(slot)
                elif slot.exists() or slot.is_symlink():
                    slot.unlink()
            self.git("worktree", "prune", fd=fd)
        return slots

    def _unlock(self, path: Path, task: str) -> bool:
        """Locks git left in the worktree at ``path`` (its own git directory: ``index.lock``, ``HEAD.lock``)
        and on the task's branch. A git of a killed lead may still hold one (the steps outside the flock
        have no flock to keep): it is waited for (up to ``LOCK_WAIT`` s); one no process holds is a
        killed git's, removed. True if there were any."""
        locks = [self.wt.common_dir / "refs" / "heads" / f"{self.wt.branch(task)}.lock"]
        try:
            pointer = (path / ".git").read_text().strip()
        except OSError:
            pointer = ""
        if pointer.startswith("gitdir:"):
            admin = path / pointer.removeprefix("gitdir:").strip()  # absolute (a relative one is from path)
            locks += sorted(admin.glob("*.lock")) if admin.is_dir() else []
        locks = [lock for lock in locks if lock.exists()]
        deadline = time.monotonic() + LOCK_WAIT
        for lock in locks:
            while not drop_unheld(lock) and lock.exists() and time.monotonic() < deadline:
                time.sleep(0.02)  # its git is still running: it removes the lock when it is done
        return bool(locks)

    # ---------------------------------------------------------------- the free list
    def _take(self, path: Path, wts: dict[Path, dict[str, str]], fd: int, slot: Path | None) -> Path | None:
        """Move a free worktree (``slot``, reserved, else any) to ``path`` (nothing is there; the caller
        holds the flock); the free one it was, or None if none."""
        while True:
            with self._lock:
                if not self._adopted:
                    self._adopt(wts, fd)
                if slot is None:
                    slot = self._free.pop() if self._free else None
            if slot is None:
                return None
            if self._move(slot, path, fd):
                return slot
            self._drop(slot, fd)  # made unusable behind our back: the next one
            slot = None

    def _give(self, path: Path, fd: int, known: Known | None) -> None:
        """The worktree at ``path`` back to the free ones (its work is on its branch, or there was none)."""
        slot = self._name(fd)
        if not self._move(path, slot, fd):
            self.wt.drop_worktree(path, fd)  # not a worktree git knows any more: it goes
            return
        with self._changed:
            if known is not None:
                self._known[slot] = known
            self._free.append(slot)
            self._changed.notify_all()

    def _move(self, src: Path, dst: Path, fd: int) -> bool:
        """``git worktree move -f src dst`` (nothing at ``dst``; the caller holds the flock); False when git
        refuses. Done as git 2.39 does it, without a git process, when the links are the plain ones git
        writes (``admin``): the folder renamed, then the back link of its admin folder (``gitdir``)
        rewritten, the worktree's ``.git`` unchanged. A kill between the two leaves what git's own move
        leaves (a folder git does not list, an entry git calls prunable: ``_adopt`` and ``drain``
        repair both). Anything else, git moves: a worktree locked or holding submodules (git refuses),
        relative links, another entry naming ``dst`` (a move a kill cut short: git's ``-f`` drops it)."""
        admin = self._admin(src, dst)
        if admin is None:
            return self.git("worktree", "move", "-f", str(src), str(dst), fd=fd, check=False).returncode == 0
        os.rename(src, dst)
        atomic_write(admin / "gitdir", f"{_real(dst)}/.git\n", durable=False)
        return True

    def _admin(self, src: Path, dst: Path) -> Path | None:
        """The admin folder of the worktree at ``src`` when ``_move`` may move it by hand to ``dst``."""
        try:
            dotgit = (src / ".git").read_text()
        except (OSError, UnicodeDecodeError):
            return None
        admin = Path(dotgit.removeprefix("gitdir: ").strip())
        admins = self.wt.common_dir / "worktrees"
        if (not dotgit.startswith("gitdir: ") or not admin.is_absolute() or admin.parent != admins
                or (admin / "locked").exists() or (admin / "modules").exists() or dst.exists() or dst.is_symlink()):
            return None
        target = f"{_real(dst)}/.git"
        for entry in admins.iterdir():
            try:
                back = (entry / "gitdir").read_text().strip()
            except OSError:
                continue
            if entry.name == admin.name:
                if back != f"{_real(src)}/.git":
                    return None
            elif back == target or not os.path.isabs(back):
                return None
        return admin

    def _name(self, fd: int) -> Path:
        """A free ``_pool-N`` path (something a kill left there goes)."""
        with self._lock:
            self._serial += 1
            slot = self.wt.base_dir / f"{PREFIX}{self._serial}"
        if slot.exists() or slot.is_symlink():
            self._drop(slot, fd)
        return slot

    def _warm(self, count: int) -> None:
        """``warm``'s thread: the worktrees added at once under the flock, filled outside it, in parallel."""
        made: list[Path] = []
        try:
            with self.wt.locked() as fd:
                if not self._ready:
                    self.wt.setup_integration(fd)
                    self._ready = True
                tip = self.wt.tip(self.wt.integration)
                wts = self.git.worktrees()
                with self._lock:
                    if not self._adopted:
                        self._adopt(wts, fd)
                    need = count - len(self._free)
                    self._promised = max(0, need)
                for _ in range(need):
                    slot = self._name(fd)
                    self.git("worktree", "add", "-f", "-q", "--no-checkout", "--detach", str(slot), str(tip), fd=fd)
                    made.append(slot)
                with self._changed:
                    self._promised = len(made)
            fillers = [threading.Thread(target=self._fill, args=(slot, str(tip)), daemon=True) for slot in made]
            for t in fillers:
                t.start()
            for t in fillers:
                t.join()
        except TeamError as e:  # a task's prepare makes its own worktree instead
            log.warning("could not make worktrees ahead of the tasks: %s", e)
        finally:
            with self._changed:
                self._promised = 0
                self._changed.notify_all()

    def _fill(self, slot: Path, tip: str) -> None:
        done = self.git("checkout", "-q", "-f", "--detach", tip, cwd=slot, check=False).returncode == 0
        with self._changed:
            self._promised = max(0, self._promised - 1)
            if done:
                self._known[slot] = Known(tip, leftovers=False)
                self._free.append(slot)  # else drain removes it with the others
            self._changed.notify_all()

    def _adopt(self, wts: dict[Path, dict[str, str]], fd: int) -> None:
        """Free worktrees a killed run left: kept when healthy, else removed. Holds ``_lock``."""
        self._adopted = True
        for slot in sorted(self.wt.base_dir.glob(f"{PREFIX}*")):
            info = wts.get(slot.resolve())
            number = slot.name[len(PREFIX):]
            self._serial = max(self._serial, int(number) if number.isdigit() else 0)
            if info is not None and "prunable" not in info and "locked" not in info and (slot / ".git").is_file():
                self._free.append(slot)
            else:
                self._drop(slot, fd)

    def _drop(self, slot: Path, fd: int) -> None:
        self._known.pop(slot, None)
        self.git("worktree", "remove", "-f", "-f", str(slot), fd=fd, check=False)
        if slot.is_dir() and not slot.is_symlink():
            shutil.rmtree(slot)
        elif slot.exists() or slot.is_symlink():
            slot.unlink()


def _real(path: Path) -> str:
    """``path`` with its folder's symlinks resolved, as git records a worktree's place (``strbuf_realpath``)."""
    return str(path.parent.resolve() / path.name)
