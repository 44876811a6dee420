"""Running git for ``team``: one subprocess helper, a clean environment, clear errors.

* Always ``git -C DIR``; nothing depends on the caller's current directory.
* Location variables inherited from the caller (``GIT_DIR``, ``GIT_WORK_TREE``,
  ``GIT_INDEX_FILE``..., e.g. when ``team`` runs inside a git hook) are dropped,
  so a command can never act on another repository or index.
* Machine commands run with ``-c`` overrides: no hooks, no commit signing, no
  automatic gc or maintenance, no autostash, no fsmonitor (a user's
  ``core.fsmonitor=true`` would start a daemon per task worktree that outlives
  the task; a task's commit scans its worktree instead, which
  ``bench/refactor_bench.py --commit-cost`` measures). ``GIT_OPTIONAL_LOCKS=0`` keeps
  read-only commands (``status``) from rewriting an index; ``LC_ALL=C`` keeps
  messages stable; ``GIT_TERMINAL_PROMPT=0`` never waits for a password.
* When the repository has no author identity (a fresh CI box), commits are made
  as ``team <team@localhost>`` through ``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` in our
  environment only: git config is never written.
* A few read-only queries every caller needs (``rev``, ``is_ancestor``,
  ``dirty``, ``in_progress``, ``gitdir``, ``worktrees``) answer in plain values: a missing
  ref is ``None``, not an error.
* A failure raises ``GitError`` (a ``WorkFailed``, exit 1) carrying the command,
  the directory and git's stderr.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from ..core.errors import WorkFailed

LOCATION_VARS = {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                 "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX"}
OVERRIDES = ("-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "-c", "gc.auto=0",
             "-c", "maintenance.auto=false", "-c", "merge.autoStash=false", "-c", "core.fsmonitor=false")
FALLBACK_IDENTITY = {"NAME": "team", "EMAIL": "team@localhost"}
IN_PROGRESS = (("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick"), ("REVERT_HEAD", "revert"),
               ("rebase-merge", "rebase"), ("rebase-apply", "rebase"))
"""State files in a worktree's git directory while an operation waits for the user (what ``in_progress`` reads)."""
HALF_ADDED_TRIES = 50
"""Listings of worktrees tried while one entry is caught half written (20 ms apart)."""


class GitError(WorkFailed):
    """A git command failed; the message carries the command and git's stderr."""

    def __init__(self, args: list[str], cwd: Path, returncode: int, stderr: str):
        super().__init__(f"git {' '.join(args)} (in {cwd}) failed with exit {returncode}: "
                         f"{stderr.strip() or '(no output)'}")
        self.returncode, self.stderr = returncode, stderr


class Git:
    """``git(*args, cwd=..., check=..., fd=...)`` for the repository at ``cwd``."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if k not in LOCATION_VARS}
        self.env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")

    def __call__(self, *args: str, cwd: Path | None = None, check: bool = True,
                 fd: int | None = None, env: dict[str, str] | None = None,
                 input: str | None = None) -> subprocess.CompletedProcess:
        """Run git; ``fd`` is inherited by the child (a lock it must keep holding if we die);
        ``env`` adds variables for this one call (e.g. a scratch ``GIT_INDEX_FILE``)."""
        cwd = cwd or self.cwd
        proc = subprocess.run(["git", "-C", str(cwd), *OVERRIDES, *args], env={**self.env, **(env or {})},
                              text=True, capture_output=True, input=input,
                              pass_fds=(fd,) if fd is not None else ())
        if check and proc.returncode:
            raise GitError(list(args), cwd, proc.returncode, proc.stderr)
        return proc

    def ensure_identity(self) -> None:
        """Supply a fallback author/committer in our env when the repository has none."""
        for var, value in FALLBACK_IDENTITY.items():
            if self("config", f"user.{var.lower()}", check=False).returncode:
                self.env.setdefault(f"GIT_AUTHOR_{var}", value)
                self.env.setdefault(f"GIT_COMMITTER_{var}", value)

    # -- queries ------------------------------------------------------------------
    def rev(self, ref: str, cwd: Path | None = None) -> str | None:
        """The commit ``ref`` names, or None when there is none."""
        proc = self("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", cwd=cwd, check=False)
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def blob(self, sha: str) -> bytes:
        """The bytes of a blob (binary-safe)."""
        proc = subprocess.run(["git", "-C", str(self.cwd), *OVERRIDES, "cat-file", "blob", sha], env=self.env,
                              capture_output=True)
        if proc.returncode:
            raise GitError(["cat-file", "blob", sha], self.cwd, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc.stdout

    def is_ancestor(self, a: str, b: str) -> bool:
        return self("merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    def dirty(self, path: Path) -> bool:
        """Uncommitted work in the worktree at ``path``: changes (untracked files included), or a merge,
        cherry-pick, revert or rebase in progress (a conflict resolution whose result may equal ``HEAD``
        is work too); False if no worktree is there."""
        if not (path / ".git").exists():
            return False
        if self.in_progress(path):
            return True
        return bool(self("status", "--porcelain", "--untracked-files=all", cwd=path).stdout.strip())

    def in_progress(self, path: Path) -> str | None:
        """The operation under way in the worktree at ``path`` (``merge``, ``cherry-pick``, ``revert``,
        ``rebase``), from the state files git keeps in its git directory; None when there is none."""
        dot = path / ".git"
        if dot.is_file():  # a linked worktree: "gitdir: PATH"
            head, _, where = dot.read_text().partition(":")
            gitdir = (path / where.strip()) if head.strip() == "gitdir" else None
        else:
            gitdir = dot if dot.is_dir() else None
        if gitdir is None:
            return None
        for name, what in IN_PROGRESS:
            if (gitdir / name).exists():
                return what
        return None

    def gitdir(self, path: Path) -> Path | None:
        """The private git directory of the linked worktree at ``path``, or None."""
        if not (path / ".git").is_file():
            return None
        proc = self("rev-parse", "--absolute-git-dir", cwd=path, check=False)
        return Path(proc.stdout.strip()) if proc.returncode == 0 else None

    def worktrees(self) -> dict[Path, dict[str, str]]:
        """Registered worktrees: resolved path -> porcelain attributes (branch, locked, ...).

        ``git worktree add`` writes a new entry's files one by one, and ``worktree list`` fails
        on an entry caught half written ("failed to read .git/worktrees/NAME/commondir"); an
        add under another lock (another plan's, the agents' group) or by another process
        (``team doctor`` during a run) cannot be waited for, so such a listing is read again,
        for up to a second."""
        for _ in range(HALF_ADDED_TRIES):
            proc = self("worktree", "list", "--porcelain", check=False)
            if proc.returncode == 0 or "failed to read" not in proc.stderr:
                break
            time.sleep(0.02)
        if proc.returncode:
            raise GitError(["worktree", "list", "--porcelain"], self.cwd, proc.returncode, proc.stderr)
        out: dict[Path, dict[str, str]] = {}
        for block in proc.stdout.split("\n\n"):
            attrs = dict((line.split(" ", 1) + [""])[:2] for line in block.splitlines() if line)
            if "worktree" in attrs:
                out[Path(attrs["worktree"]).resolve()] = attrs
        return out
