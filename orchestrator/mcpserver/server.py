"""``team mcp``: the task graph and the team served to any MCP client, with the official SDK.

``build(root, caller)`` returns an ``mcp.server.mcpserver.MCPServer`` (the SDK's high-level
server, formerly FastMCP) holding eleven tools, fifteen for ``--as lead`` (its controls:
lead.py), and the ``Caller`` (caller.py: who the client is, its permissions, its place on the
roster); ``serve_stdio`` and ``serve_http`` join the caller and run the server. The SDK does
the protocol (JSON-RPC, initialisation, schemas from the signatures, argument validation);
nothing here speaks it by hand.

Annotations (``tool_annotations``): every tool says what it does to the state, as MCP tool
annotations: the reads (``task_get``, ``task_list``, ``task_blocked``, ``task_critical``,
``team_status``) are ``readOnlyHint``, so a plan-mode teammate (which may use only read-only
tools, docs/mcp.md) and a cautious client may call them; ``task_update``, ``approve`` and
``deny`` are idempotent; ``shutdown`` is destructive. Reads are bounded: ``limit``/``cursor`` and
a page of at most ``paging.MAX_CHARS`` characters (paging.py).

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
    from mcp.types import ToolAnnotations

from ..core.errors import TeamError, UserError, storage_error
from . import tools as t
from .caller import Caller

Ref = int | str
StatusName = Literal["pending", "in_progress", "completed", "failed", "cancelled"]
TaskRef = Annotated[Ref, Field(description="Task id or name.")]
Estimate = Annotated[float | None, Field(description="Expected seconds, above 0.")]
NAME = "team"
INSTRUCTIONS = ("The durable task graph and inboxes of a `team` state root. Claim a ready task before working on "
                "it; mark it completed with a result when done.")


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UserError("`team mcp` needs the MCP SDK: pip install 'team-orchestrator[mcp]'") from None


Kind = Literal["read", "write", "destructive", "idempotent"]
READ: Kind = "read"
"""A tool that changes nothing: ``readOnlyHint`` (plan-mode teammates and cautious clients may use it)."""
ListLimit = Annotated[int, Field(ge=1, le=500, description="Most entries in this page.")]
Cursor = Annotated[int | None, Field(ge=0, description="Where the page starts: the `cursor` the last page's "
                                                        "footer names.")]


def tool_annotations(kind: Kind) -> ToolAnnotations:
    """What a client may assume of a tool (MCP tool annotations): ``read`` changes nothing;
    ``write`` adds (a task, a message); ``idempotent`` overwrites with what it is given (the same
    call twice changes nothing more); ``destructive`` may take something away (a teammate)."""
    from mcp.types import ToolAnnotations

    if kind == READ:
        return ToolAnnotations(read_only_hint=True, open_world_hint=False)
    return ToolAnnotations(read_only_hint=False, destructive_hint=kind == "destructive",
                           idempotent_hint=kind == "idempotent", open_world_hint=False)


def build(root: Path, caller: str, role: str | None = None) -> tuple[MCPServer[Any], Caller]:
    """The ``MCPServer`` serving ``root`` to a client called ``caller``, and that ``Caller``
    (``join`` it before serving: roster, heartbeat, hooks). The lead's tools are listed only to
    ``--as lead``."""
    _require_sdk()
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult, TextContent

    c = Caller(root, caller, role)
    server: MCPServer[Any] = MCPServer(NAME, instructions=INSTRUCTIONS, log_level="WARNING")

    def tool(kind: Kind) -> Callable[[Callable[..., str]], Callable[..., str]]:
        """Register a tool; its ``TeamError`` becomes an error result with the CLI's one line."""

        def register(fn: Callable[..., str]) -> Callable[..., str]:
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
                            annotations=tool_annotations(kind), structured_output=False)
            return fn

        return register

    @tool("write")
    def task_create(subject: str, description: str = "", blocked_by: list[Ref] | None = None, owner: str = "",
                    name: str | None = None, estimate: Estimate = None) -> str:
        """Create a task (blocked_by: ids or names it waits on; estimate: seconds)."""
        return t.task_create(c, subject, description, blocked_by or [], owner, name, estimate)

    @tool("idempotent")
    def task_update(task: TaskRef, status: StatusName | None = None, owner: str | None = None,
                    add_blocked_by: list[Ref] | None = None, remove_blocked_by: list[Ref] | None = None,
                    subject: str | None = None, description: str | None = None, result: str | None = None) -> str:
        """Change a task's status, owner, dependencies, text or result (yours; the lead: any)."""
        return t.task_update(c, task, status, owner, add_blocked_by or [], remove_blocked_by or [], subject,
                             description, result)

    @tool(READ)
    def task_get(task: TaskRef) -> str:
        """One task as JSON, with ready, waiting_on and blocks."""
        return t.task_get(c, task)

    @tool(READ)
    def task_list(status: StatusName | None = None, owner: str | None = None, ready: bool = False,
                  blocked: bool = False, limit: ListLimit = 100, cursor: Cursor = None) -> str:
        """Tasks, one line each, by id; ready: could start now; blocked: pending, waiting on others."""
        return t.task_list(c, status, owner, ready, blocked, limit, cursor)

    @tool(READ)
    def task_blocked(task: Ref | None = None, limit: Annotated[int, Field(ge=1, le=200)] = 20,
                     cursor: Cursor = None) -> str:
        """Why tasks wait: each blocked chain down to its root blockers."""
        return t.task_blocked(c, task, limit, cursor)

    @tool(READ)
    def task_critical(limit: Annotated[int, Field(ge=1, le=5000)] = t.CRITICAL_LIMIT,
                      cursor: Cursor = None) -> str:
        """Critical path of the unfinished work and the parallel waves (JSON)."""
        return t.task_critical(c, limit, cursor)

    @tool("write")
    def task_claim(task: TaskRef, owner: str | None = None) -> str:
        """Claim a ready task (compare-and-set; fails if taken) for you (owner: the lead's)."""
        return t.task_claim(c, task, owner)

    @tool("write")
    def message_send(to: str, text: str, sender: str | None = None) -> str:
        """Send a message to a member's or the lead's inbox."""
        return t.message_send(c, to, text, sender)

    @tool("write")
    def message_broadcast(text: str, sender: str | None = None) -> str:
        """Send a message to every member but the sender."""
        return t.message_broadcast(c, text, sender)

    @tool("write")
    def inbox_read(name: str | None = None, peek: bool = False, limit: Annotated[int, Field(ge=1, le=200)] = 20,
                   cursor: Cursor = None) -> str:
        """Read and consume your unread messages (peek: keep them; any member's inbox)."""
        return t.inbox_read(c, name, peek, limit, cursor)

    @tool(READ)
    def team_status(limit: Annotated[int, Field(ge=1, le=1000)] = 50) -> str:
        """Roster (kind, model, liveness), task counts, running jobs, the lead, token usage."""
        return t.team_status(c, limit)

    if c.is_lead:
        from . import lead  # the runtime's spawn: imported only for the lead

        @tool("write")
        def spawn(name: str, role: str = "coder", prompt: str | None = None, plan_mode: bool = False) -> str:
            """Start a teammate in the running lead (else enrol it for the next one)."""
            return lead.spawn(c, name, role, prompt, plan_mode)

        @tool("destructive")
        def shutdown(name: str, reason: str = "", timeout: Annotated[float, Field(gt=0, le=3600)] = 30.0,
                     force: bool = False) -> str:
            """Ask a teammate to shut down and wait for its answer (force: stop it anyway)."""
            return lead.shutdown(c, name, reason, timeout, force)

        @tool("idempotent")
        def approve(request: str, reason: str = "", always: bool = False) -> str:
            """Approve a pending request (a plan, an ask call, more budget; see team_status)."""
            return lead.decide(c, request, True, reason, always)

        @tool("idempotent")
        def deny(request: str, reason: str = "") -> str:
            """Deny a pending request; the teammate reads the reason."""
            return lead.decide(c, request, False, reason, False)

    return server, c


def serve_stdio(root: Path, caller: str, role: str | None = None) -> None:
    """Serve on stdin/stdout until the client closes them."""
    import anyio

    server, c = build(root, caller, role)
    c.join()
    try:
        anyio.run(server.run_stdio_async)
    finally:
        c.close()


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


def serve_http(root: Path, caller: str, sock: socket.socket, role: str | None = None) -> None:
    """Serve streamable HTTP at ``http://127.0.0.1:PORT/mcp`` on ``sock`` until SIGINT/SIGTERM."""
    import anyio
    import uvicorn

    server, c = build(root, caller, role)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    async def main() -> None:
        await uvicorn.Server(config).serve(sockets=[sock])

    c.join()
    try:
        anyio.run(main)
    finally:
        c.close()
