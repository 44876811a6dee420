"""Serving the board with uvicorn until a signal, or until the process that started it is gone.

``team board`` binds the socket (launch.py), prints the URL, then calls
``serve``: the first look at the disk happens before serving (a problem with
the root shows at once), then uvicorn runs the app (app.py) while the hub's
thread follows the disk (hub.py). uvicorn's own signal capture is switched
off: Ctrl-C or SIGTERM set ``should_exit`` (a second Ctrl-C stops without
waiting for open pages), the hub ends every event stream at once so the
shutdown never waits on a page, and ``serve`` returns the signal for the CLI
to report. With ``parent`` set (``team run --board``'s child), the board
also stops when that process is no longer its parent.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn

from ..core.redact import Secrets
from .actions import Actions
from .app import BoardApp
from .feed import Feed
from .hub import Hub


@dataclass(frozen=True)
class BoardOptions:
    """What ``team board`` was asked for."""

    root: Path
    token: str
    allow_actions: bool = False
    budget: float | None = None
    parent: int | None = None  # stop when this process is no longer our parent
    interval: float = 0.05  # seconds between looks at the disk


class _Server(uvicorn.Server):
    """uvicorn's server without its signal capture: ``serve`` handles the signals."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _Stopper:
    """The server's stop switch, for the hub's thread and the signal handler."""

    def __init__(self, parent: int | None):
        self.parent = parent
        self.server: uvicorn.Server | None = None
        self.signals: list[int] = []

    def stopping(self) -> bool:
        return self.server is not None and self.server.should_exit

    def stop_when(self) -> bool:
        return self.stopping() or (self.parent is not None and os.getppid() != self.parent)

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True

    def farewell(self) -> str:
        if self.parent is not None:
            return "the run it served has ended (`team board` serves this root again)"
        return "`team board` was stopped"

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        if self.stopping() and self.server is not None:
            self.server.force_exit = True  # a second signal: do not wait for open pages
        self.stop()


def serve(opts: BoardOptions, sock: socket.socket, *, announce: Callable[[], None] = lambda: None,
          on_ready: Callable[[], None] = lambda: None) -> int | None:
    """Serve the board on ``sock`` (see the module docstring); the signal that stopped it, if any.

    ``announce()`` runs once the signals are ours (print the URL there: a Ctrl-C from a user who
    has seen it is then always handled here); ``on_ready()`` once the server is up."""
    stopper = _Stopper(opts.parent)
    main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.signal(sig, stopper.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    hub: Hub | None = None
    try:
        announce()
        secrets = Secrets.from_environ().add(opts.token)  # the page never shows its own token either
        feed = Feed(opts.root, secrets=secrets, budget=opts.budget, actions=opts.allow_actions)
        feed.tick()
        hub = Hub(feed, interval=opts.interval, stop_when=stopper.stop_when, on_stop=stopper.stop,
                  farewell=stopper.farewell)
        app = BoardApp(feed, hub, opts.token, Actions(opts.root) if opts.allow_actions else None,
                       lifespan_start=on_ready).build()
        config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                                date_header=False, lifespan="on", timeout_graceful_shutdown=2)
        server = stopper.server = _Server(config)
        if not stopper.signals:  # a Ctrl-C during the first look: do not start serving
            server.run(sockets=[sock])
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if hub is not None:
            hub.close()
    if hub is not None and hub.failure is not None:
        raise hub.failure
    return stopper.signals[0] if stopper.signals else None
