"""``team board``: the live web board (orchestrator/board/).

The web stack (Starlette, uvicorn) is imported only when the command runs,
so ``team task list`` never pays for it. ``--fd`` and ``--parent`` are
hidden: ``team run --board`` starts this command in a child process with a
socket it already bound and the token in ``TEAM_BOARD_TOKEN`` (board/launch.py).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from typing import Annotated

import typer

from ..core.errors import UserError
from ..core.text import shown
from .common import RootOpt, err, out, root_of


def _web_stack_missing(name: str | None) -> UserError:
    return UserError(f"`team board` needs its web stack ({name or 'starlette/uvicorn'} is not installed): "
                     "pip install 'team-orchestrator[board]'")


def board_cmd(
    ctx: typer.Context,
    port: Annotated[int | None, typer.Option("--port", min=0, max=65535, help="Port on 127.0.0.1 (default: a free one).")] = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the board in a web browser.")] = False,
    allow_actions: Annotated[bool, typer.Option("--allow-actions", help="Let the page retry, cancel and send (from 127.0.0.1, with the session token).")] = False,
    budget: Annotated[float | None, typer.Option("--budget", min=0, help="Dollars the team may spend: shown against the spend.")] = None,
    root: RootOpt = None,
    fd: Annotated[int | None, typer.Option("--fd", hidden=True, help="Serve on this inherited listening socket.")] = None,
    parent: Annotated[int | None, typer.Option("--parent", hidden=True, help="Stop when this process is gone.")] = None,
) -> None:
    """Serve a live web board of the task graph, the team and the spend on 127.0.0.1 (read-only by default)."""
    try:
        from ..board import launch
        from ..board.serve import BoardOptions, serve
    except ModuleNotFoundError as e:
        raise _web_stack_missing(e.name) from None
    state_root = root_of(root, ctx)
    if fd is not None:
        token = os.environ.get(launch.TOKEN_ENV, "")
        if not token:
            raise UserError(f"--fd needs the session token in ${launch.TOKEN_ENV} (`team run --board` sets it)")
        sock = socket.socket(fileno=fd)
    else:
        sock = launch.bind(port)
        token = launch.new_token()
    url = launch.url_of(sock, token)

    def announce() -> None:
        if fd is not None:
            return  # `team run --board` printed the URL
        out(f"board: {url}")
        mode = "retry, cancel and send allowed from this page" if allow_actions else "read-only"
        out(f"serving {shown(str(state_root))} ({mode}); Ctrl-C stops it")
        if not (state_root / ".tasks").is_dir():
            out("no tasks there yet: the board fills in as soon as a run or `team task create` starts")
        sys.stdout.flush()

    def ready() -> None:
        if open_page and fd is None:
            import webbrowser

            def show() -> None:
                if not webbrowser.open(url):
                    err("could not open a web browser here: open the URL above yourself")

            threading.Thread(target=show, name="team-board-open", daemon=True).start()

    opts = BoardOptions(root=state_root, token=token, allow_actions=allow_actions, budget=budget, parent=parent)
    stopped_by = serve(opts, sock, announce=announce, on_ready=ready)
    if stopped_by is None or parent is not None:
        return  # the parent is gone, or it asked: nothing to report
    err(f"board stopped ({signal.Signals(stopped_by).name})")
    raise typer.Exit(code=128 + stopped_by)


def register(app: typer.Typer) -> None:
    """Add ``board`` to ``app``."""
    app.command("board")(board_cmd)
