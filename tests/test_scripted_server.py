"""The scripted OpenAI-compatible server: routing, strictness, recording, wire format, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest
from conftest import REPO, team_env

from orchestrator.llm.client import LLMClient
from orchestrator.llm.script import Fault, Reply, step_from_dict, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.llm.types import LLMConfig, ToolCall


def post(url: str, body: dict, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def agent_messages(name: str, text: str) -> list[dict]:
    return [{"role": "system", "content": f"You are {name}, a coder on team demo."}, {"role": "user", "content": text}]


def client(srv: ScriptedServer, key: str = "sk-local") -> LLMClient:
    return LLMClient(LLMConfig(model="scripted", base_url=srv.base_url, api_key=key, max_retries=0))


def test_stream_wire_format(tmp_path):
    reply = Reply(content="hey", tool_calls=[tool_call("bash", {"command": "ls"}, id="c1")], chunk_size=10,
                  usage={"prompt_tokens": 7, "completion_tokens": 3, "cached_tokens": 2})
    with ScriptedServer([reply]) as srv:
        body = {"model": "m", "messages": [], "stream": True, "stream_options": {"include_usage": True}}
        status, raw = post(srv.base_url + "/chat/completions", body)
    assert status == 200
    events = [line.removeprefix("data: ") for line in raw.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["delta"] if c["choices"] else c["usage"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "hey"},
        {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "bash", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"command"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ': "ls"}'}}]},
        {},
        {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 2}},
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and {c["model"] for c in chunks} == {"m"}


def test_agents_get_their_own_scripts_concurrently():
    per_agent = {
        name: [Reply(content=f"{name} step {i}") for i in range(5)] for name in ("alice", "bob", "carol")
    }
    results: dict[str, list[str]] = {}
    with ScriptedServer(per_agent) as srv:
        llm = client(srv)

        def work(name: str) -> None:
            results[name] = [llm.complete(agent_messages(name, f"go {i}")).content for i in range(5)]

        threads = [threading.Thread(target=work, args=(n,)) for n in per_agent]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        srv.assert_complete()
        assert {r.agent for r in srv.chat_requests()} == {"alice", "bob", "carol"}
        assert len(srv.chat_requests("alice")) == 5
    assert results == {name: [f"{name} step {i}" for i in range(5)] for name in per_agent}


def test_route_by_header_and_fallback_script():
    with ScriptedServer({"bob": [Reply(content="for bob")], "*": [Reply(content="anyone")]}) as srv:
        status, raw = post(srv.base_url + "/chat/completions", {"model": "m", "messages": []}, {"X-Scripted-Agent": "bob"})
        assert status == 200 and json.loads(raw)["choices"][0]["message"]["content"] == "for bob"
        # "You are bobby" is not bob: word boundary
        assert client(srv).complete(agent_messages("bobby", "hi")).content == "anyone"
        srv.assert_complete()


def test_exhausted_and_unrouted_requests_are_errors():
    with ScriptedServer({"alice": [Reply(content="one")]}) as srv:
        assert client(srv).complete(agent_messages("alice", "first")).content == "one"
        status, raw = post(srv.base_url + "/chat/completions", {"model": "m", "messages": agent_messages("alice", "again")})
        assert status == 400
        assert json.loads(raw)["error"]["message"] == "scripted server: script 'alice' exhausted after 1 step: 'again'"
        status, _ = post(srv.base_url + "/chat/completions", {"model": "m", "messages": agent_messages("zed", "x")})
        assert status == 400
        with pytest.raises(AssertionError) as exc:
            srv.assert_complete()
    assert str(exc.value) == (
        "scripted server: script 'alice' exhausted after 1 step: 'again'; "
        "no script for this request (agent None; scripts: ['alice'])"
    )


def test_unused_steps_fail_assert_complete():
    with ScriptedServer([Reply(content="a"), Fault(500)]) as srv:
        client(srv).complete([{"role": "user", "content": "x"}])
        assert srv.remaining() == {"*": 1}
        with pytest.raises(AssertionError, match=r"script '\*': 1 of 2 steps unused"):
            srv.assert_complete()


def test_callable_step_sees_the_request_and_errors_are_recorded():
    seen: list[dict] = []

    def echo(body: dict) -> dict:
        seen.append(body)
        return {"tool_calls": [{"name": "echo", "arguments": {"n": len(body["messages"])}}]}

    def broken(body: dict):
        raise KeyError("oops")

    with ScriptedServer([echo, broken]) as srv:
        done = client(srv).complete([{"role": "user", "content": "x"}], tools=[])
        assert done.tool_calls == [ToolCall(id="call_1_0", name="echo", arguments='{"n": 1}')]
        assert seen[0]["messages"] == [{"role": "user", "content": "x"}]
        with pytest.raises(Exception, match="raised KeyError"):
            client(srv).complete([{"role": "user", "content": "y"}])
        assert srv.errors == ["script '*' step 2 raised KeyError: 'oops'"]


def test_requests_recorded_without_the_key_and_key_checked():
    with ScriptedServer([Reply(content="ok")], api_key="sk-right") as srv:
        assert client(srv, "sk-right").complete([{"role": "user", "content": "x"}]).content == "ok"
        with pytest.raises(Exception, match="401 Unauthorized"):
            client(srv, "sk-wrong").complete([{"role": "user", "content": "x"}])
        status, _ = post(srv.base_url + "/chat/completions", {"model": "m", "messages": []})
        assert status == 401
        assert [r.auth for r in srv.requests] == [True, True, False]
        assert all("authorization" not in r.headers and "sk-right" not in json.dumps(r.headers) for r in srv.requests)
        srv.assert_complete()


def test_step_from_dict_json_forms():
    assert step_from_dict("hi") == Reply(content="hi")
    assert step_from_dict({"status": 429, "retry_after": 2}) == Fault(status=429, retry_after=2)
    assert step_from_dict({"content": "c", "tool_calls": [{"name": "t", "arguments": {"a": 1}}]}) == Reply(
        content="c", tool_calls=[tool_call("t", '{"a": 1}')]
    )
    with pytest.raises(TypeError, match="a script step is a dict, str, Reply or Fault, not int"):
        step_from_dict(3)


def test_cli_serves_a_json_script(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"content": "from the CLI"},
        {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}, "id": "t1"}]},
    ]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.llm.scripted", str(script), "--port", "0"],
        cwd=REPO, env=team_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving {script} at http://127.0.0.1:")
        base_url = line.split(" at ")[1].split()[0]
        llm = LLMClient(LLMConfig(model="m", base_url=base_url, api_key="x", max_retries=0))
        assert llm.complete([{"role": "user", "content": "1"}]).content == "from the CLI"
        assert llm.complete([{"role": "user", "content": "2"}], stream=False).tool_calls == [
            ToolCall(id="t1", name="bash", arguments='{"command": "echo hi"}')
        ]
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=10)
    assert (proc.returncode, out, err) == (0, "", "")  # SIGTERM: clean stop, every step used, no errors


def test_cli_refuses_a_bad_script(tmp_path):
    script = tmp_path / "bad.json"
    script.write_text('[{"content": "x", "bogus": 1}]')
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.llm.scripted", str(script)],
        cwd=REPO, env=team_env(tmp_path), capture_output=True, text=True, timeout=30,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"{script}: not a usable script: TypeError: Reply.__init__() got an unexpected keyword argument 'bogus'\n"
    )
