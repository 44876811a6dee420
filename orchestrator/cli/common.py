"""Helpers shared by the CLI modules: the ``--root`` option, output, JSON."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from ..core.jsonutil import pretty
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
    sys.stdout.write(pretty(obj) + "\n")  # json.dumps(obj, ensure_ascii=False, indent=2), faster


def silence(stream: IO[str]) -> None:
    """``stream``'s reader went away (a closed pipe): send whatever is still written to it,
    buffered or to come, to /dev/null, so no later write or flush fails."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, stream.fileno())
    finally:
        os.close(null)


def write_guarded(stream: IO[str], text: str) -> None:
    """Write and flush ``text``; a closed pipe silences ``stream`` instead of raising
    (``team run --json | head -3`` runs on to its end)."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        silence(stream)
