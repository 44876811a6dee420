"""Helpers shared by the CLI modules: the ``--root`` option, output, JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..core.paths import resolve_root
from ..core.text import shown

RootOpt = Annotated[
    Path | None,
    typer.Option(
        "--root",
        help="State root holding .tasks/ and .team/ (default: $TEAM_ROOT, else the current directory).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def root_of(root: Path | None, ctx: typer.Context) -> Path:
    """The state root: this command's ``--root``, else ``team --root DIR`` (kept on the
    command's context by the app's callback, never in the environment), else $TEAM_ROOT,
    else the current directory."""
    if root is None:
        given = ctx.find_root().obj
        root = given if isinstance(given, Path) else None
    return resolve_root(root)


def out(text: str = "") -> None:
    """Plain output on stdout. Fields from users, plans and models are escaped where they are
    formatted (core.text.shown); as a last guard no control character but newline and tab
    reaches the terminal from here."""
    sys.stdout.write(shown(text, lines=True) + "\n")


def err(text: str) -> None:
    sys.stderr.write(shown(text, lines=True) + "\n")


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2) + "\n")
