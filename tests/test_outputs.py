"""What a worktree task keeps: `outputs:` globs, and a warning when a task commits build junk.

A repository unpacked from an sdist has no `.gitignore`: a final `test` task
leaves `__pycache__/` behind, which `git add -A` commits and `team land` would
bring into the user's branch. The run warns (progress line, `--json` event,
summary) with the fix; `outputs:` declares what a task keeps (`[]`: nothing).
"""

from __future__ import annotations

import json
import re

from conftest import run_team
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import PY, git

BASE = {"pkg/__init__.py": "", "pkg/m0.py": "x = 1\n", "pkg/m1.py": "y = 1\n"}


def sdist_like(path, plan: str):
    """A repository like an unpacked sdist: no .gitignore."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in {**BASE, "plan.yaml": plan}.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "sdist")
    return path


def changed(repo, ref: str) -> list[str]:
    return sorted(git(repo, "diff", "--name-only", f"main...{ref}").split())


PLAN = f"""name: jk
isolation: worktree
tasks:
  - id: edit
    run: echo 'x = 2' > pkg/m0.py
  - id: test
    needs: [edit]
    run: {PY} -c 'import pkg.m0, pkg.m1' && mkdir -p .pytest_cache && echo 1 > .pytest_cache/lastfailed
"""


def test_a_task_that_commits_build_junk_is_warned_about_with_the_fix(tmp_path):
    repo = sdist_like(tmp_path / "repo", PLAN)
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    junk = [p for p in changed(repo, "team/jk/integration") if p != "pkg/m0.py"]
    assert len(junk) == 4 and all("__pycache__/" in p or p.startswith(".pytest_cache/") for p in junk), junk
    warning = (r"#2 test committed 4 files that look like build output \(__pycache__/, \.pytest_cache/: "
               r"pkg/__pycache__/\S+\.pyc, pkg/__pycache__/\S+\.pyc, pkg/__pycache__/\S+\.pyc, …\); merged, "
               r"`team land` brings them into your branch\. Ignore them in a \.gitignore of your project "
               r"\(e\.g\. __pycache__/\), or declare the files the task keeps with `outputs:` in the plan "
               r"\(`outputs: \[\]` for a check that keeps nothing\)")
    lines = r.stdout.splitlines()
    assert any(re.fullmatch(r"\[ *[0-9.]+s\] warning: " + warning, line) for line in lines), r.stdout  # as it ran
    assert any(re.fullmatch("warning: " + warning, line) for line in lines), r.stdout  # and in the summary
    assert "edit committed" not in r.stdout  # its own change is no junk

    events = [json.loads(line) for line in run_team(repo, "run", "plan.yaml", "--fresh", "--json").stdout.splitlines()]
    (ev,) = [e for e in events if e["event"] == "junk"]
    assert (ev["task"], ev["name"], ev["count"], ev["patterns"]) == (4, "test", 4, ["__pycache__/", ".pytest_cache/"])
    assert events[-1]["event"] == "summary" and [w["name"] for w in events[-1]["warnings"]] == ["test"]


def test_outputs_keep_only_what_a_worktree_task_declares(tmp_path):
    own_commit = "git -c user.name=t -c user.email=t@x commit -qm own"
    plan = PLAN.replace("    needs: [edit]\n", "    needs: [edit]\n    outputs: []\n").replace(
        "    run: echo 'x = 2' > pkg/m0.py\n",
        f"    run: echo 'x = 2' > pkg/m0.py && {PY} -c 'import pkg.m0' && echo log > run.log\n"
        "    outputs: [pkg/*.py]\n"
        "  - id: gen\n"
        f"    run: mkdir -p out build && echo v > out/v.txt && echo o > build/o.bin && git add -A && {own_commit}\n"
        "    outputs: out\n")
    repo = sdist_like(tmp_path / "repo", plan)
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in r.stdout + r.stderr
    assert changed(repo, "team/jk/integration") == ["out/v.txt", "pkg/m0.py"]
    log = run_team(repo, "log", "jk").stdout
    assert "#3 test  [completed]  changed nothing" in log, log
    stored = {t["plan_task"]: t for t in map(json.loads, (p.read_text() for p in (repo / ".tasks").glob("t*.json")))}
    assert {k: v.get("outputs") for k, v in stored.items()} == {"edit": ["pkg/*.py"], "test": [], "gen": ["out"]}

    land = run_team(repo, "land", "plan.yaml")
    assert land.returncode == 0, land.stdout + land.stderr
    assert sorted(git(repo, "show", "--name-only", "--format=", "HEAD").split()) == ["out/v.txt", "pkg/m0.py"]
    assert not (repo / "pkg/__pycache__").exists() and not (repo / "build").exists()


def test_outputs_in_the_schema_and_bad_globs_refused_at_their_line(tmp_path):
    schema = json.loads(run_team(tmp_path, "plan", "schema").stdout)
    described = schema["$defs"]["PlanTask"]["properties"]["outputs"]["description"]
    assert "`[]`: none (a check)" in described and "isolation worktree: only changes to them are committed" in described
    (tmp_path / "plan.yaml").write_text("name: b\nisolation: worktree\ndefaults:\n  outputs: ['']\ntasks:\n"
                                        "  - id: a\n    run: 'true'\n    outputs: [dist, /tmp/x]\n")
    r = run_team(tmp_path, "plan", "check", "plan.yaml")
    assert (r.returncode, r.stderr) == (2, (
        "PlanError: plan.yaml:4: defaults.outputs[0]: an empty glob names no file; remove it (`outputs: []` keeps "
        "nothing)\n"
        "plan.yaml:8: tasks[0].outputs[1]: '/tmp/x' is absolute: an output glob is relative to the task's folder "
        "(its cwd)\n"))
