"""Every ``team … --help`` reads well (cli/helpfmt.py), and ``team --version`` answers.

The command tree is walked from the app itself, so a command added later is checked too.
"""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.core import TyperCommand, TyperGroup

from orchestrator import __version__
from orchestrator.cli import app, main


def _commands() -> list[tuple[list[str], TyperCommand | TyperGroup]]:
    found: list[tuple[list[str], TyperCommand | TyperGroup]] = []

    def walk(path: list[str], command: TyperCommand | TyperGroup) -> None:
        found.append((path, command))
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk([*path, name], sub)

    walk([], typer.main.get_command(app))
    return found


COMMANDS = _commands()


def _help(capsys, path: list[str]) -> str:
    assert main([*path, "--help"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


def test_the_tree_holds_every_documented_command():
    names = {" ".join(path) for path, _ in COMMANDS}
    for documented in ("task list", "task create", "run", "spawn", "send", "inbox", "status", "doctor",
                       "jobs show", "chat", "board", "land", "plan check"):
        assert documented in names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "team")
def test_help_reads_well(capsys, path):
    text = _help(capsys, path)
    usage = text.splitlines()[0]
    assert usage.startswith("Usage: team" + "".join(f" {p}" for p in path))
    assert "<bool>" not in text, "a flag takes no value: no type after it"
    assert "{" not in usage, "arguments read NAME, not {name}"
    assert "<list[" not in text
    assert "\\[" not in text, "no rich escapes in plain help"
    assert "╭" not in text
    command = dict((tuple(p), c) for p, c in COMMANDS)[tuple(path)]
    for param in command.params:
        if param.param_type_name == "argument":
            assert param.name and param.name.upper() in usage
        elif getattr(param, "is_flag", False) and param.opts:
            line = next(ln for ln in text.splitlines() if param.opts[-1] in ln)
            assert not re.search(re.escape(param.opts[-1]) + r" <", line), line


@pytest.mark.parametrize("path", [p for p, c in COMMANDS if getattr(c, "commands", None)],
                         ids=lambda p: " ".join(p) or "team")
def test_command_lists_show_whole_summaries(capsys, path):
    text = _help(capsys, path)
    listing = text.split("Commands:\n", 1)[1]
    assert "..." not in listing, "a summary cut mid-sentence"
    # each summary is the first paragraph of the command's help, whole (wrapped, never cut)
    group = dict((tuple(p), c) for p, c in COMMANDS)[tuple(path)]
    flat = " ".join(listing.split())
    for name, sub in group.commands.items():
        first = " ".join((sub.help or "").split("\n\n", 1)[0].split())
        assert f"{name} {first}" in flat


def test_doctor_summary_is_one_whole_sentence(capsys):
    flat = " ".join(_help(capsys, []).split())
    assert "doctor Check .tasks/ and .team/ for damage: corrupt files, missing or cyclic dependencies, " \
           "leftover temp files, expired leases, stale indexes." in flat


def test_a_flag_shown_without_a_value_takes_none(team):
    team("task", "create", "x")
    shown = team("inbox", "--help").stdout
    assert re.search(r"^\s+--peek\s+Show", shown, re.M)
    assert team("inbox", "lead", "--peek").returncode == 0


def test_version(team):
    r = team("--version")
    assert (r.returncode, r.stdout, r.stderr) == (0, f"team {__version__}\n", "")


def test_the_lazy_command_table_names_what_each_module_registers():
    """cli/commands.py imports a command module only when one of its commands runs; its table of
    modules and names must be what the modules register (a command added to a module without the
    table would be missing from `team --help` and unreachable)."""
    import typer as typer_module

    from orchestrator.cli import commands

    for module, names in commands.MODULES.items():
        scratch = typer_module.Typer()
        __import__(f"orchestrator.cli.{module}", fromlist=["register"]).register(scratch)
        registered = [c.name for c in scratch.registered_commands] + [g.name for g in scratch.registered_groups]
        assert sorted(registered) == sorted(names), module
    assert commands.ORDER == [n for names in commands.MODULES.values() for n in names]
    listed = typer.main.get_command(commands._root).list_commands(None)  # type: ignore[arg-type]
    assert listed == commands.ORDER and len(set(listed)) == len(listed)


def test_a_command_imports_only_its_own_module(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from orchestrator.cli import main; main(['--root', sys.argv[1], 'task', 'show', '1']); "
            "print(sorted(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('orchestrator.cli.') and "
            "m.rsplit('.', 1)[1] in ('runcmd', 'chat', 'review', 'teamcmds', 'boardcmd', 'mcpcmd', 'tasks')))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines()[-1] == "['tasks']", r.stdout + r.stderr
