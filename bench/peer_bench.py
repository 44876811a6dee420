"""`team` side by side with its peers: ClawTeam (PyPI ``clawteam``), the closest Python peer (issue 13),
and, running a whole DAG, Snakemake (PyPI ``snakemake``) and ``make -j8`` (issue 29).

ClawTeam is installed from PyPI into its own virtualenv under a cache
directory (``$XDG_CACHE_HOME/team-bench/clawteam-venv``, else
``~/.cache/...``; made once, reused). If it cannot be installed, or its CLI is
not the one this bench was written against (``clawteam task create|list|update``
with ``--data-dir``), the bench says why and exits 0 without a table.

The same operations on both, each a new process (what a user or a script
pays), median of ``--repeat`` runs, in one run of this bench:

* cold create: one ``task create`` on a store of 1,000 tasks;
* cold list at 1,000 and 10,000 tasks (JSON output on both);
* claim + complete: ``task update ... --status in_progress --owner w`` then
  ``--status completed`` (two processes) on the 1,000- and 10,000-task stores.

The stores are filled in-process through each tool's own Python API (not
timed): the same random DAG (each task blocked by up to 2 of the 50 before
it). Differences worth knowing when reading the ratios: every write of
`team` is durable (fsync), ClawTeam's are not; ClawTeam's complete rewrites
every dependent's file, `team`'s rewrites only the task's own.

The DAG runs (``--dag-sizes``, default 1,000 and 10,000 tasks): the random
DAG of scale_bench.py (each task needs up to 2 of the 50 before it), bodies
that do nothing, 8 at once, one process each, in one run of this bench:

* ``team run PLAN --workers 8`` (bodies ``true``);
* Snakemake (installed from PyPI into its own virtualenv, like ClawTeam, not
  the dev extra): a Snakefile with one wildcard rule ``done/{t}`` whose inputs
  come from a deps file (``deps.json``: task -> the tasks it needs), ``shell:
  "true; touch {output}"`` (Snakemake tracks outputs: each job must make its
  file), ``snakemake -j8 --quiet``;
* ``make -j8`` of the same DAG as phony targets, recipes ``@true``.

Printed: each one's wall seconds and Snakemake / team (> 1: team is faster)
and team / make (issue 29's targets at 10,000: ≥ 12× and ≤ 3×).

``--compare CHECKOUT`` also runs each DAG's team run with another checkout's
code (an export of main), right after this one's.

Usage: python bench/peer_bench.py [--repeat 5] [--sizes 1000,10000] [--dag-sizes 1000,10000]
                                  [--skip-clawteam] [--skip-dag] [--compare CHECKOUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _proc import as_installed
from scale_bench import random_dag
from sched_bench import write_makefile, write_plan

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TEAM = "bench"

FILL_CLAWTEAM = r"""
import json, os, random, sys
from clawteam.team.tasks import TaskStore
n, seed = int(sys.argv[1]), int(sys.argv[2])
rnd = random.Random(seed)
store = TaskStore(os.environ["CLAWTEAM_TEAM"])
ids = []
for i in range(n):
    deps = [ids[j] for j in sorted(rnd.sample(range(max(0, i - 50), i), min(i, 2)))]
    ids.append(store.create(f"task {i}", blocked_by=deps).id)
print(json.dumps(ids[:1]))
"""


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "team-bench"


def peer_venv(package: str, script: str) -> tuple[Path | None, str]:
    """The bin directory of a venv of its own holding ``package`` from PyPI (made once, reused), or None
    and why not."""
    venv = cache_dir() / f"{package}-venv"
    bin_dir = venv / "bin"
    if (bin_dir / script).exists():
        return bin_dir, ""
    venv.parent.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        package], check=True, capture_output=True, text=True, timeout=600)
    except subprocess.CalledProcessError as e:
        shutil.rmtree(venv, ignore_errors=True)
        last = (e.stderr or e.stdout or "").strip().splitlines()
        return None, f"pip install {package} failed: {last[-1] if last else e}"
    except subprocess.TimeoutExpired:
        shutil.rmtree(venv, ignore_errors=True)
        return None, f"pip install {package} took over 10 minutes"
    if not (bin_dir / script).exists():
        return None, f"{package} installed but has no `{script}` script"
    return bin_dir, ""


def clawteam_venv() -> tuple[Path | None, str]:
    return peer_venv("clawteam", "clawteam")


SNAKEFILE = """\
import json

DEPS = json.load(open("deps.json"))


rule all:
    input: expand("done/{t}", t=DEPS)


rule task:
    input: lambda wc: [f"done/{d}" for d in DEPS[wc.t]]
    output: "done/{t}"
    shell: "true; touch {output}"
"""


def dag_runs(scratch: Path, sizes: list[int], workers: int = 8,
             base: Path | None = None) -> list[tuple[int, float, float | None, float, float | None]]:
    """(tasks, team s, snakemake s or None when it cannot be installed, make s, team s with ``base``'s
    code or None) per size."""
    snake_bin, why = peer_venv("snakemake", "snakemake")
    if snake_bin is None:
        print(f"Snakemake left out: {why}")
    rows = []
    for n in sizes:
        needs = random_dag(n)
        d = scratch / f"dag{n}"
        for sub in ("team", "snake", "make"):
            (d / sub).mkdir(parents=True)
        write_plan(d / "team/plan.yaml", "bench", needs, "true", workers)
        write_makefile(d / "make/Makefile", needs, "true")
        (d / "snake/Snakefile").write_text(SNAKEFILE)
        (d / "snake/deps.json").write_text(json.dumps({f"t{i}": [f"t{j}" for j in deps]
                                                       for i, deps in enumerate(needs)}))
        os.sync()
        env = as_installed(PYTHONPATH=str(REPO))
        script = Path(sys.executable).with_name("team")
        team = [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator"]
        t_team = run([*team, "run", "plan.yaml", "--json", "--workers", str(workers), "--root", str(d / "team")],
                     env, cwd=d / "team")[0]
        t_base = None
        if base is not None:  # the same plan with another checkout's code, right after
            (d / "base").mkdir()
            shutil.copy(d / "team/plan.yaml", d / "base/plan.yaml")
            os.sync()
            t_base = run([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--json", "--workers",
                          str(workers), "--root", str(d / "base")], as_installed(PYTHONPATH=str(base)),
                         cwd=d / "base")[0]
        os.sync()
        t_make = run(["make", f"-j{workers}", "-s", "-f", "Makefile", "all"], env, cwd=d / "make")[0]
        t_snake = None
        if snake_bin is not None:
            os.sync()
            t_snake = run([str(snake_bin / "snakemake"), f"-j{workers}", "--quiet"], env, cwd=d / "snake")[0]
            made = len(list((d / "snake/done").iterdir()))
            if made != n:
                raise RuntimeError(f"snakemake made {made} of {n} outputs in {d / 'snake'}")
        rows.append((n, t_team, t_snake, t_make, t_base))
        print(f"  DAG of {n:,} done", file=sys.stderr, flush=True)
    return rows


CPU: list[float] = [0.0]
"""CPU seconds (user + system) of the last ``run``: on a loaded machine it says more than wall time."""


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    before = os.times()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - t0
    after = os.times()
    CPU[0] = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-6:])} exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-300:]}")
    return wall, proc.stdout


Timing = tuple[float, float]
"""(median wall seconds, median CPU seconds)"""


def median(repeat: int, argv: list[str], env: dict[str, str]) -> Timing:
    walls, cpus = [], []
    for _ in range(repeat):
        walls.append(run(argv, env)[0])
        cpus.append(CPU[0])
    return statistics.median(walls), statistics.median(cpus)


class Team:
    name = "team"

    def __init__(self, root: Path):
        self.root = root
        self.env = as_installed(PYTHONPATH=str(REPO))
        script = Path(sys.executable).with_name("team")
        self.cmd = [str(script)] if script.exists() else [sys.executable, "-m", "orchestrator"]

    def fill(self, n: int, seed: int) -> str:
        from orchestrator.tasks.store import TaskStore

        rnd = random.Random(seed)
        specs = [{"subject": f"task {i}",
                  "blockedBy": [("new", j) for j in sorted(rnd.sample(range(max(0, i - 50), i), min(i, 2)))]}
                 for i in range(n)]
        return str(TaskStore(self.root).create_many(specs)[0].id)

    def create(self) -> list[str]:
        return [*self.cmd, "task", "create", "a new task", "--root", str(self.root)]

    def list(self) -> list[str]:
        return [*self.cmd, "task", "list", "--json", "--root", str(self.root)]

    def update(self, ref: str, *args: str) -> list[str]:
        return [*self.cmd, "task", "update", ref, *args, "--root", str(self.root)]


class ClawTeam:
    name = "clawteam"

    def __init__(self, root: Path, bin_dir: Path):
        self.root = root
        self.bin = bin_dir
        self.env = as_installed(CLAWTEAM_DATA_DIR=str(root), CLAWTEAM_TEAM=TEAM, HOME=str(root))

    def setup(self) -> None:
        run([str(self.bin / "clawteam"), "--data-dir", str(self.root), "team", "spawn-team", TEAM, "-n", "lead"],
            self.env)

    def fill(self, n: int, seed: int) -> str:
        _, out = run([str(self.bin / "python"), "-c", FILL_CLAWTEAM, str(n), str(seed)], self.env)
        return str(json.loads(out)[0])

    def _cli(self, *args: str) -> list[str]:
        return [str(self.bin / "clawteam"), "--data-dir", str(self.root), *args]

    def create(self) -> list[str]:
        return self._cli("task", "create", TEAM, "a new task")

    def list(self) -> list[str]:
        return self._cli("--json", "task", "list", TEAM)

    def update(self, ref: str, *args: str) -> list[str]:
        return self._cli("task", "update", TEAM, ref, *args)


def claim_complete(tool: Team | ClawTeam, ref: str, repeat: int) -> Timing:
    walls, cpus = [], []
    for _ in range(repeat):
        a = run(tool.update(ref, "--status", "in_progress", "--owner", "w"), tool.env)[0]
        a_cpu = CPU[0]
        b = run(tool.update(ref, "--status", "completed"), tool.env)[0]
        walls.append(a + b)
        cpus.append(a_cpu + CPU[0])
        run(tool.update(ref, "--status", "pending", "--owner", ""), tool.env)  # ready for the next round
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--dag-sizes", default="1000,10000")
    ap.add_argument("--skip-clawteam", action="store_true")
    ap.add_argument("--skip-dag", action="store_true")
    ap.add_argument("--compare", metavar="CHECKOUT", type=Path,
                    help="DAG runs: also run team with another checkout's code (an export of main)")
    args = ap.parse_args()
    t_all = time.perf_counter()
    if not args.skip_clawteam:
        clawteam_table(args)
    if not args.skip_dag:
        with tempfile.TemporaryDirectory(prefix="peer-dag-") as tmp:
            rows = dag_runs(Path(tmp), [int(s) for s in args.dag_sizes.split(",") if s],
                            base=args.compare.resolve() if args.compare else None)
        print("\nthe random DAG (≤ 2 needs within 50), bodies doing nothing, 8 at once; wall seconds, one run each")
        head = f"{'tasks':>7} {'team':>7} {'snakemake':>10} {'make -j8':>9} {'snakemake/team':>15} {'team/make':>10}"
        print(head)
        print("-" * len(head))
        for n, t, sk, mk, tb in rows:
            ratio = f"{sk / t:14.2f}×" if sk is not None else f"{'–':>15}"
            print(f"{n:7,} {t:7.2f} {sk if sk is not None else float('nan'):10.2f} {mk:9.2f} {ratio} {t / mk:9.2f}×"
                  + (f"   (base code: team {tb:.2f} s, {sk / tb if sk else float('nan'):.2f}×, {tb / mk:.2f}×)"
                     if tb is not None else ""))
        print("targets at 10,000: snakemake/team ≥ 12× · team/make ≤ 3×")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs · bench took "
          f"{time.perf_counter() - t_all:.0f} s")


def clawteam_table(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",") if s]
    bin_dir, why = clawteam_venv()
    if bin_dir is None:
        print(f"peer bench skipped: {why}")
        return
    rows: list[tuple[str, Timing, Timing]] = []
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as tmp:
        for n in sizes:
            team = Team(Path(tmp) / f"team{n}")
            team.root.mkdir()
            claw = ClawTeam(Path(tmp) / f"claw{n}", bin_dir)
            claw.root.mkdir()
            try:
                claw.setup()
                first_claw = claw.fill(n, 13)
                # the CLI this bench was written against: JSON list, update by id
                listed = json.loads(run(claw.list(), claw.env)[1])
                if not isinstance(listed, list) or len(listed) != n:
                    raise RuntimeError(f"`clawteam --json task list` gave {type(listed).__name__}, not {n} tasks")
            except (RuntimeError, json.JSONDecodeError, subprocess.CalledProcessError) as e:
                print(f"peer bench skipped: clawteam's CLI is not the one this bench knows ({e})")
                return
            first_team = team.fill(n, 13)
            os.sync()
            rows.append((f"cold list@{n:,}", median(args.repeat, team.list(), team.env),
                         median(args.repeat, claw.list(), claw.env)))
            if n == sizes[0]:
                rows.append((f"cold create (store of {n:,})", median(args.repeat, team.create(), team.env),
                             median(args.repeat, claw.create(), claw.env)))
            rows.append((f"claim+complete@{n:,}", claim_complete(team, first_team, args.repeat),
                         claim_complete(claw, first_claw, args.repeat)))
    version = subprocess.run([str(bin_dir / "clawteam"), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\nteam vs {version or 'clawteam'} (seconds, median of {args.repeat}; new process each; "
          "ratio = clawteam / team, > 1 means team is faster; wall, then CPU user + system)")
    head = (f"{'operation':28} {'team':>7} {'clawteam':>9} {'ratio':>7}   {'CPU team':>8} {'clawteam':>9} "
            f"{'ratio':>7}")
    print(head)
    print("-" * len(head))
    for label, (t, tc), (c, cc) in rows:
        print(f"{label:28} {t:7.3f} {c:9.3f} {c / t:6.2f}×   {tc:8.3f} {cc:9.3f} {cc / tc if tc else 0:6.2f}×")
    print("targets: list@1k and create ≥ 3×")


if __name__ == "__main__":
    main()
