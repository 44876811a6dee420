"""Reviewing a worktree plan's result, and what a run says before and while it works.

`team log`, `team diff`, `team task show` (branch and merge commit), the merge
phase in `--json` events and the plain progress, the uncommitted-changes
warning, and a plan file outside the repository refused at check time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import run_team
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import codemod_tasks, git, make_project, plan_yaml

PLAN = "rv"
INTEG = f"team/{PLAN}/integration"
WAIT_FOR_A = ("i=0; until git rev-parse -q --verify 'team/rv/integration^2' >/dev/null; "
              "do i=$((i+1)); [ $i -gt 600 ] && exit 3; sleep 0.05; done; ")


def store(repo: Path) -> dict[str, dict]:
    return {t["plan_task"]: t for t in (json.loads(p.read_text()) for p in (repo / ".tasks").glob("task_*.json"))}


def test_log_diff_and_task_show_say_what_each_task_did(tmp_path):
    tasks = [{"id": "a", "run": "printf 'v = 1\\n' > s.py"},
             {"id": "b", "run": WAIT_FOR_A + "printf 'v = 2\\n' > s.py"},
             {"id": "c", "needs": ["a"], "run": "echo c > c.txt && echo more > more.txt"},
             {"id": "t", "needs": ["c"], "run": "test -f c.txt"}]
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks), {"s.py": "v = 0\n"}, modules=0)
    assert run_team(repo, "run", "plan.yaml", "-k").returncode == 1  # b conflicts with a
    s = store(repo)
    merges = {k: v.get("merge_commit") for k, v in s.items()}
    assert merges["b"] is None and merges["t"] is None
    a_commit = git(repo, "log", "-1", "--format=%h %s", f"{merges['a']}^2").strip()
    c_commit = git(repo, "log", "-1", "--format=%h %s", f"{merges['c']}^2").strip()
    b_commit = git(repo, "log", "-1", "--format=%h %s", f"team/{PLAN}/b").strip()

    log = run_team(repo, "log", PLAN)
    assert log.returncode == 0, log.stderr
    base = git(repo, "rev-parse", "main").strip()
    assert log.stdout == (
        f"plan {PLAN}: {INTEG}, 2 tasks merged since {base[:10]}\n"
        f"    1. {merges['a'][:10]}  #1 a  [completed]  1 commit, 1 file\n"
        f"         {a_commit}\n"
        f"    2. {merges['c'][:10]}  #3 c  [completed]  1 commit, 2 files\n"
        f"         {c_commit}\n"
        "not merged:\n"
        f"       #2 b  [failed]  branch team/{PLAN}/b: 1 commit not merged (merge conflict: task 'b' (team/{PLAN}/b) "
        f"conflicts with {INTEG} in s.py; nothing was merged, the branch and its worktree "
        f"{repo}/.team/worktrees/{PLAN}/b are kept.)\n"
        "       #4 t  [completed]  changed nothing\n")
    as_json = json.loads(run_team(repo, "log", "plan.yaml", "--json").stdout)
    assert [e["task"] for e in as_json["merged"]] == ["a", "c"] and as_json["merged"][1]["files"] == 2

    diff = run_team(repo, "diff", f"{PLAN}.c")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith(f"# #3 c (plan {PLAN}): merged in {merges['c'][:10]}, 1 commit\n#   {c_commit}\n"
                                  "diff --git a/c.txt b/c.txt\nnew file mode 100644\n")
    assert "+more\n" in diff.stdout
    unmerged = run_team(repo, "diff", "2", "--stat")
    assert unmerged.stdout == (f"# #2 b (plan {PLAN}): not merged: branch team/{PLAN}/b, 1 commit\n#   {b_commit}\n"
                               " s.py | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n")
    nothing = run_team(repo, "diff", f"{PLAN}.t")
    assert (nothing.returncode, nothing.stderr) == (2, (
        f"UserError: task 't' of plan {PLAN} has no change to show: it is not merged into {INTEG} and has no branch "
        "(it changed nothing, or has not run yet)\n"))

    show = run_team(repo, "task", "show", f"{PLAN}.a").stdout
    assert f"  branch:      {INTEG}\n  merge:       {merges['a']}\n" in show
    show = run_team(repo, "task", "show", f"{PLAN}.b").stdout
    assert f"  branch:      team/{PLAN}/b\n  worktree:    {repo}/.team/worktrees/{PLAN}/b\n" in show


def test_the_merge_phase_is_shown_in_json_events_and_plain_progress(tmp_path):
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, codemod_tasks(4)))
    r = run_team(repo, "run", "plan.yaml", "--json")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    per_task: dict[str, list[str]] = {}
    for ev in events:
        if ev.get("name"):
            per_task.setdefault(ev["name"], []).append(ev["event"])
    for name in ("mod-0", "mod-1", "mod-2", "mod-3", "check"):
        assert per_task[name] == ["started", "merge_queued", "merging", "completed"], (name, per_task[name])
    queued = [ev for ev in events if ev["event"] == "merge_queued"]
    assert all(isinstance(ev["ahead"], int) and ev["ahead"] >= 0 for ev in queued)

    plain = run_team(repo, "run", "plan.yaml", "--fresh")
    lines = [re.sub(r"^\[ *[0-9.]+s\] ", "", line) for line in plain.stdout.splitlines()]
    assert any(re.fullmatch(r"merge #\d+ check", line) for line in lines)
    assert any(re.fullmatch(r"ran   #\d+ mod-0: waiting for its turn to merge(, \d+ ahead)?", line) for line in lines)


def test_uncommitted_changes_are_warned_about_before_the_plan_starts(tmp_path):
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, codemod_tasks(2)), modules=2)
    (repo / "pkg/m0.py").write_text("x = 1\n")
    (repo / "scratch.txt").write_text("new\n")
    r = run_team(repo, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    head = git(repo, "rev-parse", "HEAD").strip()
    assert (f"warning: your checkout has uncommitted changes the tasks will not see (pkg/m0.py, scratch.txt): they "
            f"start from your last commit {head[:10]}. Commit them first, or start over with `team run plan.yaml "
            f"--fresh --include-uncommitted` to put them in the plan's base\n") in r.stderr
    assert git(repo, "show", f"{INTEG}:pkg/m0.py") != "x = 1\n"
    again = run_team(repo, "run", "plan.yaml")  # said once, when the plan's base was fixed
    assert "warning" not in again.stderr
    inc = run_team(repo, "run", "plan.yaml", "--include-uncommitted")
    assert ("--include-uncommitted: ignored, plan rv started earlier from "
            f"{head[:10]}; `team run plan.yaml --fresh --include-uncommitted` starts over") in inc.stderr


def test_a_plan_file_outside_the_repository_is_refused_before_anything_runs(tmp_path):
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, codemod_tasks(2)), modules=2)
    elsewhere = tmp_path / "plans"
    elsewhere.mkdir()
    plan = elsewhere / "plan.yaml"
    plan.write_text(plan_yaml(PLAN, codemod_tasks(2)))
    expected = (f"PlanError: {plan}:4: tasks: mod-0, mod-1, check would run in {elsewhere}, outside the git "
                f"repository {repo} holding the state root, and isolation: worktree runs tasks only inside it: move "
                f"plan.yaml into {repo} (tasks run in the plan file's folder), or set `defaults.cwd` to a folder "
                f"inside it\n")
    for args in (["plan", "check", str(plan)], ["run", str(plan), "--dry-run"], ["run", str(plan)]):
        r = run_team(repo, *args)
        assert (r.returncode, r.stderr) == (2, expected), args
    assert not (repo / ".tasks").exists() and not (repo / ".team").exists()
    assert git(repo, "branch", "--list", "team/*") == ""

    plan.write_text(plan_yaml(PLAN, codemod_tasks(2), extra=f"defaults:\n  cwd: {repo}"))
    ok = run_team(repo, "plan", "check", str(plan))
    assert (ok.returncode, ok.stdout) == (0, f"{plan}: ok (3 tasks)\n")
    assert run_team(repo, "run", str(plan)).returncode == 0


def test_the_live_view_shows_tasks_waiting_to_merge_and_merging():
    """The terminal view (a rich Live, rendered here to text): a task whose command ended but
    whose merge has not landed holds its worker slot and says where it is in the line."""
    import io

    from rich.console import Console

    from orchestrator.cli.progress import LiveProgress

    console = Console(file=io.StringIO(), width=100, force_terminal=False)
    view = LiveProgress(console, PLAN)
    events = [{"event": "run_started", "total": 4, "workers": 3, "completed": 0},
              *({"event": "started", "task": i, "name": f"t{i}", "attempt": 1} for i in (1, 2, 3)),
              {"event": "merge_queued", "task": 1, "name": "t1", "ahead": 0},
              {"event": "merging", "task": 1, "name": "t1"},
              {"event": "merge_queued", "task": 2, "name": "t2", "ahead": 1}]
    try:
        for ev in events:
            view(ev)
        console.begin_capture()
        console.print(view._render())
        text = console.end_capture()
    finally:
        view.close()
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[1] == "running 1 · merging 2 · pending 1"
    assert re.fullmatch(r"  ⇄ #1 t1  \d+\.\ds  merging", lines[2])
    assert re.fullmatch(r"  ⇄ #2 t2  \d+\.\ds  waiting to merge \(1 ahead\)", lines[3])
    assert re.fullmatch(r"  ▶ #3 t3  \d+\.\ds", lines[4])


def test_log_and_land_agree_on_a_merge_taken_out_of_the_integration_branch(tmp_path):
    """Issue 26 item 6: with a task's merge reset off the integration branch, `team log` listed it as
    "completed, changed nothing" while `team land` refused for its missing merge. Both read the branch's
    history against the store (run/standing.py) and name the same task and merge."""
    tasks = [{"id": "a", "run": "echo a > a.txt"}, {"id": "b", "needs": ["a"], "run": "echo b > b.txt"},
             {"id": "t", "needs": ["b"], "run": "test -f b.txt"}]
    repo = make_project(tmp_path / "repo", plan_yaml(PLAN, tasks), modules=0)
    assert run_team(repo, "run", "plan.yaml").returncode == 0
    merge_b = store(repo)["b"]["merge_commit"]
    git(repo, "update-ref", f"refs/heads/{INTEG}", f"{INTEG}~1")  # b's merge taken out behind team's back

    log = run_team(repo, "log", PLAN)
    assert log.returncode == 0, log.stderr
    assert log.stdout.endswith(
        "not merged:\n"
        f"       #2 b  [completed]  its merge {merge_b[:10]} is no longer on {INTEG} (the branch was reset or "
        "rebuilt): the next `team run` runs it again\n"
        "       #3 t  [completed]  changed nothing\n")
    land = run_team(repo, "land", PLAN)
    assert (land.returncode, land.stderr) == (2, (
        f"UserError: {INTEG} lacks the merges of #2 b (merge {merge_b[:10]}): run the plan again (`team run "
        f"plan.yaml`) to redo them, then land\n"))

    again = run_team(repo, "run", "plan.yaml")  # what both said: b runs again, and what needs it
    assert again.returncode == 0, again.stdout + again.stderr
    log = run_team(repo, "log", PLAN).stdout
    assert "#2 b  [completed]  1 commit, 1 file" in log and "not merged:\n       #3 t  [completed]  changed nothing\n" in log
    assert run_team(repo, "land", PLAN).returncode == 0
