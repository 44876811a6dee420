"""Budgets and models per teammate in `team run`: the real CLI and openai client against the
scripted OpenAI-compatible server on 127.0.0.1, whose replies carry the usage they report."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
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
    # the usage stored is exactly what the server reported, on the task and in the ledger (team status)
    assert {k: t["usage"][k] for k in ("prompt_tokens", "completion_tokens", "calls")} == \
        {"prompt_tokens": 200, "completion_tokens": 20, "calls": 2}
    assert members(tmp_path)["alice"]["budget"] == {"tokens": 150}
    (alice,) = json.loads(run_team(tmp_path, "status", "--json").stdout)["usage"]["agents"]
    assert (alice["name"], alice["prompt_tokens"], alice["completion_tokens"]) == ("alice", 200, 20)
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["event"] == "summary"
    row = next(x for x in summary["spend"] if x["name"] == "alice")
    assert (row["prompt_tokens"], row["completion_tokens"], row["budget"]) == (200, 20, {"tokens": 150})
    # team status shows the spend against the budget
    status = run_team(tmp_path, "status")
    assert status.returncode == 0, status.stderr
    line = next(x for x in status.stdout.splitlines() if x.strip().startswith("alice (coder)"))
    assert line.endswith("budget 220/150 tok, $0.000042"), status.stdout
    task_line = next(x for x in status.stdout.splitlines() if x.strip().startswith("#1 capped.work"))
    assert task_line.endswith("budget 220/150 tok, $0.000042 (alice's)"), status.stdout


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


UNPRICED_PLAN = """\
name: mixed
model: gpt-4o-mini
budget: {dollars: 0.0004}
workers: 1
team:
  - {name: alice, role: coder}
  - {name: bob, role: coder, model: local-llama}
tasks:
  - {id: a, assignee: alice, prompt: Work.}
  - {id: b, assignee: bob, prompt: Work forever., needs: [a]}
"""


def test_a_dollar_budget_over_a_model_without_a_price_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "plan.yaml").write_text(UNPRICED_PLAN)
    with ScriptedServer({"alice": [], "bob": []}) as srv:
        for args in (("plan", "check", "plan.yaml"), ("run", "plan.yaml")):
            r = run_team(tmp_path, *args, **llm_env(srv))
            assert r.returncode == 2, r.stdout + r.stderr
            (line,) = r.stderr.strip().splitlines()
            assert line.startswith("PlanError: plan.yaml:3: budget: the plan's dollar budget covers every teammate, "
                                   "and bob talks to model 'local-llama', which has no known price"), line
            assert "`models: {local-llama: {price: {input: D, output: D}}}`" in line
            assert "`budget: {tokens: N}`" in line and line.endswith("(line 7: team[1])")
        assert srv.requests == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]  # no .team/, no .tasks/
    # a teammate's own dollar cap over an unpriced model (here its role's model) is refused the same way
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "local.md").write_text(
        "---\nname: local\ndescription: Runs on the local model.\ntools: [glob]\nmodel: local-llama\n---\nWork.\n")
    (tmp_path / "plan.yaml").write_text(UNPRICED_PLAN.replace("budget: {dollars: 0.0004}\n", "").replace(
        "{name: bob, role: coder, model: local-llama}", "{name: bob, role: local, budget: {dollars: 1}}"))
    r = run_team(tmp_path, "plan", "check", "plan.yaml", OPENAI_API_KEY=KEY)
    assert r.returncode == 2 and "plan.yaml:6: team[1].budget: bob talks to model 'local-llama'" in r.stderr, r.stderr
    # the key to the fix is documented where plans are
    schema = json.loads(run_team(tmp_path, "plan", "schema").stdout)
    spec = schema["$defs"]["ModelSpec"]["properties"]
    assert set(spec) == {"base_url", "api_key_env", "price"} and "models" in schema["properties"]
    assert set(schema["$defs"]["ModelPrice"]["properties"]) == {"input", "output", "cached_input"}


def test_with_a_price_in_the_plan_the_runs_dollar_budget_holds_and_small_sums_print_in_full(tmp_path):
    (tmp_path / "plan.yaml").write_text(UNPRICED_PLAN + "models:\n  local-llama: {price: {input: 1.0, output: 1.0}}\n")
    # alice (gpt-4o-mini, the built-in table): 2 calls, $0.000042; bob (local-llama at $1/1M): $0.00011 a call,
    # so the run reaches its $0.0004 after bob's 4th call (0.000042 + 4 * 0.00011 = $0.000482) and he stops
    done = Reply(content="done", usage=USAGE)
    with ScriptedServer({"alice": [*looping(1), done], "bob": looping(4)}) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", "--keep-going", **llm_env(srv))
        assert r.returncode == 1, r.stdout + r.stderr
        srv.assert_complete()
        assert {req.body["model"] for req in srv.chat_requests("bob")} == {"local-llama"}
    tasks = tasks_by_name(tmp_path)
    assert tasks["a"]["status"] == "completed"
    assert tasks["b"]["error"] == "budget reached: the run used $0.000482 of $0.0004"
    run_line = next(x for x in r.stdout.splitlines() if x.split()[:1] == ["run"])
    assert run_line.split(None, 1)[1] == "660 tok, $0.000482/$0.0004, 6 calls", r.stdout
    status = run_team(tmp_path, "status").stdout.splitlines()
    assert any(x.split()[:2] == ["bob", "(coder)"] and x.endswith("$0.00044") for x in status), status


def _approve_budget_requests(root: Path, proc: subprocess.Popen[str], times: int) -> list[dict]:
    """Answer ``times`` budget requests of a running `team run --ask` with `team approve ID`, each from
    a process of its own, as a person would; the requests as `team approve --json` listed them."""
    answered: list[dict] = []
    deadline = time.monotonic() + 120
    while len(answered) < times:
        assert proc.poll() is None, f"the run ended with {len(answered)} of {times} requests answered"
        assert time.monotonic() < deadline, "no budget request came"
        listed = run_team(root, "approve", "--json")
        assert listed.returncode == 0, listed.stderr
        pending = [x for x in json.loads(listed.stdout) if x["kind"] == "budget"]
        if not pending:
            time.sleep(0.05)
            continue
        (request,) = pending
        ok = run_team(root, "approve", request["id"])
        assert ok.returncode == 0, ok.stderr
        answered.append(request)
    return answered


def test_an_approved_budget_request_covers_the_call_that_asked_and_the_next_call_over_asks_again(tmp_path):
    (tmp_path / "plan.yaml").write_text(ASK_PLAN)
    big = {"prompt_tokens": 280, "completion_tokens": 20}  # one call: 300 tokens, twice alice's cap of 150
    finish = Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "finished"})],
                   usage=big)
    script = {"alice": [Reply(tool_calls=[tool_call("glob", {"pattern": "*"})], usage=big) for _ in range(2)] + [finish]}
    with ScriptedServer(script) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--ask"], cwd=tmp_path,
                                env=team_env(tmp_path, **llm_env(srv)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            asked = _approve_budget_requests(tmp_path, proc, 2)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, out + err
        srv.assert_complete()
    # each yes let the call that asked go ahead; the call after it went over the raised cap and asked again
    assert [a["summary"] for a in asked] == ["more budget: alice used 300 of 150 tokens",
                                             "more budget: alice used 600 of 450 tokens"]
    t = tasks_by_name(tmp_path)["work"]
    assert (t["status"], t["result"], t["usage"]["calls"]) == ("completed", "finished", 3)
    assert any(x.split()[:1] == ["alice"] and "900/750 tok" in x for x in out.splitlines()), out


def test_team_spawn_during_a_run_with_a_dollar_budget_refuses_a_teammate_whose_model_has_no_price(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "local.md").write_text(
        "---\nname: local\ndescription: Runs on the local model.\ntools: [glob]\nmodel: local-llama\n---\nWork.\n")
    (tmp_path / "plan.yaml").write_text("name: s\nbudget: {dollars: 1}\n"
                                        "tasks:\n  - {id: wait, assignee: alice, prompt: Wait.}\n")
    tried = threading.Event()

    def alice_waits(body: dict) -> Reply:
        assert tried.wait(60), "team spawn never ran"
        return Reply(content="done waiting", usage=USAGE)

    with ScriptedServer({"alice": [alice_waits]}) as srv:
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                                env=team_env(tmp_path, **llm_env(srv)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            util.wait_until(lambda: (tmp_path / ".team" / "control.json").exists(), 60,
                            what="the lead to serve control requests")
            r = run_team(tmp_path, "spawn", "dave", "--role", "local")
            assert r.returncode == 2, r.stdout + r.stderr
            assert r.stderr.startswith("UserError: dave talks to model 'local-llama', which has no known price, so "
                                       "a dollar budget cannot hold it"), r.stderr
            tried.set()
            out, err = lead.communicate(timeout=60)
        finally:
            tried.set()
            if lead.poll() is None:
                lead.kill()
                lead.wait()
        assert lead.returncode == 0, out + err
        srv.assert_complete()
    assert "dave" not in members(tmp_path)


CLI_PLAN = """\
name: cli
{budget}team:
  - name: codex
    kind: command
    command: cat > /dev/null
tasks:
  - {{id: port, assignee: codex, prompt: Port the parser.}}
"""
NOT_COUNTED = ("warning: plan.yaml:2: budget: codex is an agent CLI (kind: command), calling its own model with its "
               "own key: team does not see that spend, so the plan's budget counts only the LLM teammates' calls; "
               "cap it in the CLI's own settings\n")


def test_a_budget_over_a_plan_with_an_agent_cli_says_once_that_the_clis_spend_is_not_counted(tmp_path):
    """An agent CLI (kind: command) pays for its model calls with its own key: no line of ours records
    them, so the plan's budget cannot hold them. Before, nothing said so."""
    (tmp_path / "plan.yaml").write_text(CLI_PLAN.format(budget="budget: {dollars: 1}\n"))
    check = run_team(tmp_path, "plan", "check", "plan.yaml")
    assert (check.returncode, check.stderr) == (0, NOT_COUNTED)  # a warning, not a refusal
    dry = run_team(tmp_path, "run", "plan.yaml", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.count(NOT_COUNTED) == 1
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == NOT_COUNTED
    assert tasks_by_name(tmp_path)["port"]["status"] == "completed"

    (tmp_path / "plan.yaml").write_text(CLI_PLAN.format(budget=""))  # no budget: nothing to say
    assert run_team(tmp_path, "plan", "check", "plan.yaml").stderr == ""
