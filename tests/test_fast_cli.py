"""The fast path (orchestrator/cli/fast.py): ``team task list|create|update`` and ``team run`` without typer.

What a user must not be able to tell apart: the same command line gives the
same output, errors, exit code and store through the fast path and through
typer. What they can tell: a listing imports neither typer nor pydantic.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import team_env

from orchestrator.cli import fast
from orchestrator.cli.commands import _build
from orchestrator.core.jsonutil import dumps
from orchestrator.tasks.store import TaskStore

TYPER = ("import sys; from orchestrator.cli import guard; from orchestrator.cli.commands import dispatch; "
         "sys.exit(guard(lambda: dispatch(sys.argv[1:])))")
FAST = "import sys; from orchestrator.cli import main; sys.exit(main(sys.argv[1:]))"


def run(code: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=team_env(cwd))


def fill(root: Path) -> None:
    store = TaskStore(root)
    store.create_many([{"subject": "base", "name": "base"},
                       {"subject": "next", "blockedBy": [("new", 0)], "owner": "ann"},
                       {"subject": "ünïcode \u2603 and \"quotes\"", "blockedBy": [("new", 0), ("new", 1)]},
                       {"subject": "other", "description": "line one\nline two"}])
    store.update(1, status="completed")


KINDS = {str: "str", list[str]: "str", bool: "flag", float: "number", int: "count", Path: "path"}


def test_the_table_has_exactly_the_options_typer_declares_for_each_hot_command():
    for words, hot in fast.HOT.items():
        command = _build(words[0])
        for word in words[1:]:
            command = command.commands[word]  # type: ignore[union-attr]
        assert command is not None
        declared, arguments = {}, []
        for param in command.params:
            annotation = param.type_descriptor.annotation
            kind = KINDS[annotation]
            if annotation is int:  # a count: typer refuses < 1, the fast path leaves those to it
                assert param.type_descriptor.parameter_info.min == 1, (words, param.name)
            if param.param_type_name == "argument":
                arguments.append((param.name, kind))
                continue
            assert kind == "flag" or not param.is_flag
            declared[tuple(param.opts) + tuple(param.secondary_opts)] = (param.name, kind, bool(param.multiple))
        mine = {opt.names: (opt.dest, opt.kind, opt.many) for opt in hot.opts}
        assert mine == declared, words
        assert [(arg.dest, arg.kind) for arg in hot.args] == arguments, words


LISTS = [
    ["task", "list"],
    ["task", "list", "--json"],
    ["task", "list", "--ready"],
    ["task", "list", "--blocked", "--json"],
    ["task", "list", "--status", "completed"],
    ["task", "list", "--status=pending", "--owner", "ann", "--json"],
    ["task", "list", "--owner=nobody"],
    ["task", "list", "--status", "bogus"],
]


@pytest.mark.parametrize("argv", LISTS, ids=" ".join)
def test_a_listing_is_the_same_through_the_fast_path_and_through_typer(tmp_path, argv):
    fill(tmp_path)
    assert fast.parse([*argv, "--root", str(tmp_path)]) is not None  # the line is one the fast path takes
    quick = run(FAST, [*argv, "--root", str(tmp_path)], tmp_path)
    slow = run(TYPER, [*argv, "--root", str(tmp_path)], tmp_path)
    assert (quick.returncode, quick.stdout, quick.stderr) == (slow.returncode, slow.stdout, slow.stderr)
    if "--json" in argv and quick.returncode == 0:
        rows = json.loads(quick.stdout)
        assert quick.stdout.count("\n") == len(rows) + 2  # [, one task per line, ]
        assert all(set(r) >= {"id", "subject", "ready", "waiting_on"} for r in rows)


def test_a_listing_with_an_unreadable_file_warns_and_exits_1_on_both_paths(tmp_path):
    fill(tmp_path)
    (tmp_path / ".tasks" / "task_3.json").write_text("{torn")
    quick = run(FAST, ["--root", str(tmp_path), "task", "list", "--json"], tmp_path)
    slow = run(TYPER, ["--root", str(tmp_path), "task", "list", "--json"], tmp_path)
    assert (quick.returncode, quick.stdout, quick.stderr) == (slow.returncode, slow.stdout, slow.stderr)
    assert quick.returncode == 1 and "task_3.json cannot be read" in quick.stderr
    assert [r["id"] for r in json.loads(quick.stdout)] == [1, 2, 4]


def test_the_listing_spliced_from_file_bytes_is_what_dumps_gives(tmp_path):
    fill(tmp_path)
    (tmp_path / ".tasks" / "task_4.json").write_text(  # valid, not canonical: keys in another order
        json.dumps({"subject": "other", "id": 4, "status": "pending", "blockedBy": [2], "owner": ""}))
    r = run(FAST, ["task", "list", "--json", "--root", str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stderr
    store = TaskStore(tmp_path)
    tasks = {t.id: t for t in store.all()}
    expected = []
    for t in sorted(tasks.values(), key=lambda t: t.id):
        waiting = [i for i in t.blockedBy if tasks[i].status != "completed"]
        expected.append(dumps({**t.to_json(), "ready": t.status == "pending" and not waiting,
                               "waiting_on": waiting}))
    assert r.stdout == "[\n" + ",\n".join(expected) + "\n]\n"


def test_create_and_update_leave_the_same_store_on_both_paths(tmp_path):
    quick_root, slow_root = tmp_path / "quick", tmp_path / "slow"
    quick_root.mkdir()
    fill(quick_root)
    shutil.copytree(quick_root, slow_root)
    steps = [
        ["task", "create", "a new task"],
        ["task", "create", "with deps", "-d", "what done means", "--blocked-by", "base", "--blocked-by=#2",
         "--owner", "bob", "--name", "deps", "--estimate", "2.5", "--json"],
        ["task", "update", "deps", "--status", "in_progress", "--owner", "w"],
        ["task", "update", "5", "--subject=renamed", "--add-blocked-by", "4", "--json"],
        ["task", "update", "6", "--status", "completed"],
        ["task", "update", "6", "--remove-blocked-by", "4", "-d", ""],
        ["task", "create", ""],  # refused: an empty subject
        ["task", "update", "99", "--status", "completed"],  # refused: no such task
        ["task", "update", "2", "--status", "bogus"],
        ["task", "create", "cycle?", "--blocked-by", "nope"],
    ]
    for argv in steps:
        assert fast.parse(argv) is not None, argv
        quick = run(FAST, [*argv, "--root", str(quick_root)], tmp_path)
        slow = run(TYPER, [*argv, "--root", str(slow_root)], tmp_path)
        assert (quick.returncode, quick.stderr) == (slow.returncode, slow.stderr), argv
        assert _no_times(quick.stdout) == _no_times(slow.stdout), argv
    quick_tasks, slow_tasks = _tasks(quick_root), _tasks(slow_root)
    for tid in quick_tasks:
        assert quick_tasks[tid] == slow_tasks[tid], tid
    assert quick_tasks.keys() == slow_tasks.keys()
    assert _tasks(quick_root)[6]["status"] == "completed" and _tasks(quick_root)[6]["estimate"] == 2.5


def _no_times(text: str) -> str:
    times = ('"created_at"', '"updated_at"', '"started_at"', '"finished_at"')
    lines = [line for line in text.splitlines() if not any(key in line for key in times)]
    return "\n".join(lines)


def _tasks(root: Path) -> dict[int, dict]:
    out = {}
    for path in sorted((root / ".tasks").glob("task_*.json")):
        data = json.loads(path.read_text())
        for key in ("created_at", "updated_at", "started_at", "finished_at", "cwd"):
            data.pop(key, None)
        out[data["id"]] = data
    return out


@pytest.mark.parametrize("argv", [
    ["task", "list", "--help"],
    ["task", "list", "-h"],
    ["task", "list", "--bogus"],
    ["task", "list", "--json=yes"],
    ["task", "list", "--json", "--json"],
    ["task", "list", "--status"],
    ["task", "list", "--status", "--json"],
    ["task", "list", "extra"],
    ["task", "list", "--"],
    ["task", "list", "--stat", "pending"],
    ["task", "create"],
    ["task", "create", "a", "b"],
    ["task", "create", "a", "--estimate", "1e3"],
    ["task", "create", "a", "--estimate", "soon"],
    ["task", "create", "a", "--owner", "x", "--owner", "y"],
    ["task", "create", "-"],
    ["task", "update", "1", "--add-blocked-by"],
    ["task", "show", "1"],
    ["run"],
    ["run", "plan.yaml", "-w", "0"],
    ["run", "plan.yaml", "--workers=1e3"],
    ["run", "plan.yaml", "-kw", "2"],
    ["run", "plan.yaml", "--keep"],
    ["run", ""],
    ["run", "a.yaml", "b.yaml"],
    ["--root", "", "task", "list"],
    ["--root"],
    ["--version"],
    ["task"],
    [],
])
def test_every_other_line_is_left_to_typer(argv):
    assert fast.parse(argv) is None


@pytest.mark.parametrize("argv, words", [
    (["task", "list", "--bogus"], "No such option"),
    (["task", "list", "--status"], "requires an argument"),
    (["task", "create", "a", "--estimate", "soon"], "Invalid value for '--estimate'"),
    (["task", "list", "--help"], "Usage: team task list"),
])
def test_what_the_fast_path_leaves_gets_typers_answer(tmp_path, argv, words):
    r = run(FAST, ["--root", str(tmp_path), *argv], tmp_path)
    assert words in r.stdout + r.stderr
    assert r.returncode == (0 if "--help" in argv else 2)


def test_a_fast_listing_imports_neither_typer_nor_pydantic(tmp_path):
    fill(tmp_path)
    run(FAST, ["task", "list", "--root", str(tmp_path)], tmp_path)  # the first listing builds the index
    code = ("import sys; from orchestrator.cli import main; code = main(['task', 'list', '--json']); "
            "print(sorted(m for m in ('typer', 'click', 'pydantic', 'orchestrator.cli.commands', 'rich', 'yaml') "
            "if m in sys.modules)); sys.exit(code)")
    r = run(code, [], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "[]"
    assert len(json.loads("\n".join(r.stdout.splitlines()[:-1]))) == 4


def test_the_global_root_and_the_commands_root_are_the_same_on_both_paths(tmp_path, monkeypatch):
    fill(tmp_path)
    (tmp_path / "sub").mkdir()
    for argv in (["--root", ".", "task", "list"], ["task", "list", "--root", "."], ["task", "list"],
                 ["--root", "sub", "task", "list", "--root", "."]):
        quick = run(FAST, argv, tmp_path)
        slow = run(TYPER, argv, tmp_path)
        assert (quick.returncode, quick.stdout, quick.stderr) == (slow.returncode, slow.stdout, slow.stderr), argv
        assert "base" in quick.stdout


PLAN = """name: p
workers: 2
tasks:
  - id: a
    run: echo a > a.txt
  - id: b
    run: "true"
    needs: [a]
  - id: c
    run: "sleep 0.5; exit 3"
    needs: [a]
"""
"""c takes longest, so the summary's order and critical path are the same from run to run."""


@pytest.mark.parametrize("argv", [
    ["run", "plan.yaml", "--dry-run"],
    ["run", "plan.yaml", "--dry-run", "--json", "-w", "3"],
    ["run", "missing.yaml", "--dry-run"],
    ["run", "plan.yaml", "--dry-run", "--board"],
    ["run", "plan.yaml", "--redo", "zz"],
], ids=" ".join)
def test_a_run_line_gives_the_same_answer_on_both_paths(tmp_path, argv):
    (tmp_path / "plan.yaml").write_text(PLAN)
    assert fast.parse(argv) is not None
    quick = run(FAST, argv, tmp_path)
    slow = run(TYPER, argv, tmp_path)
    assert (quick.returncode, quick.stdout, quick.stderr) == (slow.returncode, slow.stdout, slow.stderr)
    assert quick.returncode == (0 if argv[1] == "plan.yaml" and "--board" not in argv and "--redo" not in argv
                                else 2), quick.stderr


def test_a_plan_run_through_the_fast_path_runs_and_resumes_like_one_run_through_typer(tmp_path):
    quick_root, slow_root = tmp_path / "quick", tmp_path / "slow"
    for root in (quick_root, slow_root):
        root.mkdir()
        (root / "plan.yaml").write_text(PLAN)
    for argv in (["run", "plan.yaml", "-k", "--workers", "2"], ["run", "plan.yaml", "--keep-going"]):
        assert fast.parse(argv) is not None
        quick = run(FAST, argv, quick_root)
        slow = run(TYPER, argv, slow_root)
        assert quick.returncode == slow.returncode == 1, quick.stderr + slow.stderr
        assert sorted(_masked(quick.stdout, quick_root).splitlines()) == sorted(_masked(slow.stdout, slow_root).splitlines())
    assert (quick_root / "a.txt").read_text() == "a\n"
    fields = ("subject", "status", "blockedBy", "attempts", "failures", "error", "plan_task")
    mine, theirs = _tasks(quick_root), _tasks(slow_root)
    assert mine.keys() == theirs.keys()
    for tid in mine:
        assert [mine[tid].get(k) for k in fields] == [theirs[tid].get(k) for k in fields]
        assert mine[tid].keys() == theirs[tid].keys()
    assert [t["status"] for t in _tasks(quick_root).values()] == ["completed", "completed", "failed"]


def _masked(text: str, root: Path) -> str:
    """Run output without what differs between two runs: times, job ids, the root's path."""
    import re

    text = re.sub(r"jobs/j[0-9a-f]+\.log", "jobs/J.log", text.replace(str(root), "ROOT"))
    return re.sub(r"[0-9]+(\.[0-9]+)?(\s?(ms|s)\b|×)", "T", text)
