"""Threads of ours that must not die quietly.

A thread the process depends on (a job watcher, the job server's reader, a
heartbeat, the store's writer...) that dies of an uncaught exception leaves
the process deaf: ``threading.excepthook`` prints a traceback, and the run
goes on waiting for a notification or a lease renewal that never comes.
``start(name, target, on_crash=...)`` starts such a thread so that an
exception escaping ``target`` is handed to ``on_crash`` as a ``ThreadDied``
naming the thread (the original exception is its ``__cause__``, with its
traceback). The owner decides what follows: ``team run`` stops with it
(``run.stop.RunStop.fail``), a job manager refuses new jobs. Without
``on_crash`` the exception is left to ``threading.excepthook``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .errors import TeamError, ThreadDied

Crash = Callable[[TeamError], None]
"""Hears that something the process depends on died: a thread (``ThreadDied``), or a helper
process (``JobServerDied``). Called on the dying thread; must not block."""


def guarded(name: str, target: Callable[[], None], on_crash: Crash | None) -> Callable[[], None]:
    """``target`` wrapped so that an exception escaping it reaches ``on_crash`` as a ``ThreadDied``."""
    if on_crash is None:
        return target

    def run() -> None:
        try:
            target()
        except BaseException as e:  # handed to the owner, which stops loudly with it
            died = ThreadDied(name, e)
            died.__cause__ = e
            on_crash(died)

    return run


def start(name: str, target: Callable[[], None], *, on_crash: Crash | None, daemon: bool = True) -> threading.Thread:
    """Start a daemon thread running ``target`` (see the module docstring)."""
    thread = threading.Thread(target=guarded(name, target, on_crash), name=name, daemon=daemon)
    thread.start()
    return thread
