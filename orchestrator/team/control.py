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
