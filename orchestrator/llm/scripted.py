"""A scripted OpenAI-compatible chat server on 127.0.0.1, for tests and demos.

A real HTTP server (``ThreadingHTTPServer`` in a thread, port 0) that serves
``POST /v1/chat/completions`` — streaming (SSE ``data:`` chunks, then
``data: [DONE]``) and non-streaming — and ``GET /v1/models``. What it
answers comes from a *script*: a list of steps consumed one per request.
The steps (``Reply``, ``Fault``, ``tool_call``, a callable) and the JSON
they become live in ``script.py``.

Several agents can talk to one server: pass ``{"alice": [...], "bob":
[...]}``. A request goes to the script named by its ``X-Scripted-Agent``
header, else the name in "You are NAME" in its first system message, else
the ``"*"`` script. The server is strict like openai-agents' ScriptedModel:
a request that finds no step (script exhausted or no script for it) gets a
400 and is recorded in ``errors``; ``assert_complete()`` fails on recorded
errors and on unconsumed steps. Every request is recorded (headers without
``Authorization``; ``auth`` says whether a bearer token came along).

    with ScriptedServer([Reply(content="hi")]) as srv:
        srv.base_url   # http://127.0.0.1:PORT/v1

CLI: ``python -m orchestrator.llm.scripted script.json --port 8000``;
the JSON is a list of steps or an object of per-agent lists, each step
``{"content", "tool_calls": [{"name", "arguments"}], ...}`` or
``{"status": 429, "retry_after": 1}``.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..core.text import plural
from .script import (
    Fault,
    Reply,
    Step,
    step_from_dict,
    stream_chunks,
    whole_body,
)

CHAT_PATH = "/v1/chat/completions"


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    agent: str | None
    auth: bool


class ScriptedServer:
    """See the module docstring."""

    def __init__(
        self,
        script: list[Step] | Mapping[str, list[Step]] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        route: Callable[[dict, Mapping[str, str]], str | None] | None = None,
    ):
        scripts = {"*": list(script or [])} if isinstance(script, list) or script is None else script
        self.scripts: dict[str, list[Step]] = {k: list(v) for k, v in scripts.items()}
        self.consumed: dict[str, int] = {k: 0 for k in self.scripts}
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []
        self.api_key = api_key
        self._route = route or self._default_route
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = _HTTPServer((host, port), _make_handler(self))
        self._httpd.scripted = self
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ScriptedServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="scripted-server", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- script ------------------------------------------------------------

    def add(self, *steps: Step, agent: str = "*") -> None:
        """Append steps to a script (e.g. while the server runs)."""
        with self._lock:
            self.scripts.setdefault(agent, []).extend(steps)
            self.consumed.setdefault(agent, 0)

    def remaining(self) -> dict[str, int]:
        with self._lock:
            return {k: len(v) - self.consumed[k] for k, v in self.scripts.items()}

    def chat_requests(self, agent: str | None = None) -> list[RecordedRequest]:
        """Recorded chat-completion requests, optionally of one agent."""
        with self._lock:
            return [r for r in self.requests if r.path == CHAT_PATH and (agent is None or r.agent == agent)]

    def assert_complete(self) -> None:
        """Fail if a request found no step, or if any step was never used."""
        with self._lock:
            problems = list(self.errors)
            problems += [
                f"script {k!r}: {len(v) - self.consumed[k]} of {plural(len(v), 'step')} unused"
                for k, v in self.scripts.items()
                if self.consumed[k] < len(v)
            ]
        if problems:
            raise AssertionError("scripted server: " + "; ".join(problems))

    def _default_route(self, body: dict, headers: Mapping[str, str]) -> str | None:
        named = headers.get("x-scripted-agent")
        if named:
            return named
        system = next((m for m in body.get("messages") or [] if m.get("role") == "system"), None)
        text = _text_of(system.get("content")) if system else ""
        for name in self.scripts:
            if name != "*" and re.search(rf"\bYou are {re.escape(name)}\b", text):
                return name
        return "*" if "*" in self.scripts else None

    def _next_step(self, body: dict, headers: Mapping[str, str]) -> tuple[str | None, Reply | Fault | str]:
        """(agent, step) or (agent, error text). Records the request."""
        agent = self._route(body, headers)
        with self._lock:
            script = self.scripts.get(agent) if agent is not None else None
            if agent is None or script is None:
                error = f"no script for this request (agent {agent!r}; scripts: {sorted(self.scripts)})"
            elif self.consumed[agent] >= len(script):
                error = f"script {agent!r} exhausted after {plural(len(script), 'step')}: {_last_user(body)!r}"
            else:
                step = script[self.consumed[agent]]
                self.consumed[agent] += 1
                error = None
            if error is not None or agent is None:
                self.errors.append(error or "no agent")
                return agent, error or "no agent"
        if not callable(step):
            return agent, step_from_dict(step)
        try:
            return agent, step_from_dict(step(body))
        except Exception as exc:  # a broken test callable: make it visible, not a hang-up
            error = f"script {agent!r} step {self.consumed[agent]} raised {type(exc).__name__}: {exc}"
            with self._lock:
                self.errors.append(error)
            return agent, error


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    scripted: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):
            return  # the client hung up (timeouts, retries): normal for a test server
        with self.scripted._lock:
            self.scripted.errors.append(f"handler crashed: {type(exc).__name__}: {exc}")
        super().handle_error(request, client_address)


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _last_user(body: dict) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") in ("user", "tool")]
    return _text_of(users[-1].get("content"))[:120] if users else ""


def _make_handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 60

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _record(self, body: Any, agent: str | None) -> None:
            headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "authorization"}
            auth = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            with server._lock:
                server.requests.append(RecordedRequest(self.command, self.path, headers, body, agent, bool(auth)))

        def _auth_ok(self) -> bool:
            if server.api_key is None:
                return True
            return self.headers.get("Authorization") == f"Bearer {server.api_key}"

        def do_GET(self) -> None:
            self._record(None, None)
            if self.path.rstrip("/") == "/v1/models":
                self._send_json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            if self.path != CHAT_PATH or not isinstance(body, dict):
                self._record(body, None)
                self._send_json(404 if self.path != CHAT_PATH else 400, {"error": {"message": "bad request"}})
                return
            if not self._auth_ok():
                self._record(body, None)
                self._send_json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            agent, step = server._next_step(body, headers)
            self._record(body, agent)
            if isinstance(step, str):
                self._send_json(400, {"error": {"message": f"scripted server: {step}", "type": "script_error"}})
                return
            if step.delay and server._stop.wait(step.delay):
                return
            if isinstance(step, Fault):
                self._fault(step)
            elif body.get("stream"):
                self._stream(step, body)
            else:
                self._whole(step, body)

        def _fault(self, f: Fault) -> None:
            extra = {}
            if f.retry_after is not None:
                extra["Retry-After"] = str(f.retry_after)
            if f.retry_after_ms is not None:
                extra["retry-after-ms"] = str(f.retry_after_ms)
            msg = f.message or f"scripted {f.status} {HTTPStatus(f.status).phrase}"
            self._send_json(f.status, {"error": {"message": msg, "type": "scripted_fault"}}, extra)

        def _ids(self, reply: Reply) -> list[str]:
            n = len(server.requests)
            return [tc.id or f"call_{n}_{i}" for i, tc in enumerate(reply.tool_calls)]

        def _stream(self, reply: Reply, body: dict) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            base = {"id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion.chunk",
                    "created": int(time.time()), "model": reply.model or body.get("model", "scripted")}
            for n, chunk in enumerate([] if reply.empty_stream else stream_chunks(reply, body, self._ids(reply))):
                if reply.cut_after is not None and n >= reply.cut_after:
                    self.close_connection = True
                    self.wfile.flush()
                    return  # no terminating chunk, no [DONE]: the client sees a dropped connection
                self._event(json.dumps({**base, **chunk}))
            self._event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")

        def _event(self, data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

        def _whole(self, reply: Reply, body: dict) -> None:
            obj = whole_body(reply, body, self._ids(reply), f"chatcmpl-{len(server.requests)}", int(time.time()))
            if reply.cut_after is not None:  # promise the whole body, send half, hang up
                data = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.close_connection = True
                return
            self._send_json(200, obj)

    return Handler


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m orchestrator.llm.scripted", description=__doc__.splitlines()[0])
    parser.add_argument("script", help="JSON file: a list of steps, or {agent: [steps]}")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    args = parser.parse_args(argv)
    try:
        with open(args.script, encoding="utf-8") as fh:
            data = json.load(fh)
        script: list[Step] | dict[str, list[Step]] = [step_from_dict(s) for s in data] if isinstance(data, list) else {
            k: [step_from_dict(s) for s in v] for k, v in data.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        print(f"{args.script}: not a usable script: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    with ScriptedServer(script, port=args.port, api_key=args.api_key) as srv:
        print(f"serving {args.script} at {srv.base_url}  (Ctrl-C to stop)", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: srv._stop.set())
        try:
            srv._stop.wait()
        except KeyboardInterrupt:
            pass
        left = {k: n for k, n in srv.remaining().items() if n}
        if left:
            print(f"unused steps: {left}", flush=True)
        for problem in srv.errors:
            print(f"error: {problem}", flush=True)
    return 1 if srv.errors or left else 0


if __name__ == "__main__":
    raise SystemExit(main())
