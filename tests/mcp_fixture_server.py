"""A small MCP server made with the official SDK (MCPServer), for the client-side tests: a tool
that fails, one that is slow, one marked read-only, a large result, and two tool names that
collide once a dot is not allowed (``a.b`` and ``a_b``). Run: ``python mcp_fixture_server.py``."""

from __future__ import annotations

import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("fixture", log_level="WARNING")


@server.tool(description="Fail with the given reason.")
def fail(reason: str) -> str:
    raise ToolError(reason)


@server.tool(description="Sleep for some seconds, then say so.")
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="Read a value without changing anything.", annotations=ToolAnnotations(read_only_hint=True))
def peek(key: str) -> str:
    return f"value of {key}"


@server.tool(description="Write a value.")
def poke(key: str) -> str:
    return f"wrote {key}"


@server.tool(description="Many lines.")
def big(lines: int) -> str:
    return "\n".join(f"line {i}" for i in range(lines))


@server.tool(name="a.b", description="Dotted name.")
def dotted() -> str:
    return "dotted"


@server.tool(name="a_b", description="Underscored name.")
def underscored() -> str:
    return "underscored"


if __name__ == "__main__":
    server.run()
