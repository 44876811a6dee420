"""Plan loading through the real `team` CLI: errors name file, line and field; nothing is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_team

PLANS = Path(__file__).parent / "plans"
CORPUS = sorted(PLANS.glob("*.yaml"))


def test_corpus_is_big_enough():
    assert len(CORPUS) >= 15


@pytest.mark.parametrize("plan", CORPUS, ids=[p.stem for p in CORPUS])
def test_malformed_plan_exits_2_naming_line_and_field(tmp_path, plan):
    shutil.copy(plan, tmp_path / "plan.yaml")
    expect = plan.read_text().splitlines()[0].removeprefix("# expect: ")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2, r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"PlanError: plan.yaml:{expect}"), first
    assert r.stdout == ""
    assert not (tmp_path / ".tasks").exists() and not (tmp_path / ".team").exists()


def test_every_problem_is_reported_at_once(tmp_path):
    (tmp_path / "plan.yaml").write_text(
        "name: multi\nworkers: x\ntasks:\n  - id: a\n    run: 'true'\n    retries: -1\n    colour: red\n"
    )
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "PlanError: plan.yaml:2: workers: Input should be a valid integer, unable to parse string as an "
        "integer (got 'x')",
        "plan.yaml:6: tasks[0].retries: Input should be greater than or equal to 0 (got -1)",
        "plan.yaml:7: tasks[0].colour: unknown key 'colour'; allowed: id, run, prompt, needs, description, "
        "assignee, role, estimate, timeout, retries, retry_delay, env, cwd, isolation, outputs, num_cpus, "
            "resources, lost_retries",
    ]


AGENT_PLAN = "name: ag\ntasks:\n  - id: build\n    run: 'true'\n  - id: review\n    prompt: Review it\n"


@pytest.mark.parametrize("how", ["flag", "env", "plan"])
def test_agent_tasks_accept_a_model_from_flag_env_or_plan(tmp_path, how):
    text = AGENT_PLAN.replace("name: ag\n", "name: ag\nmodel: m1\n") if how == "plan" else AGENT_PLAN
    (tmp_path / "plan.yaml").write_text(text)
    args = ["run", "plan.yaml", "--dry-run"] + (["--model", "m1"] if how == "flag" else [])
    r = run_team(tmp_path, *args, **({"TEAM_MODEL": "m1"} if how == "env" else {}))
    assert r.returncode == 0, r.stderr
    assert "  wave 1: build, review" in r.stdout.splitlines()
    assert not (tmp_path / ".tasks").exists() and not (tmp_path / ".team").exists()


def test_dry_run_prints_waves_critical_path_and_parallelism(tmp_path):
    (tmp_path / "plan.yaml").write_text(
        "name: dr\nworkers: 2\ntasks:\n"
        "  - {id: fetch, run: 'true'}\n"
        "  - {id: lint, run: 'true', needs: [fetch]}\n"
        "  - {id: build, run: 'true', needs: [fetch], estimate: 5}\n"
        "  - {id: unit, run: 'true', needs: [build]}\n"
        "  - {id: docs, run: 'true', needs: [fetch]}\n"
    )
    r = run_team(tmp_path, "run", "plan.yaml", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "plan dr (plan.yaml): 5 tasks, workers 2",
        "  wave 1: fetch",
        "  wave 2: lint, build, docs",
        "  wave 3: unit",
        "critical path (3 tasks, length 7): fetch → build → unit",
        "max useful parallelism: 3 (widest wave); average 1.3 (work 9 / critical path 7)",
        "dry run: nothing was run or written",
    ]
    assert not (tmp_path / ".tasks").exists() and not (tmp_path / ".team").exists()


def test_dry_run_json(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: dj\ntasks:\n  - {id: a, run: 'true'}\n  - {id: b, run: 'true', needs: a}\n")
    r = run_team(tmp_path, "run", "plan.yaml", "--dry-run", "--json")
    data = json.loads(r.stdout)
    assert data["waves"] == [["a"], ["b"]]
    assert data["critical_path"] == ["a", "b"]
    assert data["max_parallelism"] == 1


def test_schema_describes_the_plan(tmp_path):
    r = run_team(tmp_path, "plan", "schema")
    assert r.returncode == 0
    schema = json.loads(r.stdout)
    assert schema["title"] == "team plan"
    assert schema["required"] == ["name", "tasks"]
    assert schema["additionalProperties"] is False
    task = schema["$defs"]["PlanTask"]
    assert task["additionalProperties"] is False
    assert {"id", "run", "prompt", "needs", "timeout", "retries", "env", "cwd"} <= set(task["properties"])


def test_plan_check_accepts_the_quickstart(tmp_path):
    quick = Path(__file__).resolve().parent.parent / "examples" / "quickstart.yaml"
    r = run_team(tmp_path, "plan", "check", str(quick))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{quick}: ok (9 tasks)\n"


@pytest.mark.parametrize(("value", "line", "field"), [
    ("x: !custom thing", 5, "x"),  # a tag no constructor knows
    ("x: !!int abc", 5, "x"),
    ("x: !!binary 'a'", 5, "x"),
    ("x: {<<: 5}", 5, "x"),  # a merge of something else than a mapping
    ("x: [=]", 5, "x[0]"),  # `=` alone reads as the YAML 1.1 value key
    ("? {[a]: 1}\n: y", 5, "plan"),  # an unhashable key inside a key
])
def test_a_value_yaml_cannot_construct_is_one_line_naming_it_not_a_traceback(tmp_path, value, line, field):
    (tmp_path / "plan.yaml").write_text(f"name: p\ntasks:\n  - id: a\n    run: 'true'\n{value}\n")
    r = run_team(tmp_path, "plan", "check", "plan.yaml")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"PlanError: plan.yaml:{line}: {field}: yaml: cannot read this value ("), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
