"""MCP servers as teammates' tools: the client side, with the official ``mcp`` SDK.

    connection.py  McpConnection: one server (stdio command or streamable HTTP URL), its SDK
                   session on a dedicated event-loop thread behind a sync facade (start, tools,
                   call, close); McpStartFailed, McpServerDied, McpCallTimeout
    hub.py         McpHub: a run's servers, started on first need with the environment
                   allow-list, shared by its teammates, closed (processes reaped) with the run
    noise.py       a server that prints non-JSON-RPC on stdout: one line naming it instead of the
                   SDK's tracebacks

The SDK is imported only when a server is started: a plan without ``mcp_servers:`` never loads
it. What a server's tools look like to the model, and how a call goes through the tool pipeline,
is tools/mcptools.py's; the ``mcp_servers:`` record is core/mcpspec.py's. docs/mcp.md.
"""
