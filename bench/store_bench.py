"""Task store benchmark (``make bench``): cold CLI listing and durable write rates.

Measures, on a temporary directory:

* cold ``team task list --json`` wall time (a fresh ``python -m orchestrator``
  process each run, median of RUNS) at 100 / 1,000 / 10,000 tasks;
* ``TaskStore.create`` per second, one task per call, every write durable
  (task file fsync + rename + directory fsync, event line fsync);
* claim + complete per second (two locked, durable compare-and-set writes).

Prints each measurement next to its target and the ratio target/measured for
times (measured/target for rates): ≥ 1.0 means the target is met.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _disk import durable_write_ms  # noqa: E402

from orchestrator.tasks.store import TaskStore  # noqa: E402

RUNS = 5
WRITES = 600


def make_store(root: Path, n: int) -> None:
    """n tasks, a random DAG (up to 3 deps on earlier tasks), mixed statuses."""
    rng = random.Random(n)
    specs = []
    for i in range(n):
        deps = [("new", j) for j in rng.sample(range(i), min(i, rng.randint(0, 3)))]
        specs.append({"subject": f"task {i}", "description": "x" * rng.randint(0, 200), "blockedBy": deps})
    store = TaskStore(root, durable=False)
    store.create_many(specs)
    for tid in rng.sample(range(1, n + 1), n // 3):
        store.update(tid, status=rng.choice(["completed", "in_progress", "failed"]), owner="w")


def cold_list(root: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEAM_")}
    env["PYTHONPATH"] = str(REPO)
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        r = subprocess.run(
            [sys.executable, "-m", "orchestrator", "task", "list", "--json", "--root", str(root)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"team task list failed: {r.stderr}")
    return statistics.median(times)


def creates_per_s(root: Path) -> float:
    store = TaskStore(root)
    t0 = time.perf_counter()
    for i in range(WRITES):
        store.create(f"bench {i}")
    return WRITES / (time.perf_counter() - t0)


def claims_per_s(root: Path) -> float:
    store = TaskStore(root)
    ids = store.ids()[:WRITES]
    t0 = time.perf_counter()
    for tid in ids:
        t = store.claim(tid, "bench", lease=60)
        store.finish(tid, t.epoch, "completed")
    return len(ids) / (time.perf_counter() - t0)


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        for n, target in ((100, None), (1000, 0.3), (10000, 1.0)):
            root = Path(tmp, f"s{n}")
            make_store(root, n)
            got = cold_list(root)
            rows.append((f"cold `team task list --json` @ {n:,} tasks", f"{got:.3f} s",
                         f"≤ {target} s" if target else "-", f"{target / got:.2f}" if target else "-"))
        root = Path(tmp, "writes")
        c = creates_per_s(root)
        rows.append(("durable creates", f"{c:,.0f} /s", "≥ 500 /s", f"{c / 500:.2f}"))
        k = claims_per_s(root)
        rows.append(("durable claim+complete", f"{k:,.0f} /s", "≥ 500 /s", f"{k / 500:.2f}"))
    widths = [max(len(r[i]) for r in rows + [("metric", "measured", "target", "ratio")]) for i in range(4)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format("metric", "measured", "target", "ratio"))
    print(line.format(*("-" * w for w in widths)))
    for r in rows:
        print(line.format(*r))
    print(f"(median of {RUNS} cold runs; {WRITES} writes each; ratio ≥ 1.00 meets the target; cpus={os.cpu_count()}, "
          f"load={os.getloadavg()[0]:.1f})")
    print(f"durable write on this disk (fsync + rename + dir fsync): {durable_write_ms():.2f} ms median; "
          f"a claim+complete is two such writes plus two event-log appends")


if __name__ == "__main__":
    main()
