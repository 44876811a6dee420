"""`team run` with agent tasks, end to end: the real CLI and openai client against a
scripted OpenAI-compatible server on 127.0.0.1, one script per teammate."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import util
from conftest import run_team, team_env
from util import tasks_by_name, wait_until

from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.team.inbox import Bus

KEY = "sk-e2e-secret-7f3a9c1d2b"


def llm_env(srv: ScriptedServer, **extra: str) -> dict[str, str]:
    return util.llm_env(srv.base_url, KEY, **extra)


def text_of(body: dict) -> str:
    return json.dumps(body["messages"])


PLAN = """\
name: pair
workers: 3
team:
  - {name: alice, role: coder}
  - {name: bob, role: tester}
tasks:
  - id: build
    assignee: alice
    prompt: Write greet.py and tell bob where it is; run the slow check in the background.
  - id: check
    assignee: bob
    prompt: Wait for alice's note, then report what she said.
  - id: review
    role: reviewer
    needs: [build, check]
    prompt: Review the work.
"""


def test_two_teammates_in_parallel_message_each_other_and_use_a_background_job(tmp_path):
    root = tmp_path
    (root / "plan.yaml").write_text(PLAN)
    alice_sent = threading.Event()

    def bob_first(body: dict) -> Reply:
        # Whatever bob saw first, he only goes on once alice's message is on disk.
        assert alice_sent.wait(20), "alice never sent her message"
        if "note from alice: greet.py is ready" in text_of(body):
            return Reply(tool_calls=[tool_call("read_inbox", {})])
        return Reply(tool_calls=[tool_call("idle", {})])

    def bob_second(body: dict) -> Reply:
        assert "[message from alice (message)]\\nnote from alice: greet.py is ready" in text_of(body)
        return Reply(tool_calls=[tool_call("task_update", {"task": 2, "status": "completed",
                                                           "result": "alice says greet.py is ready"})])

    def alice_idle(body: dict) -> Reply:
        # The job waits for this file, so its notification can only arrive after this request.
        (root / "go").write_text("go")
        return Reply(tool_calls=[tool_call("idle", {})])

    def alice_sees_job(body: dict) -> Reply:
        assert "[background job " in text_of(body) and "completed, exit code 0" in text_of(body)
        assert "slow-check-passed" in text_of(body)
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed",
                                                           "result": "greet.py written; slow check passed"})])

    def alice_after_send(body: dict) -> Reply:
        alice_sent.set()
        return Reply(tool_calls=[tool_call("background_run", {
            "command": "while [ ! -f go ]; do sleep 0.02; done; echo slow-check-passed"})])

    script = {
        "alice": [
            Reply(tool_calls=[tool_call("write_file", {"path": "greet.py", "content": "print('hi')\n"}),
                              tool_call("send_message", {"to": "bob", "content": "note from alice: greet.py is ready"})]),
            alice_after_send,
            alice_idle,
            alice_sees_job,
        ],
        "bob": [bob_first, bob_second],
        "reviewer-1": [Reply(content="LGTM: greet.py prints hi.")],
    }
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
        # each teammate's requests carried its own identity in a byte-identical system prompt
        for name in ("alice", "bob"):
            systems = {json.dumps(req.body["messages"][0]) for req in srv.chat_requests(name)}
            assert len(systems) == 1 and f"You are {name}, a " in systems.pop()

    tasks = tasks_by_name(root)
    assert {k: (t["status"], t["result"]) for k, t in tasks.items()} == {
        "build": ("completed", "greet.py written; slow check passed"),
        "check": ("completed", "alice says greet.py is ready"),
        "review": ("completed", "LGTM: greet.py prints hi."),
    }
    # the teammate that ran each task holds it in the store, not the lead that claimed it
    assert {k: t["owner"] for k, t in tasks.items()} == {"build": "alice", "check": "bob", "review": "reviewer-1"}
    assert tasks["build"]["usage"]["calls"] == 4 and tasks["build"]["usage"]["prompt_tokens"] > 0
    assert tasks["check"]["usage"]["calls"] == 2 and tasks["review"]["usage"]["calls"] == 1
    assert (root / "greet.py").read_text() == "print('hi')\n"
    roster = json.loads((root / ".team" / "config.json").read_text())
    members = {m["name"]: m for m in roster["members"]}
    assert {n: (m["role"], m["status"]) for n, m in members.items()} == {
        "alice": ("coder", "shutdown"), "bob": ("tester", "shutdown"), "reviewer-1": ("reviewer", "shutdown")}
    agents = json.loads(run_team(root, "status", "--json").stdout)["usage"]["agents"]  # the ledger's
    assert {a["name"]: a["calls"] for a in agents}["alice"] == 4
    # bob's message from alice is in his inbox log and consumed; the job's full log is on disk
    jobs = [json.loads(p.read_text()) for p in (root / ".team" / "jobs").glob("*.json")]
    assert [(j["owner"], j["status"], j["task"]) for j in jobs] == [("alice", "completed", 1)]
    assert "slow-check-passed" in (root / jobs[0]["log"]).read_text()
    # the key never reached disk
    for f in [*root.joinpath(".team").rglob("*"), *root.joinpath(".tasks").rglob("*")]:
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


def test_missing_key_or_model_is_a_clear_error_before_any_work(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: p\ntasks:\n  - id: a\n    prompt: do it\n")
    r = run_team(tmp_path, "run", "plan.yaml", TEAM_MODEL="gpt-4o-mini")
    assert r.returncode == 2
    assert r.stderr == "UserError: no API key: set OPENAI_API_KEY (any non-empty value for local servers)\n"
    assert not (tmp_path / ".tasks").exists()
    r = run_team(tmp_path, "run", "plan.yaml", OPENAI_API_KEY=KEY)
    assert r.returncode == 2 and "agent tasks need a model" in r.stderr
    assert not (tmp_path / ".tasks").exists()


def test_a_dry_run_of_an_agent_plan_needs_no_model(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: p\ntasks:\n  - id: a\n    prompt: do it\n  - id: b\n    run: echo\n"
                                        "    needs: [a]\n")
    r = run_team(tmp_path, "run", "plan.yaml", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "  wave 1: a\n  wave 2: b\n" in r.stdout
    assert ("warning: agent tasks need a model to run (a): set `model:` in the plan, pass --model or set "
            "$TEAM_MODEL\ndry run: nothing was run or written\n") in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]
    r = run_team(tmp_path, "run", "plan.yaml", "--dry-run", "--model", "m")
    assert r.returncode == 0 and "warning" not in r.stdout


def test_team_spawn_without_a_lead_enrols_and_the_next_lead_starts_it(tmp_path):
    """The README's tour: spawn with no lead, message the member, and the next lead starts it."""
    bad = run_team(tmp_path, "spawn", "dave", "--role", "architect")
    assert bad.returncode == 2 and bad.stderr.startswith("UserError: unknown role 'architect'; known roles:")
    r = run_team(tmp_path, "spawn", "carol", "--role", "tester", "--prompt", "Say hello to the lead.")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("enrolled carol (tester) on the roster: no lead is running: the next one starts it")
    assert run_team(tmp_path, "send", "carol", "also: be brief", "--from", "lead").returncode == 0
    status = run_team(tmp_path, "status", "--json")
    carol = json.loads(status.stdout)["members"][0]
    assert (carol["name"], carol["liveness"], carol["unread"]) == ("carol", "waiting", 2)
    script = {"lead": [], "carol": [Reply(tool_calls=[tool_call("send_message", {"to": "lead", "content": "hello"})]),
                                     Reply(content="said hello")]}
    with ScriptedServer(script) as srv:
        chat = subprocess.Popen([sys.executable, "-m", "orchestrator", "chat"], cwd=tmp_path, text=True,
                                env=team_env(tmp_path, **llm_env(srv)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_until(lambda: len(srv.chat_requests("carol")) == 2 and Bus(tmp_path).peek("lead"), 30,
                       what="carol to start and answer")
            out, err = chat.communicate("/quit\n", timeout=30)
        finally:
            if chat.poll() is None:
                chat.kill()
        srv.assert_complete()
    assert chat.returncode == 0, err
    assert "(carol (tester) joined: `team spawn` had enrolled it)" in out
    first = srv.chat_requests("carol")[0]
    assert "Say hello to the lead." in json.dumps(first.body["messages"]) and "also: be brief" in json.dumps(first.body["messages"])
    member = json.loads((tmp_path / ".team/config.json").read_text())["members"][0]
    assert "enrolled" not in member and member["status"] == "shutdown"


def test_shell_tasks_of_an_agent_plan_do_not_inherit_the_model_key(tmp_path):
    (tmp_path / "plan.yaml").write_text(
        "name: mixed\ntasks:\n"
        "  - id: think\n    prompt: Say done.\n"
        "  - id: dump\n    run: env | sort\n    needs: [think]\n"
    )
    with ScriptedServer({"coder-1": [Reply(content="done")]}) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
    dump = tasks_by_name(tmp_path)["dump"]
    log = (tmp_path / dump["log"]).read_text()
    assert "TEAM_PLAN=mixed" in log  # the job's environment really is in its log
    assert "OPENAI_API_KEY" not in log and KEY not in log
    for f in [*tmp_path.joinpath(".team").rglob("*"), *tmp_path.joinpath(".tasks").rglob("*")]:
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
