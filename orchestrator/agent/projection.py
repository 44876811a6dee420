"""Context as a projection: what the model sees is computed from the transcript.

The agent keeps the full transcript (OpenAI-format dicts: ``role``,
``content``, ``tool_calls``, ``tool_call_id``; keys starting with ``_`` are
harness metadata and never sent). Before every model call the loop sends
``project(messages, ...)`` of it -- pure, no I/O:

* The prefix (leading ``system`` messages) is returned as the very same
  objects, untouched, so it is byte-identical from turn to turn.
* Tool results older than the ``keep_recent`` newest (the last tool-calling
  turn is always kept whole) become one-line placeholders naming the call and
  where the full text is: ``_ref`` on the tool message (set by the tool layer
  when it saved the output), else the transcript file and the call id.
  Elision is monotonic (an old result never comes back), so the request
  differs from the previous one only after the newly elided result.
* Recent results longer than ``preview_chars`` enter as head + tail + ref.
* Large string arguments of old tool calls are elided (the JSON stays valid).
* Every assistant ``tool_calls`` message is followed by exactly one result
  per call id (late results moved up, a missing one answered with a synthetic
  "no result", orphans dropped), as the API requires.
* The current state block (prompt.py) goes last, after the history, so
  it never disturbs the cached part of the request.

Compaction (saving, summarizing and replacing the old span) is in
compaction.py and uses the helpers here.

Token estimate (``estimate_tokens``): ceil(chars / 4) of each text (UTF-8
bytes / 4 for non-ASCII), plus 4 per message, 8 + name + arguments per tool
call, and the tools' canonical JSON / 4. Deterministic, no dependency; within
about 20% for English and code, which is all a threshold needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..core.jsonutil import stable_json
from .prompt import AgentState, state_message

# -- token estimate ---------------------------------------------------------

def text_tokens(text: str) -> int:
    n = len(text) if text.isascii() else len(text.encode("utf-8"))
    return (n + 3) // 4


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def message_tokens(m: Mapping[str, Any]) -> int:
    tokens = 4 + text_tokens(content_text(m.get("content")))
    for call in m.get("tool_calls") or ():
        fn = call.get("function", {})
        tokens += 8 + text_tokens(fn.get("name", "")) + text_tokens(fn.get("arguments", ""))
    if m.get("tool_call_id"):
        tokens += text_tokens(m["tool_call_id"])
    return tokens


def estimate_tokens(messages: Iterable[Mapping[str, Any]], tools: Sequence[Mapping] = ()) -> int:
    total = 3 + sum(message_tokens(m) for m in messages)
    return total + (text_tokens(stable_json(list(tools))) if tools else 0)


# -- helpers over the transcript ---------------------------------------------

def prefix_len(messages: Sequence[Mapping]) -> int:
    """Number of leading ``system`` messages: the stable prefix."""
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    return n


def public(m: Mapping[str, Any]) -> dict[str, Any]:
    """The message without harness metadata (keys starting with ``_``)."""
    return {k: v for k, v in m.items() if not k.startswith("_")}


def call_ids(m: Mapping[str, Any]) -> list[str]:
    return [c["id"] for c in m.get("tool_calls") or () if c.get("id")]


def tool_index(messages: Iterable[Mapping]) -> dict[str, tuple[str, str]]:
    """tool_call_id -> (tool name, arguments JSON string)."""
    index = {}
    for m in messages:
        for c in m.get("tool_calls") or ():
            fn = c.get("function", {})
            index[c.get("id", "")] = (fn.get("name", "?"), fn.get("arguments", "") or "")
    return index


def repair_pairs(messages: Sequence[Mapping]) -> list[dict]:
    """Each assistant ``tool_calls`` message directly followed by one result per id.

    Results found later in the same turn are moved up, a missing result is
    answered with a synthetic note, duplicate and orphan results are dropped.
    """
    out: list[dict] = []
    i, n = 0, len(messages)
    while i < n:
        m = messages[i]
        if m.get("role") == "tool":  # orphan: no assistant call right before it
            i += 1
            continue
        out.append(dict(m))
        ids = call_ids(m) if m.get("role") == "assistant" else []
        if not ids:
            i += 1
            continue
        j, results, others = i + 1, {}, []
        while j < n and messages[j].get("role") != "assistant":
            r = messages[j]
            if r.get("role") == "tool":
                if r.get("tool_call_id") in ids and r["tool_call_id"] not in results:
                    results[r["tool_call_id"]] = dict(r)
            else:
                others.append(dict(r))
            j += 1
        for cid in ids:
            out.append(results.get(cid) or {
                "role": "tool", "tool_call_id": cid,
                "content": "[no result recorded: the call was interrupted; run it again if still needed]",
            })
        out.extend(others)
        i = j
    return out


def describe_call(index: Mapping[str, tuple[str, str]], cid: str) -> str:
    name, args = index.get(cid, ("?", ""))
    args = " ".join(args.split())
    return f"{name} {args[:117] + '...' if len(args) > 120 else args}".strip()


def _ref(m: Mapping[str, Any], transcript_ref: str | None) -> str:
    if m.get("_ref"):
        return str(m["_ref"])
    if transcript_ref:
        return f"{transcript_ref} (tool_call_id {m.get('tool_call_id')})"
    return "not kept on disk; run the call again if you need it"


def placeholder(m: Mapping[str, Any], index: Mapping[str, tuple[str, str]], transcript_ref: str | None) -> str:
    size = len(content_text(m.get("content")))
    call = describe_call(index, m.get("tool_call_id", ""))
    return f"[tool result elided: {call} -> {size:,} chars; full: {_ref(m, transcript_ref)}]"


def preview(text: str, limit: int, ref: str) -> str:
    """Head and tail of ``text`` around a marker naming the full result."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[len(text) - limit // 3 :]
    nl = head.rfind("\n")  # snap to whole lines when they are not too long
    head = head[: nl + 1] if nl >= len(head) // 2 else head
    nl = tail.find("\n")
    tail = tail[nl + 1 :] if 0 <= nl < len(tail) // 2 else tail
    cut = len(text) - len(head) - len(tail)
    return f"{head}[... {cut:,} of {len(text):,} chars elided; full: {ref} ...]\n{tail}"


def _elide_args(m: dict, limit: int) -> dict:
    calls = []
    for c in m["tool_calls"]:
        fn = dict(c.get("function", {}))
        args = fn.get("arguments") or ""
        if len(args) > limit:
            try:
                parsed = json.loads(args)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                parsed = {k: (f"[elided: {len(v):,} chars]" if isinstance(v, str) and len(v) > limit else v)
                          for k, v in parsed.items()}
                fn["arguments"] = json.dumps(parsed, ensure_ascii=False)
            else:
                fn["arguments"] = json.dumps({"elided": f"{len(args):,} chars of arguments"})
        calls.append({**c, "function": fn})
    return {**m, "tool_calls": calls}


# -- projection ---------------------------------------------------------------

def project(
    messages: Sequence[Mapping[str, Any]],
    *,
    budget: int | None = None,
    keep_recent: int = 3,
    elide_batch: int = 1,
    preview_chars: int = 4000,
    min_elide_chars: int = 300,
    arg_elide_chars: int = 1000,
    state: AgentState | None = None,
    transcript_ref: str | None = None,
    tools: Sequence[Mapping] = (),
) -> list[dict]:
    """The request to send for ``messages``. Pure: the input is not modified.

    ``elide_batch`` > 1 ages results out in groups of that many: the request
    then only changes mid-history every ``elide_batch`` results, so a
    provider cache keeps more of it, at the cost of up to ``elide_batch - 1``
    more recent results kept whole.

    When ``budget`` is given and the first projection exceeds it, a tighter
    one (only the last turn's results kept, previews a quarter as long) is
    returned; if even that does not fit, the caller should compact.
    """
    rest = (min_elide_chars, arg_elide_chars, state, transcript_ref)
    result = _project(messages, keep_recent, elide_batch, preview_chars, *rest)
    if budget is not None and estimate_tokens(result, tools) > budget:
        result = _project(messages, 1, 1, max(preview_chars // 4, 200), *rest)
    return result


def _project(messages, keep_recent, elide_batch, preview_chars, min_elide_chars, arg_elide_chars, state,
             transcript_ref):
    p = prefix_len(messages)
    body = repair_pairs(messages[p:])
    index = tool_index(body)
    results = [i for i, m in enumerate(body) if m.get("role") == "tool"]
    aged = max(len(results) - max(keep_recent, 0), 0)
    aged -= aged % max(elide_batch, 1)
    keep = set(results[aged:])
    last_call = max((i for i, m in enumerate(body) if m.get("tool_calls")), default=None)
    if last_call is not None:  # the newest turn's results stay whole, however many
        keep.update(i for i in results if i > last_call)
    oldest_kept = min(keep, default=len(body))
    out = []
    for i, m in enumerate(body):
        if m.get("role") == "tool":
            text = content_text(m.get("content"))
            if i not in keep and len(text) > min_elide_chars:
                m = {**m, "content": placeholder(m, index, transcript_ref)}
            elif i in keep and len(text) > preview_chars:
                m = {**m, "content": preview(text, preview_chars, _ref(m, transcript_ref))}
        elif m.get("tool_calls") and i < oldest_kept:
            m = _elide_args(m, arg_elide_chars)
        out.append(public(m))
    tail = [public(state_message(state))] if state is not None else []
    return list(messages[:p]) + out + tail
