"""`team run --backend ray` vs raw Ray on one local 3-node cluster (issue 19's benchmark).

The cluster is a head and two worker nodes started with ``ray start`` inside a
network namespace of its own (tests/raycluster.py), each node with ``--cpus``
CPUs; the lead and the raw-Ray driver run in the namespace too.

(a) Per-task overhead: N no-op tasks (``true``)

* raw: a fresh driver, ``ray.get([f.remote() for _ in range(N)])`` where ``f``
  runs the same subprocess (``subprocess.run(["true"])``); wall from the first
  submission to the last result (after ``ray.init``). A fresh driver is a new
  Ray job whose workers start on demand, as a `team run`'s do; the same N again
  on the warm workers is shown for reference.
* team: ``team run plan.yaml --backend ray --json`` with ``outputs: []`` and
  ``workers`` = N (every ready task is submitted at once); makespan from the
  ``run_started`` event to the last ``completed`` one (claims, submissions,
  completions, all committed to the store); the process wall time (start-up,
  materialising N tasks, disconnecting) is shown too.
* overhead per task = (team makespan - raw warm wall) / N: the lead starts the
  run's workers before the run starts (ray_backend.py), so both are measured on
  warm workers (the cold raw time and team's process wall say what start-up
  costs). Target ≤ 2 ms.

(b) Makespan: a layered DAG of ``sleep 0.2`` tasks (each needs two tasks of the
layer before), ``workers`` = the cluster's slots; bound = max(critical path,
work / slots). Target ≤ 1.15×.

(c) One lead's ceiling: the scheduler and its group commit alone (a durable
``TaskStore``, an executor that completes every attempt at once, no Ray):
transitions per second (a claim and a completion per task) for N tasks with
``workers`` 64 and 1024. What docs/scale.md says about scaling past one lead
comes from here.

Usage: python bench/ray_bench.py [--tasks 1000] [--cpus 1] [--layers 6] [--width 12] [--ceiling 5000 (0: skip)]
       [--profile DIR (cProfile stats of each `team run`)] [--events DIR (its `--json` events)]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from raycluster import LocalCluster, unshare_works  # noqa: E402

RAW = """
import json, subprocess, sys, time, ray
n = int(sys.argv[1])
ray.init(address=sys.argv[2], _node_ip_address="127.0.0.1", logging_level="ERROR", log_to_driver=False)

@ray.remote(num_cpus=1, max_retries=0)
def f():
    return subprocess.run(["true"]).returncode

# cold: a fresh driver (a new Ray job) starts its workers, as `team run` does
t0 = time.perf_counter()
codes = ray.get([f.remote() for _ in range(n)])
cold = time.perf_counter() - t0
t0 = time.perf_counter()
codes += ray.get([f.remote() for _ in range(n)])
print(json.dumps({"wall": cold, "warm": time.perf_counter() - t0, "ok": codes.count(0)}))
"""


def env_for(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEAM_", "RAY_ADDRESS"))}
    env.update(TEAM_ROOT=str(root), PYTHONPATH=str(REPO))
    return env


PROFILE: Path | None = None
"""``--profile DIR``: each `team run` runs under cProfile, every Python thread of it (the scheduler, the
landing thread, the store's writer, ...), its stats in DIR/<name>.prof."""
KEEP: Path | None = None
"""``--events DIR``: the `--json` events of each `team run` are kept in DIR/<name>.jsonl."""
PROFILED = """
import atexit, cProfile, pstats, runpy, sys, threading
out, profs = sys.argv.pop(1), []
def start(*_):
    sys.setprofile(None)
    p = cProfile.Profile()
    profs.append(p)
    p.enable()
def dump():
    for p in profs:
        p.disable()
    pstats.Stats(*profs).dump_stats(out)
threading.setprofile(start)
atexit.register(dump)
start()
sys.argv[0] = "orchestrator"
runpy.run_module("orchestrator", run_name="__main__", alter_sys=True)
"""


def team_run(cluster: LocalCluster, root: Path, plan: str) -> tuple[float, float, dict]:
    """(makespan, process wall, summary) of one `team run --backend ray --json`; the lead's CPU seconds
    (user + system, start-up included) go into ``LEAD_CPU[root.name]``."""
    (root / "plan.yaml").write_text(plan)
    head = ["-c", PROFILED, str(PROFILE / f"{root.name}.prof")] if PROFILE else ["-m", "orchestrator"]
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    r = cluster.run([sys.executable, *head, "run", "plan.yaml", "--backend", "ray",
                     "--address", cluster.address, "--json"], cwd=root, env=env_for(root),
                    capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    LEAD_CPU[root.name] = _children_cpu() - cpu0
    if r.returncode != 0:
        raise SystemExit(f"team run failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    if KEEP is not None:
        (KEEP / f"{root.name}.jsonl").write_text(r.stdout)
    events = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    start = next(e["ts"] for e in events if e["event"] == "run_started")
    end = max(e["ts"] for e in events if e["event"] == "completed")
    return end - start, wall, events[-1]


LEAD_CPU: dict[str, float] = {}


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def noop_plan(n: int) -> str:
    lines = ["name: noop", f"workers: {n}", "defaults:", "  outputs: []", "tasks:"]
    lines += [f"  - {{id: t{i}, run: 'true'}}" for i in range(n)]
    return "\n".join(lines) + "\n"


def layered_plan(layers: int, width: int, slots: int, body: float) -> str:
    lines = ["name: layers", f"workers: {slots}", "defaults:", "  outputs: []", "tasks:"]
    for layer in range(layers):
        for i in range(width):
            needs = ""
            if layer:
                a, b = f"l{layer - 1}x{i}", f"l{layer - 1}x{(i + 1) % width}"
                needs = f", needs: [{a}, {b}]"
            lines.append(f"  - {{id: l{layer}x{i}, run: 'sleep {body}', estimate: {body}{needs}}}")
    return "\n".join(lines) + "\n"


def lead_ceiling(base: Path, n: int, workers: int) -> float:
    """Transitions per second of one lead's scheduler + group commit with instant attempts."""
    sys.path.insert(0, str(REPO))
    from orchestrator.run.scheduler import RunOptions, Scheduler
    from orchestrator.run.sync import SyncExecutor
    from orchestrator.tasks.store import TaskStore

    root = base / f"ceiling-{workers}"
    root.mkdir()
    store = TaskStore(root)
    tasks = store.create_many([{"subject": f"t{i}", "kind": "shell", "command": "true", "plan": "c",
                                "plan_task": f"t{i}"} for i in range(n)], actor="lead")
    sched = Scheduler(store, tasks, {}, {"shell": SyncExecutor("shell", lambda t: "completed")},
                      RunOptions(workers=workers), lambda ev: None)
    t0 = time.perf_counter()
    result = sched.run()
    wall = time.perf_counter() - t0
    assert result.counts == {"completed": n}, result.counts
    return 2 * n / wall


def _report_ceiling(ceiling: dict[int, float], n: int, team_rate: float) -> None:
    print()
    print(f"(c) one lead's scheduler + group commit, {n} instant tasks (a claim + a completion each)")
    for w, rate in ceiling.items():
        print(f"    workers {w:5}: {rate:8.0f} transitions/s")
    print(f"    (a) ran at {team_rate:.0f} transitions/s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--cpus", type=int, default=1, help="CPUs per node (3 nodes; the machine's cores are what they share)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=12)
    ap.add_argument("--ceiling", type=int, default=5000, help="tasks for (c) (0: skip it)")
    ap.add_argument("--profile", type=Path, help="run each `team run` under cProfile, stats into this folder")
    ap.add_argument("--events", type=Path, help="keep the `--json` events of each `team run` in this folder")
    args = ap.parse_args()
    global PROFILE, KEEP
    if args.events is not None:
        args.events.mkdir(parents=True, exist_ok=True)
        KEEP = args.events.resolve()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILE = args.profile.resolve()
    why = unshare_works()
    if why is not None:
        raise SystemExit(f"ray_bench: {why}")
    base = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))
    t0 = time.perf_counter()
    cluster = LocalCluster(base / "c", workers=2, cpus=args.cpus)
    print(f"cluster: head + 2 worker nodes, {args.cpus} CPUs each, up in {time.perf_counter() - t0:.1f}s")
    slots = 3 * args.cpus
    try:
        r = cluster.run([sys.executable, "-c", RAW, str(args.tasks), cluster.address],
                        capture_output=True, text=True, timeout=1800, env=env_for(base))
        if r.returncode != 0:
            raise SystemExit(f"raw ray failed:\n{r.stderr[-2000:]}")
        raw = json.loads(r.stdout.strip().splitlines()[-1])
        assert raw["ok"] == 2 * args.tasks
        (base / "noop").mkdir()
        team_ms, team_wall, s = team_run(cluster, base / "noop", noop_plan(args.tasks))
        assert s["counts"] == {"completed": args.tasks}, s["counts"]
        per_task = (team_ms - raw["warm"]) / args.tasks * 1000

        (base / "dag").mkdir()
        body = 0.2
        n = args.layers * args.width
        bound = max(args.layers * body, n * body / slots)
        dag_ms, dag_wall, s2 = team_run(cluster, base / "dag", layered_plan(args.layers, args.width, slots, body))
        assert s2["counts"] == {"completed": n}, s2["counts"]
    finally:
        cluster.stop()
    try:
        ceiling = {w: lead_ceiling(base, args.ceiling, w) for w in (64, 1024)} if args.ceiling else {}
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print()
    print(f"(a) {args.tasks} no-op tasks (`true`), {slots} slots")
    print(f"    {'':34}{'seconds':>10}{'ms/task':>10}")
    print(f"    {'raw ray.get([f.remote() ...]) cold':34}{raw['wall']:10.2f}{raw['wall'] / args.tasks * 1000:10.2f}")
    print(f"    {'  the same again (warm workers)':34}{raw['warm']:10.2f}{raw['warm'] / args.tasks * 1000:10.2f}")
    print(f"    {'team run --backend ray (makespan)':34}{team_ms:10.2f}{team_ms / args.tasks * 1000:10.2f}")
    print(f"    {'team run (process wall)':34}{team_wall:10.2f}")
    print(f"    {'team run lead CPU (user + system)':34}{LEAD_CPU['noop']:10.2f}{LEAD_CPU['noop'] / args.tasks * 1000:10.2f}")
    print(f"    overhead of team over raw Ray: {per_task:.2f} ms/task (target <= 2 ms)")
    print()
    print(f"(b) layered DAG, {args.layers} layers x {args.width} tasks of sleep {body}, {slots} slots")
    print(f"    makespan {dag_ms:.2f}s · bound max(critical path {args.layers * body:.2f}s, work/slots "
          f"{n * body / slots:.2f}s) = {bound:.2f}s · ratio {dag_ms / bound:.3f}× (target <= 1.15×)")
    if ceiling:
        _report_ceiling(ceiling, args.ceiling, 2 * args.tasks / team_ms)
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

