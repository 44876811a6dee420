"""Faults on the agent path, through `team run` and a scripted server: model service
errors, broken streams, model mistakes, refused actions, huge output, a killed teammate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

from conftest import REPO, run_team
from test_e2e_agents import KEY, llm_env, tasks_by_name
from util import wait_until

from orchestrator.llm.script import Fault, Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

ONE_TASK = "name: f\ntasks:\n  - id: work\n    assignee: alice\n    prompt: Do the work.\n"


def done(task: int = 1, result: str = "done") -> Reply:
    return Reply(tool_calls=[tool_call("task_update", {"task": task, "status": "completed", "result": result})])


def no_key_on_disk(root) -> None:
    for f in [*root.joinpath(".team").rglob("*"), *root.joinpath(".tasks").rglob("*")]:
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


def test_429_then_success_and_a_stream_cut_mid_tool_call_are_retried(tmp_path):
    (tmp_path / "plan.yaml").write_text(ONE_TASK)
    write = tool_call("write_file", {"path": "out.txt", "content": "one line\n"})
    script = {"alice": [Fault(429, retry_after=0), Reply(tool_calls=[write], cut_after=3, chunk_size=4),
                        Reply(tool_calls=[write]), done()]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
        assert len(srv.chat_requests("alice")) == 4
    assert (tmp_path / "out.txt").read_text() == "one line\n"
    task = tasks_by_name(tmp_path)["work"]
    assert (task["status"], task["result"], task["usage"]["calls"]) == ("completed", "done", 2)
    no_key_on_disk(tmp_path)


def test_repeated_500_fails_the_task_clearly_and_keep_going_runs_the_rest(tmp_path):
    plan = ONE_TASK + "  - id: other\n    run: echo other-ran\n"
    (tmp_path / "plan.yaml").write_text(plan)
    with ScriptedServer({"alice": [Fault(500, message="upstream exploded"), Fault(500, message="upstream exploded")]}) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", "--keep-going", **llm_env(srv, TEAM_LLM_MAX_RETRIES="1"))
        srv.assert_complete()
    assert r.returncode == 1, r.stdout + r.stderr
    tasks = tasks_by_name(tmp_path)
    assert tasks["other"]["status"] == "completed"
    work = tasks["work"]
    assert work["status"] == "failed"
    assert work["error"].startswith("ModelError: model service failed after 2 attempts: 500")
    assert "upstream exploded" in work["error"]
    no_key_on_disk(tmp_path)


def test_model_mistakes_and_refused_actions_come_back_as_observations(tmp_path):
    (tmp_path / "plan.yaml").write_text(ONE_TASK)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (tmp_path / "link").symlink_to(outside)
    seen: dict[str, str] = {}

    def check(body: dict) -> Reply:
        for m in body["messages"]:
            if m["role"] == "tool":
                seen[m["tool_call_id"]] = m["content"]
        return done(result="survived")

    calls = [
        tool_call("write_file", '{"path": "x.txt", "content": ', id="bad_json"),
        tool_call("raed_file", {"path": "plan.yaml"}, id="unknown"),
        tool_call("write_file", {"path": "../escape.txt", "content": "x"}, id="outside"),
        tool_call("write_file", {"path": "link/evil.txt", "content": "x"}, id="symlink"),
        tool_call("bash", {"command": "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo END"}, id="huge"),
    ]
    with ScriptedServer({"alice": [Reply(tool_calls=calls), check]}) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    assert seen["bad_json"].startswith("arguments for write_file are not valid JSON")
    assert seen["unknown"].startswith("unknown tool 'raed_file'. Did you mean 'read_file'?")
    assert "outside the workspace" in seen["outside"] and "outside the workspace" in seen["symlink"]
    assert not (tmp_path / "x.txt").exists() and not (tmp_path.parent / "escape.txt").exists()
    assert list(outside.iterdir()) == []
    huge = seen["huge"]
    assert huge.startswith("exit code: 0\nxxxx") and huge.rstrip().endswith("END")
    assert len(huge) < 20_000 and "chars elided; full: .team/outputs/alice/bash-huge-" in huge
    saved = list((tmp_path / ".team" / "outputs" / "alice").glob("bash-huge-*"))
    assert len(saved) == 1 and saved[0].stat().st_size == 10_000_000 + len("\nEND\n")
    assert tasks_by_name(tmp_path)["work"]["result"] == "survived"


KILLED_RUN = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from orchestrator.llm.client import LLMClient
    from orchestrator.llm.types import LLMConfig
    from orchestrator.runtime.runtime import TeamRuntime
    from orchestrator.tasks.store import TaskStore

    root, url = Path(sys.argv[1]), sys.argv[2]
    client = LLMClient(LLMConfig(model="m", base_url=url, api_key="k-local", max_retries=0))
    rt = TeamRuntime(root, model_for=lambda role: client)
    store = TaskStore(root)
    task = store.claim(1, "lead")
    rt.assign(task, task.epoch, lambda result: print("finished?!", result, flush=True))
    threading.Event().wait(60)
""")


def test_a_teammate_killed_mid_task_resumes_from_its_transcript(tmp_path):
    from orchestrator.llm.client import LLMClient
    from orchestrator.llm.types import LLMConfig
    from orchestrator.runtime.runtime import TeamRuntime
    from orchestrator.tasks.store import TaskStore

    store = TaskStore(tmp_path)
    store.create("write notes", "write notes.txt then finish", assignee="alice")
    proc: list[subprocess.Popen] = []

    def kill_it(body: dict) -> Reply:
        os.kill(proc[0].pid, signal.SIGKILL)
        return Reply(content="nobody hears this")

    resumed_bodies: list[dict] = []

    def after_restart(body: dict) -> Reply:
        resumed_bodies.append(body)
        return done(result="notes written once")

    script = {"alice": [Reply(tool_calls=[tool_call("write_file", {"path": "notes.txt", "content": "n\n"})]),
                        kill_it, after_restart]}
    with ScriptedServer(script) as srv:
        (tmp_path / "run.py").write_text(KILLED_RUN)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc.append(subprocess.Popen([sys.executable, str(tmp_path / "run.py"), str(tmp_path), srv.base_url],
                                     env=env, stdout=subprocess.PIPE, text=True))
        assert proc[0].wait(30) == -signal.SIGKILL
        assert "finished" not in proc[0].stdout.read()

        task = store.release(1, store.read(1).epoch, reason="lead died")
        task = store.claim(1, "lead")
        client = LLMClient(LLMConfig(model="m", base_url=srv.base_url, api_key="k-local", max_retries=0))
        rt = TeamRuntime(tmp_path, model_for=lambda role: client)
        results = []
        finished = threading.Event()
        rt.assign(task, task.epoch, lambda r: (results.append(r), finished.set()))
        wait_until(finished.is_set, 20, what="the resumed attempt")
        rt.close()
        srv.assert_complete()
    assert [(r.status, r.result) for r in results] == [("completed", "notes written once")]
    msgs = resumed_bodies[0]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "user", "user"]
    assert msgs[1]["content"].startswith("Task #1, attempt 1: write notes")
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "write_file"
    assert msgs[3]["content"] == "created notes.txt (1 line, 2 bytes)"
    assert msgs[4]["content"].startswith("Task #1, attempt 2: write notes")
    assert "You were working on this task when you were restarted" in msgs[4]["content"]
    assert (tmp_path / "notes.txt").read_text() == "n\n"
    lines = [json.loads(x) for x in (tmp_path / ".team" / "transcripts" / "alice.jsonl").read_text().splitlines()]
    assert [x["task"] for x in lines if x["kind"] == "task"] == [1, 1]


def test_a_retried_agent_task_keeps_the_usage_of_every_attempt(tmp_path):
    (tmp_path / "plan.yaml").write_text(ONE_TASK + "    retries: 1\n    retry_delay: 0.01\n")
    look = tool_call("glob", {"pattern": "*.yaml"})
    # attempt 1 hits the one-step limit mid-work; attempt 2 answers at once
    script = {"alice": [Reply(tool_calls=[look]), Reply(content="done on the second try")]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", TEAM_AGENT_MAX_STEPS="1", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    task = tasks_by_name(tmp_path)["work"]
    assert (task["status"], task["attempts"], task["result"]) == ("completed", 2, "done on the second try")
    assert task["usage"]["calls"] == 2
