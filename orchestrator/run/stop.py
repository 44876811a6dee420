"""How a run is stopped from outside its loop: a signal, or a thread of ours that failed.

``RunStop`` is made by whoever starts the run (the CLI, for ``team run``) and
handed to the runner, which gives it to the scheduler and, through
``ExecutorContext.stop``, to the executors. Two ways in:

* ``request(signum)``, from a signal handler (SIGINT, SIGTERM, SIGHUP). While
  a scheduler loop is attached (``attach(wake)``) the signal only asks it to
  stop at its next turn: a safe point, where every claim the loop made is
  known, so each one is given back. Around the loop, the runner holds
  signals back too (``deferred()``: while it takes the lock, builds the
  executors, materialises the plan, and closes everything after) and looks
  at them at its own safe points (``check``): an exception raised at an
  arbitrary instant can leave a library half-way through (a thread pool
  whose new worker is never told to stop, so the interpreter waits for it
  at exit, for ever). ``request`` then returns True. Outside both it
  returns False and the caller raises ``Signalled`` where it is. Once a
  stop is under way (a signal was taken, or the loop is aborting) a further
  signal is absorbed: stopping is bounded (the jobs' grace) and must not be
  cut short halfway, leaving claims that nobody gives back.
* ``fail(error)``, from any thread: something the run cannot go on without
  broke (a thread of ours died, the store's writer hit a full disk). The
  loop wakes and raises ``error`` at its next turn, and the run stops the
  same way. The first error wins.

A thread the run depends on hands ``fail`` to ``core.threads.start`` as its
``on_crash``: instead of dying quietly (``threading.excepthook`` prints, and
the run goes on deaf: no job notification, no lease renewal), an uncaught
exception stops the run as a ``ThreadDied`` naming the thread.

Signal safety: ``request`` runs inside a Python signal handler on the main
thread, which may be interrupted anywhere (even inside ``attach``); it only
sets attributes and calls ``wake``, which must be reentrant
(``queue.SimpleQueue.put`` is). It takes no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..core.errors import Signalled


class RunStop:
    """See the module docstring."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the signal that asked the run to stop
        self.error: BaseException | None = None  # the failure that stops the run
        self._wake: Callable[[], None] | None = None
        self._stopping = False  # the loop is giving its claims back: signals are absorbed
        self._deferring = 0  # inside deferred(): signals wait for the next check()

    # -- the loop's side -------------------------------------------------------
    def attach(self, wake: Callable[[], None]) -> None:
        """A loop runs: from now on a signal or a failure calls ``wake`` (reentrant, quick)."""
        self._wake = wake
        if self.signum is not None or self.error is not None:
            wake()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold signals back for the block: they are raised by the next ``check`` (the runner's)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1

    def stopping(self) -> None:
        """The loop is stopping (giving its claims back): absorb further signals."""
        self._stopping = True

    def detach(self) -> None:
        """The loop has ended (and given its claims back)."""
        self._wake = None
        self._stopping = False

    def check(self) -> None:
        """Raise what stops the run, if anything does (the loop calls this at each turn)."""
        if self.error is not None:
            raise self.error
        if self.signum is not None:
            raise Signalled(self.signum)

    # -- the outside's side ---------------------------------------------------------
    def request(self, signum: int) -> bool:
        """A signal arrived: True when a loop will stop (or a stop is under way), False when
        the caller must raise ``Signalled`` itself (no loop is attached)."""
        if self._stopping:
            return True
        wake = self._wake
        if wake is None and not self._deferring:
            return False
        if self.signum is None:
            self.signum = signum
            if wake is not None:
                wake()
        return True

    def fail(self, error: BaseException) -> None:
        """Stop the run with ``error`` (from any thread; the first error wins)."""
        if self.error is None:
            self.error = error
        wake = self._wake
        if wake is not None:
            wake()
