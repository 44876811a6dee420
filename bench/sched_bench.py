"""`team run` vs `make -jW` on the same DAGs (issue 4's scheduler benchmark).

For each shape and body, the DAG is written once as a plan and once as a
Makefile, then both run with W workers in a fresh directory:

* make: wall time of ``make -jW -f Makefile all``.
* team: ``team run plan.yaml --json --workers W`` in a subprocess. The
  makespan is measured from the ``run_started`` event to the final summary
  (the scheduler at work: claims, jobs, finishes, all durable); the
  process wall time (Python start-up, validation, materialising N tasks
  with fsync) is shown next to it.
* bound: max(critical path, total work / W) with the body's nominal time.

Run directories are kept until every run is measured (see ``main``), and
``sync`` settles writeback before each timed command.

Targets: ratio ≤ 1.10 on the ``sleep 0.05`` shapes; team overhead per task
≤ 3 ms on ``true`` ((team makespan - make wall) / tasks).

Usage: python bench/sched_bench.py [--workers 8] [--quick] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _disk import durable_write_ms
from _proc import as_installed

REPO = Path(__file__).resolve().parent.parent


def shapes(quick: bool) -> dict[str, list[list[int]]]:
    """name -> needs per task (indices of earlier tasks)."""
    rnd = random.Random(4)
    scale = 5 if quick else 1
    out: dict[str, list[list[int]]] = {}
    out["independent-500"] = [[] for _ in range(500 // scale)]
    out["chain-200"] = [[i - 1] if i else [] for i in range(200 // scale)]
    layers, width = 60 // scale, 8
    out["layers-60x8"] = [
        [] if layer == 0 else [(layer - 1) * width + j, (layer - 1) * width + (j + 1) % width]
        for layer in range(layers) for j in range(width)
    ]
    n = 1000 // scale
    out["random-1000"] = [sorted(set(rnd.sample(range(max(0, i - 40), i), min(i, rnd.randint(0, 3)))))
                          for i in range(n)]
    return out


def critical_len(needs: list[list[int]]) -> int:
    depth: list[int] = []
    for deps in needs:
        depth.append(1 + max((depth[d] for d in deps), default=0))
    return max(depth, default=0)


def write_plan(path: Path, name: str, needs: list[list[int]], body: str, workers: int) -> None:
    lines = [f"name: {name}", f"workers: {workers}", "tasks:"]
    for i, deps in enumerate(needs):
        lines.append(f"  - id: t{i}")
        lines.append(f"    run: \"{body}\"")
        if deps:
            lines.append(f"    needs: [{', '.join(f't{d}' for d in deps)}]")
    path.write_text("\n".join(lines) + "\n")


def write_makefile(path: Path, needs: list[list[int]], body: str) -> None:
    names = [f"t{i}" for i in range(len(needs))]
    lines = [".PHONY: all " + " ".join(names), "all: " + " ".join(names)]
    for i, deps in enumerate(needs):
        lines.append(f"t{i}: " + " ".join(f"t{d}" for d in deps))
        lines.append(f"\t@{body}")
    path.write_text("\n".join(lines) + "\n")


def run_make(d: Path, workers: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(["make", f"-j{workers}", "-s", "-f", "Makefile", "all"], cwd=d, check=True)
    return time.perf_counter() - t0


def run_team(d: Path, workers: int) -> tuple[float, float]:
    env = as_installed(PYTHONPATH=str(REPO))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--json", "--workers", str(workers),
         "--root", str(d)],
        cwd=d, env=env, capture_output=True, text=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"team run failed in {d}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    start = next(e["ts"] for e in events if e["event"] == "run_started")
    end = next(e["ts"] for e in events if e["event"] == "summary")
    done = sum(1 for e in events if e["event"] == "completed")
    if done != len([e for e in events if e["event"] == "started"]):
        raise SystemExit("bench: a task did not complete")
    return end - start, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="shapes at 1/5 size")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row; the table shows medians")
    ap.add_argument("--only", default="", help="comma-separated shape names (prefixes) to run, e.g. chain,layers")
    ap.add_argument("--body", choices=["true", "sleep"], help="run only this task body")
    args = ap.parse_args()
    w = args.workers
    bodies = {"true": ("true", 0.0), "sleep 0.05": ("sleep 0.05", 0.05)}
    if args.body:
        bodies = {k: v for k, v in bodies.items() if k.startswith(args.body)}
    wanted = [w for w in args.only.split(",") if w]
    rows = []
    t_all = time.perf_counter()
    # Run directories are deleted only once every run is measured: deleting a
    # run's thousands of files (discards on this VM's disk) slows file
    # creation for seconds afterwards, which would bill one run's teardown to
    # the next one (make creates no files, so only team would pay it).
    scratch = tempfile.TemporaryDirectory(prefix="sched-bench-")
    n_run = 0
    for shape, needs in shapes(args.quick).items():
        if wanted and not any(shape.startswith(w) for w in wanted):
            continue
        for label, (body, cost) in bodies.items():
            runs = []
            for _ in range(args.repeat):  # make and team alternate, so both see the same noise
                n_run += 1
                d = Path(scratch.name) / f"run{n_run}"
                d.mkdir()
                write_plan(d / "plan.yaml", "bench", needs, body, w)
                write_makefile(d / "Makefile", needs, body)
                os.sync()  # settle earlier runs' writeback before timing
                make_s = run_make(d, w)
                os.sync()
                runs.append((make_s, *run_team(d, w)))
            make_s, team_s, team_wall = (statistics.median(r[i] for r in runs) for i in range(3))
            n = len(needs)
            bound = max(critical_len(needs) * cost, n * cost / w)
            rows.append((shape, label, n, bound, make_s, team_s, team_wall))
            print(f"  {shape:16} {label:10} done", file=sys.stderr, flush=True)
    scratch.cleanup()
    print(f"\nworkers W={w}; makespans in seconds (median of {args.repeat} runs each); "
          f"team = run_started → summary, process = whole `team run`")
    head = f"{'shape':16} {'body':10} {'tasks':>5} {'bound':>6} {'make':>7} {'team':>7} {'ratio':>6} " \
           f"{'process':>8} {'ovh ms/task':>11}"
    print(head)
    print("-" * len(head))
    for shape, label, n, bound, make_s, team_s, team_wall in rows:
        ratio = team_s / make_s if make_s else float("nan")
        ovh = (team_s - make_s) / n * 1000
        print(f"{shape:16} {label:10} {n:5d} {bound:6.2f} {make_s:7.3f} {team_s:7.3f} {ratio:6.2f} "
              f"{team_wall:8.3f} {ovh:11.2f}")
    sleep = [r for r in rows if r[1] == "sleep 0.05"]
    true_ = [r for r in rows if r[1] == "true"]
    worst_ratio = max((r[5] / r[4] for r in sleep), default=float("nan"))
    worst_ovh = max(((r[5] - r[4]) / r[2] * 1000 for r in true_), default=float("nan"))
    print(f"\nworst ratio on sleep shapes: {worst_ratio:.2f} (target ≤ 1.10) · "
          f"worst overhead on true: {worst_ovh:.2f} ms/task (target ≤ 3) · "
          f"bench took {time.perf_counter() - t_all:.0f}s")
    print(f"durable write on this disk (fsync + rename + dir fsync): {durable_write_ms():.2f} ms median; "
          f"a chain step needs ≥ 1 (finish + next claim in one batch), make needs none")


if __name__ == "__main__":
    main()
