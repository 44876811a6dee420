"""How counts are said in what ``team`` prints and tells models: ``1 task``, ``2 tasks``
(``core.text.plural``), never ``1 tasks`` or ``task(s)``. Computed from the code's own f-strings."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from conftest import run_team, team_env
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import git, make_project, plan_yaml
from util import wait_until

from orchestrator.core.text import plural

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"
HEDGED = re.compile(r"[a-z]\(s\)")
# a count placed straight before a plural noun: "{n} tasks" reads "1 tasks" when n is 1
COUNTED = re.compile(r"^ (earlier |new |running |unread )?(task|message|commit|line|worker|problem|file|step|"
                     r"attempt|call|member|job|record)s\b")


def _offences() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.JoinedStr):
                continue
            parts = node.values
            for i, part in enumerate(parts):
                if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                    continue
                after_value = i > 0 and isinstance(parts[i - 1], ast.FormattedValue)
                if after_value and (HEDGED.search(part.value) or COUNTED.match(part.value)):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {part.value[:40]!r}")
    return found


def test_no_count_is_followed_by_a_hedged_or_fixed_plural():
    assert _offences() == []


def test_plural():
    assert [plural(n, "task") for n in (0, 1, 2)] == ["0 tasks", "1 task", "2 tasks"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"


# ---------------------------------------------------------------- what a resumed worktree plan says
# Issue 26 item 7: the run said "#5 (bump) failed: retrying it" and then "merging ... without running the
# task again" (or "was running when the last lead died: re-running it" then the same), and "merging the 10
# commits kept" for a task commit plus a resolution that merged 8 integration commits into the branch.
# Now one line a task, counting the task's own work.

WAIT_FOR_4 = ("i=0; until [ \"$(git rev-list --count --merges team/w/integration)\" -ge 4 ]; "
              "do i=$((i+1)); [ $i -gt 600 ] && exit 3; sleep 0.05; done; ")


def _wording_tasks() -> list[dict]:
    return [{"id": "fmt", "run": "sed -i 's/TIMEOUT=10/TIMEOUT = 10/' settings.py"},
            *({"id": f"o{i}", "run": f"echo {i} > o{i}.txt"} for i in (1, 2, 3)),
            {"id": "bump", "run": WAIT_FOR_4 + "sed -i 's/TIMEOUT=10/TIMEOUT=30/' settings.py"},
            {"id": "after", "needs": ["bump"], "run": "echo after > after.txt"}]


def test_a_run_resuming_a_resolution_made_by_hand_says_once_what_it_merges(tmp_path):
    repo = make_project(tmp_path / "repo", plan_yaml("w", _wording_tasks()), {"settings.py": "TIMEOUT=10\n"},
                        modules=0)
    assert run_team(repo, "run", "plan.yaml", "-k").returncode == 1  # bump conflicts with fmt
    wt = repo / ".team/worktrees/w/bump"
    git(wt, "merge", "team/w/integration", check=False)
    (wt / "settings.py").write_text("TIMEOUT = 30\n")
    git(wt, "commit", "-qam", "bump: resolved")
    assert int(git(repo, "rev-list", "--count", "team/w/bump", "^main")) == 10  # what the old note counted
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == (
        "#6 (after) was cancelled: retrying it\n"
        "#5 bump failed: merging the 2 commits of its own on team/w/bump (your merge of team/w/integration into it "
        "among them) without running the task again\n")
    assert "start #5 bump" in r.stdout and git(repo, "show", "team/w/integration:settings.py") == "TIMEOUT = 30\n"


def test_a_run_resuming_work_a_killed_lead_left_committed_says_it_merges_it_not_that_it_reruns_it(tmp_path):
    ready = tmp_path / "committed"
    tasks = [{"id": "own", "run": f"echo mine > mine.txt && git add -A && "
                                  f"git -c user.name=me -c user.email=me@x commit -qm 'own: mine' && "
                                  f"touch {ready} && sleep 60"},
             {"id": "next", "needs": ["own"], "run": "test -f mine.txt"}]
    repo = make_project(tmp_path / "repo", plan_yaml("w", tasks), modules=0)
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=repo,
                            env=team_env(repo), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        task = repo / ".tasks/task_1.json"
        wait_until(lambda: ready.exists() and json.loads(task.read_text())["status"] == "in_progress", timeout=60,
                   what="the task's own commit, and its claim on disk")
    finally:
        os.killpg(lead.pid, signal.SIGKILL)
        lead.wait()
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    notes = [line for line in r.stderr.splitlines() if not line.startswith("job ")]  # the dead lead's job, reaped
    assert notes == ["#1 own was running when the last lead died: merging the 1 commit of its own on team/w/own "
                     "without running the task again"]  # forked from the tip integration still has: no conflict
    assert git(repo, "show", "team/w/integration:mine.txt") == "mine\n"
