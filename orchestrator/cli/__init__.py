"""The ``team`` command line: the only place that prints or exits.

    tasks.py      team task list|show|create|update|retry|blocked|graph|critical
    runcmd.py     team run, team plan schema|check
    progress.py   what team run shows while it runs, and its summary
    review.py     team log|diff|land: review a plan's result (isolation: worktree) and take it
    teamcmds.py   team send|broadcast|inbox|status, team jobs
    agentcmds.py  team spawn
    chat.py       team chat (the terminal side)
    doctor.py     team doctor
    boardcmd.py   team board (the web board, imported when it runs)
    common.py     the --root and --json options, output helpers

Every command module registers itself on ``app``. Errors: any ``TeamError``
reaching the edge prints ``TypeName: message`` to stderr and exits with its
``exit_code`` (2 = bad input, 1 = work failed); click usage errors exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..core.errors import TeamError
from ..core.text import shown

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="team: a multi-agent team orchestrator with a durable task graph.",
)


@app.callback()
def _global(
    ctx: typer.Context,
    root: Annotated[
        Path | None,
        typer.Option("--root", help="State root (default: $TEAM_ROOT, else the current directory)."),
    ] = None,
) -> None:
    ctx.obj = root.absolute() if root is not None else None  # read by common.root_of


def _register() -> None:
    from . import agentcmds, boardcmd, chat, doctor, review, runcmd, tasks, teamcmds

    for module in (tasks, doctor, teamcmds, runcmd, review, chat, agentcmds, boardcmd):
        module.register(app)


_register()


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, prog_name="team")
    except SystemExit as e:  # typer's normal exit path (usage errors exit 2)
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except TeamError as e:
        sys.stderr.write(shown(f"{type(e).__name__}: {e}", lines=True) + "\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        return 130
    except BrokenPipeError:
        return 0
    return 0


def entry() -> None:
    sys.exit(main())
