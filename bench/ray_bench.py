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

(d) Shipping only what changed (issue 28): the same plans on an empty
workspace and on a big one, per-task cost = (makespan big - makespan empty) /
tasks. Target: <= 50 ms/task.

* outputs mode: ``--ship-tasks`` (60) trivial tasks, each bringing back one
  small output file, in an empty folder and in a folder of ``--folder-mb``
  (40) MB of incompressible files;
* worktree mode: a chain of ``--chain`` (12) dependent worktree tasks (each
  forks from the integration branch its predecessor merged into, so each has
  a new base commit) in a repository with one commit and in one with
  ``--history-mb`` (30) MB of history (commits replacing a 1 MB random file).

``--code DIR`` runs the lead and the nodes on the ``orchestrator`` package in
DIR (another checkout: the "before" column).

Usage: python bench/ray_bench.py [--tasks 1000] [--cpus 1] [--layers 6] [--width 12] [--ceiling 5000 (0: skip)]
       [--only a,b,d] [--ship-tasks 60] [--folder-mb 40] [--chain 12] [--history-mb 30] [--code DIR]
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


CODE = REPO
"""Where the lead and the nodes import ``orchestrator`` from (``--code``)."""


def env_for(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEAM_", "RAY_ADDRESS"))}
    env.update(TEAM_ROOT=str(root), PYTHONPATH=str(CODE))
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


DURATIONS: dict[str, list[float]] = {}
"""Each `team run`'s tasks' durations as the nodes measured them (workspace made, command run, work
packed), by the run's folder name."""


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
    DURATIONS[root.name] = [e["duration"] for e in events if e["event"] == "completed"]
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


def git(cwd: Path, *args: str) -> str:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def outputs_plan(n: int, slots: int) -> str:
    lines = ["name: ship", f"workers: {slots}", "tasks:"]
    lines += [f"  - {{id: t{i}, run: 'mkdir -p out && echo t{i} > out/t{i}', outputs: [out/t{i}]}}" for i in range(n)]
    return "\n".join(lines) + "\n"


def chain_plan(n: int) -> str:
    lines = ["name: chain", "workers: 1", "isolation: worktree", "tasks:"]
    for i in range(n):
        needs = f", needs: [c{i - 1}]" if i else ""
        lines.append(f"  - {{id: c{i}, run: 'echo c{i} > c{i}.txt'{needs}}}")
    return "\n".join(lines) + "\n"


def big_folder(root: Path, mb: int) -> None:
    data = root / "data"
    data.mkdir(parents=True)
    for i in range(mb):
        (data / f"blob{i}.bin").write_bytes(os.urandom(1 << 20))


def repo(root: Path, history_mb: int) -> None:
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".team/\n.tasks/\n")
    (root / "README").write_text("bench\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "start")
    for i in range(history_mb):  # the history grows by 1 MB a commit; the tree stays one file
        (root / "blob.bin").write_bytes(os.urandom(1 << 20))
        git(root, "add", "blob.bin")
        git(root, "commit", "-qm", f"blob {i}")
    git(root, "gc", "-q")


def shipping(cluster: LocalCluster, base: Path, args: argparse.Namespace, slots: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, mb in (("empty", 0), ("big", args.folder_mb)):
        root = base / f"ship-{name}"
        root.mkdir()
        if mb:
            big_folder(root, mb)
        ms, wall, s = team_run(cluster, root, outputs_plan(args.ship_tasks, slots))
        assert s["counts"] == {"completed": args.ship_tasks}, s["counts"]
        out[f"outputs-{name}"] = ms
    for name, mb in (("empty", 0), ("big", args.history_mb)):
        root = base / f"chain-{name}"
        repo(root, mb)
        ms, wall, s = team_run(cluster, root, chain_plan(args.chain))
        assert s["counts"] == {"completed": args.chain}, s["counts"]
        out[f"chain-{name}"] = ms
    return out


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else 0.0


def _report_shipping(ship: dict[str, float], args: argparse.Namespace) -> None:
    print()
    print("(d) shipping only what changed: makespan; per-task cost = (big - empty) / tasks; and the median")
    print("    task duration on its node (its workspace made, the command, its work packed), big - empty")
    n, c = args.ship_tasks, args.chain
    per_out = (ship["outputs-big"] - ship["outputs-empty"]) / n * 1000
    per_chain = (ship["chain-big"] - ship["chain-empty"]) / c * 1000
    med_out = (_median(DURATIONS["ship-big"]) - _median(DURATIONS["ship-empty"])) * 1000
    med_chain = (_median(DURATIONS["chain-big"]) - _median(DURATIONS["chain-empty"])) * 1000
    print(f"    outputs mode, {n} tasks: empty folder {ship['outputs-empty']:.2f}s · {args.folder_mb} MB folder "
          f"{ship['outputs-big']:.2f}s · {per_out:+.1f} ms/task (target <= 50) · median task {med_out:+.1f} ms")
    print(f"    worktree mode, a chain of {c}: 1-commit repo {ship['chain-empty']:.2f}s · {args.history_mb} MB of "
          f"history {ship['chain-big']:.2f}s · {per_chain:+.1f} ms/task (target <= 50) · median task "
          f"{med_chain:+.1f} ms")


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
    ap.add_argument("--only", default="a,b,c,d", help="which parts to run (a,b,c,d)")
    ap.add_argument("--ship-tasks", type=int, default=60)
    ap.add_argument("--folder-mb", type=int, default=40)
    ap.add_argument("--chain", type=int, default=12)
    ap.add_argument("--history-mb", type=int, default=30)
    ap.add_argument("--code", type=Path, help="import orchestrator from this checkout (lead and nodes)")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    global PROFILE, KEEP, CODE
    if args.code is not None:
        CODE = args.code.resolve()
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
    cluster = LocalCluster(base / "c", workers=2, cpus=args.cpus, env={"PYTHONPATH": str(CODE)})
    print(f"cluster: head + 2 worker nodes, {args.cpus} CPUs each, up in {time.perf_counter() - t0:.1f}s; "
          f"code: {CODE}")
    slots = 3 * args.cpus
    ship: dict[str, float] = {}
    try:
        if "a" in parts:
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
        if "b" in parts:
            (base / "dag").mkdir()
            body = 0.2
            n = args.layers * args.width
            bound = max(args.layers * body, n * body / slots)
            dag_ms, dag_wall, s2 = team_run(cluster, base / "dag", layered_plan(args.layers, args.width, slots, body))
            assert s2["counts"] == {"completed": n}, s2["counts"]
        if "d" in parts:
            ship = shipping(cluster, base, args, slots)
    finally:
        cluster.stop()
    try:
        ceiling = {w: lead_ceiling(base, args.ceiling, w) for w in (64, 1024)} \
            if args.ceiling and "c" in parts else {}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if "a" in parts:
        _report_noop(args, raw, team_ms, team_wall, per_task, slots)
    if "b" in parts:
        print()
        print(f"(b) layered DAG, {args.layers} layers x {args.width} tasks of sleep {body}, {slots} slots")
        print(f"    makespan {dag_ms:.2f}s · bound max(critical path {args.layers * body:.2f}s, work/slots "
              f"{n * body / slots:.2f}s) = {bound:.2f}s · ratio {dag_ms / bound:.3f}× (target <= 1.15×)")
    if ceiling:
        _report_ceiling(ceiling, args.ceiling, 2 * args.tasks / team_ms if "a" in parts else 0.0)
    if ship:
        _report_shipping(ship, args)
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def _report_noop(args: argparse.Namespace, raw: dict, team_ms: float, team_wall: float, per_task: float,
                 slots: int) -> None:
    print()
    print(f"(a) {args.tasks} no-op tasks (`true`), {slots} slots")
    print(f"    {'':34}{'seconds':>10}{'ms/task':>10}")
    print(f"    {'raw ray.get([f.remote() ...]) cold':34}{raw['wall']:10.2f}{raw['wall'] / args.tasks * 1000:10.2f}")
    print(f"    {'  the same again (warm workers)':34}{raw['warm']:10.2f}{raw['warm'] / args.tasks * 1000:10.2f}")
    print(f"    {'team run --backend ray (makespan)':34}{team_ms:10.2f}{team_ms / args.tasks * 1000:10.2f}")
    print(f"    {'team run (process wall)':34}{team_wall:10.2f}")
    print(f"    {'team run lead CPU (user + system)':34}{LEAD_CPU['noop']:10.2f}{LEAD_CPU['noop'] / args.tasks * 1000:10.2f}")
    print(f"    overhead of team over raw Ray: {per_task:.2f} ms/task (target <= 2 ms)")


if __name__ == "__main__":
    main()

