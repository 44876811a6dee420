"""``team mcp``: the task graph and the team served to any MCP client, with the official SDK.

``build(root, caller)`` returns an ``mcp.server.mcpserver.MCPServer`` (the SDK's high-level
server, formerly FastMCP) holding eleven tools; ``serve_stdio`` and ``serve_http`` run it. The
SDK does the protocol (JSON-RPC, initialisation, schemas from the signatures, argument
validation); nothing here speaks it by hand.

Each tool is a plain function whose signature is its input schema and whose body calls tools.py
(the CLI's implementation: ``TaskStore``, ``Bus``, ``graph``, ``overview``). Sync functions: the
SDK runs them in a worker thread, so a store lock wait never blocks the event loop, and
concurrent clients (HTTP sessions, several ``team mcp`` processes on one root) meet at the
store's file lock like any two CLI commands.

Errors: a ``TeamError`` (unknown task, cycle, bad name, claim conflict) or a failed write to the
state root comes back as a tool result with ``isError: true`` and the CLI's one line,
``TypeName: message``; anything else is a bug and the SDK reports it as its own tool error.

Descriptions are short on purpose: the tool list is sent to the client's model on every turn;
``team mcp --describe`` measures it (describe.py).
"""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

from ..core.errors import TeamError, UserError, storage_error
from . import tools as t

Ref = int | str
StatusName = Literal["pending", "in_progress", "completed", "failed", "cancelled"]
TaskRef = Annotated[Ref, Field(description="Task id or name.")]
NAME = "team"
INSTRUCTIONS = ("The durable task graph and inboxes of a `team` state root. Claim a ready task before working on "
                "it; mark it completed with a result when done.")


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UserError("`team mcp` needs the MCP SDK: pip install 'team-orchestrator[mcp]'") from None


def build(root: Path, caller: str) -> MCPServer[Any]:
    """The ``MCPServer`` serving ``root`` to a client called ``caller``."""
    _require_sdk()
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult, TextContent

    c = t.Caller(root, caller)
    server: MCPServer[Any] = MCPServer(NAME, instructions=INSTRUCTIONS, log_level="WARNING")

    def tool(fn: Callable[..., str]) -> Callable[..., Any]:
        """Register ``fn``; its ``TeamError`` becomes an error result with the CLI's one line."""

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                text = fn(*args, **kwargs)
            except TeamError as e:
                return CallToolResult(content=[TextContent(type="text", text=f"{type(e).__name__}: {e}")],
                                      is_error=True)
            except OSError as e:
                error = storage_error(e)
                if error is None:
                    raise
                return CallToolResult(content=[TextContent(type="text", text=f"{type(error).__name__}: {error}")],
                                      is_error=True)
            return CallToolResult(content=[TextContent(type="text", text=text)])

        server.add_tool(run, name=fn.__name__, description=" ".join((fn.__doc__ or "").split()),
                        structured_output=False)
        return fn

    @tool
    def task_create(subject: str, description: str = "", blocked_by: list[Ref] | None = None, owner: str = "",
                    name: str | None = None, estimate: float | None = None) -> str:
        """Create a task (blocked_by: ids or names it waits on; estimate: seconds)."""
        return t.task_create(c, subject, description, blocked_by or [], owner, name, estimate)

    @tool
    def task_update(task: TaskRef, status: StatusName | None = None, owner: str | None = None,
                    add_blocked_by: list[Ref] | None = None, remove_blocked_by: list[Ref] | None = None,
                    subject: str | None = None, description: str | None = None, result: str | None = None) -> str:
        """Change a task's status, owner, dependencies, text or result."""
        return t.task_update(c, task, status, owner, add_blocked_by or [], remove_blocked_by or [], subject,
                             description, result)

    @tool
    def task_get(task: TaskRef) -> str:
        """One task as JSON, with ready, waiting_on and blocks."""
        return t.task_get(c, task)

    @tool
    def task_list(status: StatusName | None = None, owner: str | None = None, ready: bool = False,
                  blocked: bool = False) -> str:
        """Tasks, one line each; ready: could start now; blocked: pending, waiting on others."""
        return t.task_list(c, status, owner, ready, blocked)

    @tool
    def task_blocked(task: Ref | None = None) -> str:
        """Why tasks wait: each blocked chain down to its root blockers."""
        return t.task_blocked(c, task)

    @tool
    def task_critical() -> str:
        """Critical path of the unfinished work and the parallel waves (JSON)."""
        return t.task_critical(c)

    @tool
    def task_claim(task: TaskRef, owner: str | None = None) -> str:
        """Claim a ready task (compare-and-set; fails if taken). owner defaults to you."""
        return t.task_claim(c, task, owner)

    @tool
    def message_send(to: str, text: str, sender: str | None = None) -> str:
        """Send a message to a member's or the lead's inbox."""
        return t.message_send(c, to, text, sender)

    @tool
    def message_broadcast(text: str, sender: str | None = None) -> str:
        """Send a message to every member but the sender."""
        return t.message_broadcast(c, text, sender)

    @tool
    def inbox_read(name: str | None = None, peek: bool = False) -> str:
        """Read and consume unread messages (name defaults to you; peek: keep them)."""
        return t.inbox_read(c, name, peek)

    @tool
    def team_status() -> str:
        """Roster with liveness, task counts, running jobs, the lead, token usage."""
        return t.team_status(c)

    return server


def serve_stdio(root: Path, caller: str) -> None:
    """Serve on stdin/stdout until the client closes them."""
    import anyio

    server = build(root, caller)
    anyio.run(server.run_stdio_async)


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: any free port); ``UserError`` when taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on 127.0.0.1:{port}: {e.strerror}; pick another --port") from None
    sock.listen(128)
    return sock


def serve_http(root: Path, caller: str, sock: socket.socket) -> None:
    """Serve streamable HTTP at ``http://127.0.0.1:PORT/mcp`` on ``sock`` until SIGINT/SIGTERM."""
    import anyio
    import uvicorn

    server = build(root, caller)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    async def main() -> None:
        await uvicorn.Server(config).serve(sockets=[sock])

    anyio.run(main)
