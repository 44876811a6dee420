"""A plan task's own id (`src-make`) names it outside `team run` too, when one plan has it.

The conflict message and `--redo` speak of `src-make`; `team diff`, `team task
show|update|retry|blocked` and `--blocked-by` take the same word. When several
plans have that id, the answer is exit 2 with the `PLAN.ID` names that match.
"""

from __future__ import annotations

import json

from conftest import run_team
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from refactor_project import make_project, plan_yaml


def test_a_bare_plan_id_names_its_task_in_every_command_that_takes_a_ref(tmp_path):
    tasks = [{"id": "src-make", "run": "printf 'v = 1\\n' > s.py"},
             {"id": "src-funcs", "needs": ["src-make"], "run": "printf 'def f(): pass\\n' > f.py"}]
    repo = make_project(tmp_path / "repo", plan_yaml("build", tasks), {"s.py": "v = 0\n"}, modules=0)
    (repo / "other.yaml").write_text("name: other\ntasks:\n  - id: src-make\n    run: 'true'\n"
                                     "  - id: lint\n    run: 'true'\n")
    assert run_team(repo, "run", "plan.yaml").returncode == 0

    diff = run_team(repo, "diff", "src-make")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.startswith("# #1 src-make (plan build): merged in ") and "+v = 1\n" in diff.stdout
    assert run_team(repo, "diff", "src-make", "--stat").stdout == run_team(repo, "diff", "build.src-make",
                                                                           "--stat").stdout
    show = run_team(repo, "task", "show", "src-funcs")
    assert show.returncode == 0, show.stderr
    assert show.stdout.startswith("#2: src-funcs: ") and "  name:        build.src-funcs\n" in show.stdout
    assert json.loads(run_team(repo, "task", "show", "src-funcs", "--json").stdout)["id"] == 2

    # a second plan with a task `src-make`: the bare id names neither
    assert run_team(repo, "run", "other.yaml").returncode == 0
    for args in (("task", "show", "src-make"), ("diff", "src-make"), ("task", "retry", "src-make"),
                 ("task", "update", "src-make", "--status", "pending"), ("task", "blocked", "src-make"),
                 ("task", "create", "x", "--blocked-by", "src-make")):
        r = run_team(repo, *args)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", (
            "AmbiguousRef: task 'src-make' is in 2 plans: build.src-make (#1), other.src-make (#3); name one of "
            "them as PLAN.src-make\n")), args
    assert not (repo / ".tasks" / "task_5.json").exists()  # the refused create made nothing
    assert run_team(repo, "task", "show", "other.src-make").stdout.startswith("#3: src-make")

    # ids one plan has still work everywhere, writes included
    blocked = run_team(repo, "task", "blocked", "lint")
    assert blocked.returncode == 0 and "#4" in blocked.stdout, blocked.stderr
    made = run_team(repo, "task", "create", "after lint", "--blocked-by", "lint")
    assert made.stdout == "Created task #5: after lint (blocked by: [4])\n", made.stderr
    retry = run_team(repo, "task", "retry", "src-funcs")
    assert retry.returncode == 0, retry.stderr
    assert retry.stdout.startswith("Task #2: src-funcs: ") and "The next `team run` of plan build runs them." \
        in retry.stdout
    update = run_team(repo, "task", "update", "lint", "--owner", "alice")
    assert update.stdout.startswith("Updated task #4: lint: "), update.stderr

    # a typo is told the name that is near
    typo = run_team(repo, "task", "show", "src-fucns")
    assert (typo.returncode, typo.stderr) == (2, "UnknownRef: no task named 'src-fucns' (did you mean "
                                                 "'build.src-funcs'?); `team task list` shows the tasks\n")
