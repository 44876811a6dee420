"""`ask` permissions in the tool pipeline and the request store behind `team approve`.

The pipeline tests run real tool calls (real files, real bash in the sandbox choice of the
harness) through a gate whose answers come from a list; the store tests use real files and,
for the first-answer-wins rule, real concurrent processes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import run_team
from fake_model import FakeModel, call, say, tool_results
from tools_harness import Harness
from util import wait_until

from orchestrator.core.errors import UserError
from orchestrator.roles.roles import parse_role
from orchestrator.runtime.approvals import StoreAsk, gate_for, timeout_from_env
from orchestrator.runtime.runtime import TeamRuntime
from orchestrator.team.inbox import Bus
from orchestrator.team.requests import Requests, answer
from orchestrator.team.roster import Team
from orchestrator.tools.approval import (
    ApprovalGate,
    ApprovalRequest,
    AskRule,
    Decision,
    parse_rules,
)
from orchestrator.tools.coordination import agent_registry


class Answers:
    """An ``ask`` function answering from a list, recording what it was asked."""

    def __init__(self, *decisions: Decision):
        self.decisions = list(decisions)
        self.asked: list[ApprovalRequest] = []

    def __call__(self, req: ApprovalRequest, ctx) -> Decision:
        self.asked.append(req)
        return self.decisions.pop(0)


def gated(tmp_path: Path, entries: list[str], *decisions: Decision) -> tuple[Harness, Answers]:
    h = Harness(tmp_path, registry=agent_registry())
    answers = Answers(*decisions)
    tools = {n: t for n in h.registry.names() if (t := h.registry.get(n)) is not None}
    h.ctx.approvals = ApprovalGate(parse_rules(entries, tools), answers)
    return h, answers


def test_a_shell_pattern_asks_for_matching_commands_only_also_inside_a_compound_command(tmp_path):
    h, answers = gated(tmp_path, ["bash(git push*)"], Decision(False, "no pushes today"),
                       Decision(False, "still no"))
    assert "hello" in h.ok("bash", {"command": "echo hello"})  # no match: runs, nobody asked
    obs = h.call("bash", {"command": "git push origin main"})
    assert (obs.is_error, obs.stage) == (True, "approval")
    assert obs.content == ("denied: this call needs approval (ask rule 'bash(git push*)') and user denied it: "
                           "no pushes today. It was not run. Do not repeat it; do the task another way, or report "
                           "that you could not.")
    obs = h.call("bash", {"command": "echo x > pushed.txt && git  push"})  # the second simple command matches
    assert obs.stage == "approval" and not (h.ws / "pushed.txt").exists()
    assert [a.summary for a in answers.asked] == ["bash: git push origin main", "bash: echo x > pushed.txt && git push"]
    assert [a.rule for a in answers.asked] == ["bash(git push*)"] * 2
    # the call log records the denial like any other result
    assert [(r["tool"], r["stage"]) for r in h.log()][-2:] == [("bash", "approval"), ("bash", "approval")]


def test_validation_comes_before_approval_nobody_is_asked_about_a_call_refused_anyway(tmp_path):
    h, answers = gated(tmp_path, ["write_file", "bash"])
    assert h.call("write_file", {"path": "../outside.txt", "content": "x"}).stage == "path"
    assert h.call("write_file", {"path": "a.txt"}).stage == "validate"
    assert h.call("bash", {"command": "rm -rf /"}).stage == "policy"
    assert answers.asked == []


def test_a_path_pattern_asks_for_matching_files_and_always_stops_asking_for_that_rule(tmp_path):
    h, answers = gated(tmp_path, ["write_file(config/*)"], Decision(True, always=True))
    h.ok("write_file", {"path": "notes.txt", "content": "free\n"})
    (h.ws / "config").mkdir()
    h.ok("write_file", {"path": "config/app.toml", "content": "a = 1\n"})
    h.ok("read_file", {"path": "config/app.toml"})
    h.ok("write_file", {"path": "config/app.toml", "content": "a = 2\n"})  # "always": not asked again
    assert [a.summary for a in answers.asked] == ["write_file config/app.toml (new file, 1 line, 6 chars)"]
    assert (h.ws / "config/app.toml").read_text() == "a = 2\n"
    assert h.ctx.approvals is not None and h.ctx.approvals.granted == {"write_file(config/*)"}


def test_ask_entries_are_checked_when_the_role_is_read_and_when_a_teammate_starts(tmp_path):
    reg = agent_registry()
    tools = {n: t for n in reg.names() if (t := reg.get(n)) is not None}
    assert AskRule.parse(' bash( git push* ) ') == AskRule("bash", "git push*", "bash( git push* )")
    with pytest.raises(UserError, match=r"ask: 'deploy' names 'deploy', which is not a tool"):
        parse_rules(["deploy"], tools)
    with pytest.raises(UserError, match=r"'task_list\(mine\)': task_list has no command or path to match"):
        parse_rules(["task_list(mine)"], tools)
    role = "---\nname: coder\ndescription: d\ntools: [bash]\nask: {}\n---\nYou code.\n"
    path = tmp_path / "coder.md"
    with pytest.raises(UserError, match=r"coder.md: 'ask' must be a list of TOOL or TOOL\(PATTERN\) entries"):
        parse_role(role.format('"bash()"'), path)
    with pytest.raises(UserError, match=r"'ask' must be a list"):
        parse_role(role.format("bash"), path)
    r = parse_role(role.format('[bash, "bash(rm *)"]'), path)
    assert r.ask == ("bash", "bash(rm *)")
    assert gate_for(parse_role(role.format("[]"), path), reg, Answers()) is None
    # a bad entry in a workspace role stops the teammate before it starts, naming the file
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "coder.md").write_text(role.format("[deploy]"))
    (tmp_path / "plan.yaml").write_text("name: p\nteam:\n  - {name: ada, role: coder}\ntasks:\n"
                                        "  - id: a\n    assignee: ada\n    prompt: go\n")
    r2 = run_team(tmp_path, "run", "plan.yaml", OPENAI_API_KEY="sk-x", TEAM_MODEL="m",
                  OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert r2.returncode == 2 and "coder.md: ask: 'deploy' names 'deploy', which is not a tool" in r2.stderr


def test_the_approval_timeout_comes_from_the_environment():
    assert timeout_from_env({}) == 300.0
    assert timeout_from_env({"TEAM_APPROVAL_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-1", "soon", "1e9"):
        with pytest.raises(UserError, match="TEAM_APPROVAL_TIMEOUT"):
            timeout_from_env({"TEAM_APPROVAL_TIMEOUT": bad})


# ---------------------------------------------------------------- the request store
def test_requests_are_named_by_a_unique_prefix_and_answered_once(tmp_path):
    store = Requests(tmp_path)
    a = store.create("tool", "ada", "bash: git push", rid="abc111", timeout=60)
    store.create("tool", "bob", "bash: rm -rf build", rid="abc222", timeout=60)
    assert [r.id for r in store.pending()] == ["abc111", "abc222"]
    with pytest.raises(UserError, match="request 'abc' is ambiguous: abc111, abc222"):
        store.get("abc")
    with pytest.raises(UserError, match=r"no approval request 'zzz'; pending: abc111 \(tool, ada\), abc222 \(tool, bob\)"):
        store.get("zzz")
    with pytest.raises(UserError, match=r"no approval request '\.\./x'"):  # never a path
        store.get("../x")
    done = store.decide("abc1", True, by="user", always=True)
    assert (done.id, done.status, done.always, done.decided_by) == (a.id, "approved", True, "user")
    with pytest.raises(UserError, match="request abc111 was already approved by user"):
        store.decide("abc111", False, by="lead", reason="no")
    assert [r.id for r in store.pending()] == ["abc222"]


def test_a_request_past_its_time_or_of_a_dead_process_can_no_longer_be_approved(tmp_path):
    now = [1000.0]
    store = Requests(tmp_path, clock=lambda: now[0])
    store.create("tool", "ada", "bash: git push", rid="late1", timeout=5)
    now[0] += 6
    assert store.pending() == []
    with pytest.raises(UserError, match=r"request late1 can no longer be answered: nobody answered within 5s; it "
                                        r"was denied"):
        store.decide("late1", True, by="user")
    assert store.get("late1").status == "expired"
    # a request whose waiting process is gone
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    r = store.create("tool", "bob", "bash: make deploy", rid="gone1", timeout=60)
    path = tmp_path / ".team" / "requests" / "gone1.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": int(dead.stdout)}))
    assert r.id not in [x.id for x in store.pending()]
    with pytest.raises(UserError, match=rf"the process that asked \(pid {int(dead.stdout)}\) is gone"):
        store.decide("gone1", True, by="user")


def _decide(root: str, approve: bool, barrier) -> str:
    barrier.wait()
    try:
        r = Requests(root).decide("race1", approve, by=f"p{os.getpid()}")
        return f"won:{r.status}"
    except UserError as e:
        return f"lost:{e}"


def test_two_processes_answering_at_once_one_wins_the_other_is_told(tmp_path):
    Requests(tmp_path).create("plan", "pam", "plan: do it", rid="race1")
    with pytest.raises(UserError, match="request race1 is a plan: 'always' applies to tool requests"):
        Requests(tmp_path).decide("race1", True, by="user", always=True)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(2)
    with ctx.Pool(2) as pool:
        outcomes = pool.starmap(_decide, [(str(tmp_path), True, barrier), (str(tmp_path), False, barrier)])
    won = [o for o in outcomes if o.startswith("won:")]
    lost = [o for o in outcomes if o.startswith("lost:")]
    assert len(won) == 1 and len(lost) == 1
    final = Requests(tmp_path).get("race1")
    assert won[0] == f"won:{final.status}" and f"was already {final.status} by {final.decided_by}" in lost[0]


def test_answering_a_plan_sends_its_teammate_the_protocol_response(tmp_path):
    Team(tmp_path).add("pam", "coder")
    store = Requests(tmp_path)
    store.create("plan", "pam", "plan: step one", rid="plan1", detail="step one\nstep two")
    answer(store, Bus(tmp_path), "plan1", False, by="user", reason="add tests first")
    (msg,) = Bus(tmp_path).peek("pam")
    assert (msg.type, msg.request_id, msg.approve, msg.sender, msg.content) == (
        "plan_approval_response", "plan1", False, "lead", "add tests first")


def test_store_ask_waits_for_the_answer_and_a_stopped_agent_stops_waiting(tmp_path):
    store = Requests(tmp_path)
    told: list[str] = []
    h = Harness(tmp_path)
    ask = StoreAsk(store, timeout=60, notify=lambda r: told.append(r.id))
    req = ApprovalRequest("ada", "bash", "bash", "bash: make", "make", task=3)
    result: list[Decision] = []
    t = threading.Thread(target=lambda: result.append(ask(req, h.ctx)))
    t.start()
    wait_until(lambda: told, what="the request")
    pending = store.get(told[0])
    assert (pending.sender, pending.task, pending.rule, pending.pid) == ("ada", 3, "bash", os.getpid())
    store.decide(told[0], True, by="user", always=True)
    t.join(10)
    assert result == [Decision(True, "", "user", True, told[0])]
    stop = threading.Event()
    stopping = ask.with_stop(stop.is_set)
    t = threading.Thread(target=lambda: result.append(stopping(req, h.ctx)))
    t.start()
    wait_until(lambda: len(told) == 2, what="the second request")
    stop.set()
    t.join(10)
    assert result[1] == Decision(False, "the agent was stopped while waiting", "the harness", False, told[1])
    assert store.get(told[1]).status == "expired"


def test_a_subagent_asks_about_the_same_calls_as_a_teammate_of_its_role(tmp_path):
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "coder.md").write_text(
        "---\nname: coder\ndescription: d\ntools: [bash]\nask: [\"bash(touch *)\"]\n---\nYou code.\n")
    model = FakeModel(lambda messages, n: call(("bash", {"command": "touch made.txt"})) if n == 1
                      else say(tool_results(messages)[-1]))
    rt = TeamRuntime(tmp_path, model_for=lambda role: model, approval_timeout=60)
    try:
        answers: list[str] = []
        t = threading.Thread(target=lambda: answers.append(rt.subagents.run("make it", "coder", parent="lead").result))
        t.start()
        (req,) = wait_until(lambda: rt.requests.pending(), what="the subagent's request")
        assert (req.sender, req.summary) == ("sub1-lead", "bash: touch made.txt")
        rt.requests.decide(req.id, False, by="user", reason="read only today")
        t.join(30)
    finally:
        rt.close()
    assert answers and answers[0].startswith("denied: this call needs approval (ask rule 'bash(touch *)') and user "
                                             f"denied it (request {req.id}): read only today.")
    assert not (tmp_path / "made.txt").exists()
