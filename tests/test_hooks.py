"""Hooks in `team run` (docs/hooks.md): the real CLI, real shell hooks, and for agent tasks the
real openai client against the scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import util
from conftest import run_team
from util import tasks_by_name

from orchestrator.core.hooks import HooksConfig
from orchestrator.core.models import Task
from orchestrator.hooks.dispatch import HookDispatcher
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

KEY = "sk-hooks-secret-5d1e9a7c3b"


def llm_env(srv: ScriptedServer, **extra: str) -> dict[str, str]:
    return util.llm_env(srv.base_url, KEY, **extra)


def hook_log(root: Path) -> list[dict]:
    path = root / ".team" / "hooks.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def payloads(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)]


# A hook that keeps every payload it gets as a file of its own (named by the event and a counter).
KEEP = "f=$(mktemp -p {dir} \"$TEAM_HOOK_EVENT.XXXXXX\"); cat > \"$f\"; mv \"$f\" \"$f.json\""


def test_payloads_name_the_event_the_task_and_the_run_with_an_allow_listed_environment(tmp_path):
    got = tmp_path / "got"
    got.mkdir()
    keep = KEEP.format(dir=got)
    (tmp_path / "plan.yaml").write_text(f"""\
name: demo
hooks:
  task_created: '{keep}'
  task_claimed: '{keep}'
  task_completed: ['{keep}', 'env > {tmp_path}/hook-env.txt']
  run_finished: '{keep}'
tasks:
  - {{id: build, run: echo built}}
  - {{id: test, run: echo tested, needs: [build]}}
""")
    r = run_team(tmp_path, "run", "plan.yaml", GITHUB_TOKEN="ghp_secretvalue123456789")
    assert r.returncode == 0, r.stdout + r.stderr
    seen = payloads(got)
    events = [p["event"] for p in seen]
    assert sorted(events) == sorted(["task_created"] * 2 + ["task_claimed"] * 2 + ["task_completed"] * 2
                                    + ["run_finished"])
    assert events[-1] == "run_finished"
    created = {p["task"]["plan_task"]: p for p in seen if p["event"] == "task_created"}
    assert set(created) == {"build", "test"}
    assert created["test"]["task"]["blockedBy"] == [created["build"]["task"]["id"]]
    assert created["build"]["task"]["command"] == "echo built" and created["build"]["task"]["status"] == "pending"
    for p in seen:
        assert p["run"]["plan"] == "demo" and p["run"]["root"] == str(tmp_path)
    claimed = [p for p in seen if p["event"] == "task_claimed"]
    assert {(p["task"]["status"], p["teammate"]) for p in claimed} == {("in_progress", "lead")}
    done = {p["task"]["plan_task"]: p for p in seen if p["event"] == "task_completed"}
    assert done["build"]["outcome"]["status"] == "completed" and done["build"]["outcome"]["exit_code"] == 0
    finished = next(p for p in seen if p["event"] == "run_finished")
    assert finished["ok"] is True and finished["counts"] == {"completed": 2}
    # the hook's environment is the allow-list plus TEAM_*: no credential of the lead
    env = dict(line.split("=", 1) for line in (tmp_path / "hook-env.txt").read_text().splitlines() if "=" in line)
    assert env["TEAM_HOOK_EVENT"] == "task_completed" and env["TEAM_PLAN"] == "demo"
    assert "GITHUB_TOKEN" not in env and "OPENAI_API_KEY" not in env
    assert {x["status"] for x in hook_log(tmp_path)} == {"ok"}


def test_a_hanging_hook_is_killed_with_its_group_and_a_crashing_one_is_reported_and_the_run_goes_on(tmp_path):
    (tmp_path / "plan.yaml").write_text(f"""\
name: demo
hooks:
  timeout: 1
  task_claimed:
    - run: 'sleep 300 & echo $! > {tmp_path}/child.pid; sleep 300'
  task_failed: 'echo "boom $OPENAI_API_KEY$(cat key.txt)" >&2; exit 3'
  task_completed: 'echo "not a veto here" >&2; exit 1'
tasks:
  - {{id: ok, run: echo fine}}
  - {{id: bad, run: exit 4}}
""")
    (tmp_path / "key.txt").write_text(KEY)  # the hook's environment has no key; it prints it from a file
    r = run_team(tmp_path, "run", "plan.yaml", "--keep-going", OPENAI_API_KEY=KEY)
    assert r.returncode == 1, r.stdout + r.stderr  # `bad` failed: its own exit 4, not the hooks
    tasks = tasks_by_name(tmp_path)
    assert (tasks["ok"]["status"], tasks["bad"]["status"]) == ("completed", "failed")
    assert tasks["bad"]["error"] == "failed: exit code 4"
    assert "hook `sleep 300 & " in r.stderr and "(task_claimed, task #" in r.stderr
    assert "timed out after 1s: its process group was killed" in r.stderr
    assert "exited 3: boom [REDACTED]" in r.stderr and "exited 1: not a veto here" in r.stderr
    # the background child of the hung hook died with its group
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z"
    log = hook_log(tmp_path)
    assert sorted(x["status"] for x in log) == ["failed", "failed", "timeout", "timeout"]
    assert KEY not in (tmp_path / ".team" / "hooks.jsonl").read_text()
    assert any(x["stderr"] == "boom [REDACTED]\n" for x in log)


def test_a_shell_task_completion_vetoed_by_a_hook_is_retried(tmp_path):
    (tmp_path / "plan.yaml").write_text("""\
name: demo
hooks:
  task_completed: 'if [ -f seen ]; then exit 0; fi; touch seen; echo "lint still fails" >&2; exit 2'
tasks:
  - {id: build, run: echo built, retries: 1, retry_delay: 0}
""")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    t = tasks_by_name(tmp_path)["build"]
    assert (t["status"], t["attempts"], t["failures"]) == ("completed", 2, 1)
    events = [json.loads(x) for x in (tmp_path / ".tasks" / "events.jsonl").read_text().splitlines()]
    assert any("vetoed by a task_completed hook: lint still fails" in json.dumps(e) for e in events)


def test_hooks_yaml_adds_to_the_plan_and_a_bad_one_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: demo\ntasks:\n  - {id: a, run: echo a}\n")
    (tmp_path / ".team").mkdir()
    (tmp_path / ".team" / "hooks.yaml").write_text("task_complete: ./x.sh\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2
    assert r.stderr.startswith(f"UserError: {tmp_path}/.team/hooks.yaml: task_complete: Extra inputs")
    assert not (tmp_path / ".tasks").exists()
    (tmp_path / ".team" / "hooks.yaml").write_text(f"run_finished: 'cat > {tmp_path}/finished.json'\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "finished.json").read_text())["counts"] == {"completed": 1}


def test_the_dispatcher_returns_a_veto_only_for_events_that_can_be_vetoed(tmp_path):
    config = HooksConfig.model_validate({"task_completed": "echo nope >&2; exit 2",
                                         "task_created": "echo nope >&2; exit 2"})
    reported: list[str] = []
    hooks = HookDispatcher(config, tmp_path, plan="p", report=reported.append)
    task = Task(id=3, subject="x")
    verdict = hooks.decide("task_completed", teammate="alice", task=task)
    assert (verdict.vetoed, verdict.feedback) == (True, "nope")
    assert not hooks.decide("task_created", task=task).vetoed
    assert reported == ["hook `echo nope >&2; exit 2` (task_created, task #3) exited 2, but task_created cannot "
                        "be vetoed (ignored): nope"]
    hooks.close()


# -- agent tasks: the veto reaches the agent, which finishes on its next try ------------------------------

def test_a_vetoed_agent_completion_comes_back_to_the_agent_as_feedback_and_it_finishes_next_try(tmp_path):
    got = tmp_path / "got"
    got.mkdir()
    (tmp_path / "plan.yaml").write_text(f"""\
name: pair
team:
  - {{name: alice, role: coder}}
hooks:
  task_completed: |
    {KEEP.format(dir=got)}
    if [ ! -f fixed.txt ]; then echo "tests still fail: fixed.txt is missing" >&2; exit 2; fi
tasks:
  - id: fix
    assignee: alice
    prompt: Fix the tests.
""")

    def second_try(body: dict) -> Reply:
        text = json.dumps(body["messages"])
        assert "tests still fail: fixed.txt is missing" in text and "[hook task_completed]" in text
        return Reply(tool_calls=[tool_call("write_file", {"path": "fixed.txt", "content": "ok\n"})])

    script = {"alice": [
        Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "done v1"})]),
        second_try,
        Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "done v2"})]),
    ]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    t = tasks_by_name(tmp_path)["fix"]
    assert (t["status"], t["result"], t["attempts"], t.get("failures", 0)) == ("completed", "done v2", 1, 0)
    assert [x["status"] for x in hook_log(tmp_path) if x["event"] == "task_completed"] == ["veto", "ok"]
    # each decision saw the teammate, the task as it stood (not yet completed) and what the agent said
    seen = payloads(got)
    assert [(p["teammate"], p["task"]["owner"], p["task"]["status"], p["outcome"]["result"]) for p in seen] == \
        [("alice", "alice", "in_progress", "done v1"), ("alice", "alice", "in_progress", "done v2")]
    assert {p["task"]["plan_task"] for p in seen} == {"fix"} and seen[0]["run"]["plan"] == "pair"


def test_a_teammate_idle_veto_keeps_the_teammate_working(tmp_path):
    claimed = tmp_path / "claimed"
    claimed.mkdir()
    (tmp_path / "plan.yaml").write_text(f"""\
name: pair
team:
  - {{name: alice, role: coder}}
hooks:
  teammate_idle: |
    if [ -f {tmp_path}/idle-once ]; then exit 0; fi
    touch {tmp_path}/idle-once; echo "write notes.txt before you stop" >&2; exit 2
  teammate_stopped: 'cat > {tmp_path}/stopped.json'
  task_claimed: '{KEEP.format(dir=claimed)}'
tasks:
  - id: work
    assignee: alice
    prompt: Do the work.
  - id: wait
    needs: [work]
    run: while [ ! -f notes.txt ]; do sleep 0.05; done  # the run lasts until alice wrote her notes
""")

    def after_veto(body: dict) -> Reply:
        assert "write notes.txt before you stop" in json.dumps(body["messages"])
        return Reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "notes\n"}),
                                 tool_call("idle", {})])

    script = {"alice": [
        Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "worked"})]),
        after_veto,
    ]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    assert (tmp_path / "notes.txt").read_text() == "notes\n"
    assert tasks_by_name(tmp_path)["work"]["result"] == "worked"
    stopped = json.loads((tmp_path / "stopped.json").read_text())
    assert stopped["event"] == "teammate_stopped" and stopped["teammate"] == "alice"
    assert stopped["usage"]["calls"] == 2
    # one claim per attempt, naming who runs it: the teammate for the agent task, the lead for the shell task
    assert sorted((p["task"]["plan_task"], p["teammate"], p["task"]["owner"]) for p in payloads(claimed)) == \
        [("wait", "lead", "lead"), ("work", "alice", "alice")]


def test_a_teammate_idle_veto_after_the_runs_last_task_is_honoured_before_the_run_ends(tmp_path):
    """The veto comes when the run's work is done: the run waits for the teammate to do what the
    hook asked (issue 27 item 6: it used to be logged and dropped, the run exiting 0)."""
    (tmp_path / "plan.yaml").write_text(f"""\
name: last
team:
  - {{name: alice, role: coder}}
hooks:
  teammate_idle: |
    if [ -f {tmp_path}/notes.txt ]; then exit 0; fi
    echo "write notes.txt before you stop" >&2; exit 2
tasks:
  - {{id: work, assignee: alice, prompt: Do the work.}}
""")

    def after_veto(body: dict) -> Reply:
        assert "write notes.txt before you stop" in json.dumps(body["messages"])
        return Reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "notes\n"})])

    script = {"alice": [
        Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "worked"})]),
        after_veto, Reply(content="notes written"),
    ]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "notes.txt").read_text() == "notes\n"
    assert [(x["event"], x["status"]) for x in hook_log(tmp_path)] == [("teammate_idle", "veto"),
                                                                        ("teammate_idle", "ok")]


def test_a_teammate_idle_hook_that_never_consents_fails_the_run_naming_it(tmp_path):
    (tmp_path / "plan.yaml").write_text("""\
name: stubborn
team:
  - {name: alice, role: coder}
hooks:
  teammate_idle: 'echo "the changelog is still empty" >&2; exit 2'
tasks:
  - {id: work, assignee: alice, prompt: Do the work.}
""")
    script = {"alice": [
        Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "worked"})]),
        Reply(content="did it"), Reply(content="did it again"), Reply(content="and again"),
    ]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        srv.assert_complete()
    assert r.returncode == 1, r.stdout + r.stderr
    assert tasks_by_name(tmp_path)["work"]["status"] == "completed"  # the task stays done
    assert ("INCOMPLETE: alice's teammate_idle hooks refused to let it go idle 3 times in a row: "
            "the changelog is still empty") in r.stdout + r.stderr
    assert [x["status"] for x in hook_log(tmp_path)] == ["veto"] * 3


def test_team_chat_runs_the_hooks_of_team_hooks_yaml_for_what_its_lead_and_teammates_do(tmp_path):
    from orchestrator.chat.session import ChatSession
    from orchestrator.llm.client import LLMClient
    from orchestrator.llm.types import LLMConfig
    from orchestrator.team.roster import Team

    got = tmp_path / "got"
    got.mkdir()
    (tmp_path / ".team").mkdir()
    (tmp_path / ".team" / "hooks.yaml").write_text(f"task_created: '{KEEP.format(dir=got)}'\n"
                                                   f"message_sent: '{KEEP.format(dir=got)}'\n")
    Team(tmp_path).add("bob", "tester")
    script = {"lead": [Reply(tool_calls=[tool_call("task_create", {"subject": "Port the parser"}),
                                         tool_call("send_message", {"to": "bob", "content": "parser is yours"})]),
                       Reply(content="asked bob")]}
    with ScriptedServer(script) as srv:
        model = LLMClient(LLMConfig(model="gpt-4o-mini", base_url=srv.base_url, api_key="k-local", max_retries=0))
        with ChatSession(tmp_path, model_for=lambda role: model, heartbeat_every=0.05) as s:
            assert s.handle("give bob the parser").result.status == "completed"
        srv.assert_complete()
    seen = {p["event"]: p for p in payloads(got)}  # the session's close ran every fired hook
    assert seen["task_created"]["task"]["subject"] == "Port the parser"
    message = seen["message_sent"]
    assert message["teammate"] == "lead"
    assert (message["message"]["to"], message["message"]["content"]) == ("bob", "parser is yours")
