"""The ``team`` command line: the only place that prints or exits.

    commands.py   the typer app: every command, its options, --help (module docstring: adding one)
    fast.py       the hottest commands (task list|create|update, run) parsed without typer
    taskcore.py   what task list|create|update do, for both paths
    runcore.py    what team run does, for both paths
    tasks.py      team task list|show|create|update|retry|blocked|graph|critical
    runcmd.py     team run (its options), team plan schema|check
    progress.py   what team run shows while it runs, and its summary
    review.py     team log|diff|land: review a plan's result (isolation: worktree) and take it
    teamcmds.py   team send|broadcast|inbox|status, team jobs
    agentcmds.py  team spawn
    controls.py   team shutdown|approve|reject|deny: the lead's controls for people
    chat.py       team chat (the terminal side)
    doctor.py     team doctor
    worktreecmd.py  team worktree list|events|keep|remove|land: the agents' worktrees
    boardcmd.py   team board (the web board, imported when it runs)
    mcpcmd.py     team mcp (the MCP server, imported when it runs)
    common.py     the --root and --json options of typer commands
    output.py     output helpers (typer-free)
    helpfmt.py    how --help reads (plain, whole summaries, NAME for arguments, no <bool> on flags)

Start-up (issue 13): importing this package imports nothing but the standard
library's basics. ``main`` first offers the command line to the fast path
(``fast.run``): a hot command in the exact shape it knows runs without
importing typer, click or pydantic (typer builds a pydantic ``TypeAdapter``
per option it parses: ~45 ms of a 1,000-task listing). Anything else, help
and every malformed line included, goes to the typer app (``commands.dispatch``),
which owns the errors and the wording of usage errors.

Errors: any ``TeamError`` reaching the edge prints ``TypeName: message`` to stderr and exits with its
``exit_code`` (2 = bad input, 1 = work failed); click usage errors exit 2.
An ``OSError`` of a write to the state root (disk full, read-only root) is
the same one line (``core.errors.storage_error``: the path, the errno, what
to do); any other ``OSError`` is a bug and keeps its traceback. A signal
that stopped a command (``Signalled``) prints ``Interrupted.`` (exit 130),
``Terminated.`` (143) or ``Hung up.`` (129). A ``ThreadDied`` (a thread of
ours died: a bug) prints that thread's traceback, then its one line. A
closed stdout is silenced, not an error (``output.silence``); the exit code
stays the command's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..core.errors import Signalled, TeamError, ThreadDied, storage_error
from ..core.oneshot import exiting, mark_one_shot
from ..core.text import shown
from .output import silence


def __getattr__(name: str) -> Any:  # ``from orchestrator.cli import app``: the typer app, built when asked for
    if name == "app":
        from .commands import everything

        return everything()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    code = guard(lambda: _dispatch(args))
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # nobody reads our output any more: the exit code still says how it went
        silence(sys.stdout)
    return code


def _dispatch(args: list[str]) -> int:
    from .fast import run

    code = run(args)
    if code is not None:
        return code
    from .commands import dispatch

    return dispatch(args)


def guard(call: Callable[[], int]) -> int:
    """``call()``'s exit code, or the one line and exit code of what stopped it (module docstring)."""
    try:
        return call()
    except TeamError as e:
        if isinstance(e, ThreadDied) and e.__cause__ is not None:
            import traceback

            traceback.print_exception(e.__cause__, file=sys.stderr)
        sys.stderr.write(shown(f"{type(e).__name__}: {e}", lines=True) + "\n")
        return e.exit_code
    except Signalled as e:
        sys.stderr.write(e.word + "\n")
        return e.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("Interrupted.\n")
        return 130
    except BrokenPipeError:
        silence(sys.stdout)
        return 0
    except OSError as e:
        error = storage_error(e)
        if error is None:
            raise  # not the disk: a bug, with its traceback
        sys.stderr.write(f"{type(error).__name__}: {error}\n")
        return error.exit_code


def entry() -> None:
    """The console script (and ``python -m orchestrator``): one command, then the exit."""
    mark_one_shot()
    code = main()
    exiting()
    sys.exit(code)
