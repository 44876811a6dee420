"""The LLM client through the real openai SDK over HTTP to the scripted server."""

from __future__ import annotations

import email.utils
import socket
import traceback

import pytest

from orchestrator.core.errors import ModelError, UserError
from orchestrator.llm import pricing
from orchestrator.llm.client import LLMClient
from orchestrator.llm.pricing import Usage
from orchestrator.llm.script import Fault, Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.llm.types import Completion, LLMConfig, RetryEvent, ToolCall

KEY = "sk-test-very-secret-0123456789"
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def server():
    servers: list[ScriptedServer] = []

    def start(script, **kw) -> ScriptedServer:
        srv = ScriptedServer(script, **kw).start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()


class Recorder:
    """Injected sleep/on_retry: records what the client would have waited."""

    def __init__(self):
        self.sleeps: list[float] = []
        self.events: list[RetryEvent] = []


def client_for(srv: ScriptedServer, rec: Recorder | None = None, *, model="gpt-4o-mini", rng=lambda: 1.0, **cfg):
    rec = rec or Recorder()
    config = LLMConfig(model=model, base_url=srv.base_url, api_key=KEY, **{"timeout": 10, **cfg})
    return LLMClient(config, sleep=rec.sleeps.append, rng=rng, on_retry=rec.events.append)


# -- text and tool calls ---------------------------------------------------


def test_streaming_text_arrives_in_pieces_and_whole(server):
    srv = server([Reply(content="Hello there, general Kenobi.", chunk_size=5)])
    pieces: list[str] = []
    done = client_for(srv).complete(USER, on_text=pieces.append)

    assert pieces == ["Hello", " ther", "e, ge", "neral", " Keno", "bi."]
    assert done.content == "Hello there, general Kenobi."
    assert (done.tool_calls, done.finish_reason, done.model) == ([], "stop", "gpt-4o-mini")
    (req,) = srv.chat_requests()
    assert req.body["stream"] is True
    assert req.body["stream_options"] == {"include_usage": True}
    assert req.body["messages"] == USER and req.body["model"] == "gpt-4o-mini"
    assert "tools" not in req.body
    srv.assert_complete()


def test_non_streaming_text_and_tool_call(server):
    srv = server([Reply(content="Reading.", tool_calls=[tool_call("read_file", {"path": "a.py"}, id="call_a")])])
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    done = client_for(srv).complete(USER, tools, stream=False)

    assert done.content == "Reading."
    assert done.tool_calls == [ToolCall(id="call_a", name="read_file", arguments='{"path": "a.py"}')]
    assert done.finish_reason == "tool_calls"
    assert srv.chat_requests()[0].body["tools"] == tools
    assert srv.chat_requests()[0].body["tool_choice"] == "auto"  # llama.cpp ignores tools without it
    assert "stream" not in srv.chat_requests()[0].body
    assert done.to_message() == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
        ],
    }


@pytest.mark.parametrize("interleave", [False, True])
def test_parallel_tool_calls_assembled_from_split_deltas(server, interleave):
    calls = [
        tool_call("read_file", {"path": "src/a.py", "offset": 10}, id="call_1"),
        tool_call("bash", {"command": "pytest -q tests/test_a.py"}, id="call_2"),
        tool_call("grep", {"pattern": "import requests", "path": "."}, id="call_3"),
    ]
    srv = server([Reply(tool_calls=calls, chunk_size=3, interleave=interleave)])
    done = client_for(srv).complete(USER)

    assert done.content is None
    assert done.finish_reason == "tool_calls"
    assert done.tool_calls == [
        ToolCall(id="call_1", name="read_file", arguments='{"path": "src/a.py", "offset": 10}'),
        ToolCall(id="call_2", name="bash", arguments='{"command": "pytest -q tests/test_a.py"}'),
        ToolCall(id="call_3", name="grep", arguments='{"pattern": "import requests", "path": "."}'),
    ]


@pytest.mark.parametrize("stream", [True, False])
def test_malformed_tool_call_json_is_returned_verbatim(server, stream):
    srv = server([Reply(tool_calls=[tool_call("write_file", '{"path": "a.txt", "content": "x', id="c1")])])
    done = client_for(srv).complete(USER, stream=stream)
    assert done.tool_calls == [ToolCall(id="c1", name="write_file", arguments='{"path": "a.txt", "content": "x')]


# -- usage and cost --------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_usage_with_cached_tokens_and_cost(server, stream):
    srv = server([Reply(content="ok", usage={"prompt_tokens": 1000, "completion_tokens": 100, "cached_tokens": 400})])
    done = client_for(srv, model="gpt-4o-mini").complete(USER, stream=stream)
    # gpt-4o-mini: $0.15 input, $0.075 cached input, $0.60 output per 1M tokens
    expected = (600 * 0.15 + 400 * 0.075 + 100 * 0.60) / 1_000_000
    assert done.usage.model_dump() == {
        "prompt_tokens": 1000, "completion_tokens": 100, "cached_tokens": 400, "cost": pytest.approx(expected), "calls": 1
    }


def test_unknown_model_has_no_cost(server):
    srv = server([Reply(content="ok", usage={"prompt_tokens": 50, "completion_tokens": 5})])
    done = client_for(srv, model="smollm2-135m-instruct").complete(USER)
    assert done.usage == Usage(prompt_tokens=50, completion_tokens=5, cached_tokens=0, cost=None, calls=1)


def test_server_that_sends_no_usage(server):
    srv = server([Reply(content="ok", usage=False), Reply(content="ok", usage=False)])
    client = client_for(srv)
    assert client.complete(USER).usage == Usage(cost=None, calls=1)
    assert client.complete(USER, stream=False).usage == Usage(cost=None, calls=1)


def test_server_that_rejects_stream_options_is_asked_again_without(server):
    def picky(body):
        if "stream_options" in body:
            return Fault(400, message="Unrecognized request argument supplied: stream_options")
        return Reply(content="fine", usage=False)

    srv = server([picky, picky])
    rec = Recorder()
    done = client_for(srv, rec).complete(USER)
    assert done.content == "fine"
    assert ["stream_options" in r.body for r in srv.chat_requests()] == [True, False]
    assert rec.sleeps == []


def test_usage_sums_and_unknown_cost_is_contagious():
    a = Usage(prompt_tokens=10, completion_tokens=2, cached_tokens=4, cost=0.5, calls=1)
    b = Usage(prompt_tokens=1, completion_tokens=1, cost=0.25, calls=1)
    assert Usage() + a + b == Usage(prompt_tokens=11, completion_tokens=3, cached_tokens=4, cost=0.75, calls=2)
    assert (a + Usage(prompt_tokens=3, cost=None, calls=1)).cost is None


def test_price_table_lookup():
    assert pricing.price_of("no-such-model", "gpt-4o-2024-08-06") == pricing.PRICES["gpt-4o"]
    assert pricing.price_of("llama3", None) is None
    assert pricing.cost(None, 100, 100) is None


# -- retries -----------------------------------------------------------------


def test_429_retry_after_is_honoured_then_success(server):
    srv = server([Fault(429, retry_after=3), Fault(429, retry_after_ms=250), Reply(content="made it")])
    rec = Recorder()
    assert client_for(srv, rec).complete(USER).content == "made it"
    assert rec.sleeps == [3.0, 0.25]
    assert [str(e) for e in rec.events] == [
        "retrying in 3.0 s (429 Too Many Requests), attempt 2 of 5",
        "retrying in 0.2 s (429 Too Many Requests), attempt 3 of 5",
    ]
    assert len(srv.chat_requests()) == 3
    srv.assert_complete()


def test_retry_after_as_http_date(server):
    now = 1_760_000_000.0
    srv = server([Fault(503, retry_after=email.utils.formatdate(now + 30, usegmt=True)), Reply(content="ok")])
    rec = Recorder()
    client = LLMClient(
        LLMConfig(model="m", base_url=srv.base_url, api_key=KEY), sleep=rec.sleeps.append, clock=lambda: now
    )
    assert client.complete(USER).content == "ok"
    assert rec.sleeps == [30.0]


def test_retry_after_longer_than_we_wait_fails_at_once(server):
    srv = server([Fault(429, retry_after=3600)])
    rec = Recorder()
    with pytest.raises(ModelError) as exc:
        client_for(srv, rec).complete(USER)
    assert str(exc.value).startswith(
        "model service asked to wait 3600 s (Retry-After), more than the 120 s we wait: "
        f"429 Too Many Requests from {srv.base_url}"
    )
    assert rec.sleeps == []


def test_repeated_500_gives_clear_error_after_max_retries(server):
    srv = server([Fault(500)] * 3)
    rec = Recorder()
    with pytest.raises(ModelError) as exc:
        client_for(srv, rec, max_retries=2, backoff_base=1.5).complete(USER)
    assert str(exc.value) == (
        f"model service failed after 3 attempts: 500 Internal Server Error from {srv.base_url} "
        "(model gpt-4o-mini): scripted 500 Internal Server Error"
    )
    assert exc.value.exit_code == 1
    assert rec.sleeps == [1.5, 3.0]  # exponential, jitter at its top (rng=1.0)
    srv.assert_complete()


def test_backoff_jitter_and_cap(server):
    srv = server([Fault(502), Fault(503), Fault(500), Fault(500), Reply(content="ok")])
    rec = Recorder()
    client_for(srv, rec, rng=lambda: 0.0, backoff_base=2, backoff_max=5).complete(USER)
    assert rec.sleeps == [1.0, 2.0, 2.5, 2.5]  # half of min(5, 2 * 2**n)
    assert [e.status for e in rec.events] == [502, 503, 500, 500]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retried(server, status):
    srv = server([Fault(status)])
    rec = Recorder()
    with pytest.raises(ModelError, match=f"^model service refused the request: {status} ") as exc:
        client_for(srv, rec).complete(USER)
    assert len(srv.chat_requests()) == 1 and rec.sleeps == []
    if status in (401, 403):
        assert "check OPENAI_API_KEY" in str(exc.value)
    if status == 404:
        assert "check the model name" in str(exc.value)


def test_stream_cut_mid_tool_call_is_retried_whole(server):
    call = tool_call("write_file", {"path": "notes.txt", "content": "a fairly long body of text"}, id="w1")
    srv = server([Reply(content="Writing", tool_calls=[call], chunk_size=4, cut_after=6), Reply(tool_calls=[call])])
    rec = Recorder()
    seen: list[str] = []
    done = client_for(srv, rec).complete(USER, on_text=seen.append)
    assert done.tool_calls == [ToolCall(id="w1", name="write_file", arguments=call.arguments)]
    assert done.content is None  # the cut attempt's text is not mixed in
    assert seen == ["Writ", "ing"]
    (event,) = rec.events
    assert (event.reason, event.discarded_output) == ("connection dropped mid-response", True)
    srv.assert_complete()


def test_stream_without_finish_reason_is_retried(server):
    srv = server([Reply(content="half an ans", finish_reason=""), Reply(content="a whole answer")])
    rec = Recorder()
    assert client_for(srv, rec).complete(USER).content == "a whole answer"
    assert [e.reason for e in rec.events] == ["stream ended before the response was complete"]


def test_empty_stream_for_tools_falls_back_to_non_streaming(server):
    # llama-cpp-python answers stream=True + tool_choice="auto" with an empty 200 stream
    def like_llama_cpp(body):
        if body.get("stream"):
            return Reply(empty_stream=True)
        return Reply(tool_calls=[tool_call("read_file", {"path": "README.md"}, id="r1")])

    srv = server([like_llama_cpp, like_llama_cpp, like_llama_cpp, Reply(content="plain text streams")])
    rec = Recorder()
    client = client_for(srv, rec)
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    expected = [ToolCall(id="r1", name="read_file", arguments='{"path": "README.md"}')]
    assert client.complete(USER, tools).tool_calls == expected
    assert client.complete(USER, tools).tool_calls == expected  # remembered: no streaming attempt
    assert client.complete(USER).content == "plain text streams"
    assert [r.body.get("stream", False) for r in srv.chat_requests()] == [True, False, False, True]
    assert rec.sleeps == [] and rec.events == []
    srv.assert_complete()


def test_streaming_can_be_switched_off(server):
    srv = server([Reply(content="whole")])
    env = {"TEAM_MODEL": "m", "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": srv.base_url, "TEAM_LLM_STREAM": "0"}
    pieces: list[str] = []
    assert LLMClient(LLMConfig.resolve(env=env)).complete(USER, on_text=pieces.append).content == "whole"
    assert "stream" not in srv.chat_requests()[0].body and pieces == ["whole"]


def test_non_streaming_body_cut_is_retried(server):
    srv = server([Reply(content="x" * 200, cut_after=0), Reply(content="whole")])
    rec = Recorder()
    assert client_for(srv, rec).complete(USER, stream=False).content == "whole"
    assert len(rec.events) == 1


def test_timeout_is_retried(server):
    srv = server([Reply(content="late", delay=30), Reply(content="on time")])
    rec = Recorder()
    assert client_for(srv, rec, timeout=0.3).complete(USER).content == "on time"
    assert [e.reason for e in rec.events] == ["timed out after 0.3 s"]


def test_connection_refused_is_retried_then_fails():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = Recorder()
    config = LLMConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=1)
    with pytest.raises(ModelError) as exc:
        LLMClient(config, sleep=rec.sleeps.append).complete(USER)
    assert str(exc.value).startswith(
        f"model service failed after 2 attempts: connection refused from http://127.0.0.1:{port}/v1 (model m)"
    )
    assert len(rec.sleeps) == 1


def test_script_exhausted_is_a_clear_non_retried_error(server):
    srv = server([])
    with pytest.raises(ModelError, match="script '\\*' exhausted after 0 steps"):
        client_for(srv).complete(USER)
    with pytest.raises(AssertionError, match="exhausted"):
        srv.assert_complete()


# -- configuration and secrets -------------------------------------------------


def test_resolve_precedence_and_env():
    env = {"TEAM_MODEL": "env-model", "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
           "TEAM_LLM_MAX_RETRIES": "1", "TEAM_LLM_BACKOFF_BASE": "0.01"}
    assert LLMConfig.resolve(env=env).model == "env-model"
    assert LLMConfig.resolve(plan_model="plan-model", env=env).model == "plan-model"
    cfg = LLMConfig.resolve(plan_model="plan-model", cli_model="cli-model", env=env)
    assert (cfg.model, cfg.endpoint, cfg.max_retries, cfg.backoff_base) == ("cli-model", "http://127.0.0.1:9/v1", 1, 0.01)
    assert cfg.api_key.get_secret_value() == KEY
    assert LLMConfig.resolve(env={"TEAM_MODEL": "m", "OPENAI_API_KEY": "x"}).endpoint == "https://api.openai.com/v1"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OPENAI_API_KEY": KEY}, "no model configured: pass --model, or set TEAM_MODEL or model: in the plan"),
        ({"TEAM_MODEL": "m"}, "no API key: set OPENAI_API_KEY (any non-empty value for local servers)"),
        ({"TEAM_MODEL": "m", "OPENAI_API_KEY": "  "}, "no API key: set OPENAI_API_KEY (any non-empty value for local servers)"),
        ({"TEAM_MODEL": "m", "OPENAI_API_KEY": KEY, "TEAM_LLM_TIMEOUT": "soon"},
         "TEAM_LLM_TIMEOUT='soon' is not a number: unset it or give a float"),
    ],
)
def test_resolve_errors_name_the_fix(env, message):
    with pytest.raises(UserError) as exc:
        LLMConfig.resolve(env=env)
    assert str(exc.value) == message


def test_api_key_never_leaks(server):
    srv = server([Fault(500, message=f"backend rejected token {KEY}")] * 2, api_key=KEY)
    client = client_for(srv, max_retries=1)
    with pytest.raises(ModelError) as exc:
        client.complete(USER)
    texts = [
        str(exc.value), repr(exc.value), "".join(traceback.format_exception(exc.value)),
        repr(client), repr(client.config), str(client.config),
        client.config.model_dump_json(), str(client.config.model_dump()),
    ]
    for text in texts:
        assert KEY not in text
    assert "backend rejected token ***" in str(exc.value)
    assert all(r.auth and "authorization" not in r.headers for r in srv.chat_requests())

    wrong = LLMClient(LLMConfig(model="m", base_url=srv.base_url, api_key="sk-wrong-key-999"))
    with pytest.raises(ModelError, match="401 Unauthorized.*check OPENAI_API_KEY") as exc:
        wrong.complete(USER)
    assert "sk-wrong-key-999" not in str(exc.value)


def test_assistant_message_of_a_tool_call_only_answer_has_string_content():
    done = Completion(content=None, tool_calls=[ToolCall(id="c", name="n", arguments="{}")], finish_reason="tool_calls")
    assert done.to_message() == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "n", "arguments": "{}"}}],
    }


def test_completion_record_round_trips():
    c = Completion(content="x", tool_calls=[ToolCall(id="1", name="n", arguments="{}")], finish_reason="stop",
                   usage=Usage(prompt_tokens=1, cost=None, calls=1), model="m")
    assert Completion.model_validate_json(c.model_dump_json()) == c
