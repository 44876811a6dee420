"""Every role on the graph, end to end with the real openai client against the scripted
OpenAI-compatible server: the seed's s07 scenario with the default coder role (it plans three
tasks with dependencies and they run, in order), and the chat lead splitting a refactor across
two teammates, each in its own git worktree, editing in parallel, merged back in order (s12)."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import run_team
from gitutil import no_git_identity  # noqa: F401  (autouse fixture)
from test_worktree import git, make_repo, show
from util import wait_until

from orchestrator.chat.session import ChatSession
from orchestrator.core.fsutil import read_jsonl
from orchestrator.llm.client import LLMClient
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.llm.types import LLMConfig
from orchestrator.runtime.runtime import TeamRuntime
from orchestrator.tasks.store import TaskStore


def client(srv: ScriptedServer) -> LLMClient:
    return LLMClient(LLMConfig(model="m", base_url=srv.base_url, api_key="k-local", max_retries=0))


def tool_messages(srv: ScriptedServer, agent: str) -> list[str]:
    """Every tool result the agent's last request carried (its whole conversation so far)."""
    return [m["content"] for m in srv.chat_requests(agent)[-1].body["messages"] if m["role"] == "tool"]


def test_s07_a_coder_creates_three_tasks_with_dependencies_and_they_run_in_order(tmp_path):
    def finish(n: int):
        def step(body: dict) -> Reply:
            prompt = [m for m in body["messages"] if m["role"] == "user"][-2]["content"]
            assert prompt.startswith(f"Task #{n}, attempt 1: "), prompt  # claimed in dependency order
            return Reply(tool_calls=[tool_call("task_update", {"task": n, "status": "completed",
                                                               "result": f"step {n} done"})])
        return step

    store = TaskStore(tmp_path)
    store.create("the lead's own task", owner="lead", actor="lead")  # #1: not carl's to change
    script = {"carl": [
        Reply(tool_calls=[
            tool_call("task_create", {"subject": "parse the config", "description": "write parse()"}),
            tool_call("task_create", {"subject": "test the parser", "blocked_by": [2]}),
            tool_call("task_create", {"subject": "wire it into main", "blocked_by": ["#3"]}),
            tool_call("task_update", {"task": 1, "owner": "carl"}),
        ]),
        Reply(content="Planned: #2 -> #3 -> #4."),
        finish(2), finish(3), finish(4),
    ]}
    with ScriptedServer(script) as srv:
        rt = TeamRuntime(tmp_path, model_for=lambda role: client(srv), autoclaim=True, idle_slice=0.01,
                         claim_rescan=0.05, heartbeat_every=0.05)
        try:
            rt.spawn("carl", "coder", prompt="Split the config work into three tasks, each after the previous.")
            wait_until(lambda: [t.status.value for t in store.all()][1:] == ["completed"] * 3, 30,
                       what="the three tasks completed")
        finally:
            rt.close()
        srv.assert_complete()
        first = [m["content"] for m in srv.chat_requests("carl")[1].body["messages"] if m["role"] == "tool"]
    assert first[:3] == ["created task #2: parse the config", "created task #3: test the parser (blocked by [2])",
                         "created task #4: wire it into main (blocked by [3])"]
    assert first[3] == ("task #1 is owned by lead: you may update only tasks you own or created (your role's "
                        "permissions: tasks: create, update-own; worktrees: own); ask the lead with send_message "
                        "if it should change")
    assert (store.read(1).owner, store.read(1).status.value) == ("lead", "pending")
    tasks = {i: store.read(i) for i in (2, 3, 4)}
    assert {i: (t.created_by, t.owner, t.result) for i, t in tasks.items()} == {
        i: ("carl", "carl", f"step {i} done") for i in (2, 3, 4)}
    # each ran only after the one it waits for completed
    events = [(e["task"], e["event"]) for e in read_jsonl(tmp_path / ".tasks/events.jsonl")
              if e["task"] in (2, 3, 4) and e["event"] in ("claimed", "completed", "finished", "status")]
    claims = [t for t, ev in events if ev == "claimed"]
    assert claims == [2, 3, 4]
    for earlier, later in ((2, 3), (3, 4)):
        assert tasks[earlier].finished_at <= tasks[later].started_at


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo", {"a.py": "A = 1\nprint(A)\n", "b.py": "B = 2\nprint(B)\n",
                                          ".gitignore": ".team/\n.tasks/\n"})


def test_chat_lead_splits_a_refactor_across_two_teammates_in_worktrees_and_merges_them(repo):
    both_in = threading.Barrier(2, timeout=20)  # each teammate edits only once both are in their worktrees

    def teammate(name: str, wt: str, task: int, path: str, old: str, new: str) -> list:
        def edit_when_both_in(body: dict) -> Reply:
            both_in.wait()
            return Reply(tool_calls=[tool_call("edit_file", {"path": path, "old_string": old, "new_string": new})])
        return [
            Reply(tool_calls=[tool_call("worktree_enter", {"name": wt}), tool_call("read_file", {"path": path})]),
            edit_when_both_in,
            Reply(tool_calls=[tool_call("bash", {"command": f"python3 {path}"}),
                              tool_call("task_update", {"task": task, "status": "completed",
                                                        "result": f"renamed in {path}"}),
                              tool_call("send_message", {"to": "lead", "content": f"#{task} done in {wt}"})]),
            Reply(content=f"#{task} done"),
        ]

    script = {
        "lead": [
            Reply(tool_calls=[
                tool_call("task_create", {"subject": "rename A to ALPHA in a.py", "owner": "alice"}),
                tool_call("task_create", {"subject": "rename B to BETA in b.py", "owner": "bob"}),
            ]),
            Reply(tool_calls=[
                tool_call("worktree_create", {"name": "wt-alice", "task": 1, "owner": "alice"}),
                tool_call("worktree_create", {"name": "wt-bob", "task": 2, "owner": "bob"}),
            ]),
            Reply(tool_calls=[
                tool_call("spawn_teammate", {"name": "alice", "role": "coder", "prompt":
                                             "Task #1 in worktree wt-alice: rename A to ALPHA in a.py."}),
                tool_call("spawn_teammate", {"name": "bob", "role": "coder", "prompt":
                                             "Task #2 in worktree wt-bob: rename B to BETA in b.py."}),
            ]),
            Reply(content="alice and bob are on it, each in a worktree."),
            Reply(tool_calls=[tool_call("worktree_merge", {"names": ["wt-alice", "wt-bob"]})]),
            Reply(content="Both merged into team/agents/integration."),
        ],
        "alice": teammate("alice", "wt-alice", 1, "a.py", "A = 1\nprint(A)", "ALPHA = 1\nprint(ALPHA)"),
        "bob": teammate("bob", "wt-bob", 2, "b.py", "B = 2\nprint(B)", "BETA = 2\nprint(BETA)"),
    }
    store = TaskStore(repo)
    with ScriptedServer(script) as srv:
        with ChatSession(repo, model_for=lambda role: client(srv), heartbeat_every=0.05) as chat:
            chat.handle("Rename A and B; split it between two teammates.")
            wait_until(lambda: all(store.read(i).status.value == "completed" for i in (1, 2)), 30,
                       what="both teammates' tasks completed")
            wait_until(lambda: len(chat.rt.bus.peek("lead")) == 2 if chat.rt else False, 10,
                       what="both reports in the lead's inbox")
            # bound while they worked: the task records and `team task show` name the worktree
            assert [store.read(i).worktree for i in (1, 2)] == ["wt-alice", "wt-bob"]
            shown = run_team(repo, "task", "show", "2")
            assert "\n  worktree:    wt-bob\n" in shown.stdout
            # each edited its own worktree; the user's checkout is untouched
            assert (repo / "a.py").read_text() == "A = 1\nprint(A)\n"
            assert (repo / ".team/worktrees/agents/wt-alice/a.py").read_text() == "ALPHA = 1\nprint(ALPHA)\n"
            assert (repo / ".team/worktrees/agents/wt-bob/b.py").read_text() == "BETA = 2\nprint(BETA)\n"
            chat.handle("Merge their work.")
        srv.assert_complete()
        alice, bob = tool_messages(srv, "alice"), tool_messages(srv, "bob")
        lead = tool_messages(srv, "lead")
    assert not both_in.broken
    for results, path, out in ((alice, "a.py", "1"), (bob, "b.py", "2")):
        assert results[0].startswith("you are in worktree ")
        assert results[2].startswith(f"edited {path}: 1 replacement\n")
        assert results[3] == f"exit code: 0\n{out}\n"  # bash ran in the worktree
        assert results[4].startswith("updated: [x] #") and results[5].startswith("sent to lead")
    assert lead[-1].startswith("merged wt-alice (") and "\nmerged wt-bob (" in lead[-1]
    # merged in the order given, one merge commit each, on the integration branch
    log = git(repo, "log", "--first-parent", "--format=%(trailers:key=Team-Task,valueonly)", "team/agents/integration")
    assert [t for t in log.split() if t][:2] == ["wt-bob", "wt-alice"]
    assert show(repo, "team/agents/integration", "a.py") == "ALPHA = 1\nprint(ALPHA)\n"
    assert show(repo, "team/agents/integration", "b.py") == "BETA = 2\nprint(BETA)\n"
    assert [store.read(i).worktree for i in (1, 2)] == [None, None]
    # the index and the events say exactly what happened
    index = {w["name"]: w for w in json.loads((repo / ".team/worktrees/index.json").read_text())["worktrees"]}
    assert {n: (w["status"], w["owner"], w["task_id"], w["created_by"]) for n, w in index.items()} == {
        "wt-alice": ("merged", "alice", 1, "lead"), "wt-bob": ("merged", "bob", 2, "lead")}
    events = [(e["event"], e["worktree"]["name"], e["actor"]) for e in read_jsonl(repo / ".team/worktrees/events.jsonl")]
    assert events == [("worktree.create.before", "wt-alice", "lead"), ("worktree.create.after", "wt-alice", "lead"),
                      ("worktree.create.before", "wt-bob", "lead"), ("worktree.create.after", "wt-bob", "lead"),
                      ("worktree.merge.before", "wt-alice", "lead"), ("worktree.merge.after", "wt-alice", "lead"),
                      ("worktree.merge.before", "wt-bob", "lead"), ("worktree.merge.after", "wt-bob", "lead")]
    merge_commits = {e["worktree"]["name"]: e["commit"] for e in read_jsonl(repo / ".team/worktrees/events.jsonl")
                     if e["event"] == "worktree.merge.after"}
    assert merge_commits == {n: w["merge_commit"] for n, w in index.items()}
    # the user takes the result
    landed = run_team(repo, "worktree", "land")
    assert landed.returncode == 0, landed.stderr
    assert (repo / "a.py").read_text() == "ALPHA = 1\nprint(ALPHA)\n"
    assert (repo / "b.py").read_text() == "BETA = 2\nprint(BETA)\n"
    assert git(repo, "status", "--porcelain") == ""
