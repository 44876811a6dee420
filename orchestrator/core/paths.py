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

A root named with ``--root`` is checked before a command uses it (``check_root``), so a typo
does not quietly start a new, empty store. A command that only reads or changes the state
(``task list``, ``status``, ``send``, ``mcp`` ...) needs a store there (``.tasks/`` or
``.team/``). The commands that create state (``task create``, ``run``, ``spawn``, ``chat``,
``mcp --init``) make it, and the directory too when it is missing, unless a store with a
close name sits next to it: then the path is taken for a typo and refused (a new project with
such a name starts once its directory exists). The refusal names the fix: the store probably
meant ("did you mean"), or the command that creates one. ``$TEAM_ROOT`` and the
current directory are taken as they are: they are set on purpose, not typed per command.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from .errors import UserError


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


def is_store(root: Path) -> bool:
    """``root`` holds team state: ``.tasks/`` or ``.team/``."""
    return tasks_dir(root).is_dir() or team_dir(root).is_dir()


def check_root(root: Path, *, creates: bool) -> None:
    """Refuse a ``--root`` that is not a directory, or (unless the command ``creates`` state) one
    that holds no store, naming the fix (see the module docstring)."""
    if root.is_dir() and (creates or is_store(root)):
        return
    typo = _sibling(root)
    guess = typo or _holder(root)
    hint = f"did you mean {guess}? " if guess is not None else ""
    if root.exists() and not root.is_dir():
        raise UserError(f"--root {root} is a file, not a directory; {hint}give the project's directory")
    if not root.exists():
        if creates and typo is None:
            return  # a new project: the command makes the directory and the store
        raise UserError(f"--root {root} does not exist; {hint}(to start a new project there, create the "
                        "directory first)")
    raise UserError(f"--root {root} holds no team state (no .tasks/ or .team/); {hint}a new project starts "
                    "with `team task create`, `team run PLAN` or `team mcp --init`")


def _holder(root: Path) -> Path | None:
    """The nearest parent of ``root`` that holds a store, if any."""
    return next((p for p in root.parents if is_store(p)), None)


def _sibling(root: Path) -> Path | None:
    """A directory next to ``root`` (under its nearest existing parent) that holds a store and
    whose name is close to ``root``'s there: ``root`` is probably a typo of it."""
    parent = next((p for p in root.parents if p.is_dir()), None)
    if parent is None:
        return None
    want = root.relative_to(parent).parts[0]
    try:
        names = [p.name for p in parent.iterdir() if p.name != want and p.is_dir() and is_store(p)]
    except OSError:
        return None
    close = difflib.get_close_matches(want, names, n=1, cutoff=0.6)
    return parent / close[0] if close else None
