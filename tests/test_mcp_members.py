"""MCP clients as members of the team, what they may change, and the lead's controls over MCP
(issue 27 items 4, 5, 11): the real ``team mcp`` (stdio and streamable HTTP) driven by the
official MCP SDK's client, the real CLI in subprocesses, a real `team run` against the scripted
OpenAI-compatible server where a lead must be running.

* ``team mcp --as NAME`` makes NAME an ``external`` member: it has an inbox (``team send NAME``),
  reads its own by default, shows in ``team status`` (kind, model, liveness: idle while served,
  offline after) and is never started by a lead as an LLM teammate.
* A second client cannot take over, reset, complete or re-describe a task another client
  claimed, nor act or read in another's name; ``--as lead`` may; completions go through the
  ``task_completed`` hooks of ``.team/hooks.yaml`` (a veto refuses them).
* ``spawn``, ``shutdown``, ``approve`` and ``deny`` are the lead's: listed and allowed only for
  ``--as lead``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import util
from conftest import run_team, team_env
from mcpkit import call, http_server, http_session, ok, stdio_session
from util import wait_until

from orchestrator import Root
from orchestrator.llm.script import Reply
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.team.requests import Requests
from orchestrator.team.roster import Team

KEY = "sk-mcp-members-9d1f3a7e"
LEAD_TOOLS = {"spawn", "shutdown", "approve", "deny"}


def members(root: Path) -> dict[str, dict]:
    r = run_team(root, "status", "--json")
    assert r.returncode == 0, r.stderr
    return {m["name"]: m for m in json.loads(r.stdout)["members"]}


def task(root: Path, tid: int) -> dict:
    return json.loads((root / ".tasks" / f"task_{tid}.json").read_text())


def events(root: Path, tid: int) -> list[dict]:
    lines = (root / ".tasks" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("task") == tid]


# -- item 4: a client is a member -----------------------------------------------------------
def test_an_mcp_client_is_an_external_member_with_its_own_inbox(tmp_path):
    root = tmp_path
    # the lead writes first, before claude ever connected: nobody by that name
    r = run_team(root, "send", "claude", "hello?")
    assert r.returncode == 2 and "unknown recipient 'claude'" in r.stderr

    async def first_session():
        async with stdio_session(root, "claude") as s:
            assert run_team(root, "send", "claude", "please review #1").returncode == 0
            got = await ok(s, "inbox_read")  # no name: its own inbox
            assert "lead: please review #1" in got and got.endswith("none left unread")
            assert "sent" in await ok(s, "message_send", to="lead", text="on it")
            await ok(s, "task_create", subject="review #1")
            await ok(s, "task_claim", task=1)
            return members(root)["claude"], run_team(root, "status").stdout

    while_served, status = anyio.run(first_session)
    assert (while_served["kind"], while_served["liveness"], while_served["role"]) == ("external", "idle", "coder")
    (line,) = [x for x in status.splitlines() if x.split()[:1] == ["claude"]]
    assert line.split()[:5] == ["claude", "coder", "idle", "external", "-"]
    assert "lead: claude: on it" not in status and "on it" in run_team(root, "inbox", "lead").stdout

    # the client went away: still a member, offline, and its inbox keeps what is sent meanwhile
    gone = wait_until(lambda: (m := members(root)["claude"])["liveness"] == "offline" and m, 30, what="offline")
    assert "no `team mcp --as claude` is running" in gone["reason"]
    (api,) = [m for m in Root(root).status().members if m.name == "claude"]  # the Python API says the same
    assert (api.kind, api.liveness, api.model) == ("external", "offline", None)
    assert run_team(root, "send", "claude", "while you were away").returncode == 0
    doctor = run_team(root, "doctor")  # its claim is a person's: it stays while the client is away
    assert doctor.returncode == 0 and "dead-owner" not in doctor.stdout, doctor.stdout
    assert task(root, 1)["owner"] == "claude"

    async def second_session():
        async with stdio_session(root, "claude") as s:
            return await ok(s, "inbox_read")

    assert "lead: while you were away" in anyio.run(second_session)
    roster = json.loads((root / ".team" / "config.json").read_text())
    assert roster["members"] == [{"name": "claude", "role": "coder", "status": "idle", "kind": "external"}]


def test_a_lead_never_starts_an_external_member_and_a_client_cannot_be_a_teammate(tmp_path):
    root = tmp_path
    Team(root).join_external("claude")
    Team(root).add("alice", "coder")
    r = run_team(root, "spawn", "claude", "--role", "coder")
    assert r.returncode == 2 and "'claude' is an external member" in r.stderr and "Traceback" not in r.stderr
    # a client cannot take the name (and the inbox) of a teammate the lead runs
    r = run_team(root, "mcp", "--as", "alice", input="")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "'alice' is a teammate the lead runs (coder, kind llm), not an MCP client" in r.stderr
    # a plan that assigns claude an agent task: the task fails naming why; no model call is made
    (root / "plan.yaml").write_text("name: p\ntasks:\n  - {id: review, assignee: claude, prompt: Review it.}\n")
    with ScriptedServer({}) as srv:
        r = run_team(root, "run", "plan.yaml", **util.llm_env(srv.base_url, KEY))
        assert srv.chat_requests("claude") == []
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cannot start task #1: 'claude' is an external member" in r.stdout + r.stderr
    assert members(root)["claude"]["kind"] == "external"


# -- item 5: ownership ----------------------------------------------------------------------
def test_a_second_client_cannot_take_reset_complete_or_act_for_another(tmp_path):
    root = tmp_path

    async def main():
        async with stdio_session(root, "ann") as ann, stdio_session(root, "bob") as bob:
            design = json.loads(await ok(ann, "task_create", subject="design"))
            await ok(ann, "task_claim", task=design["id"])
            free = json.loads(await ok(ann, "task_create", subject="unowned, ann's"))
            before = task(root, design["id"])
            hostile = [
                ("task_update", {"task": design["id"], "status": "completed", "result": "mine now"}),
                ("task_update", {"task": design["id"], "owner": "bob"}),
                ("task_update", {"task": design["id"], "status": "pending"}),
                ("task_update", {"task": design["id"], "description": "something else"}),
                ("task_update", {"task": free["id"], "status": "cancelled"}),
                ("task_claim", {"task": free["id"], "owner": "ann"}),
                ("task_create", {"subject": "for ann", "owner": "ann"}),
                ("inbox_read", {"name": "ann"}),
                ("message_send", {"to": "lead", "text": "ann says hi", "sender": "ann"}),
                ("message_broadcast", {"text": "ann says hi", "sender": "ann"}),
            ]
            for tool, args in hostile:
                text, err = await call(bob, tool, **args)
                assert err and text.startswith("NotAllowed: "), (tool, args, text)
            text, err = await call(bob, "task_claim", task=design["id"])
            assert err and text == f"ConflictError: task #{design['id']} is in_progress, not pending"
            refusal = (await call(bob, "task_update", task=design["id"], owner="bob"))[0]
            assert refusal == (f"NotAllowed: task #{design['id']} is owned by ann: you may update only tasks you own "
                               "or created (you are bob, a coder (task rights: create, update-own)); ask the lead "
                               "with message_send if it should change")
            # nothing was written: the task, its events, the inboxes
            assert task(root, design["id"]) == before
            assert all(e.get("actor") != "bob" for e in events(root, design["id"]) + events(root, free["id"]))
            assert run_team(root, "inbox", "lead", "--peek").stdout.strip() == "no unread messages for lead"
            # the owner may; so may bob with his own task
            done = json.loads(await ok(ann, "task_update", task=design["id"], status="completed", result="spec"))
            assert (done["status"], done["owner"], done["result"]) == ("completed", "ann", "spec")
            own = json.loads(await ok(bob, "task_create", subject="bob's own"))
            await ok(bob, "task_update", task=own["id"], description="bob's words")
            # created by bob, owned by nobody: ann may not touch it
            assert (await call(ann, "task_update", task=own["id"], status="cancelled"))[0].startswith("NotAllowed: ")
            return free["id"], own["id"]

    free, own = anyio.run(main)

    async def as_lead(url: str):
        async with http_session(url) as lead:  # the lead may do more: reassign, reset, complete for others
            await ok(lead, "task_update", task=free, owner="bob")
            await ok(lead, "task_claim", task=own, owner="ann")
            reset = json.loads(await ok(lead, "task_update", task=own, status="pending"))
            assert (reset["status"], reset["owner"]) == ("pending", "")
            assert "sent" in await ok(lead, "message_send", to="ann", text="from bob, via the lead", sender="bob")

    with http_server(root, "lead") as url:
        anyio.run(as_lead, url)
    assert task(root, free)["owner"] == "bob"
    assert [e["actor"] for e in events(root, own)][-2:] == ["lead", "lead"]


HOOKS = """\
task_completed: |
  cat > payload.json
  if [ -f tests-pass ]; then exit 0; fi
  echo "tests still fail: test_parse" >&2; exit 2
"""


def test_an_mcp_completion_goes_through_the_task_completed_hooks(tmp_path):
    root = tmp_path
    (root / ".team").mkdir()
    (root / ".team" / "hooks.yaml").write_text(HOOKS)

    async def main():
        async with stdio_session(root, "ann") as ann:
            t = json.loads(await ok(ann, "task_create", subject="fix the parser"))
            await ok(ann, "task_claim", task=t["id"])
            text, err = await call(ann, "task_update", task=t["id"], status="completed", result="fixed")
            assert err and text.startswith(f"NotAllowed: a task_completed hook refused to record task #{t['id']} "
                                           "completed: tests still fail: test_parse"), text
            assert (task(root, t["id"])["status"], task(root, t["id"]).get("result")) == ("in_progress", None)
            payload = json.loads((root / "payload.json").read_text())
            assert (payload["teammate"], payload["task"]["id"], payload["outcome"]) == (
                "ann", t["id"], {"status": "completed", "result": "fixed"})
            (root / "tests-pass").write_text("")
            done = json.loads(await ok(ann, "task_update", task=t["id"], status="completed", result="fixed"))
            assert done["status"] == "completed"

    anyio.run(main)
    runs = [json.loads(x) for x in (root / ".team" / "hooks.jsonl").read_text().splitlines()]
    assert [(r["event"], r["status"]) for r in runs] == [("task_completed", "veto"), ("task_completed", "ok")]


# -- item 11: the lead's controls -----------------------------------------------------------
def test_the_lead_tools_are_the_leads_only(tmp_path):
    root = tmp_path
    Team(root).add("pam", "coder")
    plan = Requests(root).create("plan", "pam", "plan: write notes.txt")
    tool = Requests(root).create("tool", "pam", "bash: git push", tool="bash", rule="bash(git push*)")

    async def main():
        async with stdio_session(root, "claude") as claude, stdio_session(root, "lead") as lead:
            assert not LEAD_TOOLS & {t.name for t in (await claude.list_tools()).tools}
            for name, args in (("spawn", {"name": "eve"}), ("approve", {"request": plan.id})):
                text, err = await call(claude, name, **args)
                assert err and name in text, text  # the SDK refuses a tool it does not list
            listed = {t.name: t for t in (await lead.list_tools()).tools}
            assert LEAD_TOOLS <= set(listed) and listed["shutdown"].annotations.destructive_hint is True
            said = await ok(lead, "approve", request=tool.id[:6])
            assert said == f"approved {tool.id}: tool request of pam: bash: git push"
            said = await ok(lead, "deny", request=plan.id, reason="split it in two")
            assert said == f"denied {plan.id}: plan request of pam: plan: write notes.txt"
            text, err = await call(lead, "deny", request=plan.id)
            assert err and "already" in text
            said = await ok(lead, "spawn", name="eve", role="tester", prompt="check the notes")
            assert said.startswith("enrolled eve (tester) on the roster: no lead is running")

    anyio.run(main)
    stored = {r.id: r for r in Requests(root).all()}
    assert (stored[tool.id].status, stored[tool.id].decided_by) == ("approved", "lead")
    assert (stored[plan.id].status, stored[plan.id].reason) == ("rejected", "split it in two")
    assert "split it in two" in run_team(root, "inbox", "pam").stdout  # the plan's teammate was told
    eve = members(root)["eve"]
    assert (eve["kind"], eve["liveness"], eve["unread"]) == ("llm", "waiting", 1)


RUN_PLAN = """\
name: live
team:
  - {name: bob, role: coder}
tasks:
  - {id: hello, assignee: bob, prompt: Say hello.}
  - id: gate
    run: "while [ ! -f release ]; do sleep 0.05; done"
"""


def test_the_lead_spawns_and_shuts_down_teammates_of_a_running_lead_over_mcp(tmp_path):
    root = tmp_path
    (root / "plan.yaml").write_text(RUN_PLAN)
    with ScriptedServer({"bob": [Reply(content="hello")], "carol": [Reply(content="hello from carol")]}) as srv:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root,
                                env=team_env(root, **util.llm_env(srv.base_url, KEY)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: len(srv.chat_requests("bob")) == 1 and members(root)["bob"]["liveness"] == "idle",
                       60, 0.1, "bob done and idle")

            async def main():
                async with stdio_session(root, "lead") as lead:
                    said = await ok(lead, "spawn", name="carol", role="tester", prompt="say hello")
                    assert said.startswith("spawned carol (tester) in the lead (pid ")
                    said = await ok(lead, "shutdown", name="bob", reason="not needed")
                    assert said.startswith("bob approved shutdown request ") and said.endswith("it has shut down")
                    text, err = await call(lead, "shutdown", name="bob")
                    assert err and text == "UserError: bob has already shut down; nothing to do"

            anyio.run(main)
            wait_until(lambda: len(srv.chat_requests("carol")) == 1, 60, what="carol's turn")
        finally:
            (root / "release").write_text("")
            out, err = proc.communicate(timeout=90)
        srv.assert_complete()
    assert proc.returncode == 0, out + err
    assert members(root)["bob"]["status"] == "shutdown"


# -- item 8: annotations --------------------------------------------------------------------
PLAN_MODE_PLAN = """\
name: planning
mcp_servers:
  - name: team
    command: {team}
    args: [mcp, --root, {root}, --as, pam-tools]
team:
  - {{name: pam, role: coder, plan_mode: true}}
tasks:
  - {{id: survey, assignee: pam, prompt: Survey the open work and plan.}}
"""


def test_a_plan_mode_teammate_uses_team_mcps_reads_and_is_refused_its_writes(tmp_path):
    from orchestrator.llm.script import tool_call

    root = tmp_path
    (root / "plan.yaml").write_text(PLAN_MODE_PLAN.format(team=Path(sys.executable).parent / "team", root=root))

    async def annotated():
        async with stdio_session(root, "claude") as s:
            return {t.name: t.annotations for t in (await s.list_tools()).tools}

    hints = anyio.run(annotated)
    reads = {n for n, a in hints.items() if a.read_only_hint}
    assert reads == {"task_get", "task_list", "task_blocked", "task_critical", "team_status"}
    assert hints["task_update"].idempotent_hint and not hints["task_update"].read_only_hint

    def report(body: dict) -> Reply:
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed",
                                                           "result": "\n---\n".join(results)})])

    script = {"pam": [Reply(tool_calls=[tool_call("team__task_list", {})]),
                      Reply(tool_calls=[tool_call("team__task_create", {"subject": "sneaky"})]),
                      report]}
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", **util.llm_env(srv.base_url, KEY))
        srv.assert_complete()
    assert r.returncode == 0, r.stdout + r.stderr
    listed, created = task(root, 1)["result"].split("\n---\n")
    assert "[>] #1: survey: Survey the open work and plan. (pam)" in listed  # the read went through
    assert "plan mode: team__task_create" in created and "not allowed" in created
    assert not any("sneaky" in f.read_text() for f in (root / ".tasks").glob("task_*.json"))
