"""``team mcp``: the durable task graph and the team as an MCP server (the official ``mcp`` SDK).

    tools.py     what each tool does: the CLI's implementation (TaskStore, Bus, graph, overview),
                 with the caller's permissions and the task_completed hooks on completions
    lead.py      the lead's controls (spawn, shutdown, approve, deny), for ``--as lead`` only
    caller.py    who the client is: an external member of the team (roster, inbox, heartbeat),
                 its permissions, the root's hooks
    paging.py    bounded reads: limit/cursor and a page that fits a model's context
    server.py    the SDK's MCPServer with the tools and their annotations; stdio and streamable
                 HTTP (127.0.0.1)
    describe.py  the tool list as a client receives it, and its token cost (``--describe``)

Imported only by ``team mcp`` (cli/mcpcmd.py): no other command pays for the SDK. The SDK comes
with the ``mcp`` extra (``pip install 'team-orchestrator[mcp]'``). docs/mcp.md says how to
register the server with Claude Code, Codex and Cursor.
"""
