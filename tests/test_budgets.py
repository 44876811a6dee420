"""Budgets and models per teammate in `team run`: the real CLI and openai client against the
scripted OpenAI-compatible server on 127.0.0.1, whose replies carry the usage they report."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import util
from conftest import run_team, team_env
from util import tasks_by_name

from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

KEY = "sk-budget-secret-0a9b8c7d6e"
USAGE = {"prompt_tokens": 100, "completion_tokens": 10}


def llm_env(srv: ScriptedServer, **extra: str) -> dict[str, str]:
    return util.llm_env(srv.base_url, KEY, **extra)


def members(root: Path) -> dict[str, dict]:
    return {m["name"]: m for m in json.loads((root / ".team" / "config.json").read_text())["members"]}


def looping(n: int) -> list[Reply]:
    return [Reply(tool_calls=[tool_call("glob", {"pattern": "*"})], usage=USAGE) for _ in range(n)]


def test_a_teammate_stops_at_its_token_budget_and_its_task_fails_with_the_reason(tmp_path):
    (tmp_path / "plan.yaml").write_text("""\
name: capped
team:
  - {name: alice, role: coder, budget: {tokens: 150}}
tasks:
  - {id: work, assignee: alice, prompt: Work forever.}
""")
    # 110 tokens after the first call (under 150): a second call; 220 after it: no third call
    with ScriptedServer({"alice": looping(2)}) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", "--json", **llm_env(srv))
        assert r.returncode == 1, r.stdout + r.stderr
        srv.assert_complete()
        assert len(srv.chat_requests("alice")) == 2
    t = tasks_by_name(tmp_path)["work"]
    assert t["status"] == "failed"
    assert t["error"] == "budget reached: alice used 220 of 150 tokens"
    # the usage stored is exactly what the server reported, on the task and on the teammate
    assert {k: t["usage"][k] for k in ("prompt_tokens", "completion_tokens", "calls")} == \
        {"prompt_tokens": 200, "completion_tokens": 20, "calls": 2}
    alice = members(tmp_path)["alice"]
    assert alice["usage"]["prompt_tokens"] == 200 and alice["usage"]["completion_tokens"] == 20
    assert alice["budget"] == {"tokens": 150}
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["event"] == "summary"
    row = next(x for x in summary["spend"] if x["name"] == "alice")
    assert (row["prompt_tokens"], row["completion_tokens"], row["budget"]) == (200, 20, {"tokens": 150})
    # team status shows the spend against the budget
    status = run_team(tmp_path, "status")
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if x.strip().startswith("alice (coder)"))
    assert line.endswith("budget 220/150 tok, $0.0000"), status.stdout
    task_line = next(x for x in status.stdout.splitlines() if x.strip().startswith("#1 capped.work"))
    assert task_line.endswith("budget 220/150 tok, $0.0000 (alice's)"), status.stdout


def test_the_run_budget_caps_all_teammates_together_and_a_role_budget_applies_to_its_teammates(tmp_path):
    (tmp_path / "agents").mkdir()
    tester = (Path(__file__).parents[1] / "agents" / "tester.md").read_text()
    (tmp_path / "agents" / "tester.md").write_text(tester.replace("---\nname: tester\n",
                                                                  "---\nname: tester\nbudget: {tokens: 100}\n", 1))
    (tmp_path / "plan.yaml").write_text("""\
name: capped
workers: 1
budget: {tokens: 300}
team:
  - {name: alice, role: coder}
  - {name: tess, role: tester}
tasks:
  - {id: check, assignee: tess, prompt: Check forever.}
  - {id: work, assignee: alice, prompt: Work forever.}
""")
    # one at a time: tess's role allows 100 tokens: one call (110); then alice, under the run's 300
    # together: two calls (110 + 220 = 330)
    with ScriptedServer({"tess": looping(1), "alice": looping(2)}) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", "--keep-going", **llm_env(srv))
        assert r.returncode == 1, r.stdout + r.stderr
        srv.assert_complete()
    tasks = tasks_by_name(tmp_path)
    assert tasks["check"]["error"] == "budget reached: tess used 110 of 100 tokens"
    assert tasks["work"]["error"] == "budget reached: the run used 330 of 300 tokens"
    assert members(tmp_path)["tess"]["budget"] == {"tokens": 100}
    lines = r.stdout.splitlines()
    assert any(x.split()[:1] == ["tess"] and "110/100 tok" in x for x in lines), r.stdout
    assert any(x.split()[:1] == ["run"] and "330/300 tok" in x for x in lines), r.stdout


def test_two_teammates_two_models_each_request_names_its_teammates_model(tmp_path):
    (tmp_path / "agents").mkdir()
    reviewer = (Path(__file__).parents[1] / "agents" / "reviewer.md").read_text()
    (tmp_path / "agents" / "reviewer.md").write_text(reviewer.replace("---\nname: reviewer\n",
                                                                      "---\nname: reviewer\nmodel: model-r\n", 1))
    (tmp_path / "plan.yaml").write_text("""\
name: models
team:
  - {name: alice, role: coder, model: model-a}
  - {name: bob, role: coder, model: model-b}
  - {name: rita, role: reviewer}
  - {name: carl, role: coder}
tasks:
  - {id: a, assignee: alice, prompt: Say a.}
  - {id: b, assignee: bob, prompt: Say b.}
  - {id: r, assignee: rita, prompt: Review.}
  - {id: c, assignee: carl, prompt: Say c.}
""")
    script = {name: [Reply(content=f"{name} done", usage=USAGE),] for name in ("alice", "bob", "rita", "carl")}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
        seen = {name: {req.body["model"] for req in srv.chat_requests(name)}
                for name in ("alice", "bob", "rita", "carl")}
    # its team: entry's model, else its role's, else the run's
    assert seen == {"alice": {"model-a"}, "bob": {"model-b"}, "rita": {"model-r"}, "carl": {"gpt-4o-mini"}}
    assert {n: m.get("model") for n, m in members(tmp_path).items()} == \
        {"alice": "model-a", "bob": "model-b", "rita": "model-r", "carl": "gpt-4o-mini"}
    assert {k: t["result"] for k, t in tasks_by_name(tmp_path).items()} == \
        {"a": "alice done", "b": "bob done", "r": "rita done", "c": "carl done"}


def _ask_run(root: Path, srv: ScriptedServer, answer: str) -> subprocess.CompletedProcess[str]:
    """`team run --ask` in a process of its own; this test answers the budget request from another
    process (`team send`) once it is in the lead's inbox."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--ask"], cwd=root,
                            env=team_env(root, **llm_env(srv)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        inbox = root / ".team" / "inbox" / "lead.jsonl"
        request = None
        deadline = time.monotonic() + 60
        while request is None and time.monotonic() < deadline and proc.poll() is None:
            lines = inbox.read_text().splitlines() if inbox.exists() else []
            request = next((json.loads(x) for x in lines if json.loads(x)["type"] == "budget_request"), None)
            time.sleep(0.05)
        assert request is not None, "no budget request reached the lead's inbox"
        assert request["from"] == "alice" and "alice used 220 of 150 tokens" in request["content"]
        sent = run_team(root, "send", "alice", answer, "--type", "budget_response",
                        "--request-id", request["request_id"])
        assert sent.returncode == 0, sent.stderr
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


ASK_PLAN = """\
name: asking
team:
  - {name: alice, role: coder, budget: {tokens: 150}}
tasks:
  - {id: work, assignee: alice, prompt: Work on.}
"""


def test_with_ask_a_teammate_at_its_budget_waits_for_the_lead_and_goes_on_when_approved(tmp_path):
    (tmp_path / "plan.yaml").write_text(ASK_PLAN)
    done = Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "finished"})],
                 usage=USAGE)
    with ScriptedServer({"alice": [*looping(2), done]}) as srv:
        r = _ask_run(tmp_path, srv, "approve")
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    assert "alice reached its budget (alice used 220 of 150 tokens) and asks for more" in r.stderr
    t = tasks_by_name(tmp_path)["work"]
    assert (t["status"], t["result"], t["usage"]["calls"]) == ("completed", "finished", 3)


def test_with_ask_a_teammate_told_no_fails_its_task_with_the_budget_reason(tmp_path):
    (tmp_path / "plan.yaml").write_text(ASK_PLAN)
    with ScriptedServer({"alice": looping(2)}) as srv:
        r = _ask_run(tmp_path, srv, "no, too expensive")
        assert r.returncode == 1, r.stdout + r.stderr
        srv.assert_complete()
    t = tasks_by_name(tmp_path)["work"]
    assert t["error"] == "budget reached: alice used 220 of 150 tokens (the lead said no: no, too expensive)"


def test_a_subagent_spends_its_callers_budget(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "scout.md").write_text(
        "---\nname: scout\ndescription: Sends subagents to look things up.\ntools: [subagent, glob, task_update]\n"
        "---\nYou are a scout.\n")
    (tmp_path / "plan.yaml").write_text("""\
name: scouting
team:
  - {name: alice, role: scout, budget: {tokens: 150}}
tasks:
  - {id: look, assignee: alice, prompt: Look around.}
""")
    # alice's call (110) and her subagent's (110) are both hers: 220 of 150 before her second call
    script = {"alice": [Reply(tool_calls=[tool_call("subagent", {"prompt": "list the files", "role": "coder"})],
                              usage=USAGE)],
              "sub1-alice": [Reply(content="two files", usage=USAGE)]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", **llm_env(srv))
        assert r.returncode == 1, r.stdout + r.stderr
        srv.assert_complete()
    assert tasks_by_name(tmp_path)["look"]["error"] == "budget reached: alice used 220 of 150 tokens"


def test_dollar_caps_apply_to_priced_models_and_grants_raise_the_cap_that_was_reached():
    from orchestrator.core.budget import Budget
    from orchestrator.llm.pricing import Usage
    from orchestrator.runtime.budgets import Spend

    spend = Spend(Budget(tokens=1000))
    spend.set_budget("alice", Budget(dollars=0.01))
    spend.record("alice", Usage(prompt_tokens=100, completion_tokens=10, cost=0.02, calls=1))
    assert spend.check("alice") == "alice used $0.0200 of $0.01"
    spend.grant("alice")  # the lead said yes: twice the cap
    assert spend.budget_of("alice") == Budget(dollars=0.02) and spend.check("alice") == "alice used $0.0200 of $0.02"
    spend.set_budget("bob", Budget(dollars=0.01))
    spend.record("bob", Usage(prompt_tokens=500, completion_tokens=5, cost=None, calls=1))  # an unpriced model
    assert spend.check("bob") is None  # its cost is unknown: only a token cap could stop it
    spend.record("bob", Usage(prompt_tokens=900, completion_tokens=5, cost=None, calls=2))
    assert spend.check("bob") == "the run used 1,015 of 1,000 tokens"
    assert spend.used("bob").prompt_tokens == 900 and spend.total().prompt_tokens == 1000
