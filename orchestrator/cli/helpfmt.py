"""How ``team … --help`` reads: plain click-style help, whole summaries, real metavars.

typer's own rendering shows a flag as ``--peek <bool>`` (which reads as if it took a
value: ``--peek true`` is an error), a required argument as ``{name}`` (click's notation
for a choice), a repeatable option as ``--blocked-by <list[str]>``, and cuts a command's
summary in the command list at a fixed width (``Check .tasks/ … missing...``). The two
classes here, set on every command and group by ``adopt``, render instead:

    Usage: team inbox [OPTIONS] NAME          arguments upper-case, optional ones [NAME]
    Arguments:  NAME   Whose inbox …           the argument's name, not its Python type
    Options:    --peek  Show without consuming. a flag has no value
                --blocked-by <str>  …           one value per occurrence (the help says repeatable)
    Commands:   doctor  <the whole first paragraph of its docstring, wrapped>

The app runs with ``rich_markup_mode=None`` (plain help: no rich import for ``--help``, no
box drawing in pipes). ``tests/test_help.py`` checks every command's help.
"""

from __future__ import annotations

import re

import typer
from typer import _click as click  # typer ships its own click; its commands are built on that one
from typer.core import TyperCommand, TyperGroup

_LIST = re.compile(r"<list\[(.+?)\]>")


def summary(help_text: str | None, short_help: str | None = None) -> str:
    """A command's one-line summary: its ``short_help``, else the whole first paragraph of
    its help on one line (the formatter wraps it; nothing is cut mid-sentence)."""
    if short_help:
        return " ".join(short_help.split())
    first = (help_text or "").strip().split("\n\n", 1)[0]
    return " ".join(first.split())


def _argument_name(param: click.Parameter) -> str:
    name = (param.metavar or param.name or "ARG").upper()
    return name if param.nargs == 1 else f"{name}..."


def _usage(command: TyperCommand | TyperGroup, ctx: click.Context) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":  # typer's arguments are not click.Argument
            name = _argument_name(param)
            pieces.append(name if param.required else f"[{name}]")
    return pieces


def _format_params(command: TyperCommand | TyperGroup, ctx: click.Context, formatter: click.HelpFormatter) -> None:
    arguments: list[tuple[str, str]] = []
    options: list[tuple[str, str]] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        label, text = record
        if param.param_type_name == "argument":  # typer's arguments are not click.Argument
            arguments.append((_argument_name(param), text.replace("[required]", "").strip()))
        else:
            options.append((_LIST.sub(r"<\1>", label).replace(" range>", ">"), text))
    if arguments:
        with formatter.section("Arguments"):
            formatter.write_dl(arguments)
    if options:
        with formatter.section("Options"):
            formatter.write_dl(options)


class TeamCommand(TyperCommand):
    """A ``team`` command with the help format of the module docstring."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return _usage(self, ctx)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_params(self, ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        return summary(self.help, self.short_help)


class TeamGroup(TyperGroup):
    """A ``team`` command group (the app, ``team task``, ``team jobs``…), formatted likewise."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*_usage(self, ctx), self.subcommand_metavar]

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def get_short_help_str(self, limit: int = 45) -> str:
        return summary(self.help, self.short_help)


def adopt(app: typer.Typer) -> None:
    """Give ``app``, its commands and its sub-apps (recursively) the classes above."""
    if not isinstance(app.info.cls, type) or app.info.cls is TyperGroup:  # unset: a placeholder object
        app.info.cls = TeamGroup
    for command in app.registered_commands:
        if command.cls is None or command.cls is TyperCommand:
            command.cls = TeamCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            adopt(group.typer_instance)
