"""Helpers shared by the typer command modules: the ``--root`` and ``--json`` options; the output
helpers of ``output`` (typer-free, for the fast path too) are re-exported here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..core.paths import check_root, resolve_root
from .output import err, out, print_json, silence, write_guarded

__all__ = ["JsonOpt", "RootOpt", "err", "exit_with", "out", "print_json", "root_of", "silence", "write_guarded"]

RootOpt = Annotated[
    Path | None,
    typer.Option(
        "--root",
        help="State root holding .tasks/ and .team/ (default: $TEAM_ROOT, else the current directory).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def root_of(root: Path | None, ctx: typer.Context, *, creates: bool = False) -> Path:
    """The state root: this command's ``--root``, else ``team --root DIR`` (kept on the
    command's context by the app's callback, never in the environment), else $TEAM_ROOT,
    else the current directory. A ``--root`` is checked (core/paths.py ``check_root``): it must
    exist, and hold a store unless the command ``creates`` one."""
    if root is None:
        given = ctx.find_root().obj
        root = given if isinstance(given, Path) else None
    resolved = resolve_root(root)
    if root is not None:
        check_root(resolved, creates=creates)
    return resolved


def exit_with(code: int) -> None:
    """End a typer command with ``code`` (a typer-free body's return value; 0 returns normally)."""
    if code:
        raise typer.Exit(code)
