"""What the agents' sandbox and the secrets scrubber cost: real bubblewrap, the real tool pipeline.

    python bench/sandbox_bench.py [--calls N]

1. Latency of one ``bash`` tool call (registry → policy → sandbox → pump →
   scrub → bound → call log), p50 and p90, with the sandbox on (bubblewrap)
   and off (``TEAM_SANDBOX=off``), for a command that prints nothing, one
   that prints a line, and one that prints 1 MB (through the pipe and the
   streaming scrubber, with four secrets to look for). The ratio column is
   on/off.
2. What a plan shell task pays for the one environment policy: building a
   job's environment from the lead's (the allow-list plus the plan's ``env``
   and the ``TEAM_*`` variables), per job, in microseconds. Shell tasks do
   not go through the sandbox.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.core.environ import task_environment  # noqa: E402
from orchestrator.core.redact import Secrets  # noqa: E402
from orchestrator.core.sandbox import Sandbox  # noqa: E402
from orchestrator.tasks.store import TaskStore  # noqa: E402
from orchestrator.tools import FileTruth, ToolContext, default_registry  # noqa: E402

COMMANDS = [("true", "true"), ("echo", "echo hello"), ("1 MB out", "head -c 1000000 /dev/zero | tr '\\0' x")]
SECRETS = Secrets(["sk-bench-0123456789abcdef", "ghp_bench0123456789", "pa55-bench-url", "sk-ant-bench-42"])


def pct(sorted_times: list[float], q: float) -> float:
    return sorted_times[min(len(sorted_times) - 1, int(len(sorted_times) * q))]


def call_times(root: Path, sandbox: Sandbox, command: str, calls: int) -> list[float]:
    ctx = ToolContext(workspace=root, root=root, agent="bench", truth=FileTruth(), store=TaskStore(root),
                      outputs_dir=root / ".team" / "outputs" / "bench", call_log=root / ".team" / "calls.jsonl",
                      sandbox=sandbox, secrets=SECRETS)
    registry = default_registry()
    registry.call("bash", {"command": "true"}, ctx, "warm")  # the probe, once per session
    times = []
    for i in range(calls):
        started = time.perf_counter()
        obs = registry.call("bash", {"command": command}, ctx, f"c{i}")
        times.append((time.perf_counter() - started) * 1000)
        assert obs.stage == "ok" and obs.meta["exit_code"] == 0, obs.content
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="calls per command and setting (default 50)")
    a = parser.parse_args()
    on = Sandbox()
    if on.problem() is not None:
        print(f"cannot measure: {on.problem()}")
        return 1
    print(f"bash tool call latency, {a.calls} calls each (ms)\n")
    print(f"{'command':<10} {'off p50':>8} {'off p90':>8} {'on p50':>8} {'on p90':>8} {'on/off':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for label, command in COMMANDS:
            off_t = sorted(call_times(root, Sandbox.off("bench"), command, a.calls))
            on_t = sorted(call_times(root, on, command, a.calls))
            ratio = statistics.median(on_t) / statistics.median(off_t)
            print(f"{label:<10} {pct(off_t, .5):>8.1f} {pct(off_t, .9):>8.1f} {pct(on_t, .5):>8.1f} "
                  f"{pct(on_t, .9):>8.1f} {ratio:>6.1f}x")
    environ = dict(os.environ)
    declared = {"PYTHONPATH": ".", "DEBUG": "1"}
    team = {"TEAM_TASK_ID": "7", "TEAM_PLAN": "p", "TEAM_PLAN_TASK": "t", "TEAM_ATTEMPT": "1", "TEAM_ROOT": "/r"}
    n = 20_000
    started = time.perf_counter()
    for _ in range(n):
        task_environment(environ, declared, team)
    per = (time.perf_counter() - started) / n * 1e6
    print(f"\na plan shell task's environment (allow-list of {len(environ)} variables + env + TEAM_*): "
          f"{per:.1f} µs per job; shell tasks run without the sandbox")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
