"""`tool_call` hooks (docs/hooks.md, tools/hookgate.py): a shell command sees a teammate's tool call
before it runs and may refuse it (exit 2), like Claude Code's PreToolUse. Driven through the real
`team run`, the real openai client against the scripted OpenAI-compatible server on 127.0.0.1, real
shell hooks, and for MCP tools a real MCP server made with the official SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import util
from conftest import run_team
from test_hooks import hook_log, payloads
from util import tasks_by_name

from orchestrator.core.hooks import HooksConfig, ToolCall
from orchestrator.hooks.dispatch import HookDispatcher
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

KEY = "sk-toolhook-secret-7c2e9f1a4b"
FIXTURE = Path(__file__).parent / "mcp_fixture_server.py"
# Keeps every payload it gets as a file of its own, named by the tool.
KEEP = 'f=$(mktemp -p {dir} "call.XXXXXX"); cat > "$f"; mv "$f" "$f.json"'
# Refuses any rm, saying why on stderr.
GUARD = 'echo "rm is not allowed here: move files to trash/ instead" >&2; exit 2'


def tool_results(body: dict) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m.get("role") == "tool"}


def run_script(root: Path, script: dict) -> subprocess.CompletedProcess:
    """`team run plan.yaml` against the scripted model server; every step of ``script`` used."""
    with ScriptedServer(script) as srv:
        r = run_team(root, "run", "plan.yaml", **util.llm_env(srv.base_url, KEY))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    return r


def test_a_tool_call_hook_refuses_rm_the_model_reads_why_and_other_calls_go_through(tmp_path):
    got = tmp_path / "got"
    got.mkdir()
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "data.txt").write_text("keep me\n")
    (tmp_path / "notes.txt").write_text("the notes\n")
    (tmp_path / "plan.yaml").write_text(f"""\
name: guard
team:
  - {{name: alice, role: coder}}
hooks:
  tool_call:
    - run: '{GUARD}'
      match: "bash(rm *)"
    - run: '{KEEP.format(dir=got)}'
    - run: 'env > {tmp_path}/hook-env.txt'
      match: read_file
tasks:
  - id: clean
    assignee: alice
    prompt: Clean up.
""")

    def after(body: dict) -> Reply:
        results = tool_results(body)
        refused, read, echoed = results["c-rm"], results["c-read"], results["c-echo"]
        assert refused.startswith("refused by a tool_call hook (`echo \"rm is not allowed here")
        assert "rm is not allowed here: move files to trash/ instead" in refused and "was not run" in refused
        assert "the notes" in read and "[REDACTED]" in echoed and KEY not in echoed
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed",
                                                           "result": "could not rm; left it"})])

    script = {"alice": [
        Reply(tool_calls=[tool_call("bash", {"command": "cd . && rm -rf precious"}, id="c-rm"),
                          tool_call("read_file", {"path": "notes.txt"}, id="c-read"),
                          tool_call("bash", {"command": f"echo {KEY} > echoed.txt; cat echoed.txt"}, id="c-echo")]),
        after,
    ]}
    run_script(tmp_path, script)
    # the refused command never ran; the others did
    assert (tmp_path / "precious" / "data.txt").read_text() == "keep me\n"
    assert (tmp_path / "echoed.txt").exists()
    assert tasks_by_name(tmp_path)["clean"]["status"] == "completed"
    # the guard ran for the rm only (its matcher), the keeper for every call up to the refusal
    log = [(x["command"][:4], x["status"]) for x in hook_log(tmp_path) if x["event"] == "tool_call"]
    assert log == [("echo", "veto"), ("f=$(", "ok"), ("env ", "ok"), ("f=$(", "ok"), ("f=$(", "ok")]
    # hooks run with the allow-listed environment: no key of the lead's
    env = dict(x.split("=", 1) for x in (tmp_path / "hook-env.txt").read_text().splitlines() if "=" in x)
    assert env["TEAM_HOOK_EVENT"] == "tool_call" and "OPENAI_API_KEY" not in env
    seen = payloads(got)
    assert [p["tool"]["name"] for p in seen] == ["read_file", "bash", "task_update"]
    read = seen[0]
    assert read["event"] == "tool_call" and read["teammate"] == "alice"
    assert read["tool"]["arguments"] == {"path": "notes.txt"} and read["tool"]["risk"] == "read"
    assert read["tool"]["server"] is None and read["tool"]["call_id"] == "c-read"
    assert (read["task"]["plan_task"], read["task"]["owner"], read["task"]["status"]) == \
        ("clean", "alice", "in_progress")
    assert read["run"]["plan"] == "guard"
    # the payload is scrubbed of the lead's secrets: the key the model quoted is not in it
    assert KEY not in seen[1]["tool"]["arguments"]["command"] and "[REDACTED]" in seen[1]["tool"]["arguments"]["command"]
    assert not any(KEY in p.read_text() for p in got.glob("*.json"))
    assert KEY not in (tmp_path / ".team" / "hooks.jsonl").read_text()


def test_a_hook_matches_a_teammates_mcp_tool_by_its_claude_code_name(tmp_path):
    got = tmp_path / "got"
    got.mkdir()
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "poker.md").write_text(
        "---\nname: poker\ndescription: Pokes.\ntools: [read_file]\nmcp_tools: [fx.poke, fx.peek]\n---\nPoke.\n")
    (tmp_path / "plan.yaml").write_text(f"""\
name: mcpguard
mcp_servers:
  - {{name: fx, command: {sys.executable}, args: ['{FIXTURE}']}}
team:
  - {{name: alice, role: poker}}
hooks:
  tool_call:
    - run: 'echo "no poking" >&2; exit 2'
      match: "mcp__fx__poke"
    - run: '{KEEP.format(dir=got)}'
      match: ["fx__*"]
tasks:
  - id: poke
    assignee: alice
    prompt: Poke and peek.
""")

    def after(body: dict) -> Reply:
        results = tool_results(body)
        assert "no poking" in results["c-poke"] and "was not run" in results["c-poke"]
        assert results["c-peek"] == "value of k"
        return Reply(content="peeked only")

    script = {"alice": [
        Reply(tool_calls=[tool_call("fx__poke", {"key": "k"}, id="c-poke"),
                          tool_call("fx__peek", {"key": "k"}, id="c-peek")]),
        after,
    ]}
    run_script(tmp_path, script)
    seen = payloads(got)
    assert [(p["tool"]["name"], p["tool"]["server"], p["tool"]["arguments"]) for p in seen] == \
        [("fx__peek", "fx", {"key": "k"})]


def test_a_tool_call_hook_that_crashes_or_hangs_refuses_the_call_and_is_reported(tmp_path):
    (tmp_path / "plan.yaml").write_text("""\
name: broken
team:
  - {name: alice, role: coder}
hooks:
  tool_call:
    - run: 'exit 3'
      match: write_file
    - run: 'sleep 300'
      timeout: 0.5
      match: "bash(touch *)"
tasks:
  - id: w
    assignee: alice
    prompt: Write.
""")

    def after(body: dict) -> Reply:
        results = tool_results(body)
        assert results["c-w"].startswith("refused: the tool_call hook that guards this call failed")
        assert "exited 3" in results["c-w"]
        assert "timed out after" in results["c-t"] and "its process group was killed" in results["c-t"]
        return Reply(content="could not write")

    script = {"alice": [
        Reply(tool_calls=[tool_call("write_file", {"path": "out.txt", "content": "x"}, id="c-w"),
                          tool_call("bash", {"command": "touch made.txt"}, id="c-t")]),
        after,
    ]}
    r = run_script(tmp_path, script)
    assert not (tmp_path / "out.txt").exists() and not (tmp_path / "made.txt").exists()
    assert "hook: hook `exit 3` (tool_call, task #1) exited 3" in r.stderr
    assert "hook: hook `sleep 300` (tool_call, task #1) timed out" in r.stderr
    assert [x["status"] for x in hook_log(tmp_path)] == ["failed", "timeout"]


def test_match_is_for_tool_call_hooks_only_and_a_bad_matcher_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "plan.yaml").write_text("""\
name: bad
hooks:
  task_completed:
    - {run: ./check.sh, match: bash}
tasks:
  - {id: a, run: echo a}
""")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2
    assert "plan.yaml:3: hooks.task_completed:" in r.stderr
    assert "task_completed[0] has `match:`, which only tool_call hooks take" in r.stderr
    (tmp_path / "plan.yaml").write_text("""\
name: bad
hooks:
  tool_call:
    - {run: ./check.sh, match: "bash(rm *"}
tasks:
  - {id: a, run: echo a}
""")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2
    assert "plan.yaml:4: hooks.tool_call[0].match:" in r.stderr and "must be TOOL or TOOL(PATTERN)" in r.stderr
    assert not (tmp_path / ".tasks").exists() and not (tmp_path / ".team").exists()


def test_matchers_take_tool_globs_patterns_and_mcp_names(tmp_path):
    config = HooksConfig.model_validate({"tool_call": [
        {"run": "exit 2", "match": "bash(git push*)"},
        {"run": "exit 2", "match": ["write_file", "edit_file(migrations/*)"]},
        {"run": "exit 2", "match": "mcp__*"},
    ]})
    push, write, edit, mcp = config.tool_call[0], config.tool_call[1], config.tool_call[1], config.tool_call[2]
    bash = ToolCall("bash", {"command": "make && git push origin"}, "execute",
                    subjects=("make && git push origin", "make", "git push origin"))
    assert push.matches(bash) and not write.matches(bash) and not mcp.matches(bash)
    assert edit.matches(ToolCall("edit_file", {}, "write", subjects=("migrations/001.sql",)))
    assert not edit.matches(ToolCall("edit_file", {}, "write", subjects=("src/a.py",)))
    assert mcp.matches(ToolCall("git__log", {}, "read", server="git", subjects=("{}",)))
    assert not mcp.matches(ToolCall("git__log", {}, "read", subjects=("{}",)))  # a built-in named like one
    hooks = HookDispatcher(config, tmp_path, plan="p")
    verdict = hooks.tool_call(ToolCall("read_file", {"path": "a"}, "read", subjects=("a",)), teammate="alice")
    assert not verdict.vetoed and hooks.runs == []  # no hook matched: none ran
    hooks.close()


def test_team_chat_lead_calls_pass_the_tool_call_hooks_of_team_hooks_yaml(tmp_path):
    from orchestrator.chat.session import ChatSession
    from orchestrator.llm.client import LLMClient
    from orchestrator.llm.types import LLMConfig

    (tmp_path / ".team").mkdir()
    (tmp_path / ".team" / "hooks.yaml").write_text(f"tool_call:\n  - run: '{GUARD}'\n    match: \"bash(rm *)\"\n")
    (tmp_path / "keep.txt").write_text("kept\n")

    def after(body: dict) -> Reply:
        results = tool_results(body)
        assert "rm is not allowed here" in results["c-rm"] and "exit code: 0" in results["c-touch"]
        return Reply(content="made one file, removed none")

    script = {"lead": [Reply(tool_calls=[tool_call("bash", {"command": "rm keep.txt"}, id="c-rm"),
                                         tool_call("bash", {"command": "touch made.txt"}, id="c-touch")]),
                       after]}
    with ScriptedServer(script) as srv:
        model = LLMClient(LLMConfig(model="gpt-4o-mini", base_url=srv.base_url, api_key="k-local", max_retries=0))
        with ChatSession(tmp_path, model_for=lambda role: model, heartbeat_every=0.05) as s:
            assert s.handle("tidy up").result.status == "completed"
        srv.assert_complete()
    assert (tmp_path / "keep.txt").read_text() == "kept\n" and (tmp_path / "made.txt").exists()
