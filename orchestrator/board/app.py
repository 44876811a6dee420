"""The board's HTTP surface: a Starlette app on 127.0.0.1.

Routes (every one but the static assets needs the session token, given as
``?token=`` in the URL ``team board`` prints, or as the ``X-Board-Token``
header)::

    GET  /                       the page (static/board.html)
    GET  /static/{file}          board.js, board.css: no data in them
    GET  /api/snapshot           the whole picture (feed.py), JSON
    GET  /api/events             server-sent events: ``snapshot``, then ``delta``s
                                 (and ``problem``s), ``: ping`` every PING seconds,
                                 ``end`` when the board stops (hub.py)
    GET  /api/task/{id}          one task's details (details.py)
    POST /api/task/{id}/retry    } only with --allow-actions, from 127.0.0.1,
    POST /api/task/{id}/cancel   } with the token as the X-Board-Token header
    POST /api/send               } and a JSON body: {"to", "content", "from"?}

Why a token even for reading: the board shows commands, messages and job
output; another local user, or a web page using DNS rebinding against a
local port, must not read them. The token is compared in constant time,
sent only in the URL the user opened and in this page's own requests (the
``Referrer-Policy`` keeps it out of any other request), and the ``Host``
header must name the loopback. A refused request gets 403 and a sentence
saying what to do. Every response forbids inline scripts and styles and
framing (``Content-Security-Policy``): even a mistake in the page's
escaping could not run injected code.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core.errors import ConflictError, TeamError, UnknownRef
from .actions import Actions
from .details import task_details
from .feed import Feed
from .hub import Hub, encode

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"board.js": "text/javascript", "board.css": "text/css"}
PING = 15.0
"""Seconds between keep-alive comments on an idle event stream."""
RETRY_MS = 1000
"""How soon a page's EventSource reconnects after the stream ends."""
LOOPBACK = ("127.0.0.1", "localhost")
HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
NO_TOKEN = ("this board needs its session token: open the URL that `team board` (or `team run --board`) "
            "printed, which ends in ?token=...")
READ_ONLY = "this board is read-only: start it with `team board --allow-actions` to retry, cancel and send"


class SecurityHeaders:
    """Adds ``HEADERS`` to every response."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def sse(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"


class BoardApp:
    """The routes above over one feed, hub and (with --allow-actions) ``Actions``."""

    def __init__(self, feed: Feed, hub: Hub, token: str, actions: Actions | None, *,
                 lifespan_start: Callable[[], None] = lambda: None):
        self.feed, self.hub, self.token, self.actions = feed, hub, token, actions
        self.lifespan_start = lifespan_start

    def build(self) -> Starlette:
        routes = [
            Route("/", self.page),
            Route("/static/{name}", self.asset),
            Route("/api/snapshot", self.snapshot),
            Route("/api/events", self.events),
            Route("/api/task/{tid:int}", self.task),
            Route("/api/task/{tid:int}/retry", self.retry, methods=["POST"]),
            Route("/api/task/{tid:int}/cancel", self.cancel, methods=["POST"]),
            Route("/api/send", self.send, methods=["POST"]),
        ]
        return Starlette(routes=routes, lifespan=self._lifespan,
                         middleware=[Middleware(SecurityHeaders),
                                     Middleware(TrustedHostMiddleware, allowed_hosts=list(LOOPBACK))])

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.hub.start(asyncio.get_running_loop())
        self.lifespan_start()
        try:
            yield
        finally:
            self.hub.close()

    # ------------------------------------------------------------------ checks
    def _authorised(self, request: Request) -> bool:
        given = request.query_params.get("token") or request.headers.get("x-board-token") or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _refuse_action(self, request: Request) -> Response | None:
        """Why this write is refused (a 403), or None when it may go ahead."""
        if not self._authorised(request):
            return JSONResponse({"error": NO_TOKEN}, status_code=403)
        if self.actions is None:
            return JSONResponse({"error": READ_ONLY}, status_code=403)
        if request.client is None or request.client.host != "127.0.0.1":
            return JSONResponse({"error": "actions are taken only from 127.0.0.1"}, status_code=403)
        if request.headers.get("x-board-token") is None:
            return JSONResponse({"error": "send the token as the X-Board-Token header (the page does)"},
                                status_code=403)
        return None

    # ------------------------------------------------------------------ reads
    async def page(self, request: Request) -> Response:
        if not self._authorised(request):
            return PlainTextResponse(NO_TOKEN + "\n", status_code=403)
        return FileResponse(STATIC / "board.html", media_type="text/html; charset=utf-8")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return PlainTextResponse("no such file\n", status_code=404)
        return FileResponse(STATIC / name, media_type=ASSETS[name] + "; charset=utf-8")

    async def snapshot(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"error": NO_TOKEN}, status_code=403)
        return Response(encode(self.feed.snapshot()), media_type="application/json")

    async def events(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"error": NO_TOKEN}, status_code=403)
        return StreamingResponse(self._stream(), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    async def _stream(self) -> AsyncIterator[str]:
        snap, queue = self.hub.subscribe()
        try:
            yield f"retry: {RETRY_MS}\n" + sse("snapshot", encode(snap))
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=PING)
                except asyncio.TimeoutError:
                    yield ": ping\n\n"
                    continue
                if item is None:
                    return
                event, version, data = item
                if event == "delta" and version <= snap["version"]:
                    continue  # already in the snapshot
                yield sse(event, data)
        finally:
            self.hub.unsubscribe(queue)

    async def task(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"error": NO_TOKEN}, status_code=403)
        tid = request.path_params["tid"]
        feed = self.feed
        details = await run_in_threadpool(task_details, feed.root, feed.tasks(), feed.jobs(), tid,
                                          feed.clock(), feed.show)
        if details is None:
            return JSONResponse({"error": f"no task #{tid} on this board"}, status_code=404)
        data = details.model_dump()
        data["actions"] = self.actions is not None
        return Response(encode(data), media_type="application/json")

    # ------------------------------------------------------------------ writes
    async def _act(self, request: Request, do: Callable[[Actions], str]) -> Response:
        refused = self._refuse_action(request)
        if refused is not None:
            return refused
        assert self.actions is not None  # _refuse_action said so
        actions = self.actions
        try:
            said = await run_in_threadpool(do, actions)
        except UnknownRef as e:
            return JSONResponse({"error": self.feed.show.line(str(e))}, status_code=404)
        except ConflictError as e:
            return JSONResponse({"error": self.feed.show.line(str(e))}, status_code=409)
        except TeamError as e:
            return JSONResponse({"error": self.feed.show.line(str(e))}, status_code=400)
        return JSONResponse({"ok": True, "said": self.feed.show.line(said)})

    async def retry(self, request: Request) -> Response:
        tid = request.path_params["tid"]
        return await self._act(request, lambda a: a.retry(tid))

    async def cancel(self, request: Request) -> Response:
        tid = request.path_params["tid"]
        return await self._act(request, lambda a: a.cancel(tid))

    async def send(self, request: Request) -> Response:
        refused = self._refuse_action(request)
        if refused is not None:
            return refused
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("to"), str) or not isinstance(body.get("content"), str):
            return JSONResponse({"error": 'send a JSON object {"to": NAME, "content": TEXT, "from": NAME}'},
                                status_code=400)
        given = body.get("from")
        sender: str = given if isinstance(given, str) and given else "lead"
        to, content = body["to"], body["content"]
        return await self._act(request, lambda a: a.send(to, content, sender))
