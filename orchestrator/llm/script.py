"""Script steps of the scripted chat server, and their wire form.

What a step is (consumed one per request by ``scripted_server.ScriptedServer``)::

    Reply(content=..., tool_calls=[tool_call(name, args), ...])   an answer
    Fault(status=429, retry_after=1)                              an HTTP error
    Reply(..., cut_after=N)         close the connection after N chunks, no [DONE]
    Reply(..., delay=s)             wait s seconds before answering
    tool_call("x", '{"a": ')        arguments are sent verbatim: malformed JSON too
    fn(request_json) -> step        computed step (Reply, Fault, dict or str)

``step_from_dict`` reads the JSON form of a step (``{"content",
"tool_calls": [{"name", "arguments"}], ...}`` or ``{"status": 429,
"retry_after": 1}``; a bare string is a text reply).

The wire form is pure data, no sockets: ``stream_chunks`` splits text and
each argument string into ``chunk_size`` pieces; the first delta of a tool
call carries its ``id`` and ``name`` (``interleave`` round-robins the calls'
deltas). Usage (``usage_of``: the step's numbers, else estimated from the
text) is sent when the request asks for it (``stream_options.include_usage``)
unless the step says ``usage=False``. ``whole_body`` is the non-streamed
answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCallSpec:
    name: str
    arguments: str
    id: str | None = None


def tool_call(name: str, arguments: str | Mapping[str, Any] = "{}", id: str | None = None) -> ToolCallSpec:
    """A scripted tool call; a dict is JSON-encoded, a string is sent verbatim."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCallSpec(name, args, id)


@dataclass
class Reply:
    """A scripted answer: text and/or tool calls."""

    content: str | None = None
    tool_calls: list[ToolCallSpec] = field(default_factory=list)
    finish_reason: str | None = None  # default: "tool_calls" if calls else "stop"; "": never sent
    usage: dict[str, int] | bool | None = None  # None: estimated; False: never sent
    delay: float = 0.0
    cut_after: int | None = None  # close the connection after this many chunks
    empty_stream: bool = False  # a streamed answer with no chunks at all, as llama.cpp gives for tools
    chunk_size: int = 8
    interleave: bool = False
    model: str | None = None


@dataclass
class Fault:
    """A scripted HTTP error answer."""

    status: int = 500
    retry_after: float | str | None = None
    retry_after_ms: float | None = None
    message: str | None = None
    delay: float = 0.0


Step = Reply | Fault | Callable[[dict], Any]


def step_from_dict(d: Any) -> Reply | Fault:
    """A step from its JSON form (also what a callable step may return)."""
    if isinstance(d, (Reply, Fault)):
        return d
    if isinstance(d, str):
        return Reply(content=d)
    if not isinstance(d, dict):
        raise TypeError(f"a script step is a dict, str, Reply or Fault, not {type(d).__name__}")
    d = dict(d)
    if "status" in d:
        return Fault(**d)
    d["tool_calls"] = [
        tc if isinstance(tc, ToolCallSpec) else tool_call(tc["name"], tc.get("arguments", "{}"), tc.get("id"))
        for tc in d.get("tool_calls", [])
    ]
    return Reply(**d)


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def usage_of(reply: Reply, body: dict) -> dict[str, Any]:
    u = reply.usage if isinstance(reply.usage, dict) else {}
    prompt = u.get("prompt_tokens", len(json.dumps(body.get("messages", []))) // 4)
    out_text = (reply.content or "") + "".join(tc.name + tc.arguments for tc in reply.tool_calls)
    completion = u.get("completion_tokens", max(1, len(out_text) // 4))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": u.get("cached_tokens", 0)},
    }


def stream_chunks(reply: Reply, body: dict, ids: list[str]) -> list[dict]:
    """The ``choices`` deltas of a streamed reply, then the usage chunk."""
    deltas: list[dict] = [{"role": "assistant", "content": ""}]
    if reply.content:
        deltas += [{"content": p} for p in _pieces(reply.content, reply.chunk_size)]
    per_call = []
    for i, tc in enumerate(reply.tool_calls):
        first = {"index": i, "id": ids[i], "type": "function", "function": {"name": tc.name, "arguments": ""}}
        rest = [{"index": i, "function": {"arguments": p}} for p in _pieces(tc.arguments, reply.chunk_size)]
        per_call.append([first, *rest])
    if reply.interleave:
        while any(per_call):
            for q in per_call:
                if q:
                    deltas.append({"tool_calls": [q.pop(0)]})
    else:
        deltas += [{"tool_calls": [d]} for q in per_call for d in q]
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    out: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    if reply.finish_reason != "":
        out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if wants_usage and reply.usage is not False:
        out.append({"choices": [], "usage": usage_of(reply, body)})
    return out




def whole_body(reply: Reply, body: dict, ids: list[str], response_id: str, created: int) -> dict[str, Any]:
    """The JSON of a non-streamed reply (``ids``: one per tool call)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": ids[i], "type": "function", "function": {"name": tc.name, "arguments": tc.arguments}}
            for i, tc in enumerate(reply.tool_calls)
        ]
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    obj = {"id": response_id, "object": "chat.completion", "created": created,
           "model": reply.model or body.get("model", "scripted"),
           "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if reply.usage is not False:
        obj["usage"] = usage_of(reply, body)
    return obj
