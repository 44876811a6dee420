"""The ledger of model spend: one line per model call, durable, under the state root.

Every report of tokens and dollars reads this one file (status/usage.py: the ``team run``
summary, ``team status``, ``/cost`` in ``team chat``, the board's spend, the Python API's
status); nothing else is summed, so no report can leave out a kind of call. The file is
``.team/spend.jsonl``, one JSON object a line::

    {"ts": 1795266065.71, "run": "20261128T221503-3f9c0d", "agent": "sub1-alice", "member": "alice",
     "task": 4, "model": "gpt-4o-mini", "prompt_tokens": 1200, "completion_tokens": 80,
     "cached_tokens": 1024, "cost": 0.0001512, "calls": 1}

* ``run``: the run (``team run``) or chat session (``chat-...``) that made the call, so a run's
  summary counts that run only, however often its tasks ran before;
* ``agent``: who called the model (a teammate, a subagent ``sub1-alice``, the chat lead
  ``lead``); ``member``: whose spend it is (a subagent's calls are its teammate's);
* ``task``: the task the call worked on, None for a turn outside a task (a teammate woken by a
  message, the chat lead); an autoclaimed task is a task like any other;
* ``model``: the model as the server named it in its answer; the numbers are what the server
  reported in the call's ``usage`` (pricing.py prices them; ``cost`` null: no known price).

A line is appended once the call's answer is in (``Ledger.add``), under ``.team/spend.lock``
with ``append_line``, fsync'd: a writer killed mid-line leaves a fragment the next append cuts
off and readers skip. A call whose answer came but whose line was not written (the process
killed in between) is missing: at most one call per agent, at the instant of a kill. Lines of a
teammate on a Ray node are written by the lead when the attempt's result comes back (one line
per attempt, ``calls`` > 1).

``Ledger.lines()`` reads what was appended since its last look (by offset; a new file is read
whole), so the board, which asks a few times a second, reads each line once; ``totals(run=)``
sums them by member, task, model and run.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.fsutil import append_line, file_lock, parse_jsonl
from ..core.paths import team_dir
from .pricing import Usage

LEDGER = "spend.jsonl"


def new_run_id(prefix: str = "") -> str:
    """A run's id: when it started, and random bits so two runs of one second differ."""
    return f"{prefix}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class Line:
    """One model call (or an attempt's calls, from a Ray node) in the ledger."""

    ts: float
    run: str
    agent: str
    member: str
    task: int | None
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost: float | None
    calls: int

    @property
    def usage(self) -> Usage:
        return Usage(prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                     cached_tokens=self.cached_tokens, cost=self.cost, calls=self.calls)


class _Sum:
    """A running sum of lines (plain numbers: a ``Usage`` per addition would be the cost of a read)."""

    __slots__ = ("prompt", "completion", "cached", "cost", "calls")

    def __init__(self) -> None:
        self.prompt = self.completion = self.cached = self.calls = 0
        self.cost: float | None = 0.0

    def add(self, line: Line) -> None:
        self.prompt += line.prompt_tokens
        self.completion += line.completion_tokens
        self.cached += line.cached_tokens
        self.calls += line.calls
        self.cost = None if self.cost is None or line.cost is None else self.cost + line.cost

    def usage(self) -> Usage:
        return Usage(prompt_tokens=self.prompt, completion_tokens=self.completion, cached_tokens=self.cached,
                     cost=self.cost, calls=self.calls)


@dataclass
class Totals:
    """Sums of ledger lines: overall and by member, task, model and run (first seen first)."""

    total: Usage = field(default_factory=Usage)
    members: dict[str, Usage] = field(default_factory=dict)
    tasks: dict[int, Usage] = field(default_factory=dict)
    models: dict[str, Usage] = field(default_factory=dict)
    runs: dict[str, Usage] = field(default_factory=dict)

    @classmethod
    def of(cls, lines: Iterable[Line]) -> Totals:
        total = _Sum()
        members: dict[str, _Sum] = {}
        tasks: dict[int, _Sum] = {}
        models: dict[str, _Sum] = {}
        runs: dict[str, _Sum] = {}
        for line in lines:
            total.add(line)
            for by, key in ((members, line.member), (models, line.model), (runs, line.run)):
                (by.get(key) or by.setdefault(key, _Sum())).add(line)
            if line.task is not None:
                (tasks.get(line.task) or tasks.setdefault(line.task, _Sum())).add(line)
        return cls(total.usage(), {k: v.usage() for k, v in members.items()},
                   {k: v.usage() for k, v in tasks.items()}, {k: v.usage() for k, v in models.items()},
                   {k: v.usage() for k, v in runs.items()})


_TYPES: dict[str, tuple[type, ...]] = {
    "ts": (int, float), "run": (str,), "agent": (str,), "member": (str,), "task": (int, type(None)),
    "model": (str,), "prompt_tokens": (int,), "completion_tokens": (int,), "cached_tokens": (int,),
    "cost": (int, float, type(None)), "calls": (int,)}


def _line(raw: dict[str, Any]) -> Line | None:
    """A parsed line as a ``Line``, or None when it is not one (checked by hand: a read of a big
    ledger would spend most of its time in validation)."""
    for key, types in _TYPES.items():
        value = raw.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            return None
    return Line(**{k: raw[k] for k in _TYPES})


class Ledger:
    """``.team/spend.jsonl`` of one state root (see the module docstring); safe from any thread."""

    def __init__(self, root: Path):
        self.path = team_dir(Path(root)) / LEDGER
        self._lock_path = team_dir(Path(root)) / "spend.lock"
        self._read = threading.Lock()
        self._ino: int | None = None
        self._offset = 0
        self._lines: list[Line] = []

    def add(self, *, run: str, agent: str, usage: Usage, member: str | None = None, task: int | None = None,
            model: str = "") -> Line:
        """Append one call's usage (``member``: whose spend it is, default ``agent``)."""
        line = Line(ts=time.time(), run=run, agent=agent, member=member or agent, task=task, model=model,
                    prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens,
                    cached_tokens=usage.cached_tokens, cost=usage.cost, calls=usage.calls)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(self._lock_path):
            append_line(self.path, dataclasses.asdict(line))
        return line

    def lines(self) -> list[Line]:
        """Every line so far (only what was appended since the last call is read)."""
        with self._read:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._ino, self._offset, self._lines = None, 0, []
                return []
            if st.st_ino != self._ino or st.st_size < self._offset:
                self._ino, self._offset, self._lines = st.st_ino, 0, []
            if st.st_size > self._offset:
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    data = f.read(st.st_size - self._offset)
                end = data.rfind(b"\n") + 1  # a line still being written is read next time
                for raw in parse_jsonl(data[:end]):
                    line = _line(raw)
                    if line is not None:  # a hand-edited or foreign line is skipped like a torn one
                        self._lines.append(line)
                self._offset += end
            return list(self._lines)

    def totals(self, run: str | None = None) -> Totals:
        """The sums of every line (``run``: of that run's lines only)."""
        return Totals.of(line for line in self.lines() if run is None or line.run == run)
