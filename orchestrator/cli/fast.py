"""The fast path: ``team task list|create|update`` parsed without typer (issue 13).

A command line in exactly a shape this module knows runs its command's body
(taskcore.py) straight away; typer, click and pydantic are never imported
for a listing (typer builds a pydantic ``TypeAdapter`` per option it parses:
~45 ms of a cold 1,000-task ``task list --json``, a third of it). Anything
else returns ``None`` and the typer app runs the line as always, so every
error message, usage error and ``--help`` stays typer's. "Exactly" means:

* ``[--root DIR] task VERB`` then, in any order, the options of ``HOT[VERB]``
  (``--opt VALUE``, ``--opt=VALUE``, flags alone) and its arguments;
* each option at most once, unless it is repeatable (``--blocked-by``);
* a value that starts with ``-`` or is empty (for ``--root``), a number that
  is not plain decimal (``--estimate``), an unknown or abbreviated option,
  ``--``, ``-h``/``--help``, a missing value, too many or too few arguments:
  all left to typer.

The table below repeats the options typer declares for these three commands
(cli/tasks.py); tests/test_fast_cli.py compares it with typer's own parse
of the same commands, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.paths import resolve_root


@dataclass(frozen=True)
class Opt:
    names: tuple[str, ...]
    dest: str
    flag: bool = False
    many: bool = False
    number: bool = False


@dataclass(frozen=True)
class Hot:
    run: Callable[..., int]
    args: tuple[str, ...] = ()
    opts: tuple[Opt, ...] = ()
    by_name: dict[str, Opt] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for opt in self.opts:
            for name in opt.names:
                self.by_name[name] = opt


ROOT = Opt(("--root",), "root")
JSON = Opt(("--json",), "as_json", flag=True)
NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
"""What ``--estimate`` takes here: plain decimals (anything else, typer parses and judges)."""


def _list(root: Path, **kw: Any) -> int:
    from .taskcore import list_tasks

    return list_tasks(root, **kw)


def _create(root: Path, **kw: Any) -> int:
    from .taskcore import create_task

    return create_task(root, **kw)


def _update(root: Path, **kw: Any) -> int:
    from .taskcore import update_task

    return update_task(root, **kw)


HOT: dict[str, Hot] = {
    "list": Hot(_list, opts=(Opt(("--status",), "status"), Opt(("--owner",), "owner"),
                             Opt(("--ready",), "ready", flag=True), Opt(("--blocked",), "blocked", flag=True),
                             JSON, ROOT)),
    "create": Hot(_create, args=("subject",),
                  opts=(Opt(("-d", "--description"), "description"), Opt(("--blocked-by",), "blocked_by", many=True),
                        Opt(("--owner",), "owner"), Opt(("--name",), "name"),
                        Opt(("--estimate",), "estimate", number=True), JSON, ROOT)),
    "update": Hot(_update, args=("ref",),
                  opts=(Opt(("--status",), "status"), Opt(("--owner",), "owner"),
                        Opt(("--add-blocked-by",), "add_blocked_by", many=True),
                        Opt(("--remove-blocked-by",), "remove_blocked_by", many=True),
                        Opt(("--subject",), "subject"), Opt(("-d", "--description"), "description"),
                        Opt(("--estimate",), "estimate", number=True), JSON, ROOT)),
}


def parse(argv: list[str]) -> tuple[Hot, Path, dict[str, Any]] | None:
    """The hot command, its state root and its keyword arguments; None: not a line for the fast path."""
    rest = list(argv)
    top: str | None = None
    if rest and (rest[0] == "--root" or rest[0].startswith("--root=")):
        if rest[0] == "--root":
            if len(rest) < 2:
                return None
            top, rest = rest[1], rest[2:]
        else:
            top, rest = rest[0][len("--root="):], rest[1:]
        if not top or top.startswith("-"):
            return None
    if len(rest) < 2 or rest[0] != "task" or rest[1] not in HOT:
        return None
    hot = HOT[rest[1]]
    kw: dict[str, Any] = {}
    args: list[str] = []
    words = rest[2:]
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            if word == "-":
                return None
            args.append(word)
            continue
        name, eq, value = word.partition("=")
        opt = hot.by_name.get(name)
        if opt is None or (eq and opt.flag):
            return None
        if opt.flag:
            if opt.dest in kw:
                return None
            kw[opt.dest] = True
            continue
        if not eq:
            if i >= len(words):
                return None
            value = words[i]
            i += 1
        if value.startswith("-") and not (opt.number and NUMBER.fullmatch(value)):
            return None
        if opt.many:
            kw.setdefault(opt.dest, []).append(value)
            continue
        if opt.dest in kw:
            return None
        if opt.number:
            if not NUMBER.fullmatch(value):
                return None
            kw[opt.dest] = float(value)
        else:
            kw[opt.dest] = value
    if len(args) != len(hot.args):
        return None
    kw.update(zip(hot.args, args, strict=True))
    own = kw.pop("root", None)
    if own == "":
        return None
    given = Path(own) if own is not None else (Path(top).absolute() if top is not None else None)
    return hot, resolve_root(given), kw


def run(argv: list[str]) -> int | None:
    """Run ``team ARGV`` here if it is a line for the fast path: its exit code; else None."""
    parsed = parse(argv)
    if parsed is None:
        return None
    hot, root, kw = parsed
    return hot.run(root, **kw)
