"""The benchmarks still run (a brief sample; `make bench` runs them in full and prints the figures)."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO


def run_bench(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_sched_bench_runs_team_and_make_on_the_same_dag_and_prints_the_ratio():
    out = run_bench("bench/sched_bench.py", "--quick", "--repeat", "1", "--only", "chain,layers", "--body", "true")
    rows = [line.split() for line in out.splitlines() if line.startswith(("chain-", "layers-"))]
    assert [r[0] for r in rows] == ["chain-200", "layers-60x8"] and [int(r[2]) for r in rows] == [40, 96]
    assert "worst overhead on true" in out and "durable write on this disk" in out


def test_token_bench_compares_the_projected_context_with_the_naive_loop():
    out = run_bench("bench/token_bench.py", "--turns", "20")
    assert "naive" in out.lower()


def test_sandbox_bench_times_the_bash_tool_with_and_without_the_sandbox():
    out = run_bench("bench/sandbox_bench.py", "--calls", "3")
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("true ", "echo ", "1 MB"))]
    assert rows == ["true", "echo", "1"] and "on/off" in out
    assert "µs per job; shell tasks run without the sandbox" in out


def test_hooks_bench_runs_a_plan_without_and_with_hooks_and_prints_the_ratios():
    out = run_bench("bench/hooks_bench.py", "--tasks", "5", "--repeat", "1", "--calls", "2")
    rows = [line.split() for line in out.splitlines() if line.startswith(("none ", "notify ", "decide "))]
    assert [r[0] for r in rows if r[-1].endswith("x")] == ["none", "notify", "decide"]
    assert "ms per hook run" in out


def test_mcp_bench_prints_the_tool_list_cost_and_the_read_latencies():
    out = run_bench("bench/mcp_bench.py", "--calls", "5")  # reads on the default 2,000-task graph
    assert re.search(r"team mcp tool list: 11 tools, \d+ tokens .*, \d+ cl100k tokens", out)
    assert re.search(r"team mcp tool list \(--as lead\): 15 tools", out)
    m = re.search(r"largest default read: \w+, ([\d,]+) cl100k tokens \(target <= 8,000", out)
    assert m and int(m.group(1).replace(",", "")) <= 8000, out
    rows = [line for line in out.splitlines() if line.startswith(("team task show", "task_get over", "MCP fx__peek"))]
    assert len(rows) == 4


def test_scale_bench_times_materialise_listing_dry_run_and_a_run_against_make():
    out = run_bench("bench/scale_bench.py", "--sizes", "120", "--skip-startup")
    (row,) = [line.split() for line in out.splitlines() if line.split()[:3] == ["120", "true", "this"]]
    assert len(row) == 13 and float(row[11]) > 0  # ms per task
    assert "per-task cost vs 1k's" not in out and "durable write on this disk" in out
