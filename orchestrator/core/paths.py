"""Where state lives: ``--root DIR``, else ``$TEAM_ROOT``, else the current directory.

    <root>/.tasks/task_<id>.json   one task per file (see tasks/store.py)
    <root>/.tasks/events.jsonl     append-only transition log
    <root>/.team/config.json       roster (see team/roster.py)
    <root>/.team/inbox/<name>.jsonl
    <root>/.team/jobs/             background job records and logs (see jobs/manager.py)
    <root>/.team/materialising/<plan>.json   a plan's tasks being created (see run/materialise.py)
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
