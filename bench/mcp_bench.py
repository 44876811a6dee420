"""What MCP costs and saves: `team mcp` against the CLI, and a teammate's MCP call against a
built-in tool. Real processes, the official SDK's client, nothing mocked.

    python bench/mcp_bench.py [--calls N]

1. The tool list `team mcp` sends a client's model every turn (``--describe``): tools, tokens
   (bytes/4, as team counts everywhere), against the 3,000-token target.
2. One task read, p50 and p90 in ms: a ``task_get`` through a live ``team mcp`` stdio session
   and through a ``team mcp --http`` session, against ``team task show --json`` (a process per
   read, as an agent without MCP would shell out). The ratio is the CLI's over MCP's.
3. One call of an MCP server's tool through the whole tool pipeline (registry → validation
   against the server's schema → the connection's event-loop thread → the server → scrub →
   bound → call log), against the built-in ``task_get`` tool in the same pipeline: what the
   facade and the round trip to the server add.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from orchestrator.core.mcpspec import McpServerSpec  # noqa: E402
from orchestrator.mcpclient.hub import McpHub  # noqa: E402
from orchestrator.mcpserver.describe import TARGET_TOKENS, describe  # noqa: E402
from orchestrator.tasks.store import TaskStore  # noqa: E402
from orchestrator.tools import FileTruth, ToolContext, ToolRegistry, default_registry  # noqa: E402
from orchestrator.tools.mcptools import mcp_tools  # noqa: E402

FIXTURE = REPO / "tests" / "mcp_fixture_server.py"


def pct(times: list[float], q: float) -> float:
    s = sorted(times)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def row(name: str, times: list[float], base: list[float] | None = None) -> str:
    ratio = f"{statistics.median(base) / statistics.median(times):8.1f}x" if base else " " * 9
    return f"{name:<34} {pct(times, 0.5):9.2f} {pct(times, 0.9):9.2f} {ratio}"


async def mcp_reads(session: ClientSession, calls: int) -> list[float]:
    await session.call_tool("task_get", {"task": 1})  # warm
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        res = await session.call_tool("task_get", {"task": 1})
        times.append(time.perf_counter() - t)
        assert not res.is_error
    return times


def stdio_reads(root: Path, calls: int) -> list[float]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "orchestrator", "--root", str(root), "mcp"],
                                   env={"PYTHONPATH": str(REPO)})

    async def main() -> list[float]:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            return await mcp_reads(s, calls)

    return anyio.run(main)


def http_reads(root: Path, calls: int) -> list[float]:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "--root", str(root), "mcp", "--http", "--port", "0"],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        m = re.search(r"(http://127\.0\.0\.1:\d+/mcp)", proc.stderr.readline())
        assert m

        async def main() -> list[float]:
            async with streamable_http_client(m.group(1)) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                return await mcp_reads(s, calls)

        return anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(30)


def cli_reads(root: Path, calls: int) -> list[float]:
    times = []
    for _ in range(max(3, calls // 5)):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "orchestrator", "--root", str(root), "task", "show", "1", "--json"],
                       cwd=REPO, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return times


def pipeline_calls(root: Path, calls: int) -> tuple[list[float], list[float]]:
    store = TaskStore(root)
    ctx = ToolContext(workspace=root, root=root, agent="bench", truth=FileTruth(), store=store,
                      outputs_dir=root / ".team" / "outputs" / "bench", call_log=root / ".team" / "calls" / "bench.jsonl")
    hub = McpHub([McpServerSpec(name="fx", command=sys.executable, args=[str(FIXTURE)])], root=root)
    try:
        remote = ToolRegistry(mcp_tools(hub.connect(hub.specs["fx"]), ("fx.peek",)))
        local = default_registry()

        def timed(reg: ToolRegistry, name: str, args: str) -> list[float]:
            times = []
            for i in range(calls + 1):
                t = time.perf_counter()
                obs = reg.call(name, args, ctx, f"c{i}")
                times.append(time.perf_counter() - t)
                assert not obs.is_error, obs.content
            return times[1:]

        return timed(remote, "fx__peek", '{"key": "k"}'), timed(local, "task_get", '{"task": 1}')
    finally:
        hub.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        TaskStore(root).create("benchmark task", "read me")
        desc = describe(root)
        print(f"team mcp tool list: {len(desc.tools)} tools, {desc.total} tokens "
              f"(target <= {TARGET_TOKENS}; {desc.total / TARGET_TOKENS:.0%} of it)\n")
        print(f"{'one task read':<34} {'p50 ms':>9} {'p90 ms':>9} {'CLI/this':>9}")
        cli = cli_reads(root, a.calls)
        print(row("team task show --json (a process)", cli))
        print(row("task_get over team mcp (stdio)", stdio_reads(root, a.calls), cli))
        print(row("task_get over team mcp --http", http_reads(root, a.calls), cli))
        remote, local = pipeline_calls(root, a.calls)
        print(f"\n{'one call in the tool pipeline':<34} {'p50 ms':>9} {'p90 ms':>9} {'MCP/built-in':>12}")
        print(row("built-in task_get", local))
        print(f"{'MCP fx__peek (stdio server)':<34} {pct(remote, .5):9.2f} {pct(remote, .9):9.2f} "
              f"{statistics.median(remote) / statistics.median(local):11.1f}x")


if __name__ == "__main__":
    main()
