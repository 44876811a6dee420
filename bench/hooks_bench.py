"""What hooks cost a run: `team run` of N shell tasks without hooks, with notification hooks,
and with a deciding `task_completed` hook, all measured in this run on this machine.

    python bench/hooks_bench.py [--tasks N] [--workers W] [--repeat R]

Rows (best of R):
  none       no hooks: the baseline
  notify     `true` on task_created, task_claimed, task_failed, message_sent, run_finished
             (run in the background by the dispatcher's worker thread)
  decide     `true` on task_completed: each completion waits for its hook (its own thread)

and one direct figure: a `HookDispatcher.decide` of `true` (fork + exec of /bin/sh, the payload
on stdin, the log line), per call. Nothing is asserted: the ratios print against the baseline.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from orchestrator.core.hooks import HooksConfig  # noqa: E402
from orchestrator.core.models import Task  # noqa: E402
from orchestrator.hooks.dispatch import HookDispatcher  # noqa: E402

CONFIGS = {
    "none": "",
    "notify": "hooks:\n" + "".join(f"  {e}: 'true'\n" for e in
                                   ("task_created", "task_claimed", "task_failed", "message_sent", "run_finished")),
    "decide": "hooks:\n  task_completed: 'true'\n",
}


def plan(tasks: int, workers: int, hooks: str) -> str:
    body = "".join(f"  - {{id: t{i}, run: 'true'}}\n" for i in range(tasks))
    return f"name: bench\nworkers: {workers}\n{hooks}tasks:\n{body}"


def run_once(tasks: int, workers: int, hooks: str) -> float:
    with tempfile.TemporaryDirectory(prefix="hooks-bench-") as d:
        root = Path(d)
        (root / "plan.yaml").write_text(plan(tasks, workers, hooks))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TEAM_", "OPENAI_"))}
        env.update(TEAM_ROOT=str(root), PYTHONPATH=str(REPO))
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root, env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"team run failed: {proc.stderr[-2000:]}")
        return wall


def decide_cost(calls: int) -> float:
    with tempfile.TemporaryDirectory(prefix="hooks-bench-") as d:
        hooks = HookDispatcher(HooksConfig.model_validate({"task_completed": "true"}), Path(d), plan="bench")
        task = Task(id=1, subject="bench")
        t0 = time.perf_counter()
        for _ in range(calls):
            hooks.decide("task_completed", teammate="alice", task=task)
        hooks.close()
        return (time.perf_counter() - t0) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    best = {name: min(run_once(args.tasks, args.workers, hooks) for _ in range(args.repeat))
            for name, hooks in CONFIGS.items()}
    base = best["none"]
    print(f"team run of {args.tasks} `true` tasks, {args.workers} workers, best of {args.repeat}")
    print(f"{'hooks':<8} {'wall s':>8} {'vs none':>8}")
    for name, wall in best.items():
        print(f"{name:<8} {wall:>8.3f} {wall / base:>7.2f}x")
    per = decide_cost(args.calls)
    print(f"decide of `true`: {per * 1e3:.2f} ms per hook run ({args.calls} calls)")


if __name__ == "__main__":
    main()
