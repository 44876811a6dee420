"""Live updates: one thread ticks the feed, every open page gets each delta once.

The hub's thread calls ``Feed.tick`` every ``interval`` seconds (the file
work stays off the event loop) and hands each delta, encoded once, to the
loop (``call_soon_threadsafe``), which puts it on every subscriber's queue.
A page's server-sent-event stream (app.py) is one subscriber:

    subscribe()   on the loop: the snapshot and a queue, taken together, so
                  no delta falls between them; deltas not newer than the
                  snapshot are skipped by the stream
    queue item    (event, version, encoded JSON): a ``delta`` or a ``problem``;
                  or None: the stream ends
                  (the board stops, or the page fell ``MAX_BEHIND`` deltas
                  behind: its EventSource reconnects and starts from a new
                  snapshot)

Stopping: ``stop_when()`` is checked every tick (the server is shutting
down, or the process that started the board is gone); when it holds, or on
``close``, the hub takes one last look (so a page sees how a run ended, even
when the board stops with it), says goodbye (an ``end`` event carrying
``farewell()``: the page keeps the last state and stops reconnecting), and
ends every stream, so the server's shutdown never waits on an open page. A tick that fails on the disk (``OSError``: a permission, a full
disk) is reported to the pages as a ``problem`` and retried; any other
exception is a bug: the hub stops, keeps it in ``failure``, and the board
exits with it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

from .feed import Feed

MAX_BEHIND = 500
"""Deltas a page may fall behind before its stream is ended (it reconnects with a snapshot)."""

Item = tuple[str, int, str] | None


def encode(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class Hub:
    """Ticks ``feed`` on a thread and fans its deltas out (see the module docstring)."""

    def __init__(self, feed: Feed, *, interval: float = 0.05, stop_when: Callable[[], bool] = lambda: False,
                 on_stop: Callable[[], None] = lambda: None,
                 farewell: Callable[[], str] = lambda: "the board was stopped"):
        self.feed = feed
        self.farewell = farewell
        self.interval = interval
        self.stop_when = stop_when
        self.on_stop = on_stop
        self.failure: BaseException | None = None
        self._subs: set[asyncio.Queue[Item]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._problem: str | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start ticking; deltas go to subscribers on ``loop``. The owner takes the feed's first
        look before (serve.py), so the first page gets a full snapshot and a problem shows early."""
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="team-board-feed", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._end_all()

    # ------------------------------------------------------------------ subscribers (loop thread)
    def subscribe(self) -> tuple[dict[str, Any], asyncio.Queue[Item]]:
        queue: asyncio.Queue[Item] = asyncio.Queue()
        if self._stop.is_set():
            queue.put_nowait(None)
        self._subs.add(queue)
        return self.feed.snapshot(), queue

    def unsubscribe(self, queue: asyncio.Queue[Item]) -> None:
        self._subs.discard(queue)

    def _fanout(self, item: tuple[str, int, str]) -> None:
        for queue in list(self._subs):
            if queue.qsize() >= MAX_BEHIND:
                self._subs.discard(queue)
                queue.put_nowait(None)
            else:
                queue.put_nowait(item)

    def _end_all(self) -> None:
        def end() -> None:
            for queue in list(self._subs):
                queue.put_nowait(None)
            self._subs.clear()

        if self._loop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(end)
            except RuntimeError:  # the loop closed in between: nobody is listening
                pass

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                if self.stop_when():
                    break
                self._tick()
        except BaseException as e:  # a bug: stop the board with it (serve.py raises it)
            self.failure = e
        finally:
            self._stop.set()
            if self.failure is None:
                self._tick()  # the last look
                self._publish("end", {"version": self.feed.version, "reason": self.farewell()})
            self._end_all()
            self.on_stop()

    def _tick(self) -> None:
        try:
            delta = self.feed.tick()
        except OSError as e:
            problem = f"cannot read the state root: {e}; the board retries (check the permissions)"
            if problem != self._problem:
                self._problem = problem
                self._publish("problem", {"version": self.feed.version, "problem": problem})
            return
        if self._problem is not None:
            self._problem = None
            self._publish("problem", {"version": self.feed.version, "problem": None})
        if delta is not None:
            self._publish("delta", delta)

    def _publish(self, event: str, data: dict[str, Any]) -> None:
        if self._loop is None or self._loop.is_closed():
            return
        item = (event, int(data["version"]), encode(data))
        try:
            self._loop.call_soon_threadsafe(self._fanout, item)
        except RuntimeError:  # the loop closed in between: nobody is listening
            pass
