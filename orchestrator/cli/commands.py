"""``team``'s typer app: every command, its options and its help (the fast path, cli/fast.py,
runs the hottest commands without it). cli/__init__.py lists the command modules.

Adding a command: write it in a module here and register it in that
module's ``register(app)``, one line per command (``app.command("NAME")(fn)``
or ``app.add_typer(sub_app, name="NAME")``); then add the module and the names it
registers to ``MODULES`` below and to ``_load``. A command the fast path also parses
(cli/fast.py ``HOT``) keeps its options in step with the table there
(tests/test_fast_cli.py compares them). The order of registration is the order of
``team --help``.

Start-up (issue 13): every command typer runs pays for importing this module, so a
command module imports at module level only typer, ``core.states``/``text``/
``paths``/``errors`` and what its options' annotations need; the store,
pydantic records, rich, networkx, yaml and the rest are imported inside the
command functions that use them (``tests/test_scale.py`` checks this).
``app`` only collects the registrations, and a command module is imported
(and registers its commands) only when one of its commands is looked up
(``MODULES`` names them): the click command tree ``team`` runs is ``_root``,
whose group (``_Commands``) builds a command's click object the first time it
is looked up, so ``team task show`` neither imports nor builds the options of
every other command (``team --help`` does both).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import typer.main

from ..core.errors import Signalled
from .helpfmt import TeamGroup, adopt

if TYPE_CHECKING:  # typer carries its own click
    from typer._click import Command, Context

HELP = "team: a multi-agent team orchestrator with a durable task graph."

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, help=HELP,
                  rich_markup_mode=None)  # plain help (cli/helpfmt.py)
"""Where the command modules register their commands (see the module docstring)."""


class _Commands(TeamGroup):
    """``team``'s root group: the commands registered on ``app``, each built on first lookup."""

    def list_commands(self, ctx: Context) -> list[str]:
        return ORDER

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands:
            built = _build(cmd_name)
            if built is None:
                return None
            self.commands[cmd_name] = built
        return self.commands[cmd_name]

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        if args and args[0] not in self.list_commands(ctx):  # a typo: typer suggests from the built commands
            for name in self.list_commands(ctx):
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


def _build(name: str) -> Command | None:
    """The click object of the command or group registered on ``app`` as ``name``, built as
    typer would have built it with the whole tree."""
    if name not in OWNER:
        return None
    _load(OWNER[name])
    for command in app.registered_commands:
        if command.name == name:
            return typer.main.get_command_from_info(
                command, pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode)
    for group in app.registered_groups:
        if group.name == name:
            return typer.main.get_group_from_info(
                group, pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode, suggest_commands=app.suggest_commands)
    return None


_root = typer.Typer(cls=_Commands, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                    help=HELP, rich_markup_mode=None)


def _show_version(value: bool) -> None:
    if value:
        from .. import __version__

        sys.stdout.write(f"team {__version__}\n")
        raise typer.Exit()


@_root.callback()
def _global(
    ctx: typer.Context,
    root: Annotated[
        Path | None,
        typer.Option("--root", help="State root (default: $TEAM_ROOT, else the current directory)."),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_show_version, help="Print the version and exit."),
    ] = False,
) -> None:
    ctx.obj = root.absolute() if root is not None else None  # read by common.root_of


MODULES: dict[str, tuple[str, ...]] = {
    "tasks": ("task",), "doctor": ("doctor",), "teamcmds": ("send", "broadcast", "inbox", "status", "jobs"),
    "runcmd": ("run", "plan"), "review": ("log", "diff", "land"), "chat": ("chat",), "agentcmds": ("spawn",),
    "controls": ("shutdown", "approve", "reject", "deny"), "boardcmd": ("board",), "worktreecmd": ("worktree",),
    "mcpcmd": ("mcp",),
}
"""Each command module and the names it registers, in registration order (tests/test_help.py checks
it against what the modules register), so a command's module is imported only when it runs."""
OWNER = {name: module for module, names in MODULES.items() for name in names}
ORDER = [name for names in MODULES.values() for name in names]
_loaded: set[str] = set()


def _load(module: str) -> None:
    """Import one command module and register its commands on ``app`` (explicit imports, so the
    layout test sees them)."""
    if module in _loaded:
        return
    if module == "tasks":
        from . import tasks as m
    elif module == "doctor":
        from . import doctor as m  # type: ignore[no-redef]
    elif module == "teamcmds":
        from . import teamcmds as m  # type: ignore[no-redef]
    elif module == "runcmd":
        from . import runcmd as m  # type: ignore[no-redef]
    elif module == "review":
        from . import review as m  # type: ignore[no-redef]
    elif module == "chat":
        from . import chat as m  # type: ignore[no-redef]
    elif module == "agentcmds":
        from . import agentcmds as m  # type: ignore[no-redef]
    elif module == "controls":
        from . import controls as m  # type: ignore[no-redef]
    elif module == "boardcmd":
        from . import boardcmd as m  # type: ignore[no-redef]
    elif module == "worktreecmd":
        from . import worktreecmd as m  # type: ignore[no-redef]
    elif module == "mcpcmd":
        from . import mcpcmd as m  # type: ignore[no-redef]
    else:
        raise KeyError(module)
    _loaded.add(module)
    m.register(app)
    adopt(app)


def everything() -> typer.Typer:
    """``app`` with every command registered (``from orchestrator.cli import app``)."""
    for module in MODULES:
        _load(module)
    return app


def dispatch(argv: list[str] | None) -> int:
    """Run ``team ARGV`` through typer; the exit code. Errors past typer are ``cli.guard``'s."""
    try:
        _root(args=argv, prog_name="team")
    except SystemExit as e:  # typer's normal exit path (usage errors exit 2)
        stopped = _interrupt_behind(e)
        if stopped is not None:  # typer ends a KeyboardInterrupt silently with 130: say what stopped us
            word, code = (stopped.word, stopped.exit_code) if isinstance(stopped, Signalled) else ("Interrupted.", 130)
            sys.stderr.write(word + "\n")
            return code
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The ``KeyboardInterrupt`` that typer turned into ``Exit(130)``, then ``SystemExit``, if any."""
    seen: BaseException | None = exc
    for _ in range(4):
        seen = seen.__cause__ or seen.__context__ if seen is not None else None
        if isinstance(seen, KeyboardInterrupt):
            return seen
    return None
