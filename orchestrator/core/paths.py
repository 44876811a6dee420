"""Where state lives: ``--root DIR``, else ``$TEAM_ROOT``, else the current directory.

    <root>/.tasks/task_<id>.json   one task per file (see tasks/store.py)
    <root>/.tasks/events.jsonl     append-only transition log
    <root>/.team/config.json       roster (see team/roster.py)
    <root>/.team/inbox/<name>.jsonl
    <root>/.team/jobs/             background job records and logs (see jobs/manager.py)
    <root>/.team/materialising/<plan>.json   a plan's tasks being created (see run/materialise.py)

Paths stored in the state (a task's ``cwd`` and ``worktree``, an agent
worktree's ``path``) are relative to the root when they lie inside it
(``stored``), so a repository moved or copied with its state resumes where
it is; ``at_root`` reads them back, and reads the absolute paths older
stores hold (and paths outside the root, which did not move with it) as
they are.
"""

from __future__ import annotations

import os
from pathlib import Path


def resolve_root(root: str | os.PathLike[str] | None = None) -> Path:
    if root is not None:
        return Path(root).absolute()
    env = os.environ.get("TEAM_ROOT")
    if env:
        return Path(env).absolute()
    return Path.cwd()


def tasks_dir(root: Path) -> Path:
    return root / ".tasks"


def team_dir(root: Path) -> Path:
    return root / ".team"


def creation_record(root: Path, plan: str) -> Path:
    """Exists while the creation of ``plan``'s tasks is under way (run/materialise.py); survives a kill."""
    return team_dir(root) / "materialising" / f"{plan}.json"


def stored(path: str | os.PathLike[str], root: Path) -> str:
    """``path`` as the state stores it: relative to ``root`` (``.`` for the root) when inside it, else absolute."""
    p = Path(os.path.abspath(path))
    base = Path(os.path.abspath(root))
    try:
        return p.relative_to(base).as_posix() or "."
    except ValueError:
        pass
    try:  # the same folder reached through a symlink
        return p.resolve().relative_to(base.resolve()).as_posix() or "."
    except ValueError:
        return str(p)


def at_root(value: str, root: Path) -> Path:
    """A stored path as a path to use: a relative one under ``root``, an absolute one as it is."""
    return Path(root) / value
