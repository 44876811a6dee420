"""Does splitting a refactor across workers pay? (issue 29)

A generated repository of 50 Python modules in 13 packages (old style:
unsorted and unused imports, ``typing.List``, ``"{}".format``, loose
formatting) gets a chain of five fast codemods, each a ruff pass (ruff of the
dev extras, ``--no-cache``) standing for the tools users chain: pyupgrade
(``UP``), autoflake (``F401,F841``), flynt (``UP031,UP032``), ruff's own
fixes (``I,C4,SIM``) and ``ruff format``. It is run:

* serially: each task's command one after the other, in a clone (no
  ``team``): the baseline every ratio divides by. It pays the same process
  starts as the split job, so the ratio says what ``team`` adds and what
  parallelism takes back. (One pass of the chain over all 50 files, printed
  last, is far cheaper with a codemod as fast as ruff: splitting pays only
  where the work per file outweighs a process start.)
* as ``team run`` of one task per package (13) and of one task per file
  (50), ``isolation: worktree``, and the same plans with ``isolation: none``;
* 13 tasks of ``true``, worktree against none: what isolation alone costs.

Every ``team run`` is a new process on a fresh copy of the repository (the
copy is not timed), ``workers: 4``. The worktree runs' result
(``team/<plan>/integration``) must equal the serial run's tree bit for bit,
else the bench fails. Printed per job: the serial seconds, team's seconds
(median, min–max over ``--repeat`` rounds), team / serial, and the
isolation overhead per task: (worktree − none) / tasks.

``--compare CHECKOUT`` runs another checkout's code too (an export of main:
``git archive main | tar -x -C /tmp/base``), alternating with this one round
by round, so both see the same minutes of a shared machine.

``--commit-cost`` measures instead what committing one task's work costs in
a worktree of a repository of 5,000 files (issue 29, item d): the task edits
5 files, adds one and leaves ignored build output; between tasks the worktree
is reset as the pool resets it. Each way of committing exactly what the task
changed is timed, alternating, median of 20: ``add -A`` over the whole tree
then ``write-tree`` (what git/pool.py does), the same with
``core.untrackedCache``, ``status`` then ``update-index`` of the paths it
lists, and the old path (``add -A``, ``diff --cached``, ``commit``).

Usage: python bench/refactor_bench.py [--repeat 3] [--workers 4] [--jobs groups,files,true] [--compare CHECKOUT]
       python bench/refactor_bench.py --commit-cost
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _proc import as_installed

REPO = Path(__file__).resolve().parent.parent
RUFF = str(Path(sys.executable).with_name("ruff"))
GROUPS, FILES = 13, 50
IDENTITY = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
            "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}

MODULE = '''\
import sys
import os
import json
import re
from typing import List, Dict, Optional, Tuple, Set
from collections import OrderedDict


class Record{i}(object):
    def __init__(self, name, size = {n}, tags = None):
        self.name=name
        self.size  =  size
        self.tags = tags or list()

    def describe(self) -> str:
        return "{{}} of size {{}} with {{}} tags".format(self.name, self.size, len(self.tags))

    def as_dict(self) -> Dict[str, object]:
        return dict(name = self.name, size = self.size, tags = list(self.tags))


def load_{i}(paths: List[str]) -> Dict[str, Optional[str]]:
    out = {{}}
    for p in paths:
        out[p] = os.environ.get(p, "{{}}-{{}}".format(sys.platform, {n}))
    return out


def pairs_{i}(items: List[int]) -> List[Tuple[int, int]]:
    result = []
    for a in items :
        for b in items:
            if a<b and (a+b)%{m} == 0 :
                result.append( (a,b) )
    return result


def words_{i}(text: str) -> Set[str]:
    return set([w.lower() for w in re.split("[^a-zA-Z]+", text) if w])


def render_{i}(records: List[Record{i}]) -> str:
    lines = []
    for r in records:
        lines.append("%s: %d" % (r.name, r.size))
    return "\\n".join(lines)


SETTINGS_{i} = {{  'name':'m{i}','size':{n},
      'tags' : [ 'a','b' ],   'nested': {{ 'x':1,'y':[1,2,3] }} }}
'''


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(cwd), *args], env={**os.environ, **IDENTITY}, capture_output=True,
                          text=True)
    if proc.returncode:
        raise SystemExit(f"bench: git {' '.join(args)} in {cwd}: {proc.stderr}")
    return proc.stdout


def modules() -> list[list[str]]:
    """The 50 module paths in 13 packages (sizes 4 and 3)."""
    groups: list[list[str]] = [[] for _ in range(GROUPS)]
    for i in range(FILES):
        groups[i % GROUPS].append(f"pkg/g{i % GROUPS}/m{i}.py")
    return groups


PASSES = ("check --fix --exit-zero --select UP", "check --fix --exit-zero --select F401,F841",
          "check --fix --exit-zero --unsafe-fixes --select UP031,UP032", "check --fix --exit-zero --select I,C4,SIM",
          "format")


def codemod(files: list[str]) -> str:
    paths = " ".join(files)
    return " && ".join(f"{RUFF} {p} --no-cache --silent {paths}" for p in PASSES)


def jobs() -> dict[str, list[tuple[str, str]]]:
    """job -> [(task id, command)]"""
    groups = modules()
    return {
        "groups": [(f"g{k}", codemod(files)) for k, files in enumerate(groups)],
        "files": [(Path(f).stem, codemod([f])) for files in groups for f in files],
        "true": [(f"t{k}", "true") for k in range(GROUPS)],
    }


def make_template(path: Path) -> None:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for files in modules():
        for f in files:
            i = int(Path(f).stem[1:])
            (path / f).parent.mkdir(parents=True, exist_ok=True)
            (path / f).write_text(MODULE.format(i=i, n=i, m=i % 7 + 2) + "".join(
                "\n\n" + MODULE.format(i=f"{i}_{k}", n=i * 10 + k, m=k + 2).split("\n\n\n", 1)[1] for k in range(3)))
    for k in range(GROUPS):
        (path / f"pkg/g{k}/__init__.py").write_text("")
    (path / "pkg/__init__.py").write_text("")
    (path / "pyproject.toml").write_text('[tool.ruff]\ntarget-version = "py310"\n')
    (path / ".gitignore").write_text("__pycache__/\n.ruff_cache/\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")


def write_plan(path: Path, name: str, tasks: list[tuple[str, str]], isolation: str, workers: int, cwd: Path) -> None:
    """The plan lives outside the repository (which stays clean); its tasks run in it (``cwd``)."""
    lines = [f"name: {name}", f"workers: {workers}", f"isolation: {isolation}", f"defaults: {{cwd: {cwd}}}", "tasks:"]
    for tid, run in tasks:
        lines += [f"  - id: {tid}", "    run: " + '"' + run.replace("\\", "\\\\").replace('"', '\\"') + '"']
    path.write_text("\n".join(lines) + "\n")


def serial(template: Path, where: Path, tasks: list[tuple[str, str]]) -> tuple[float, str]:
    """Seconds to run the tasks one after the other in a clone, and the resulting tree."""
    git(where.parent, "clone", "-q", str(template), str(where))
    t0 = time.perf_counter()
    for tid, run in tasks:
        proc = subprocess.run(run, shell=True, cwd=where, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"bench: serial {tid} failed: {(proc.stdout + proc.stderr)[-2000:]}")
    wall = time.perf_counter() - t0
    git(where, "add", "-A")
    return wall, git(where, "write-tree").strip()


def team_run(code: Path, template: Path, where: Path, job: str, tasks: list[tuple[str, str]], isolation: str,
             workers: int) -> tuple[float, str | None]:
    """Seconds of one `team run` process on a fresh copy, and the result's tree (worktree runs)."""
    shutil.copytree(template, where, symlinks=True)
    name = f"{job}-{isolation}"
    plan = where.parent / f"{where.name}.yaml"
    write_plan(plan, name, tasks, isolation, workers, where)
    env = as_installed(PYTHONPATH=str(code), **IDENTITY)
    argv = [sys.executable, "-m", "orchestrator", "run", str(plan), "--root", str(where)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"bench: team run of {name} ({code}) exited {proc.returncode}:\n{proc.stdout[-2000:]}\n"
                         f"{proc.stderr[-2000:]}")
    tree = git(where, "rev-parse", f"team/{name}/integration^{{tree}}").strip() if isolation == "worktree" else None
    if isolation == "none":
        git(where, "add", "-A", "--", ".", ":(exclude).team", ":(exclude).tasks")
        tree = git(where, "write-tree").strip()
    return wall, tree


def commit_cost(scratch: Path, files: int = 5000, rounds: int = 20) -> None:
    """Item d: the ways to commit a task's work in a worktree of ``files`` files (module docstring)."""
    repo = scratch / "big"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for d in range(files // 50):
        (repo / f"src/d{d}").mkdir(parents=True)
        for f in range(50):
            (repo / f"src/d{d}/f{f}.py").write_text(f"x = {d * 50 + f}\n" * 20)
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    base = git(repo, "rev-parse", "HEAD").strip()
    work = scratch / "big-wt"
    git(repo, "worktree", "add", "-q", "--detach", str(work), base)
    off = ("-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false")
    on = ("-c", "core.fsmonitor=false", "-c", "core.untrackedCache=true")

    def g(*args: str, cfg: tuple[str, ...] = off, stdin: str | None = None) -> str:
        proc = subprocess.run(["git", "-C", str(work), *cfg, *args], capture_output=True, text=True, input=stdin,
                              env={**os.environ, **IDENTITY})
        if proc.returncode not in (0, 1):
            raise SystemExit(f"bench: git {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def add_all(cfg: tuple[str, ...]) -> str:
        g("add", "-A", cfg=cfg)
        tree = g("write-tree", cfg=cfg).strip()
        g("rev-parse", "HEAD", "HEAD^{tree}", cfg=cfg)
        return tree

    def by_status() -> str:
        out = g("status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
        paths = [e[3:] for e in out.split("\0") if len(e) > 3]
        g("update-index", "--add", "--remove", "-z", "--stdin", stdin="\0".join(paths) + "\0")
        tree = g("write-tree").strip()
        g("rev-parse", "HEAD", "HEAD^{tree}")
        return tree

    def old_path() -> str:
        g("add", "-A")
        g("diff", "--cached", "--quiet")
        g("commit", "-q", "--no-verify", "-m", "task")
        return g("rev-parse", "HEAD^{tree}").strip()

    ways: dict[str, Callable[[], str]] = {"add -A + write-tree (pool.py)": lambda: add_all(off),
            "  the same, core.untrackedCache": lambda: add_all(on),
            "status + update-index + write-tree": by_status,
            "add -A + diff + commit (before)": old_path}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(rounds):
        for name, way in (list(ways.items()) if r % 2 == 0 else list(ways.items())[::-1]):
            g("checkout", "-q", "-f", "--detach", base)
            g("clean", "-q", "-ffdx")
            for i in range(5):
                with open(work / f"src/d{r % (files // 50)}/f{i}.py", "a") as f:
                    f.write(f"y = {r}\n")
            (work / f"src/new{r}.py").write_text("new = 1\n")
            (work / "build").mkdir(exist_ok=True)
            (work / "build/out.o").write_text("o")
            t0 = time.perf_counter()
            tree = way()
            times[name].append((time.perf_counter() - t0) * 1000)
            changed = sorted(g("diff", "--name-only", base, tree).split())
            want = sorted([f"src/d{r % (files // 50)}/f{i}.py" for i in range(5)] + [f"src/new{r}.py"])
            if changed != want:
                raise SystemExit(f"bench: {name} committed {changed}, not {want}")
    print(f"\ncommitting one task's work in a worktree of {files:,} files (5 edited, 1 added, ignored build output); "
          f"ms, median (min–max) of {rounds}")
    for name, xs in times.items():
        print(f"{name:38} {statistics.median(xs):7.1f} ({min(xs):.1f}–{max(xs):.1f})")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):6.2f} ({min(xs):.2f}–{max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="rounds (each runs every job of every code once)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--jobs", default="groups,files,true", help="which jobs (comma-separated)")
    ap.add_argument("--compare", metavar="CHECKOUT", type=Path,
                    help="also run another checkout's code (an export of main), alternating round by round")
    ap.add_argument("--commit-cost", action="store_true", help="measure what a task's commit costs (item d) instead")
    args = ap.parse_args()
    if args.commit_cost:
        with tempfile.TemporaryDirectory(prefix="refactor-bench-") as tmp:
            commit_cost(Path(tmp))
        return
    if not Path(RUFF).exists():
        raise SystemExit(f"bench: no ruff next to {sys.executable} (make install puts the dev extras there)")
    codes = [("this", REPO)] + ([("base", args.compare.resolve())] if args.compare else [])
    t_all = time.perf_counter()
    all_jobs = {k: v for k, v in jobs().items() if k in args.jobs.split(",")}
    walls: dict[tuple[str, str, str], list[float]] = {}
    serials: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="refactor-bench-") as tmp:
        scratch = Path(tmp)
        template = scratch / "template"
        make_template(template)
        trees: dict[str, str] = {}
        one_pass = serial(template, scratch / "serial-one-pass", [("all", codemod(sum(modules(), [])))])[0]
        for r in range(args.repeat):
            for job in [j for j in ("groups", "files") if j in all_jobs]:
                wall, trees[job] = serial(template, scratch / f"serial-{job}-{r}", all_jobs[job])
                serials.setdefault(job, []).append(wall)
            for label, code in (codes if r % 2 == 0 else codes[::-1]):
                for job, tasks in all_jobs.items():
                    for isolation in ("worktree", "none"):
                        where = scratch / f"{label}-{job}-{isolation}-{r}"
                        wall, tree = team_run(code, template, where, job, tasks, isolation, args.workers)
                        if job in trees and tree != trees[job]:
                            raise SystemExit(f"bench: {label} {job} {isolation}: the result differs from the serial "
                                             f"run's ({tree} vs {trees[job]}) in {where}")
                        walls.setdefault((label, job, isolation), []).append(wall)
                        shutil.rmtree(where)
            print(f"  round {r + 1}/{args.repeat} done", file=sys.stderr, flush=True)
    print(f"\nrefactor bench: {FILES} modules in {GROUPS} packages; codemod: {len(PASSES)} ruff passes; "
          f"workers {args.workers}; seconds, median (min–max) of {args.repeat} rounds")
    head = (f"{'job':24} {'code':5} {'serial':>7} {'worktree':>19} {'none':>19} {'wt/serial':>9} "
            f"{'none/serial':>11} {'overhead ms/task':>16}")
    print(head)
    print("-" * len(head))
    for job, label_n in (("groups", f"{GROUPS} tasks, one a package"), ("files", f"{FILES} tasks, one a file"),
                         ("true", f"{GROUPS} tasks of true")):
        if job not in all_jobs:
            continue
        n = len(all_jobs[job])
        for label, _ in codes:
            wt, none = walls[(label, job, "worktree")], walls[(label, job, "none")]
            ser = statistics.median(serials[job]) if job in serials else None
            ratio = f"{statistics.median(wt) / ser:8.2f}×" if ser else f"{'–':>9}"
            nratio = f"{statistics.median(none) / ser:10.2f}×" if ser else f"{'–':>11}"
            over = [(w - o) / n * 1000 for w, o in zip(wt, none, strict=True)]
            print(f"{label_n:24} {label:5} {ser if ser else 0:7.2f} {fmt(wt):>19} {fmt(none):>19} {ratio} {nratio} "
                  f"{statistics.median(over):7.0f} ({min(over):.0f}–{max(over):.0f})")
    print("targets: overhead of true tasks ≤ 40 ms/task · 13 packages ≤ 1.3× serial · 50 files ≤ 2× serial")
    print(" · ".join(f"serial {job} {fmt(xs)} s" for job, xs in serials.items()) + f" · one pass over all "
          f"files {one_pass:.2f} s · load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs · bench took {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
