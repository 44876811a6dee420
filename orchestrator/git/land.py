"""``team land``: bring a plan's result into the user's current branch, or refuse.

    squash     one commit: a title, the tasks' subjects, one ``Team-Task:`` trailer per task
    per-task   one commit per task, in merge order: its subject and its ``Team-Task:`` trailer

This is the one place ``team`` writes to the user's checkout, and it is careful:

1. Build. The commits are made off to the side, in a scratch worktree (``_land``)
   detached at the user's ``HEAD``: each step of the integration branch since the
   plan's base (history.py) is cherry-picked onto it (``-m 1`` for a task's merge).
   If the user's branch moved since the plan started and a step no longer applies,
   the land is refused naming the files; nothing was changed.
2. Check. Every path the land changes must hold, in the user's index and working
   tree, the committed version, the landed version or (``--include-uncommitted``)
   the snapshot's version, compared as git compares them: mode and object id, so a
   deletion (``git rm``, ``rm``), a mode change (``chmod +x``) or a type change
   (a file made a symlink), staged or not, counts like an edit. Anything else is
   work the land would overwrite: refused, naming the paths. A detached ``HEAD``, a branch that does not contain the plan's
   base, a ``.git/index.lock`` held by a running git: refused too. Every refusal
   comes before step 3, so "nothing was changed" holds: no intent is left for
   ``team run`` to call an interrupted land.
3. Record the intent (``land.json``: branch, from, to, the commit of each task) in
   the plan's worktree folder.
4. Apply. The changed paths are written into the user's checkout (``git checkout TO
   -- PATHS``, ``git rm`` for deletions), then the branch moves with a
   compare-and-set ``update-ref BRANCH TO FROM``.
5. The caller records the landing in the task store, then ``finish`` deletes the
   plan's branches and worktrees, and the intent last.

Killed at any instant, ``team land`` again finishes the recorded land: when the
branch already moved only step 5 is left; otherwise steps 2 and 4 run again, and
step 2 then also accepts a file that is missing or holds a prefix of its landed
version (a write that was cut short): nothing the user wrote is overwritten. The
killed git's ``index.lock``, and the branch's lock and ``HEAD.lock`` its ``update-ref``
left, are removed only when no process holds them open.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..core.errors import UserError
from ..core.fsutil import atomic_write
from .history import History
from .worktrees import TRAILER, Worktrees, drop_unheld

MODES = ("squash", "per-task")
ZERO = "0" * 40
Entry = tuple[str, str]
"""A path's entry as git compares it: (mode, object id)."""
ABSENT: Entry = ("000000", ZERO)
CONFLICT: Entry = ("conflict", "")  # an index path with unmerged stages
DIRECTORY: Entry = ("directory", "")  # a directory in the working tree where the land writes a file


def _entry(mode: str, oid: str) -> Entry:
    return ABSENT if oid == ZERO else (mode, oid)


class LandRefused(UserError):
    """The land would lose work or cannot apply; nothing was changed. The message says what to do."""


@dataclass
class Intent:
    """``land.json``: a land under way."""

    branch: str  # refs/heads/<the user's branch>
    old: str  # its commit before
    new: str  # its commit after
    mode: str
    tasks: dict[str, str] = field(default_factory=dict)  # task -> the landed commit holding its change
    commits: list[str] = field(default_factory=list)  # "sha subject" of the landed commits, oldest first


@dataclass(frozen=True)
class Landing:
    """A finished land (``resumed``: it finished one a killed ``team land`` left)."""

    intent: Intent
    resumed: bool = False

    @property
    def empty(self) -> bool:
        return self.intent.old == self.intent.new


class Land:
    """Land one plan's integration branch into the user's current branch (module docstring)."""

    def __init__(self, wt: Worktrees):
        self.wt = wt
        self.git = wt.git
        self.top = wt.toplevel

    @property
    def intent_path(self) -> Path:
        return self.wt.base_dir / "land.json"

    def pending(self) -> Intent | None:
        """The land a killed ``team land`` left, if any."""
        try:
            return Intent(**json.loads(self.intent_path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as e:
            raise UserError(f"{self.intent_path} is unreadable ({e}): the land it recorded cannot be finished; "
                            f"check your branch with `git status` and `git log`, then remove the file") from None

    # ---------------------------------------------------------------- the land
    def land(self, mode: str, subjects: dict[str, str], title: str) -> Landing:
        """Build, check and apply (steps 1-4); ``subjects``: task -> commit subject."""
        if mode not in MODES:
            raise UserError(f"unknown land mode {mode!r}: use one of {', '.join(MODES)}")
        with self.wt.locked() as fd:
            branch = self._branch()
            intent = self.pending()
            if intent is not None:
                cur = self.git.rev(intent.branch)
                if cur == intent.new:
                    self._killed_ref_locks(intent)  # its update-ref was killed after the branch moved
                    return Landing(intent, resumed=True)
                if cur == intent.old and branch == intent.branch:
                    self._apply(intent, fd, recovering=True)
                    return Landing(intent, resumed=True)
                self.intent_path.unlink()  # the user moved on after a killed land: start again
            intent = self._build(branch, mode, subjects, title, fd)
            if intent.old == intent.new:
                return Landing(intent)
            self._check(intent, recovering=False)
            self._index_lock(recovering=False)  # every refusal comes before the intent is recorded
            atomic_write(self.intent_path, json.dumps(asdict(intent), indent=1) + "\n")
            try:
                self._apply(intent, fd, recovering=False)
            except LandRefused:  # a git took the index lock since: refused before anything was written
                self.intent_path.unlink(missing_ok=True)
                raise
            return Landing(intent)

    def finish(self) -> None:
        """Step 5: delete the plan's branches and worktrees, then the intent."""
        self.wt.reset()
        self.intent_path.unlink(missing_ok=True)

    # ---------------------------------------------------------------- 1. build
    def _branch(self) -> str:
        ref = self.git("symbolic-ref", "-q", "HEAD", cwd=self.top, check=False).stdout.strip()
        if not ref.startswith("refs/heads/"):
            raise LandRefused(f"your checkout {self.top} has a detached HEAD: check out the branch to land "
                              f"plan {self.wt.plan} into (`git switch BRANCH`), then `team land` again")
        if self.git.rev(ref) is None:
            raise LandRefused(f"your branch {ref.removeprefix('refs/heads/')} has no commit yet: nothing to land on")
        return ref

    def _build(self, branch: str, mode: str, subjects: dict[str, str], title: str, fd: int) -> Intent:
        wt = self.wt
        if self.git.rev(wt.integration) is None:
            raise LandRefused(f"plan {wt.plan} has no integration branch {wt.integration}: nothing to land "
                              f"(run the plan first)")
        head = self.git.rev(branch)
        assert head is not None
        name = branch.removeprefix("refs/heads/")
        base = wt.base()
        if base is not None and not self.git.is_ancestor(base.commit, head):
            started = f" on {base.branch.removeprefix('refs/heads/')}" if base.branch else ""
            raise LandRefused(f"your branch {name} does not contain {base.commit[:10]}, the commit plan {wt.plan} "
                              f"started from{started}: check out a branch that does, then `team land` again (or "
                              f"take the result by hand: `git cherry-pick -m 1 MERGE` per task)")
        kept = [k for k in (wt.kept(t) for t in wt.task_branches())
                if k is not None and k.commits and not self.git.is_ancestor(k.tip, wt.integration)]
        if kept:
            raise LandRefused(f"branches with work not on {wt.integration}: "
                              f"{', '.join(k.branch for k in kept)}; merge them (`team run`) or drop them "
                              f"(`team run PLAN --redo TASK`) before landing")
        steps = History(wt).steps()
        intent = Intent(branch, head, head, mode)
        if not steps:
            return intent
        work = wt.scratch("land", head, fd)
        try:
            for s in steps:
                pick = ["cherry-pick", "--no-commit", *(["-m", "1"] if len(s.parents) == 2 else []), s.sha]
                proc = self.git(*pick, cwd=work, check=False, fd=fd)
                if proc.returncode:
                    files = self.git("diff", "--name-only", "--diff-filter=U", cwd=work, fd=fd).stdout.split()
                    raise LandRefused(
                        f"your branch {name} moved since plan {wt.plan} started and "
                        + (f"conflicts with its result in {', '.join(files)}" if files else
                           f"the result does not apply to it ({(proc.stderr or proc.stdout).strip()})")
                        + f"; nothing was changed. Merge it yourself: git merge {wt.integration}")
                if mode == "per-task":
                    if s.is_task_merge and s.task is not None:
                        message = f"{subjects.get(s.task) or s.task}\n\n{TRAILER}: {s.task}\n"
                    else:
                        message = self.git("log", "-1", "--format=%B", s.sha).stdout
                    sha = self._commit(work, message, fd)
                    if sha is not None:
                        intent.commits.append(f"{sha} {message.splitlines()[0]}")
                    if s.task is not None and s.is_task_merge:
                        intent.tasks[s.task] = sha or self.git("rev-parse", "HEAD", cwd=work).stdout.strip()
            if mode == "squash":
                lines = [f"- {subjects.get(s.task) or s.task}" if s.is_task_merge and s.task else f"- {s.subject}"
                         for s in steps]
                trailers = "".join(f"{TRAILER}: {s.task}\n" for s in steps if s.is_task_merge and s.task)
                message = f"{title}\n\n" + "\n".join(lines) + "\n\n" + trailers
                sha = self._commit(work, message, fd)
                if sha is not None:
                    intent.commits.append(f"{sha} {title}")
                tip = sha or head
                intent.tasks = {s.task: tip for s in steps if s.is_task_merge and s.task}
            intent.new = self.git("rev-parse", "HEAD", cwd=work).stdout.strip()
        finally:
            wt.drop_worktree(work, fd)
            self.git("worktree", "prune", fd=fd)
        return intent

    def _commit(self, work: Path, message: str, fd: int) -> str | None:
        if self.git("diff", "--cached", "--quiet", cwd=work, check=False).returncode == 0:
            return None  # the change is already in the user's branch
        self.git("commit", "-q", "--no-verify", "-F", "-", cwd=work, input=message, fd=fd)
        return self.git("rev-parse", "HEAD", cwd=work).stdout.strip()

    # ---------------------------------------------------------------- 2. check
    def _changes(self, intent: Intent) -> list[tuple[str, Entry, Entry]]:
        """(path, old entry, new entry) for every path the land changes (``ABSENT``: no file)."""
        out = self.git("diff", "--raw", "-z", "--no-renames", "--no-abbrev", intent.old, intent.new,
                       cwd=self.top).stdout.split("\0")
        changes = []
        for meta, path in zip(out[0::2], out[1::2], strict=False):
            if meta.startswith(":"):
                old_mode, new_mode, old, new, _ = meta[1:].split(" ", 4)
                changes.append((path, _entry(old_mode, old), _entry(new_mode, new)))
        return changes

    def _check(self, intent: Intent, recovering: bool) -> None:
        """Refuse unless every path the land changes holds, in the index and in the working tree, an
        entry (mode and object id, as git compares them) it may overwrite; see the module docstring."""
        changes = self._changes(intent)
        if not changes:
            return
        paths = [p for p, _, _ in changes]
        base = self.wt.base()
        snap = base.snapshot if base is not None else None
        snapped = self._tree_entries(snap, paths) if snap else {}
        index = self._index()
        worktree = self._worktree_entries(paths, index)
        lost = []
        for path, old, new in changes:
            ok = {old, new} | ({snapped.get(path, ABSENT)} if snap else set())
            staged = index.get(path, ABSENT)
            here = worktree.get(path, ABSENT)
            cut_short = recovering and (here == ABSENT or here[0] == new[0] and self._prefix_of(path, new))
            if staged not in ok or (here not in ok and not cut_short):
                lost.append(path)
        if lost:
            shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
            raise LandRefused(f"your checkout has changes the land would overwrite in {shown}: commit or stash "
                              f"them (`git stash -u`), then `team land` again; nothing was changed")

    def _index(self) -> dict[str, Entry]:
        """The user's index: path -> (mode, object id); a path in conflict gets ``CONFLICT``."""
        out = self.git("ls-files", "-s", "-z", cwd=self.top).stdout.split("\0")
        index: dict[str, Entry] = {}
        for entry in out:
            if not entry:
                continue
            meta, path = entry.split("\t", 1)
            mode, oid, stage = meta.split(" ")
            index[path] = (mode, oid) if stage == "0" else CONFLICT
        return index

    def _worktree_entries(self, paths: list[str], index: dict[str, Entry]) -> dict[str, Entry]:
        """What the user's working tree holds at ``paths``, as git would stage it: a symlink is
        ``120000`` and the object of its target, a file ``100755`` when its owner may execute it
        (else ``100644``; with ``core.fileMode`` off, the index's mode) and the object ``git add``
        would make of it (filters applied), a directory ``DIRECTORY``. Absent ones (also under a
        parent that is no directory) are left out."""
        filemode = self.git("config", "--type=bool", "core.filemode", cwd=self.top,
                            check=False).stdout.strip() != "false"
        found: dict[str, Entry] = {}
        files: list[tuple[str, str]] = []
        for p in paths:
            full = self.top / p
            if any(parent.is_symlink() or not parent.is_dir()
                   for parent in list(full.parents)[:len(Path(p).parts) - 1]):
                continue
            try:
                st = full.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                found[p] = ("120000", self.git("hash-object", "--stdin", "--no-filters", input=os.readlink(full),
                                               cwd=self.top).stdout.strip())
            elif stat.S_ISDIR(st.st_mode):
                found[p] = DIRECTORY
            elif not filemode and index.get(p, ABSENT)[0] in ("100644", "100755"):
                files.append((p, index[p][0]))
            else:
                files.append((p, "100755" if st.st_mode & stat.S_IXUSR else "100644"))
        if files:
            hashes = self.git("hash-object", "--stdin-paths", cwd=self.top, input="".join(f"{p}\n" for p, _ in files))
            found.update((p, (mode, oid)) for (p, mode), oid in zip(files, hashes.stdout.split(), strict=True))
        return found

    def _tree_entries(self, commit: str, paths: list[str]) -> dict[str, Entry]:
        out = self.git("ls-tree", "-r", "-z", "--full-tree", commit, cwd=self.top).stdout.split("\0")
        wanted = set(paths)
        entries = {}
        for entry in out:
            if entry:
                meta, path = entry.split("\t", 1)
                if path in wanted:
                    mode, _, oid = meta.split(" ")
                    entries[path] = (mode, oid)
        return entries

    def _prefix_of(self, path: str, entry: Entry) -> bool:
        """The file at ``path`` holds the first bytes of ``entry``'s blob (a checkout write cut short)."""
        if entry == ABSENT or entry[0] not in ("100644", "100755"):
            return False
        full = self.top / path
        if full.is_symlink():
            return False
        try:
            here = full.read_bytes()
        except OSError:
            return False
        return self.git.blob(entry[1]).startswith(here)

    # ---------------------------------------------------------------- 4. apply
    def _apply(self, intent: Intent, fd: int, recovering: bool) -> None:
        if recovering:
            self._check(intent, recovering=True)
        self._index_lock(recovering)
        changes = self._changes(intent)
        literal = {"GIT_LITERAL_PATHSPECS": "1"}
        written = [p for p, _, new in changes if new != ABSENT]
        deleted = [p for p, _, new in changes if new == ABSENT]
        if written:
            self.git("checkout", intent.new, "--pathspec-from-file=-", "--pathspec-file-nul", cwd=self.top,
                     env=literal, input="\0".join(written), fd=fd)
        if deleted:
            self.git("rm", "-q", "-f", "--ignore-unmatch", "--pathspec-from-file=-", "--pathspec-file-nul",
                     cwd=self.top, env=literal, input="\0".join(deleted), fd=fd)
        if recovering:
            self._killed_ref_locks(intent)
        self.git("update-ref", "-m", f"team land {self.wt.plan}", intent.branch, intent.new, intent.old, fd=fd)

    def _killed_ref_locks(self, intent: Intent) -> None:
        """The locks the killed land's ``update-ref`` of your branch left and no process holds: the branch's,
        and your checkout's ``HEAD.lock`` (git locks ``HEAD`` too to log the move in its reflog, and
        unlocks both at the end: a kill after the branch moved leaves ``HEAD.lock`` alone, and every
        later git command that moves ``HEAD`` fails on it)."""
        drop_unheld(self.wt.common_dir / f"{intent.branch}.lock")
        head_lock = Path(self.git("rev-parse", "--git-path", "HEAD.lock", cwd=self.top).stdout.strip())
        drop_unheld(head_lock if head_lock.is_absolute() else self.top / head_lock)

    def _index_lock(self, recovering: bool) -> None:
        lock = Path(self.git("rev-parse", "--git-path", "index.lock", cwd=self.top).stdout.strip())
        if not lock.is_absolute():
            lock = self.top / lock
        if not lock.exists():
            return
        if recovering and drop_unheld(lock):  # left by the git of the killed land: nobody holds it
            return
        raise LandRefused(f"{lock} exists: a git command is running in your checkout; wait for it to end "
                          f"(or remove the file if none is), then `team land` again; nothing was changed")

