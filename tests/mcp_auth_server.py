"""An MCP server over streamable HTTP, made with the official SDK (MCPServer), that lets in only
requests carrying ``Authorization: Bearer $EXPECTED_TOKEN`` (else 401) and whose one tool says what
header it was called with. Run: ``python mcp_auth_server.py``; it prints its URL on stdout, then one
line on stderr per refused request."""

from __future__ import annotations

import os
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

EXPECTED = f"Bearer {os.environ['EXPECTED_TOKEN']}"
server = MCPServer("auth-fixture", log_level="WARNING")
seen: list[str] = []


@server.tool(description="Say which Authorization header this call came with.")
def whoami() -> str:
    return f"authorized; you sent {seen[-1]}"


def checked(app):
    async def guard(scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"").decode()
            if auth != EXPECTED:
                print(f"refused: {scope['method']} {scope['path']} without the expected Authorization",
                      file=sys.stderr, flush=True)
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
            seen.append(auth)
        await app(scope, receive, send)

    return guard


if __name__ == "__main__":
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)
    config = uvicorn.Config(checked(server.streamable_http_app()), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
