"""An MCP server's tools in the tool pipeline (tools/mcptools.py), against a real server process
(tests/mcp_fixture_server.py, made with the SDK) through the real client facade."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from tools_harness import Harness

from orchestrator.core.errors import UserError
from orchestrator.core.mcpspec import TOOL_NAME, McpServerSpec, allowed, tool_name
from orchestrator.mcpclient.connection import McpConnection
from orchestrator.mcpclient.hub import McpHub
from orchestrator.tools import ToolRegistry
from orchestrator.tools.mcptools import mcp_tools

FIXTURE = str(Path(__file__).resolve().parent / "mcp_fixture_server.py")


@pytest.fixture
def conn(tmp_path):
    hub = McpHub([McpServerSpec(name="fx", command=sys.executable, args=[FIXTURE], timeout=3)], root=tmp_path)
    try:
        yield hub.connect(hub.specs["fx"])
    finally:
        hub.close()


def test_names_are_valid_openai_tool_names_and_allow_lists_take_both_spellings():
    assert tool_name("git", "status") == "git__status"
    assert tool_name("fx", "a.b") == "fx__a_b" and tool_name("fx", "é/x") == "fx____x"
    assert TOOL_NAME.match(tool_name("s", "x" * 100)) and len(tool_name("s", "x" * 100)) == 64
    assert allowed("git", "status", None)
    assert allowed("git", "status", ("git.status",)) and allowed("git", "status", ("git__status",))
    assert allowed("git", "log", ("git.*",)) and allowed("git", "log", ("*",))
    assert not allowed("git", "log", ("git.status", "time.*"))


def test_colliding_names_are_a_clear_error_unless_the_allow_list_picks_one(conn):
    with pytest.raises(UserError, match=r"'a\.b' and 'a_b', which both become 'fx__a_b'"):
        mcp_tools(conn)
    assert sorted(t.name for t in mcp_tools(conn, ("fx.a_b", "fx.peek"))) == ["fx__a_b", "fx__peek"]


def test_calls_go_through_the_whole_pipeline(tmp_path, conn):
    tools = mcp_tools(conn, ("fx.fail", "fx.slow", "fx.peek", "fx.poke", "fx.big"))
    h = Harness(tmp_path, registry=ToolRegistry(tools))
    schema = {s["function"]["name"]: s["function"] for s in h.registry.schemas()}
    assert schema["fx__peek"]["parameters"]["required"] == ["key"]

    assert h.ok("fx__peek", {"key": "k"}) == "value of k"
    bad = h.call("fx__peek", {"nope": 1})  # refused before anything is sent
    assert bad.is_error and bad.stage == "validate" and "'key' is a required property" in bad.content
    failed = h.call("fx__fail", {"reason": "disk on fire"})  # the server's isError: the model reads it
    assert failed.is_error and failed.stage == "execute" and "disk on fire" in failed.content
    slow = h.call("fx__slow", {"seconds": 30})  # the spec's timeout (3 s) ends the wait
    assert slow.is_error and "did not answer within 3s" in slow.content
    big = h.call("fx__big", {"lines": 20000})  # bounded like any tool: head, tail, the rest saved
    assert big.full_output and Path(big.full_output).read_text().count("\n") >= 19999
    assert len(big.content) < 25_000 and "line 0" in big.content and "line 19999" in big.content

    h.ctx.mode = "plan"  # plan mode: the read-only tool runs, the others are refused
    assert h.ok("fx__peek", {"key": "k"}) == "value of k"
    assert h.call("fx__poke", {"key": "k"}).stage == "plan"

    logged = [(c["tool"], c["stage"]) for c in h.log()]
    assert logged == [("fx__peek", "ok"), ("fx__peek", "validate"), ("fx__fail", "execute"),
                      ("fx__slow", "execute"), ("fx__big", "ok"), ("fx__peek", "ok"), ("fx__poke", "plan")]


def test_a_closed_connection_refuses_calls_with_the_reason(tmp_path):
    spec = McpServerSpec(name="fx", command=sys.executable, args=[FIXTURE])
    c = McpConnection(spec, log=tmp_path / "fx.log").start()
    assert c.call("peek", {"key": "x"}).text == "value of x"
    c.close()
    from orchestrator.mcpclient.connection import McpServerDied

    with pytest.raises(McpServerDied, match=re.escape("mcp server 'fx'")):
        c.call("peek", {"key": "x"})


def test_a_servers_stderr_log_keeps_no_secret(tmp_path, monkeypatch):
    """A credential handed to a server by reference ($NAME) and printed on its stderr is scrubbed
    from .team/mcp/NAME.log once the server has stopped."""
    monkeypatch.setenv("MY_SERVICE_API_KEY", "sk-live-9a8b7c6d5e4f")
    spec = McpServerSpec(name="fx", command="sh",
                         args=["-c", f'echo "using key $SERVICE_KEY" >&2; exec {sys.executable} {FIXTURE}'],
                         env={"SERVICE_KEY": "$MY_SERVICE_API_KEY"})
    hub = McpHub([spec], root=tmp_path)
    try:
        assert hub.connect(spec).call("peek", {"key": "x"}).text == "value of x"
    finally:
        hub.close()
    log = (tmp_path / ".team" / "mcp" / "fx.log").read_text()
    assert "using key [REDACTED]" in log and "sk-live-9a8b7c6d5e4f" not in log
