"""An MCP server's tools as ``Tool``s: next to the built-in ones, through the same pipeline.

``mcp_tools(conn, allow)`` turns each tool a connected server lists (mcpclient/connection.py)
into a ``Tool`` named ``<server>__<tool>`` (core/mcpspec.py: OpenAI tool names allow no dot),
described as the server describes it, with the server's ``inputSchema`` as its ``schema``. So a
call goes through ``ToolRegistry.call`` like any other: arguments validated against that schema
(the model gets the problem and the signature back), plan mode (a tool the server does not
mark read-only counts as ``execute``), secrets scrubbed, the result bounded (full output saved
and referenced), the call and its result in the agent's call log and transcript.

``allow``: the role's ``mcp_tools`` allow-list (``server.tool``, ``server__tool``,
``server.*``); None lets every tool through.

A server error result (``isError``) is an error observation the model can act on. A server
that has gone away is not something the model can fix: the call ends the task attempt as
failed (``LoopControl.finish``) with the reason (which server, that it exited, its last stderr
line), so the task fails clearly instead of the agent looping on a dead tool; given
``reconnect`` (the runtime passes its hub's), a later attempt (a retry) starts the server again. A call that does
not answer in time (the server's ``timeout``, cut to the task's time left) is an error
observation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.errors import UserError
from ..core.jsonutil import dumps
from ..core.mcpspec import allowed, tool_name
from ..mcpclient.connection import McpCallTimeout, McpConnection, McpServerDied, McpStartFailed
from .base import Call, Handler, JsonArgs, Tool, ToolError, ToolOutput

DESCRIPTION_CHARS = 1000


def mcp_tools(conn: McpConnection, allow: tuple[str, ...] | None = None,
              reconnect: Callable[[], McpConnection] | None = None) -> list[Tool]:
    """The tools of ``conn`` that ``allow`` lets through, as ``Tool``s.

    ``reconnect``: how a later attempt gets the server back once it has died (the hub starts it
    again); without it a dead server stays dead for these tools."""
    holder = _Holder(conn, reconnect)
    out: list[Tool] = []
    seen: dict[str, str] = {}
    for remote in conn.tools():
        if not allowed(conn.name, remote.name, allow):
            continue
        name = tool_name(conn.name, remote.name)
        if name in seen:
            raise UserError(f"mcp server {conn.name!r} lists tools {seen[name]!r} and {remote.name!r}, which both "
                            f"become {name!r} for the model; let one of them through with the role's mcp_tools")
        seen[name] = remote.name
        desc = " ".join(remote.description.split())[:DESCRIPTION_CHARS] or f"{remote.name} (no description)"
        out.append(Tool(name=name, description=f"[MCP {conn.name}] {desc}",
                        args=JsonArgs, risk="read" if remote.read_only else "execute",
                        handler=_handler(holder, remote.name), schema=remote.input_schema, server=conn.name))
    return out


class _Holder:
    """The connection a server's tools call through. The call that finds the server dead ends its
    attempt; a later call (the retry's) starts the server again, if the owner said how."""

    def __init__(self, conn: McpConnection, reconnect: Callable[[], McpConnection] | None):
        self.conn, self.reconnect, self.lock = conn, reconnect, threading.Lock()

    def get(self) -> McpConnection:
        with self.lock:
            if self.conn.dead and self.reconnect is not None:
                self.conn = self.reconnect()  # McpStartFailed says why not
            return self.conn


def _handler(holder: _Holder, remote: str) -> Handler:
    def handle(call: Call) -> ToolOutput:
        ctx = call.ctx
        try:
            res = holder.get().call(remote, dict(call.args), timeout=ctx.time_left())
        except (McpServerDied, McpStartFailed) as e:
            reason = str(e)
            if ctx.loop is not None:
                ctx.loop.finish("failed", reason)
            raise ToolError(f"{reason}; this task attempt ends as failed") from None
        except McpCallTimeout as e:
            raise ToolError(str(e)) from None
        text = res.text or (dumps(res.structured) if res.structured else "(the tool returned no content)")
        return ToolOutput(text, is_error=res.is_error)

    return handle
