"""`team` at 1k, 10k (and 100k) tasks, and its start-up (issue 13).

Two tables, every figure measured in this run:

* start-up: ``team --help``; cold ``team task list --json`` on a store of
  1,000 and 10,000 pending tasks; an 8×4 layered plan of ``sleep 0.2``
  tasks as a ``team run`` process vs ``make -j4`` on the same DAG. "Cold"
  means a new process (what a user or a script pays), not a cold page cache.
* scale: for each size, a random DAG of the same shape (each task needs up
  to 2 earlier tasks among the 50 before it), written once as a plan and
  once as a Makefile:

  - materialise: ``runner.materialise`` of the plan into an empty store, in
    this process (the plan's tasks created, durable);
  - cold ``task list --ready`` and ``task list --json`` on that store;
  - ``--dry-run``: the whole ``team run PLAN --dry-run`` process;
  - ``team run PLAN --json --workers W``: process wall, time from the
    process start to the first ``started`` event (plan → first task
    started), lead peak RSS (``wait4``), and per-task cost (process wall /
    tasks: it should stay flat as the plan grows);
  - ``make -jW`` wall on the same DAG, and team's process wall over it.

Bodies are ``true`` (``--sleep`` adds ``sleep 0.01`` rows). The 100k size
is slow and runs only with ``--full``.

``--compare CHECKOUT`` measures another checkout's code too (an export
of main, say: ``git archive main | tar -x -C /tmp/base``), row by row in
the same run, so both see the same load.

Usage: python bench/scale_bench.py [--full] [--workers 8] [--sizes 1000,10000] [--sleep]
       [--skip-startup] [--skip-scale] [--compare CHECKOUT]
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
from sched_bench import write_makefile, write_plan

REPO = Path(__file__).resolve().parent.parent
CODE = [REPO]
"""The checkout whose code the measured `team` processes run (``--compare`` switches it)."""

SPAN = 50
"""A task's dependencies are among the SPAN tasks before it."""


def random_dag(n: int, seed: int = 13) -> list[list[int]]:
    """needs per task: up to 2 distinct earlier tasks within SPAN (the first tasks have fewer)."""
    rnd = random.Random(seed)
    return [sorted(rnd.sample(range(max(0, i - SPAN), i), min(i, 2))) for i in range(n)]


def layered(layers: int, width: int) -> list[list[int]]:
    return [[] if layer == 0 else [(layer - 1) * width + j, (layer - 1) * width + (j + 1) % width]
            for layer in range(layers) for j in range(width)]


def env() -> dict[str, str]:
    return as_installed(PYTHONPATH=str(CODE[0]))


def team_argv(*args: str) -> list[str]:
    """The installed console script when there is one (what a user runs), else ``python -m``."""
    script = Path(sys.executable).with_name("team")
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "orchestrator", *args]


def timed(argv: list[str], cwd: Path | None = None) -> tuple[float, str]:
    """Wall seconds and stdout of one process."""
    return timed_cpu(argv, cwd)[0::2]  # type: ignore[return-value]


def timed_cpu(argv: list[str], cwd: Path | None = None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system, of the process and what it waited for), stdout.
    On a loaded machine the CPU time says more than the wall time."""
    before = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-1500:]}\n"
                         f"{proc.stderr[-1500:]}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, proc.stdout


def timed_rss(argv: list[str], cwd: Path | None = None) -> tuple[float, int, str, float]:
    """Like ``timed`` but reaps the child with wait4 to read its peak RSS; also returns the
    wall-clock start (time.time) to compare with event timestamps."""
    start_wall = time.time()
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as errfile:
        proc = subprocess.Popen(argv, cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=errfile)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        errfile.seek(0)
        errs = errfile.read()
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv)} failed ({proc.returncode}):\n"
                         f"{out[-1500:].decode()}\n{errs[-1500:].decode()}")
    return wall, usage.ru_maxrss, out.decode(), start_wall


def best(n: int, argv: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """Median wall and median CPU seconds of n runs."""
    runs = [timed_cpu(argv, cwd) for _ in range(n)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


MATERIALISE = """
import sys, time
from pathlib import Path
from orchestrator.plan.load import load_plan
from orchestrator.run.runner import materialise
from orchestrator.tasks.store import TaskStore
lp = load_plan(Path(sys.argv[1]) / "plan.yaml")
store = TaskStore(sys.argv[1])
t0 = time.perf_counter()
materialise(store, lp)
print(time.perf_counter() - t0)
"""


def make_store(d: Path, needs: list[list[int]], body: str, workers: int) -> float:
    """Materialise the plan into ``d``'s store (``runner.materialise``, in a process of the code
    measured); seconds it took."""
    write_plan(d / "plan.yaml", "bench", needs, body, workers)
    os.sync()
    _, out = timed([sys.executable, "-c", MATERIALISE, str(d)], cwd=Path(tempfile.gettempdir()))
    return float(out.split()[-1])


def run_make(d: Path, workers: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(["make", f"-j{workers}", "-s", "-f", "Makefile", "all"], cwd=d, check=True)
    return time.perf_counter() - t0


def run_team(d: Path, workers: int) -> dict[str, float]:
    wall, rss, out, start = timed_rss(team_argv("run", "plan.yaml", "--json", "--workers", str(workers),
                                                "--root", str(d)), cwd=d)
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    first = next(e["ts"] for e in events if e["event"] == "started")
    began = next(e["ts"] for e in events if e["event"] == "run_started")
    end = next(e["ts"] for e in events if e["event"] == "summary")
    done = sum(1 for e in events if e["event"] == "completed")
    started = sum(1 for e in events if e["event"] == "started")
    if done != started:
        raise SystemExit(f"bench: {started - done} task(s) did not complete in {d}")
    return {"wall": wall, "rss_mb": rss / 1024, "first": first - start, "to_run_started": began - start,
            "makespan": end - began, "done": done}


def startup(scratch: Path, repeat: int) -> list[tuple[str, tuple[float, float], str]]:
    rows: list[tuple[str, tuple[float, float], str]] = []
    rows.append(("team --help", best(repeat, team_argv("--help")), "≤ 0.12 s"))
    for n, target in ((1000, "≤ 0.08 s"), (10000, "≤ 0.25 s")):
        d = scratch / f"list{n}"
        d.mkdir()
        make_store(d, random_dag(n), "true", 8)
        rows.append((f"cold task list --json, {n // 1000}k", best(repeat, team_argv("task", "list", "--json",
                                                                                  "--root", str(d))), target))
    own, seed = seed_stores(scratch, 1000)
    rows.append(("cold task list, 1k team's files", best(repeat, team_argv("task", "list", "--root", str(own))), ""))
    rows.append(("cold task list, 1k seed-format files", best(repeat, team_argv("task", "list", "--root", str(seed))),
                 "≤ 1.2× team's files"))
    return rows


def seed_stores(scratch: Path, n: int) -> tuple[Path, Path]:
    """The same n tasks (random DAG, pending) written by `team` (``create_many``) and as the seed's
    TaskManager writes them (its six keys, ``json.dumps(indent=2)``), each in a state root of its own."""
    own, seed = scratch / f"own{n}", scratch / f"seed{n}"
    needs = random_dag(n)
    code = ("import sys; from orchestrator.tasks.store import TaskStore; import json; needs = json.loads(sys.argv[2]); "
            "TaskStore(sys.argv[1]).create_many([{'subject': f'task {i}', 'blockedBy': [('new', j) for j in d]} "
            "for i, d in enumerate(needs)])")
    timed([sys.executable, "-c", code, str(own), json.dumps(needs)], cwd=Path(tempfile.gettempdir()))
    (seed / ".tasks").mkdir(parents=True)
    for i, deps in enumerate(needs):
        task = {"id": i + 1, "subject": f"task {i}", "description": "", "status": "pending",
                "blockedBy": [j + 1 for j in deps], "owner": ""}
        (seed / ".tasks" / f"task_{i + 1}.json").write_text(json.dumps(task, indent=2, ensure_ascii=False))
    os.sync()
    return own, seed


def layered_vs_make(scratch: Path, repeat: int) -> tuple[float, float]:
    needs = layered(8, 4)
    walls: list[tuple[float, float]] = []
    for r in range(repeat):
        d = scratch / f"layered{r}"
        d.mkdir()
        write_plan(d / "plan.yaml", "layered", needs, "sleep 0.2", 4)
        write_makefile(d / "Makefile", needs, "sleep 0.2")
        os.sync()
        m = run_make(d, 4)
        os.sync()
        walls.append((m, run_team(d, 4)["wall"]))
    return statistics.median(w[0] for w in walls), statistics.median(w[1] for w in walls)


def scale_row(scratch: Path, n: int, body: str, workers: int) -> dict[str, float]:
    needs = random_dag(n)
    row: dict[str, float] = {"n": n}
    d = scratch / f"store{n}-{body.replace(' ', '')}"
    d.mkdir()
    row["materialise"] = make_store(d, needs, body, workers)
    row["ready"] = timed(team_argv("task", "list", "--ready", "--root", str(d)))[0]
    row["list_json"] = timed(team_argv("task", "list", "--json", "--root", str(d)))[0]
    r = scratch / f"run{n}-{body.replace(' ', '')}"
    r.mkdir()
    write_plan(r / "plan.yaml", "bench", needs, body, workers)
    write_makefile(r / "Makefile", needs, body)
    row["dry_run"] = timed(team_argv("run", "plan.yaml", "--dry-run", "--root", str(r)), cwd=r)[0]
    os.sync()
    row["make"] = run_make(r, workers)
    os.sync()
    row.update(run_team(r, workers))
    row["per_task_ms"] = row["makespan"] / n * 1000
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="add the 100k-task plan (minutes)")
    ap.add_argument("--sizes", default="", help="comma-separated sizes instead of 1000,10000[,100000]")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sleep", action="store_true", help="also run `sleep 0.01` bodies")
    ap.add_argument("--repeat", type=int, default=5, help="runs per start-up row (median)")
    ap.add_argument("--skip-startup", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--compare", metavar="CHECKOUT", type=Path,
                    help="also measure the code of another checkout (e.g. an export of main), row by row in "
                         "the same run: on a shared machine only figures taken side by side compare")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s] or ([1000, 10000, 100000] if args.full else [1000, 10000])
    bodies = ["true", "sleep 0.01"] if args.sleep else ["true"]
    codes = [("this", REPO)] + ([("base", args.compare.resolve())] if args.compare else [])
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        scratch = Path(tmp)
        if not args.skip_startup:
            print("\nstart-up (median of runs, new process each)")
            print(f"{'measure':37} {'code':5} {'wall s':>8} {'CPU s':>7}  target (wall)")
            results = []
            for label, code in codes:
                CODE[0] = code
                sub = scratch / f"startup-{label}"
                sub.mkdir()
                results.append((label, startup(sub, args.repeat), layered_vs_make(sub, 3)))
            for i in range(len(results[0][1])):
                for label, rows, _ in results:
                    name, (sec, cpu), target = rows[i]
                    print(f"{name:37} {label:5} {sec:8.3f} {cpu:7.3f}  {target}")
            for label, rows, _ in results:
                own, seed = (dict((r[0], r[1]) for r in rows)[f"cold task list, 1k {k}"]
                             for k in ("team's files", "seed-format files"))
                print(f"{'cold list, seed-format / own':37} {label:5} {seed[0] / own[0]:7.2f}×  (CPU "
                      f"{seed[1] / own[1]:.2f}×)  ≤ 1.2×")
            for label, _, (make4, team4) in results:
                print(f"{'8x4 sleep 0.2: team run / make -j4':37} {label:5} {team4 / make4:7.2f}×  ≤ 1.05×   "
                      f"(team {team4:.2f} s, make {make4:.2f} s)")
        if not args.skip_scale:
            table = []
            for body in bodies:
                for n in sizes:
                    for label, code in codes:
                        CODE[0] = code
                        where = scratch / label
                        where.mkdir(exist_ok=True)
                        row = scale_row(where, n, body, args.workers)
                        row["body"], row["code"] = body, label  # type: ignore[assignment]
                        table.append(row)
                        print(f"  {n} {body} {label} done", file=sys.stderr, flush=True)
            w = args.workers
            print(f"\nscale: random DAG (≤ 2 needs within {SPAN}), W={w}; seconds unless noted; "
                  "ms/task = (run_started → summary) / tasks")
            head = (f"{'tasks':>6} {'body':10} {'code':5} {'materialise':>11} {'ready':>6} {'list':>6} {'dry-run':>7} "
                    f"{'1st start':>9} {'process':>8} {'make':>6} {'ratio':>6} {'ms/task':>7} {'RSS MB':>7}")
            print(head)
            print("-" * len(head))
            for row in table:
                print(f"{int(row['n']):6d} {row['body']:10} {row['code']:5} {row['materialise']:11.2f} "
                      f"{row['ready']:6.2f} {row['list_json']:6.2f} {row['dry_run']:7.2f} {row['first']:9.2f} "
                      f"{row['wall']:8.2f} {row['make']:6.2f} {row['wall'] / row['make']:6.2f} "
                      f"{row['per_task_ms']:7.2f} {row['rss_mb']:7.0f}")
            for label, _ in codes:
                mine = {int(r["n"]): r for r in table if r["body"] == "true" and r["code"] == label}
                if 1000 in mine:
                    base = mine[1000]["per_task_ms"]
                    flat = " · ".join(f"{n // 1000}k {r['per_task_ms'] / base:.2f}×" for n, r in sorted(mine.items()))
                    print(f"per-task cost vs 1k's ({label}): {flat} (target ≤ 1.5×)")
            print("targets: 10k first start ≤ 1 s · 10k dry-run ≤ 0.5 s · 10k true ratio ≤ 2.5× · "
                  "100k RSS ≤ 1024 MB")
    print(f"durable write on this disk: {durable_write_ms():.2f} ms median · load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs · bench took {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
