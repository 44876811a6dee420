"""The fast path: ``team task list|create|update`` and ``team run`` parsed without typer (issue 13).

A command line in exactly a shape this module knows runs its command's body
(taskcore.py) straight away; typer, click and pydantic are never imported
for a listing (typer builds a pydantic ``TypeAdapter`` per option it parses:
~45 ms of a cold 1,000-task ``task list --json``, a third of it). Anything
else returns ``None`` and the typer app runs the line as always, so every
error message, usage error and ``--help`` stays typer's. "Exactly" means:

* ``[--root DIR]``, the command's words (``task list``, ``run``), then in any
  order the options ``HOT`` lists for it (``--opt VALUE``, ``--opt=VALUE``,
  flags alone) and its arguments;
* each option at most once, unless it is repeatable (``--blocked-by``);
* a value that starts with ``-`` (a word click would take as the value, but
  rarely what was meant), an empty path, a number that is not plain decimal
  (``--estimate``) or a count that is not 1 or more (``--workers``), an
  unknown, abbreviated or clustered option, ``-``, ``--``, ``-h``/``--help``,
  a missing value, too many or too few arguments: all left to typer.

A ``--root`` is checked as the typer commands check it (core/paths.py ``check_root``; ``creates``:
``task create`` and ``run`` may start a store).

The table below repeats the options typer declares for these commands
(cli/tasks.py, cli/runcmd.py); tests/test_fast_cli.py compares it with typer's own parse
of the same commands, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..core.paths import check_root, resolve_root


class Opt(NamedTuple):  # (not a dataclass: importing dataclasses costs this path ~8 ms)
    """An option (``names``) or an argument (no names) of a hot command, as typer declares it."""

    names: tuple[str, ...]
    dest: str
    kind: str = "str"
    """str, path, flag (no value), count (an int ≥ 1), number (a float)."""
    many: bool = False


class Hot:
    """One hot command: its body, its arguments in order, its options."""

    def __init__(self, run: Callable[..., int], args: tuple[Opt, ...] = (), opts: tuple[Opt, ...] = (),
                 creates: bool = False):
        self.run = run
        self.creates = creates
        """It may create the store (else a ``--root`` must hold one: core/paths.py ``check_root``)."""
        self.args = args
        self.opts = opts
        self.by_name = {name: opt for opt in opts for name in opt.names}


ROOT = Opt(("--root",), "root", "path")
JSON = Opt(("--json",), "as_json", "flag")
NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
"""A float the fast path takes: plain decimals (anything else, typer parses and judges)."""
COUNT = re.compile(r"[1-9][0-9]{0,8}")
"""An int ≥ 1 the fast path takes (``--workers``: typer says what is wrong with 0, -1 or 1e3)."""


def _list(root: Path, **kw: Any) -> int:
    from .taskcore import list_tasks

    return list_tasks(root, **kw)


def _create(root: Path, **kw: Any) -> int:
    from .taskcore import create_task

    return create_task(root, **kw)


def _update(root: Path, **kw: Any) -> int:
    from .taskcore import update_task

    return update_task(root, **kw)


def _run(root: Path, **kw: Any) -> int:
    from .runcore import run_plan_file

    return run_plan_file(root, **kw)


def _flag(name: str, dest: str, *more: str) -> Opt:
    return Opt((name, *more), dest, "flag")


HOT: dict[tuple[str, ...], Hot] = {
    ("task", "list"): Hot(_list, opts=(Opt(("--status",), "status"), Opt(("--owner",), "owner"),
                                       _flag("--ready", "ready"), _flag("--blocked", "blocked"), JSON, ROOT)),
    ("task", "create"): Hot(_create, args=(Opt((), "subject"),),
                            opts=(Opt(("-d", "--description"), "description"),
                                  Opt(("--blocked-by",), "blocked_by", many=True), Opt(("--owner",), "owner"),
                                  Opt(("--name",), "name"), Opt(("--estimate",), "estimate", "number"), JSON, ROOT),
                            creates=True),
    ("task", "update"): Hot(_update, args=(Opt((), "ref"),),
                            opts=(Opt(("--status",), "status"), Opt(("--owner",), "owner"),
                                  Opt(("--add-blocked-by",), "add_blocked_by", many=True),
                                  Opt(("--remove-blocked-by",), "remove_blocked_by", many=True),
                                  Opt(("--subject",), "subject"), Opt(("-d", "--description"), "description"),
                                  Opt(("--estimate",), "estimate", "number"), JSON, ROOT)),
    ("run",): Hot(_run, args=(Opt((), "plan_file", "path"),),
                  opts=(Opt(("--workers", "-w"), "workers", "count"), _flag("--keep-going", "keep_going", "-k"),
                        _flag("--fresh", "fresh"), Opt(("--redo",), "redo", many=True),
                        _flag("--include-uncommitted", "include_uncommitted"), _flag("--dry-run", "dry_run"),
                        Opt(("--model",), "model"), _flag("--ask", "ask"), _flag("--board", "board"),
                        Opt(("--backend",), "backend"), Opt(("--address",), "address"),
                        _flag("--json", "json_out"), ROOT), creates=True),
}


def _value(opt: Opt, value: str) -> Any:
    """The value typer would give ``opt`` for ``value``; None: leave it to typer."""
    if opt.kind == "number":
        return float(value) if NUMBER.fullmatch(value) else None
    if opt.kind == "count":
        return int(value) if COUNT.fullmatch(value) else None
    if value.startswith("-"):
        return None
    if opt.kind == "path":
        return Path(value) if value else None
    return value


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
    hot = HOT.get(tuple(rest[:1])) or HOT.get(tuple(rest[:2]))
    if hot is None:
        return None
    words = rest[1:] if tuple(rest[:1]) in HOT else rest[2:]
    kw: dict[str, Any] = {}
    args: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-"):
            args.append(word)
            continue
        name, eq, raw = word.partition("=")
        opt = hot.by_name.get(name)
        if opt is None or (eq and opt.kind == "flag") or (opt.dest in kw and not opt.many):
            return None
        if opt.kind == "flag":
            kw[opt.dest] = True
            continue
        if not eq:
            if i >= len(words):
                return None
            raw = words[i]
            i += 1
        value = _value(opt, raw)
        if value is None:
            return None
        if opt.many:
            kw.setdefault(opt.dest, []).append(value)
        else:
            kw[opt.dest] = value
    if len(args) != len(hot.args):
        return None
    for arg, raw in zip(hot.args, args, strict=True):
        value = _value(arg, raw)
        if value is None:
            return None
        kw[arg.dest] = value
    own = kw.pop("root", None)
    given = own if own is not None else (Path(top).absolute() if top is not None else None)
    root = resolve_root(given)
    if given is not None:
        check_root(root, creates=hot.creates)
    return hot, root, kw


def run(argv: list[str]) -> int | None:
    """Run ``team ARGV`` here if it is a line for the fast path: its exit code; else None."""
    parsed = parse(argv)
    if parsed is None:
        return None
    hot, root, kw = parsed
    return hot.run(root, **kw)
