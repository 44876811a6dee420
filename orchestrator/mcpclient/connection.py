"""One MCP server, connected: the SDK's asyncio client behind a typed, thread-safe sync facade.

The SDK's ``ClientSession`` is asyncio; teammates are threads. So each ``McpConnection`` owns a
dedicated thread running its own event loop, and inside it one coroutine holds the whole
connection open (``stdio_client`` or ``streamable_http_client``, then ``ClientSession``,
``initialize``, ``list_tools``) until ``close``. A teammate's ``call`` hands the SDK's
``call_tool`` to that loop (``run_coroutine_threadsafe``) and waits for its answer, bounded.
Several teammates may call at once: the session multiplexes requests by id.

Nothing here hangs:

* starting: the server must answer ``initialize`` and ``tools/list`` within
  ``spec.startup_timeout``; a command that does not exist, exits, or never answers is an
  ``McpStartFailed`` naming the server, what happened and the last line of its stderr;
* calling: each call waits at most ``timeout`` (the spec's, cut to the task's time left), then
  an ``McpCallTimeout``;
* dying: a server that exits (or whose HTTP endpoint goes away) closes the connection; the call
  in flight and every later one raise ``McpServerDied`` at once, with the server's last
  stderr line.

``close`` ends the coroutine: the SDK closes the server's stdin, waits, then kills its process
group (stdio servers run in a session of their own), so nothing it started outlives the run.
A URL server gets its ``headers`` (resolved from the lead's environment by hub.py) on every
request, through an HTTP client of our own; they live in this object's memory only.
A stdio server's stderr goes to ``log`` (``.team/mcp/<server>.log``), never to the terminal;
once the server has stopped, the log is scrubbed of the lead's secrets in place (core/redact.py;
a lead killed outright leaves that to nobody: the same gap as a job log until it is reaped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..core.errors import UserError, WorkFailed
from ..core.mcpspec import McpServerSpec
from ..core.redact import Secrets
from . import noise

if TYPE_CHECKING:
    from mcp import ClientSession

JOIN_GRACE = 15.0
"""Seconds ``close`` waits for the connection's thread (the SDK's own shutdown is bounded)."""
CLOSED = "closed its connection (did the process exit?)"
CALL_GRACE = 5.0
"""Seconds past a call's timeout before the facade stops waiting for the SDK's own timeout."""


class McpStartFailed(UserError):
    """An MCP server could not be started or did not answer in time."""


class McpServerDied(WorkFailed):
    """An MCP server went away while in use."""


class McpCallTimeout(WorkFailed):
    """An MCP tool call did not answer in time."""


@dataclass(frozen=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False
    """The server says it does not change anything (``annotations.readOnlyHint``)."""


@dataclass(frozen=True)
class CallResult:
    """A tool call's answer: its text content joined, and whether the server flagged an error."""

    text: str
    is_error: bool = False
    structured: dict[str, Any] | None = field(default=None, compare=False)


class McpConnection:
    """One connected MCP server (see the module docstring). ``start`` before use, ``close`` after."""

    def __init__(self, spec: McpServerSpec, *, env: dict[str, str] | None = None, cwd: Path | None = None,
                 log: Path | None = None, headers: dict[str, str] | None = None):
        """``headers``: a URL server's headers with their values resolved (hub.py); held in memory only."""
        self.spec, self.env, self.cwd, self.log = spec, env or {}, cwd, log
        self._headers = dict(headers or {})
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self._tools: list[RemoteTool] = []
        self._failure: str | None = None
        self._dead: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"{noise.THREAD_PREFIX}{spec.name}", daemon=True)

    @property
    def name(self) -> str:
        return self.spec.name

    # -- the facade (any thread) ------------------------------------------------------
    def start(self) -> McpConnection:
        """Connect, initialise and list the tools; ``McpStartFailed`` saying why not."""
        noise.install()  # stdout junk from a server: one line naming it, not the SDK's tracebacks
        self._thread.start()
        if not self._ready.wait(self.spec.startup_timeout):
            self.close()
            raise McpStartFailed(f"mcp server {self.name!r} did not answer within {self.spec.startup_timeout:g}s "
                                 f"(startup_timeout){self._stderr_hint()}")
        if self._failure is not None:
            self._thread.join(JOIN_GRACE)
            raise McpStartFailed(f"mcp server {self.name!r} failed to start: {self._failure}{self._stderr_hint()}")
        return self

    def tools(self) -> list[RemoteTool]:
        return list(self._tools)

    @property
    def dead(self) -> bool:
        """It was up and has gone away (a call found it closed, or it was closed)."""
        return self._ready.is_set() and (self._dead is not None or self._ended.is_set())

    @property
    def alive(self) -> bool:
        return self._ready.is_set() and self._failure is None and self._dead is None and not self._ended.is_set()

    def call(self, tool: str, arguments: dict[str, Any], timeout: float | None = None) -> CallResult:
        """Call ``tool``; ``McpServerDied`` / ``McpCallTimeout`` when the server cannot answer."""
        if not self.alive or self._loop is None:
            raise McpServerDied(self._death())
        wait = min(self.spec.timeout, timeout) if timeout is not None else self.spec.timeout
        wait = max(wait, 0.001)
        future = asyncio.run_coroutine_threadsafe(self._call(tool, arguments, wait), self._loop)
        try:
            return future.result(wait + CALL_GRACE)
        except _Closed:
            self._dead = self._dead or CLOSED
            raise McpServerDied(self._death()) from None
        except (concurrent.futures.TimeoutError, asyncio.TimeoutError, TimeoutError):  # distinct classes on 3.10
            future.cancel()
            raise McpCallTimeout(f"mcp server {self.name!r}: {tool} did not answer within {wait:g}s") from None

    def close(self) -> None:
        """End the connection (the SDK stops the server's process group); idempotent."""
        loop, closing, task = self._loop, self._closing, self._task
        if loop is not None and not self._ended.is_set():
            with contextlib.suppress(RuntimeError):  # the loop already stopped
                if self._session is not None and closing is not None:
                    loop.call_soon_threadsafe(closing.set)  # connected: leave the session the normal way
                elif task is not None:
                    loop.call_soon_threadsafe(task.cancel)  # still starting: the SDK's shutdown runs on cancel
        if self._thread.is_alive():
            self._thread.join(JOIN_GRACE)

    # -- the connection's own thread ------------------------------------------------------
    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._task = loop.create_task(self._main())
        try:
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            self._failure = self._failure or "cancelled while starting"
        finally:
            loop.close()
            if self.log is not None and self.log.exists():  # the server has stopped: its log is complete
                Secrets.from_environ().scrub_file(self.log)
            self._ended.set()
            self._ready.set()

    async def _main(self) -> None:
        from mcp import ClientSession

        self._closing = asyncio.Event()
        errlog: TextIO | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.spec.url is not None:
                    from mcp.client.streamable_http import (
                        create_mcp_http_client,
                        streamable_http_client,
                    )

                    # our own client only to send the headers; closed after the transport, by the stack
                    http = await stack.enter_async_context(create_mcp_http_client(headers=self._headers)) \
                        if self._headers else None
                    read, write = await stack.enter_async_context(streamable_http_client(self.spec.url,
                                                                                         http_client=http))
                else:
                    from mcp import StdioServerParameters, stdio_client

                    if self.log is not None:
                        self.log.parent.mkdir(parents=True, exist_ok=True)
                        errlog = stack.enter_context(self.log.open("a", encoding="utf-8"))
                    params = StdioServerParameters(command=self.spec.command or "", args=list(self.spec.args),
                                                   env=self.env, cwd=self.cwd)
                    read, write = await stack.enter_async_context(
                        stdio_client(params, errlog=errlog) if errlog is not None else stdio_client(params))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._tools = await self._list(session)
                self._session = session
                self._ready.set()
                await self._closing.wait()
        except Exception as e:  # noqa: BLE001 -- every way a connection ends is reported, never raised here
            reason = _reason(e)
            if self._ready.is_set():
                self._dead = self._dead or reason
            else:
                self._failure = reason

    async def _list(self, session: ClientSession) -> list[RemoteTool]:
        from mcp.types import PaginatedRequestParams

        out: list[RemoteTool] = []
        cursor: str | None = None
        while True:
            res = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            out += [RemoteTool(t.name, t.description or "", dict(t.input_schema or {"type": "object"}),
                               bool(t.annotations is not None and t.annotations.read_only_hint))
                    for t in res.tools]
            cursor = res.next_cursor
            if not cursor:
                return out

    async def _call(self, tool: str, arguments: dict[str, Any], wait: float) -> CallResult:
        from mcp.shared.exceptions import MCPError
        from mcp.types import (
            CONNECTION_CLOSED,
            CallToolResult,
            EmbeddedResource,
            TextContent,
            TextResourceContents,
        )

        assert self._session is not None, "called before start()"
        try:
            # ours is the deadline that counts (McpCallTimeout); the SDK's own comes a second later
            res = await asyncio.wait_for(self._session.call_tool(tool, arguments, read_timeout_seconds=wait + 1), wait)
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                raise _Closed() from None
            return CallResult(f"MCP error {e.code}: {e.message}", is_error=True)
        if not isinstance(res, CallToolResult):  # input requests: this client asks for none
            return CallResult(f"the server answered {tool} with a {type(res).__name__}, which team does not use",
                              is_error=True)
        texts = []
        for block in res.content:
            if isinstance(block, TextContent):
                texts.append(block.text)
            elif isinstance(block, EmbeddedResource) and isinstance(block.resource, TextResourceContents):
                texts.append(block.resource.text)
            else:
                texts.append(f"[{block.type} content not shown]")
        structured = res.structured_content if isinstance(res.structured_content, dict) else None
        return CallResult("\n".join(texts), bool(res.is_error), structured)

    # -- messages ---------------------------------------------------------------------
    def _death(self) -> str:
        why = self._dead or self._failure or "is not connected"
        return f"mcp server {self.name!r} {why} while in use{self._stderr_hint()}"

    def _stderr_hint(self) -> str:
        if self.log is None or not self.log.exists():
            return ""
        try:
            lines = [ln.strip() for ln in self.log.read_text(encoding="utf-8", errors="replace").splitlines()
                     if ln.strip()]
        except OSError:
            return ""
        last = f"; its last stderr line: {lines[-1][:300]!r}" if lines else ""
        return f"{last} (full log: {self.log})"


class _Closed(Exception):
    """The SDK said the connection closed under a call."""


def _reason(e: BaseException) -> str:
    """One line for whatever ended a connection (an ExceptionGroup: its first leaf)."""
    while getattr(e, "exceptions", None):  # an ExceptionGroup (a builtin from 3.11 on)
        e = e.exceptions[0]  # type: ignore[attr-defined]
    if isinstance(e, FileNotFoundError):
        return f"command not found: {e.filename or e}"
    if isinstance(e, OSError):
        return f"{type(e).__name__}: {e.strerror or e}"
    text = str(e) or type(e).__name__
    if text == "Connection closed":
        return CLOSED
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text else text
