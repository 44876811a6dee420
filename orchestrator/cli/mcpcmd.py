"""``team mcp``: serve the task graph and the team to an MCP client (orchestrator/mcpserver/).

Over stdio by default (what Claude Code, Codex and Cursor start from their MCP config);
``--http`` serves streamable HTTP on 127.0.0.1 instead; ``--describe`` prints the tool list and
its token cost and exits. A ``--root`` must hold a store already (a mistyped path is refused,
naming the one probably meant: core/paths.py ``check_root``); ``--init`` starts one there. The MCP SDK is imported only when the command runs, so
``team task list`` never pays for it.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .common import RootOpt, err, out, print_json, root_of


def mcp_cmd(
    ctx: typer.Context,
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")] = False,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port for --http (0: a free one).")] = 8765,
    caller: Annotated[str, typer.Option("--as", help="Who the client is: a team member (kind external) with an "
                                                     "inbox, the actor of its changes; `lead` for the lead's "
                                                     "reach.")] = "mcp",
    role: Annotated[str | None, typer.Option("--role", help="The role whose permissions the client acts with "
                                                           "(default: its roster role, else coder).")] = None,
    init: Annotated[bool, typer.Option("--init", help="Start a new project's state in --root if it has none "
                                                     "(else a --root without .tasks/ or .team/ is refused).")] = False,
    describe: Annotated[bool, typer.Option("--describe", help="Print the tool list and its token cost, then exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --describe: the tool list as the client gets it.")] = False,
    root: RootOpt = None,
) -> None:
    """Serve the task graph and inboxes to an MCP client (stdio, or --http); see docs/mcp.md."""
    from ..mcpserver import describe as desc
    from ..mcpserver import server

    state = root_of(root, ctx, creates=init or describe)  # --describe reads nothing
    if init:
        (state / ".tasks").mkdir(parents=True, exist_ok=True)
    if describe:
        d = desc.describe(state, caller)
        if as_json:
            print_json({"tools": d.wire, "tokens": d.total})
        else:
            out("\n".join(desc.describe_lines(d)))
        return
    if http:
        sock = server.bind(port)
        host, bound = sock.getsockname()[:2]
        err(f"team mcp: serving {state} on http://{host}:{bound}/mcp (streamable HTTP); Ctrl-C stops")
        sys.stderr.flush()
        server.serve_http(state, caller, sock, role)
        return
    server.serve_stdio(state, caller, role)


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp_cmd)
