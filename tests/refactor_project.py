"""A small Python project refactored by real codemods (``ruff``), and a serial reference.

``make_project(path, plan)`` creates a git repository holding a package whose
modules are written in an old style (unsorted imports, ``typing.List``,
``"{}".format``, loose formatting) and ``plan.yaml``. ``codemod_plan`` writes a
plan with one ``ruff check --fix --select UP,I`` or ``ruff format`` task per
module and a final ``check`` task that needs them all and imports the
package (it changes nothing). ``serial_tree`` runs the same tasks one after
the other in a clone, in plan order, and returns the git tree of the
result: the reference every parallel, killed, resumed, redone or landed run
is compared with (equal trees mean byte-identical contents).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gitutil import USER_ID

RUFF = f"{sys.executable} -m ruff"
PY = sys.executable

MODULE = '''\
import sys
import os
from typing import List, Dict, Optional


def load_{i}(paths: List[str]) -> Dict[str, Optional[str]]:
    out = {{}}
    for p in paths:
        out[p] = os.environ.get(p, "{{}}-{{}}".format(sys.platform, {i}))
    return out
SETTINGS_{i} = {{  'name':'m{i}','size':{i},
      'tags' : [ 'a','b' ] }}
'''


def git(cwd: Path, *args: str, check: bool = True, input: str | None = None) -> str:
    """The test's own git, as the user (identity given, no opportunistic index writes)."""
    env = {**os.environ, **USER_ID, "GIT_OPTIONAL_LOCKS": "0"}
    proc = subprocess.run(["git", "-C", str(cwd), *args], env=env, capture_output=True, text=True,
                          input=input)
    if check and proc.returncode:
        raise AssertionError(f"git {args} in {cwd}: {proc.stderr}")
    return proc.stdout


def project_files(modules: int) -> dict[str, str]:
    files = {f"pkg/m{i}.py": MODULE.format(i=i) for i in range(modules)}
    files["pkg/__init__.py"] = ""
    files["pyproject.toml"] = '[tool.ruff]\ntarget-version = "py310"\n'
    files[".gitignore"] = "__pycache__/\n.ruff_cache/\n"
    return files


def codemod_tasks(modules: int) -> list[dict]:
    """One codemod task per module (even: upgrade, sort imports, drop unused ones; odd: format), then ``check``."""
    tasks = []
    for i in range(modules):
        if i % 2 == 0:
            run = f"{RUFF} check --no-cache --fix --exit-zero --select UP,I,F401 -q pkg/m{i}.py"
        else:
            run = f"{RUFF} format --no-cache -q pkg/m{i}.py"
        tasks.append({"id": f"mod-{i}", "run": run})
    tasks.append({"id": "check", "needs": [t["id"] for t in tasks],
                  "run": f"{PY} -B -c 'import pkg.m0, pkg.m1'"})
    return tasks


def plan_yaml(name: str, tasks: list[dict], workers: int = 4, extra: str = "") -> str:
    lines = [f"name: {name}", f"workers: {workers}", "isolation: worktree"]
    if extra:
        lines.append(extra.rstrip("\n"))
    lines.append("tasks:")
    for t in tasks:
        lines.append(f"  - id: {t['id']}")
        lines.append(f"    run: {yaml_str(t['run'])}")
        if t.get("needs"):
            lines.append(f"    needs: [{', '.join(t['needs'])}]")
    return "\n".join(lines) + "\n"


def yaml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_project(path: Path, plan: str, files: dict[str, str] | None = None, modules: int = 4) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in {**project_files(modules), **(files or {}), "plan.yaml": plan}.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def serial_tree(repo: Path, tasks: list[dict], where: Path, ref: str = "HEAD") -> str:
    """Run ``tasks`` one at a time, in order, in a clone of ``repo`` at ``ref``; the result's tree."""
    git(where.parent, "clone", "-q", str(repo), str(where))
    git(where, "checkout", "-q", "--detach", git(repo, "rev-parse", ref).strip())
    for t in tasks:
        proc = subprocess.run(t["run"], shell=True, cwd=where, capture_output=True, text=True)
        assert proc.returncode == 0, f"serial {t['id']}: {proc.stdout}{proc.stderr}"
    git(where, "add", "-A")
    return git(where, "write-tree").strip()


def tree(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", f"{ref}^{{tree}}").strip()


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split()
