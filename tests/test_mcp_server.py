"""``team mcp`` driven by the official MCP client SDK: the real ``team mcp`` process, over stdio
and over streamable HTTP on 127.0.0.1.

Every tool is called; refused changes come back as MCP tool errors carrying the CLI's own line;
concurrent clients claiming the same tasks on one store each win a task at most once.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import anyio
from conftest import run_team
from mcp import ClientSession
from mcpkit import call, http_server, http_session, ok, stdio_session

from orchestrator.team.roster import Team

TOOLS = {"task_create", "task_update", "task_get", "task_list", "task_blocked", "task_critical", "task_claim",
         "message_send", "message_broadcast", "inbox_read", "team_status"}


async def every_tool(s: ClientSession, root: Path) -> None:
    listed = {t.name for t in (await s.list_tools()).tools}
    assert listed == TOOLS

    a = json.loads(await ok(s, "task_create", subject="design", name="design", estimate=5))
    b = json.loads(await ok(s, "task_create", subject="build", blocked_by=["design"], estimate=10))
    c = json.loads(await ok(s, "task_create", subject="ship", blocked_by=[b["id"]]))
    assert (a["ready"], b["ready"], b["waiting_on"]) == (True, False, [a["id"]])

    assert "design" in await ok(s, "task_list", ready=True)
    assert "build" not in await ok(s, "task_list", ready=True)
    blocked = await ok(s, "task_list", blocked=True)
    assert "build" in blocked and "ship" in blocked
    chains = await ok(s, "task_blocked", task=c["id"])
    assert f"#{a['id']}" in chains and f"#{b['id']}" in chains
    crit = json.loads(await ok(s, "task_critical"))
    assert crit["path"] == [a["id"], b["id"], c["id"]]

    got = json.loads(await ok(s, "task_claim", task="design"))
    assert (got["status"], got["owner"]) == ("in_progress", "claude")
    done = json.loads(await ok(s, "task_update", task=a["id"], status="completed", result="spec written"))
    assert (done["status"], done["result"]) == ("completed", "spec written")
    assert json.loads(await ok(s, "task_get", task=b["id"]))["ready"] is True

    # the store on disk says the same, through the CLI
    shown = json.loads(run_team(root, "task", "show", "design", "--json").stdout)
    assert (shown["status"], shown["owner"], shown["result"]) == ("completed", "claude", "spec written")

    Team(root).add("alice", "coder")
    assert "sent" in await ok(s, "message_send", to="lead", text="design is done")
    assert "design is done" in await ok(s, "inbox_read", name="lead", peek=True)
    assert "design is done" in await ok(s, "inbox_read", name="lead", peek=True)  # peek consumes nothing
    assert run_team(root, "send", "claude", "thanks for the design").returncode == 0
    mine = await ok(s, "inbox_read")  # its own inbox by default: the client is a member
    assert "lead: thanks for the design" in mine and mine.endswith("none left unread")
    assert "no unread messages for claude" in await ok(s, "inbox_read")
    assert await ok(s, "message_broadcast", text="hello all") == "broadcast to alice"
    assert "hello all" in await ok(s, "inbox_read", name="alice", peek=True)
    status = await ok(s, "team_status")
    assert "tasks: 2 pending · 1 completed (1 ready)" in status and "alice" in status
    same = functools.partial(re.sub, r"heartbeat \S+ ago", "heartbeat … ago")  # seconds go by between the two
    assert same(status) == same(run_team(root, "status").stdout.strip())  # the same text as `team status`
    line = next(x for x in status.splitlines() if x.split()[:1] == ["claude"])
    assert line.split()[:5] == ["claude", "coder", "idle", "external", "-"]  # a member while it is connected


async def errors(s: ClientSession, root: Path) -> None:
    await ok(s, "task_create", subject="one", name="one")
    await ok(s, "task_create", subject="two", name="two", blocked_by=["one"])
    cases = [
        ("task_get", {"task": 99}, ["task", "show", "99"]),
        ("task_update", {"task": "one", "add_blocked_by": ["two"]}, ["task", "update", "one", "--add-blocked-by", "two"]),
        ("task_create", {"subject": "x", "name": "bad name/"}, ["task", "create", "x", "--name", "bad name/"]),
        ("task_create", {"subject": "x", "estimate": -5}, ["task", "create", "x", "--estimate=-5"]),
        ("task_update", {"task": "one", "status": "completed", "owner": "bad/owner"},
         ["task", "update", "one", "--status", "completed", "--owner", "bad/owner"]),
    ]
    for tool, args, cli in cases:
        text, err = await call(s, tool, **args)
        assert err, f"{tool}({args}) should fail, got {text}"
        line = run_team(root, *cli).stderr.strip()
        assert line and text == line, (tool, text, line)
    assert re.match(r"UnknownRef: ", (await call(s, "task_get", task=99))[0])
    assert (await call(s, "task_update", task="one", add_blocked_by=["two"]))[0].startswith("CycleError: ")
    text, err = await call(s, "task_claim", task="two")
    assert err and text.startswith("ConflictError: ")
    await ok(s, "task_claim", task="one")
    text, err = await call(s, "task_claim", task="one")
    assert err and text == "ConflictError: task #1 is in_progress, not pending"
    text, err = await call(s, "message_send", to="nobody", text="hi")
    assert err and "nobody" in text
    # nothing refused was written
    assert json.loads(run_team(root, "task", "show", "one", "--json").stdout)["blockedBy"] == []
    # a torn task file is named, not fatal, in a listing (as `team task list` does)
    (root / ".tasks" / "task_2.json").write_text("{torn")
    listing = await ok(s, "task_list")
    assert "one" in listing and "warning: task_2.json cannot be read" in listing


def test_every_tool_over_stdio(tmp_path):
    async def main():
        async with stdio_session(tmp_path) as s:
            await every_tool(s, tmp_path)

    anyio.run(main)


def test_every_tool_over_http(tmp_path):
    async def main(url):
        async with http_session(url) as s:
            await every_tool(s, tmp_path)

    with http_server(tmp_path) as url:
        anyio.run(main, url)


def test_errors_are_mcp_tool_errors_with_the_cli_line_stdio(tmp_path):
    async def main():
        async with stdio_session(tmp_path) as s:
            await errors(s, tmp_path)

    anyio.run(main)


def test_errors_are_mcp_tool_errors_with_the_cli_line_http(tmp_path):
    async def main(url):
        async with http_session(url) as s:
            await errors(s, tmp_path)

    with http_server(tmp_path) as url:
        anyio.run(main, url)


N = 12


async def _claim_all(s: ClientSession, owner: str, won: dict[str, list[int]]) -> None:
    for tid in range(1, N + 1):
        text, err = await call(s, "task_claim", task=tid, owner=owner)
        if not err:
            won[owner].append(json.loads(text)["id"])
        else:
            assert text.startswith("ConflictError: "), text


def _check_claims(root: Path, won: dict[str, list[int]]) -> None:
    claimed = sorted(i for ids in won.values() for i in ids)
    assert claimed == list(range(1, N + 1)), won  # each task once, none lost
    tasks = {t["id"]: t for t in json.loads(run_team(root, "task", "list", "--json").stdout)}
    for owner, ids in won.items():
        for i in ids:
            assert (tasks[i]["owner"], tasks[i]["status"], tasks[i]["attempts"]) == (owner, "in_progress", 1)


def test_concurrent_stdio_clients_on_one_store_claim_each_task_once(tmp_path):
    for i in range(N):
        assert run_team(tmp_path, "task", "create", f"t{i}").returncode == 0
    won: dict[str, list[int]] = {"ann": [], "bob": [], "cy": []}

    async def client(owner: str) -> None:
        async with stdio_session(tmp_path, owner) as s:
            await _claim_all(s, owner, won)
            for i in range(5):
                await ok(s, "task_create", subject=f"{owner} {i}")

    async def main():
        async with anyio.create_task_group() as tg:
            for owner in won:
                tg.start_soon(client, owner)

    anyio.run(main)
    _check_claims(tmp_path, won)
    tasks = json.loads(run_team(tmp_path, "task", "list", "--json").stdout)  # creates lost nothing either
    assert sorted(t["id"] for t in tasks) == list(range(1, N + 16))
    assert sorted(t["subject"] for t in tasks[N:]) == sorted(f"{o} {i}" for o in won for i in range(5))


def test_concurrent_http_sessions_on_one_server_claim_each_task_once(tmp_path):
    for i in range(N):
        assert run_team(tmp_path, "task", "create", f"t{i}").returncode == 0
    won: dict[str, list[int]] = {"ann": [], "bob": [], "cy": []}

    async def client(url: str, owner: str) -> None:
        async with http_session(url) as s:
            await _claim_all(s, owner, won)

    async def main(url):
        async with anyio.create_task_group() as tg:
            for owner in won:
                tg.start_soon(client, url, owner)

    with http_server(tmp_path, "lead") as url:  # one server, claiming for three owners: the lead's right
        anyio.run(main, url)
    _check_claims(tmp_path, won)


def test_describe_prints_the_tool_list_and_its_token_cost(team):
    r = team("mcp", "--describe")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert {line.split()[0] for line in lines[:-1]} == TOOLS
    m = re.match(r"11 tools, (\d+) tokens", lines[-1])
    assert m and int(m.group(1)) <= 3000
    data = json.loads(team("mcp", "--describe", "--json").stdout)
    assert {t["name"] for t in data["tools"]} == TOOLS
    assert data["tokens"] == int(m.group(1))


def test_bad_caller_name_and_taken_port_are_one_line_errors(team):
    r = team("mcp", "--as", "no/slash", "--describe")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "InvalidName" in r.stderr
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        r = team("mcp", "--http", "--port", str(s.getsockname()[1]))
    assert r.returncode == 2 and "UserError: cannot listen on 127.0.0.1" in r.stderr and "Traceback" not in r.stderr


def _next_cursor(page: str) -> int | None:
    m = re.search(r"next page: \w+\((?:.*, )?cursor=(\d+)\)$", page)
    return int(m.group(1)) if m else None


def test_reads_come_in_pages_that_state_the_total_and_the_next_call(tmp_path):
    from orchestrator.mcpserver.paging import MAX_CHARS
    from orchestrator.tasks.store import TaskStore
    from orchestrator.team.inbox import Bus

    root = tmp_path
    long = "port the handler to the new client and keep its retries, " * 3
    # 300 tasks, each waiting on the one before (a chain: every task but the first is blocked)
    TaskStore(root).create_many([{"subject": f"{i:03d} {long}", "blockedBy": [("new", i - 1)] if i else []}
                                 for i in range(300)])

    async def main():
        async with stdio_session(root, "ann") as s:
            first = await ok(s, "task_list")
            assert len(first) <= MAX_CHARS + 200
            lines = first.splitlines()
            assert re.fullmatch(r"— (\d+) of 300 tasks \(#1–#\1\); next page: task_list\(cursor=\1\)", lines[-1])
            await ok(s, "task_create", subject="late")  # made between two pages: on a later page, none shifts
            seen, page = [], first
            while True:
                seen += [int(m) for m in re.findall(r"^\[ \] #(\d+):", page, re.M)]
                cursor = _next_cursor(page)
                if cursor is None:
                    break
                page = await ok(s, "task_list", cursor=cursor)
            assert page.splitlines()[-1].startswith("— ") and "next page" not in page
            assert seen == list(range(1, 302))  # every task once, in order, the late one last
            # filters are repeated in the next call
            small = await ok(s, "task_list", blocked=True, limit=10)
            assert small.splitlines()[-1] == ("— 10 of 299 matching tasks (301 in all) (#2–#11); next page: "
                                              "task_list(blocked=true, cursor=11)")
            # blocked chains: a page of them, then the next
            chains = await ok(s, "task_blocked", limit=3)
            assert re.findall(r"^#(\d+) ", chains, re.M) == ["1", "2", "3"] and _next_cursor(chains) == 3
            more = await ok(s, "task_blocked", limit=3, cursor=3)
            assert re.findall(r"^#(\d+) ", more, re.M) == ["4", "5", "6"]
            # the critical path and its waves, paged the same way
            crit = json.loads(await ok(s, "task_critical", limit=50))
            assert (crit["path"], crit["path_length"], crit["wave_count"]) == (list(range(1, 51)), 300, 300)
            assert crit["waves"] == [[1, 301], *([i] for i in range(2, 50))]  # 50 ids: the late task runs at once
            assert crit["next"] == "task_critical(limit=50, cursor=49)"
            rest = json.loads(await ok(s, "task_critical", limit=50, cursor=49))
            assert rest["first_wave"] == 50 and rest["waves"][0] == [50]
            # an inbox: consumed a page at a time, the rest left unread
            bus = Bus(root)
            for i in range(45):
                bus.send("ann", f"note {i}", sender="lead")
            peeked = await ok(s, "inbox_read", peek=True, limit=10, cursor=40)
            assert re.findall(r"note (\d+)", peeked) == ["40", "41", "42", "43", "44"]
            read = await ok(s, "inbox_read")
            assert re.findall(r"note (\d+)", read) == [str(i) for i in range(20)]
            assert read.endswith("— 20 messages read; 25 more unread: call inbox_read again")
            read = await ok(s, "inbox_read", limit=30)
            assert read.endswith("— 25 messages read; none left unread")
            # one task: long text is cut, saying where the rest is
            big = json.loads(await ok(s, "task_create", subject="big", description="x" * 50_000))
            got = json.loads(await ok(s, "task_get", task=big["id"]))
            assert len(got["description"]) < 4_200 and got["description"].endswith(
                f"more characters); `team task show {big['id']}` has it all")

    anyio.run(main)
