"""Control requests to the running lead (``team spawn``), apart from the inboxes.

Files under ``.team/``::

    control.jsonl        requests, one JSON line each: {"id", "op", "args", "ts", "pid"}
    control.lock         flock: appenders
    control.cursor       {"offset"}: how far the lead has handled requests
    control.json         {"pid", "ops"}: written by a lead that serves requests
    control/<id>.json    the lead's reply: {"ok": true, ...} or {"ok": false, "error"}

A client (``request``) checks that a lead holds the lead lock and that the
same process serves control requests, appends its request, then waits for
the reply file. The lead's ``ControlServer`` thread watches the file size
(stat every ``poll`` seconds: requests are rare and come from other
processes), handles each new line, writes the reply atomically, then
advances the cursor. A lead killed mid-request leaves the line unhandled;
the next lead handles it (the waiting client has timed out by then, so a
spawn may then happen late, which is harmless: it is idempotent by name).
Ordinary messages to ``lead`` (``.team/inbox/lead.jsonl``) are never touched.
A request line is scrubbed of the client's secrets (core/redact.py): a spawn
prompt may quote a key.

Slow requests (``slow`` ops: ``shutdown``, which waits for the teammate's
answer) are handled each on a thread of its own, so a teammate that takes
its time answering does not hold up a ``team spawn`` behind it; their reply
is written when the handler returns. The client waits as long as its
``timeout`` says (``team shutdown`` passes the handshake's timeout plus a
margin).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import threads
from ..core.errors import TeamError, UserError, WorkFailed
from ..core.fsutil import append_line, atomic_write, file_lock, parse_jsonl
from ..core.jsonutil import dumps
from ..core.paths import team_dir
from ..core.redact import Secrets
from ..core.threads import Crash
from .lead import lead_info

Handler = Callable[[str, dict[str, Any]], dict[str, Any]]


def _paths(root: Path) -> dict[str, Path]:
    d = team_dir(Path(root))
    return {"queue": d / "control.jsonl", "lock": d / "control.lock", "cursor": d / "control.cursor",
            "marker": d / "control.json", "replies": d / "control"}


def request(root: Path, op: str, args: dict[str, Any], *, timeout: float = 15.0) -> dict[str, Any]:
    """Ask the running lead to do ``op``; the reply dict. Raises UserError/WorkFailed."""
    p = _paths(root)
    info = lead_info(root)
    if info is None:
        raise UserError(f"no lead is running on {root}: `team {op}` asks the running lead "
                        "(`team run PLAN` or `team chat`) to do it; start one first")
    try:
        marker = json.loads(p["marker"].read_text())
    except (FileNotFoundError, ValueError):
        marker = {}
    if marker.get("pid") != info.get("pid") or op not in marker.get("ops", []):
        raise UserError(f"the running lead (pid {info.get('pid')}) does not take `{op}` requests: "
                        "its plan has no agent tasks; add agent tasks or a `team:` list to the plan")
    rid = secrets.token_hex(6)
    with file_lock(p["lock"]):
        line = dumps({"id": rid, "op": op, "args": args, "ts": time.time(), "pid": os.getpid()})
        append_line(p["queue"], Secrets.from_environ().scrub(line))  # a spawn prompt may quote a key
    reply_path = p["replies"] / f"{rid}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reply = json.loads(reply_path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.02)
            continue
        reply_path.unlink(missing_ok=True)
        if not isinstance(reply, dict) or not reply.get("ok"):
            raise UserError((reply.get("error") if isinstance(reply, dict) else None) or f"the lead refused `{op}`")
        return reply
    raise WorkFailed(f"the lead (pid {info.get('pid')}) did not answer the `{op}` request within "
                     f"{timeout:g}s; it may be busy or stuck (see `team status`)")


class ControlServer:
    """The lead's side: a thread handling requests with ``handler(op, args) -> reply``."""

    def __init__(self, root: Path, handler: Handler, ops: list[str], *, poll: float = 0.1,
                 on_crash: Crash | None = None, slow: frozenset[str] = frozenset()):
        """``on_crash``: told if the serving thread dies (core/threads.py), rather than go deaf;
        ``slow``: ops handled each on a thread of its own (see the module docstring)."""
        self.p = _paths(root)
        self.handler, self.ops, self.poll, self.on_crash, self.slow = handler, ops, poll, on_crash, slow
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ControlServer:
        self.p["replies"].mkdir(parents=True, exist_ok=True)
        atomic_write(self.p["marker"], dumps({"pid": os.getpid(), "ops": self.ops}))
        self._thread = threads.start("team-control", self._loop, on_crash=self.on_crash)
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            if json.loads(self.p["marker"].read_text()).get("pid") == os.getpid():
                self.p["marker"].unlink()
        except (FileNotFoundError, ValueError):
            pass  # another lead's marker, or none: leave it

    def _offset(self) -> int:
        try:
            return int(json.loads(self.p["cursor"].read_text())["offset"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return 0

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            self.handle_pending()

    def handle_pending(self) -> int:
        """Handle every request past the cursor; returns how many."""
        offset = self._offset()
        try:
            size = self.p["queue"].stat().st_size
        except FileNotFoundError:
            return 0
        if size <= offset:
            return 0
        with open(self.p["queue"], "rb") as f:
            f.seek(offset)
            data = f.read(size - offset)
        end = data.rfind(b"\n") + 1
        n = 0
        for req in parse_jsonl(data[:end]):
            n += 1
            if str(req.get("op")) in self.slow:
                threads.start(f"team-control-{req.get('op')}", functools.partial(self._answer, req),
                              on_crash=self.on_crash)
            else:
                self._answer(req)
        atomic_write(self.p["cursor"], dumps({"offset": offset + end}))
        return n

    def _answer(self, req: dict[str, Any]) -> None:
        try:
            reply = {"ok": True, **self.handler(str(req.get("op")), dict(req.get("args") or {}))}
        except TeamError as e:
            reply = {"ok": False, "error": str(e)}
        if isinstance(req.get("id"), str) and req["id"].isalnum():
            atomic_write(self.p["replies"] / f"{req['id']}.json", dumps(reply), durable=False)


SHUTDOWN_MARGIN = 15.0
"""Seconds ``ask_shutdown`` waits for the lead beyond the handshake's own timeout."""


def ask_shutdown(root: Path, name: str, *, reason: str = "", timeout: float = 30.0,
                 force: bool = False) -> tuple[dict[str, Any], str]:
    """``team shutdown NAME`` (and the lead's ``shutdown`` over MCP): ask the running lead to run
    the shutdown handshake with teammate ``name``; the lead's reply and what happened, in words.

    ``UserError`` for ``lead``, a name that is not a teammate, or one not running; the reply's
    ``approved``/``forced`` say whether it has shut down."""
    from .roster import LEAD, Team, check_name

    check_name(name, "teammate name")
    if name == LEAD:
        raise UserError("'lead' is the lead itself: stop `team run` with Ctrl-C, leave `team chat` with /quit")
    states = {s.name: s for s in Team(root).states()}
    state = states.get(name)
    if state is None or state.kind == "external":
        known = ", ".join(n for n, s in states.items() if s.kind != "external") or "none"
        what = f"{name!r} is an {state.kind} member, not a teammate the lead runs" if state is not None \
            else f"unknown teammate {name!r}"
        raise UserError(f"{what}; teammates: {known} (see `team status`)")
    if state.liveness == "shutdown":
        raise UserError(f"{name} has already shut down; nothing to do")
    if state.liveness == "dead":
        raise UserError(f"{name} is not running ({state.reason or 'dead'}); nothing to shut down")
    reply = request(root, "shutdown", {"name": name, "reason": reason, "timeout": timeout, "force": force},
                    timeout=timeout + SHUTDOWN_MARGIN)
    rid, text = reply.get("request_id"), str(reply.get("text") or "")
    if reply.get("kind") == "command":  # an agent CLI: no handshake, its process is stopped (run/command.py)
        msg = f"{name} (an agent CLI, kind command) was shut down" + (f": {text}" if text else "")
    elif reply.get("approved"):
        msg = f"{name} approved shutdown request {rid}" + (f": {text}" if text else "")
        msg += "; it has shut down" if reply.get("stopped") else "; it is stopping"
    elif reply.get("timed_out"):
        msg = text  # the handshake's own words: who, which request, how long
    else:
        msg = f"{name} refused shutdown request {rid}" + (f": {text}" if text else "")
    if reply.get("forced"):
        msg += "; stopped anyway (--force): its running task attempt, if any, ended as interrupted"
    return reply, msg
