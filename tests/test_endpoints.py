"""Per-model endpoints (a plan's `models:`: base_url and the NAME of the variable holding the key)
and auth headers from the environment for URL MCP servers: real `team run`, the real openai client
against two scripted servers on two ports, each checking its own key, and a real MCP HTTP server
made with the SDK that checks its header."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import run_team
from util import llm_env, tasks_by_name

from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

KEY_A = "sk-provider-a-0f1e2d3c4b5a"
KEY_B = "sk-provider-b-9a8b7c6d5e4f"
KEY_OPENAI = "sk-openai-default-77aa88bb"

PLAN = """\
name: mixed
model: gpt-4o-mini
models:
  model-a: {{base_url: "{a}", api_key_env: PROVIDER_A_API_KEY, price: {{input: 1, output: 2}}}}
  model-b: {{base_url: "{b}", api_key_env: PROVIDER_B_TOKEN}}
team:
  - {{name: alice, role: coder, model: model-a}}
  - {{name: bob, role: coder, model: model-b}}
tasks:
  - {{id: a, assignee: alice, prompt: Say a.}}
  - {{id: b, assignee: bob, prompt: Say b.}}
"""


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_two_teammates_on_two_providers_each_request_lands_on_its_server_with_its_key(tmp_path):
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    # alice's model echoes its own key back: what the run keeps of it must not hold it
    with ScriptedServer({"alice": [Reply(content=f"a done; my key is {KEY_A}", usage=usage)]}, api_key=KEY_A) as a, \
            ScriptedServer({"bob": [Reply(content="b done", usage=usage)]}, api_key=KEY_B) as b:
        (tmp_path / "plan.yaml").write_text(PLAN.format(a=a.base_url, b=b.base_url))
        env = {**llm_env("http://127.0.0.1:9/v1", KEY_OPENAI), "PROVIDER_A_API_KEY": KEY_A,
               "PROVIDER_B_TOKEN": KEY_B, "TEAM_LLM_MAX_RETRIES": "0"}
        r = run_team(tmp_path, "run", "plan.yaml", "--json", **env)
        assert r.returncode == 0, r.stdout + r.stderr
        a.assert_complete()
        b.assert_complete()
        # each server saw only its teammate, with its model, and let it in with its own key (else: 401)
        assert [(q.agent, q.body["model"], q.auth) for q in a.chat_requests()] == [("alice", "model-a", True)]
        assert [(q.agent, q.body["model"], q.auth) for q in b.chat_requests()] == [("bob", "model-b", True)]
    tasks = tasks_by_name(tmp_path)
    assert tasks["a"]["result"] == "a done; my key is [REDACTED]" and tasks["b"]["result"] == "b done"
    # model-a's price came from the plan; model-b has none (no dollar budget here, so none is needed)
    summary = json.loads(r.stdout.strip().splitlines()[-1])["usage"]
    assert {m["name"]: m["cost"] for m in summary["models"]} == {"model-a": (100 * 1 + 10 * 2) / 1e6,
                                                                 "model-b": None}
    leaked = [str(p) for p, data in files_under(tmp_path).items()
              if any(k.encode() in data for k in (KEY_A, KEY_B, KEY_OPENAI))]
    assert leaked == []
    assert "PROVIDER_A_API_KEY" in (tmp_path / "plan.yaml").read_text()  # the plan names the variable only


def test_a_models_key_variable_that_is_not_set_or_not_named_like_a_credential_is_refused(tmp_path):
    (tmp_path / "plan.yaml").write_text(PLAN.format(a="http://127.0.0.1:9/v1", b="http://127.0.0.1:9/v1"))
    env = {**llm_env("http://127.0.0.1:9/v1", KEY_OPENAI), "PROVIDER_A_API_KEY": KEY_A}
    r = run_team(tmp_path, "run", "plan.yaml", **env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == ("PlanError: plan.yaml:8: team[1]: bob talks to model 'model-b', whose key is read "
                                "from $PROVIDER_B_TOKEN (models.model-b.api_key_env), which is not set: export it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]
    (tmp_path / "plan.yaml").write_text(PLAN.format(a="http://127.0.0.1:9/v1", b="http://127.0.0.1:9/v1")
                                        .replace("PROVIDER_B_TOKEN", "PROVIDER_B"))
    r = run_team(tmp_path, "plan", "check", "plan.yaml", **env, PROVIDER_B="x")
    assert r.returncode == 2
    assert r.stderr.startswith("PlanError: plan.yaml:5: models.model-b.api_key_env: Value error, 'PROVIDER_B' does "
                               "not look like the name of a credential"), r.stderr
    assert os.environ.get("PROVIDER_B") is None


DOCS_TOKEN = "tok-docs-5e6f7a8b9c0d1e2f"
MCP_PLAN = """\
name: docs
mcp_servers:
  - {{name: docs, url: "{url}", headers: {{Authorization: "Bearer $DOCS_TOKEN"}}}}
team:
  - {{name: alice, role: coder}}
tasks:
  - {{id: look, assignee: alice, prompt: Ask the docs server who you are.}}
"""


@contextlib.contextmanager
def auth_server(token: str):
    """tests/mcp_auth_server.py in a process of its own: (its URL, its stderr lines so far)."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("mcp_auth_server.py"))],
                            env={**os.environ, "EXPECTED_TOKEN": token}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_url_mcp_server_gets_its_auth_header_from_the_environment_and_the_value_is_kept_out_of_files(tmp_path):
    script = {"alice": [Reply(tool_calls=[tool_call("docs__whoami", {})]), Reply(content="the docs server knows me")]}
    with auth_server(DOCS_TOKEN) as (url, proc), ScriptedServer(script) as srv:
        (tmp_path / "plan.yaml").write_text(MCP_PLAN.format(url=url))
        env = llm_env(srv.base_url, KEY_OPENAI)
        # the variable the header reads is not set: refused before anything is written
        r = run_team(tmp_path, "run", "plan.yaml", **env)
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.strip() == ("PlanError: plan.yaml:3: mcp_servers[0].headers: mcp server 'docs' sends "
                                    "$DOCS_TOKEN in its headers, which is not set: export it")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]
        r = run_team(tmp_path, "run", "plan.yaml", **env, DOCS_TOKEN=DOCS_TOKEN)
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
        # the server let the teammate's tool call in (it refuses any request without the header) ...
        tool_msg = next(m for m in srv.chat_requests("alice")[1].body["messages"] if m["role"] == "tool")
        assert tool_msg["content"].startswith("authorized; you sent Bearer [REDACTED]"), tool_msg
        proc.terminate()
        _, refused = proc.communicate(timeout=30)
        assert "refused" not in refused, refused
    # ... and the header's value reached no file under the root (the plan names the variable only)
    assert tasks_by_name(tmp_path)["look"]["status"] == "completed"
    leaked = [str(p) for p, data in files_under(tmp_path).items() if DOCS_TOKEN.encode() in data]
    assert leaked == []


def test_headers_need_a_credential_named_variable_and_a_url_server(tmp_path):
    bad = MCP_PLAN.format(url="http://127.0.0.1:9/mcp").replace("$DOCS_TOKEN", "$DOCS")
    (tmp_path / "plan.yaml").write_text(bad)
    r = run_team(tmp_path, "plan", "check", "plan.yaml", TEAM_MODEL="gpt-4o-mini", DOCS="x")
    assert r.returncode == 2 and "plan.yaml:3: mcp_servers[0].headers: Value error, header 'Authorization': $DOCS " \
                                 "does not look like the name of a credential" in r.stderr, r.stderr
    stdio = MCP_PLAN.format(url="x").replace('url: "x"', "command: mcp-server-time")
    (tmp_path / "plan.yaml").write_text(stdio)
    r = run_team(tmp_path, "plan", "check", "plan.yaml", TEAM_MODEL="gpt-4o-mini")
    assert r.returncode == 2 and "`headers` go with `url` (HTTP), not `command`" in r.stderr, r.stderr
