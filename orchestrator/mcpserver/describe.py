"""``team mcp --describe``: the tool list a client receives, and what it costs in tokens.

The list is the server's own ``tools/list`` answer (``MCPServer.list_tools``, dumped as it goes
on the wire: camelCase aliases, no nulls), so the figure is what a client's model pays for on
every turn. Tokens are counted the way the rest of ``team`` counts them
(``agent.projection.text_tokens``: UTF-8 bytes / 4, rounded up, over the canonical JSON).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent.projection import text_tokens
from ..core.jsonutil import stable_json
from .server import build

TARGET_TOKENS = 3000
"""The budget the tool list is held to (issue 14: a peer's 36 tools cost ~21k)."""


@dataclass(frozen=True)
class ToolCost:
    name: str
    description: str
    tokens: int


@dataclass(frozen=True)
class Description:
    tools: list[ToolCost]
    total: int
    """Tokens of the whole list as one JSON document (what ``tools/list`` returns)."""
    wire: list[dict[str, Any]]


def describe(root: Path, caller: str = "mcp") -> Description:
    import anyio

    server, _ = build(root, caller)

    async def listed() -> list[Any]:
        return list(await server.list_tools())

    wire = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in anyio.run(listed)]
    costs = [ToolCost(w["name"], w.get("description", ""), text_tokens(stable_json(w))) for w in wire]
    return Description(costs, text_tokens(stable_json({"tools": wire})), wire)


def describe_lines(d: Description) -> list[str]:
    width = max(len(c.name) for c in d.tools)
    lines = [f"{c.name:<{width}}  {c.tokens:>4}  {c.description}" for c in d.tools]
    lines.append(f"{len(d.tools)} tools, {d.total} tokens for the whole list (target ≤ {TARGET_TOKENS}; "
                 "bytes/4, as team counts tokens everywhere)")
    return lines
