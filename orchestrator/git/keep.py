"""What a worktree task's result keeps: its ``outputs:`` globs, and build junk it should not commit.

A task of a plan with ``isolation: worktree`` runs in its own checkout, and
what it changes there is committed and merged (``git add -A``), so what a
check leaves behind (``__pycache__/``, ``.pytest_cache/`` in a repository
without a ``.gitignore``) reaches the integration branch, and ``team land``
brings it into the user's branch. Two things here:

* ``commit_outputs``: a task that declares ``outputs:`` keeps only the
  changes to paths matching them, relative to the task's folder; every other
  change it made since its fork point (uncommitted, or in commits of its
  own) is left out of its result, and its checkout is cleaned, so the kept
  worktree is not "dirty" for a later run. ``outputs: []`` keeps nothing: a
  check. Matching is pathlib glob's, as on ``--backend ray`` (which brings
  back the files matching the same globs): ``*`` and ``?`` within one path
  component, ``**`` any number of them, and a folder that matches keeps
  everything under it (``dist`` keeps ``dist/app.whl``).
* ``junk``: the paths a task *added* that look like build output (``JUNK``),
  grouped by pattern, for the run's warning; ``added_by_merges`` lists what
  each of a run's merges added, in one ``git log`` after the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from .worktrees import Worktrees

JUNK: tuple[str, ...] = (
    "__pycache__/", "*.pyc", "*.pyo", ".pytest_cache/", "*.egg-info/", ".eggs/", ".mypy_cache/",
    ".ruff_cache/", ".hypothesis/", ".tox/", ".nox/", ".coverage", ".coverage.*", "htmlcov/",
    "node_modules/", ".ipynb_checkpoints/", ".DS_Store", "Thumbs.db", "*.swp",
)
"""Build and tool output that rarely belongs in a commit: a folder (``name/``) anywhere in the path, or
a file name pattern."""


def _parts(pattern: str) -> list[str]:
    return [p for p in pattern.split("/") if p not in ("", ".")]


def _match(parts: list[str], pats: list[str]) -> bool:
    if not pats:
        return not parts
    if pats[0] == "**":
        return any(_match(parts[i:], pats[1:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], pats[0]) and _match(parts[1:], pats[1:])


def matches(path: str, globs: list[str]) -> bool:
    """Whether ``path`` (relative to the task's folder, ``/``-separated) or a folder above it matches a glob."""
    parts = _parts(path)
    pats = [_parts(g) for g in globs]
    return any(_match(parts[:n], pat) for pat in pats for n in range(1, len(parts) + 1))


def junk_pattern(path: str) -> str | None:
    """The ``JUNK`` pattern ``path`` matches (the first), or None."""
    parts = _parts(path)
    for pattern in JUNK:
        if pattern.endswith("/"):
            if any(fnmatchcase(p, pattern[:-1]) for p in parts[:-1]):
                return pattern
        elif parts and fnmatchcase(parts[-1], pattern):
            return pattern
    return None


@dataclass(frozen=True)
class Junk:
    """The paths a task added that look like build output."""

    paths: list[str] = field(default_factory=list)
    patterns: list[str] = field(default_factory=list)  # the JUNK patterns they match, most paths first


def junk(paths: list[str]) -> Junk:
    by: dict[str, list[str]] = {}
    for path in paths:
        pattern = junk_pattern(path)
        if pattern is not None:
            by.setdefault(pattern, []).append(path)
    ranked = sorted(by, key=lambda p: (-len(by[p]), JUNK.index(p)))
    return Junk([p for pattern in ranked for p in by[pattern]], ranked)


def fork_of(wt: Worktrees, task: str) -> str:
    """The commit the task's branch forked from (recorded, else where it meets the integration branch)."""
    return wt.fork(task) or wt.git("merge-base", wt.integration, wt.branch(task)).stdout.strip()


HEAD_MARK = "\x01merge "


def added_by_merges(wt: Worktrees, since: str | None) -> dict[str, list[str]]:
    """Task -> the paths its merge added to the integration branch, for the merges after ``since`` (the
    tip when the run began; None: all), oldest first: one git call for a whole run, after it."""
    if wt.git.rev(wt.integration) is None:
        return {}
    span = f"{since}..{wt.integration}" if since else wt.integration
    out = wt.git("log", "--reverse", "--first-parent", "-m", "--no-renames", "--name-only", "--diff-filter=A",
                 "-z", f"--format={HEAD_MARK}%(trailers:key=Team-Task,valueonly,separator=)", span).stdout
    found: dict[str, list[str]] = {}
    task = None
    for entry in out.split("\0"):
        entry = entry.lstrip("\n")
        if entry.startswith(HEAD_MARK):
            task = entry[len(HEAD_MARK):].strip() or None
        elif entry and task is not None:
            found.setdefault(task, []).append(entry)
    return found


def commit_outputs(wt: Worktrees, task: str, message: str, globs: list[str], folder: str) -> list[str]:
    """Commit only the task's changes to paths matching ``globs`` (relative to ``folder``, the task's
    folder in its worktree, ``.`` for the top); the other changes since its fork point are left out
    and its checkout is cleaned. The paths left out."""
    path = wt.path(task)
    git = wt.git
    git("add", "-A", cwd=path)
    fork = fork_of(wt, task)
    changed = [p for p in git("diff", "--cached", "--name-only", "--no-renames", "-z", fork, cwd=path).stdout
               .split("\0") if p]
    top = PurePosixPath(folder)

    def kept(p: str) -> bool:
        if folder in ("", "."):
            return matches(p, globs)
        rel = PurePosixPath(p)
        return top in rel.parents and matches(str(rel.relative_to(top)), globs)

    drop = [p for p in changed if not kept(p)]
    literal = {"GIT_LITERAL_PATHSPECS": "1"}
    if drop:
        git("reset", "-q", fork, "--pathspec-from-file=-", "--pathspec-file-nul", cwd=path, env=literal,
            input="\0".join(drop))
    if git("diff", "--cached", "--quiet", "HEAD", cwd=path, check=False).returncode:
        git("commit", "-q", "--no-verify", "-m", message, cwd=path)
    git("reset", "-q", "--hard", "HEAD", cwd=path)
    git("clean", "-q", "-fd", cwd=path)
    return drop
