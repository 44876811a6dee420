"""What commands print, without typer (the fast path of cli/fast.py prints through here too)."""

from __future__ import annotations

import os
import sys
from typing import IO, Any

from ..core.jsonutil import listing, pretty
from ..core.text import shown


def out(text: str = "") -> None:
    """Plain output on stdout. Fields from users, plans and models are escaped where they are
    formatted (core.text.shown); as a last guard no control character but newline and tab
    reaches the terminal from here."""
    sys.stdout.write(shown(text, lines=True) + "\n")


def err(text: str) -> None:
    sys.stderr.write(shown(text, lines=True) + "\n")


def print_json(obj: Any) -> None:
    """``--json`` output: a list of records (``task list``, ``jobs``...) one record per line
    (``jsonutil.listing``), anything else indented (``jsonutil.pretty``)."""
    if isinstance(obj, list) and obj and all(isinstance(item, dict) for item in obj):
        sys.stdout.write(listing(obj))
    else:
        sys.stdout.write(pretty(obj) + "\n")


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
