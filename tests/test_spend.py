"""One ledger of spend (llm/ledger.py): every report of tokens and dollars counts exactly what the
model server billed, across a teammate's turn outside any task, a task it claimed by itself, a
task that failed and ran again, and two runs. Real `team run`, `team status`, `team chat`'s
/cost, `team board` over HTTP and the Python API, against the scripted server, whose replies
carry the usage it bills."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from boardkit import board_process, request, split
from conftest import run_team, team_env
from test_budgets import KEY
from util import llm_env, tasks_by_name, wait_until

from orchestrator import open_root
from orchestrator.core.budget import money
from orchestrator.llm.pricing import PRICES, Usage, cost
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

PLAN = """\
name: ledger
team:
  - {name: alice, role: coder}
  - {name: bob, role: coder}
tasks:
  - {id: work, assignee: alice, prompt: Get bob to do a side job.}
"""


def billed(*steps: Reply) -> Usage:
    """What the server billed for ``steps`` (each reply's usage, priced as gpt-4o-mini)."""
    out = Usage()
    for s in steps:
        u = s.usage or {}
        p, c, cached = u.get("prompt_tokens", 0), u.get("completion_tokens", 0), u.get("cached_tokens", 0)
        out += Usage(prompt_tokens=p, completion_tokens=c, cached_tokens=cached, calls=1,
                     cost=cost(PRICES["gpt-4o-mini"], p, c, cached))
    return out


def numbers(u: Usage | dict) -> tuple[int, int, int, int, float]:
    d = u.model_dump() if isinstance(u, Usage) else u
    return (d["prompt_tokens"], d["completion_tokens"], d["cached_tokens"], d["calls"], pytest.approx(d["cost"]))


def summary(stdout: str) -> dict:
    last = json.loads(stdout.strip().splitlines()[-1])
    assert last["event"] == "summary"
    return last


def test_every_report_counts_what_the_server_billed_idle_turns_autoclaims_and_two_runs(tmp_path: Path):
    (tmp_path / "plan.yaml").write_text(PLAN)
    # run 1. alice pings bob and waits; bob, idle, is woken by it: a turn outside any task (B1, B2);
    # alice then makes a side job (#2, no plan task) that idle bob claims by himself (B3); alice
    # fails her task (A3).
    a1 = Reply(tool_calls=[tool_call("send_message", {"to": "bob", "content": "ping"}), tool_call("idle", {})],
               usage={"prompt_tokens": 1000, "completion_tokens": 50})
    b1 = Reply(tool_calls=[tool_call("send_message", {"to": "alice", "content": "pong"})],
               usage={"prompt_tokens": 700, "completion_tokens": 30})
    b2 = Reply(content="replied to alice", usage={"prompt_tokens": 720, "completion_tokens": 10})
    a2 = Reply(tool_calls=[tool_call("task_create", {"subject": "side job"}), tool_call("idle", {})],
               usage={"prompt_tokens": 1300, "completion_tokens": 40})
    b3 = Reply(tool_calls=[tool_call("send_message", {"to": "alice", "content": "side job done"}),
                           tool_call("task_update", {"task": 2, "status": "completed", "result": "done"})],
               usage={"prompt_tokens": 900, "completion_tokens": 60, "cached_tokens": 100})
    a3 = Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "failed", "result": "not yet"})],
               usage={"prompt_tokens": 1500, "completion_tokens": 20})
    with ScriptedServer({"alice": [a1, a2, a3], "bob": [b1, b2, b3]}) as srv:
        r1 = run_team(tmp_path, "run", "plan.yaml", "--json", **llm_env(srv.base_url, KEY))
        assert r1.returncode == 1, r1.stdout + r1.stderr
        srv.assert_complete()
    tasks = tasks_by_name(tmp_path)
    assert (tasks["work"]["status"], tasks[2]["status"], tasks[2]["owner"]) == ("failed", "completed", "bob")
    # run 2: the failed task runs again, one call
    a4 = Reply(content="done now", usage={"prompt_tokens": 1600, "completion_tokens": 25})
    with ScriptedServer({"alice": [a4]}) as srv:
        r2 = run_team(tmp_path, "run", "plan.yaml", "--json", **llm_env(srv.base_url, KEY))
        assert r2.returncode == 0, r2.stdout + r2.stderr
        srv.assert_complete()

    run1, run2 = billed(a1, b1, b2, a2, b3, a3), billed(a4)
    everything = run1 + run2
    s1, s2 = summary(r1.stdout)["usage"], summary(r2.stdout)["usage"]
    # each run's summary: that run's calls, all of them, and only them
    assert numbers(s1["total"]) == numbers(run1)
    assert {a["name"]: numbers(a) for a in s1["agents"]} == {"alice": numbers(billed(a1, a2, a3)),
                                                             "bob": numbers(billed(b1, b2, b3))}
    assert {t["task"]: numbers(t) for t in s1["tasks"]} == {1: numbers(billed(a1, a2, a3)), 2: numbers(billed(b3))}
    assert numbers(s2["total"]) == numbers(run2)
    assert [(t["task"], t["calls"]) for t in s2["tasks"]] == [(1, 1)]
    # team status, the API, /cost in team chat and the board: every run's calls
    status = json.loads(run_team(tmp_path, "status", "--json").stdout)["usage"]
    assert numbers(status["total"]) == numbers(everything)
    assert {t["task"]: t["calls"] for t in status["tasks"]} == {1: 4, 2: 1}
    assert numbers(open_root(tmp_path).status().data["usage"]["total"]) == numbers(everything)
    with ScriptedServer({"lead": []}) as srv:
        chat = run_team(tmp_path, "chat", input="/cost\n/quit\n", **llm_env(srv.base_url, KEY))
        assert chat.returncode == 0 and srv.requests == [], chat.stderr
    total = next(x for x in chat.stdout.splitlines() if x.split()[:1] == ["total"]).split()
    assert total[1:] == [f"{everything.prompt_tokens:,}", f"{everything.completion_tokens:,}",
                         f"{everything.cached_tokens:,}", str(everything.calls), money(everything.cost or 0)]
    with board_process(tmp_path, "--port", "0") as url:
        base, token = split(url)
        status_code, snap = request(f"{base}/api/snapshot?token={token}")
    assert status_code == 200
    spend = snap["spend"]
    assert (spend["prompt_tokens"], spend["completion_tokens"], spend["calls"], spend["cost"]) == \
        (everything.prompt_tokens, everything.completion_tokens, everything.calls, pytest.approx(everything.cost))
    assert {m["name"]: m["calls"] for m in snap["members"]} == {"alice": 4, "bob": 3}


def test_a_run_killed_mid_call_leaves_a_readable_ledger_and_the_next_run_counts_only_its_own_calls(tmp_path: Path):
    (tmp_path / "plan.yaml").write_text("name: k\nteam:\n  - {name: alice, role: coder}\n"
                                        "tasks:\n  - {id: work, assignee: alice, prompt: Work.}\n")
    a1 = Reply(tool_calls=[tool_call("glob", {"pattern": "*"})], usage={"prompt_tokens": 1000, "completion_tokens": 10})
    hung = Reply(content="never delivered", delay=120, usage={"prompt_tokens": 5000, "completion_tokens": 50})
    a3 = Reply(content="done after the restart", usage={"prompt_tokens": 1200, "completion_tokens": 20})
    ledger = tmp_path / ".team" / "spend.jsonl"
    with ScriptedServer({"alice": [a1, hung, a3]}) as srv:
        env = llm_env(srv.base_url, KEY)
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                                env=team_env(tmp_path, **env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: len(srv.chat_requests("alice")) == 2, 60, what="alice's second call in flight")
        finally:
            os.kill(lead.pid, signal.SIGKILL)
            lead.wait()
        # the answered call is on record, the one in flight is not (it was never answered)
        lines = ledger.read_text().splitlines()
        assert [json.loads(x)["prompt_tokens"] for x in lines] == [1000]
        with ledger.open("a") as f:  # and a writer killed mid-line leaves a fragment
            f.write('{"ts": 1, "run": "torn", "agent": "alice", "member": "al')
        r = run_team(tmp_path, "run", "plan.yaml", "--json", **env)
        assert r.returncode == 0, r.stdout + r.stderr
    assert numbers(summary(r.stdout)["usage"]["total"]) == numbers(billed(a3))
    status = json.loads(run_team(tmp_path, "status", "--json").stdout)["usage"]
    assert numbers(status["total"]) == numbers(billed(a1, a3))
    assert [json.loads(x)["prompt_tokens"] for x in ledger.read_text().splitlines()] == [1000, 1200]  # fragment cut
