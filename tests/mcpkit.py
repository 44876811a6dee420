"""Test helpers for ``team mcp``: the real server (a ``team mcp`` process over stdio, or ``team mcp
--http`` on 127.0.0.1) driven by the official MCP SDK's client."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from conftest import REPO, team_env
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def _stdio_params(root: Path, caller: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "orchestrator", "--root", str(root), "mcp", "--init", "--as", caller],
                                 env={"PYTHONPATH": str(REPO)}, cwd=str(root))


@contextlib.asynccontextmanager
async def stdio_session(root: Path, caller: str = "claude") -> AsyncIterator[ClientSession]:
    """A session with a fresh ``team mcp`` process over its stdin/stdout."""
    async with stdio_client(_stdio_params(root, caller)) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        yield s


@contextlib.contextmanager
def http_server(root: Path, caller: str = "claude") -> Iterator[str]:
    """``team mcp --http --port 0`` in a subprocess; yields its URL (read from its stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "mcp", "--http", "--port", "0", "--as", caller],
                            cwd=root, env=team_env(root), stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line)
        assert m, f"no URL in {line!r}"
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        yield s


async def call(s: ClientSession, tool: str, /, **args) -> tuple[str, bool]:
    res = await s.call_tool(tool, args)
    return "".join(c.text for c in res.content if c.type == "text"), bool(res.is_error)


async def ok(s: ClientSession, tool: str, /, **args) -> str:
    text, err = await call(s, tool, **args)
    assert not err, f"{tool}({args}) failed: {text}"
    return text
