"""Compaction: fold the old part of a transcript into an explicit boundary.

``compact(messages, ...)``: the old span -- all but the last ``keep_units``
turns, cut only between turns (a turn is a message plus the tool results
answering it, so a ``tool_calls`` message is never separated from its
results) -- is replaced by

    [compaction boundary #k: <reason>; N earlier messages (~T tokens)
     replaced by this summary; full transcript: <path>]  + summary
    [team state] block (instructions.state_message)

after the full transcript is saved to ``transcripts_dir`` (atomic write,
name from a sequence number and a content hash: no clock). The summary comes
from the injected ``summarize(span) -> str`` (the loop wraps an LLM call
built by ``summary_request``); when it raises or returns nothing,
``extractive_summary`` builds one deterministically from the span: earlier
summary, user requests, files changed/read, last assistant statements, open
tool errors. The state block after the boundary (and again at the end of
every projected request) keeps identity, role, task, roster, goal and changed
files in view whatever the summary says.

``ContextWindow.prepare`` is the loop's single call per turn: project; if the
estimate exceeds ``threshold * budget``, compact once (no recursion: at most
one compaction per call) and project again. The ``compact`` tool and
``/compact`` call ``ContextWindow.compact`` directly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.fsutil import atomic_write
from ..core.text import plural
from .projection import (
    call_ids,
    content_text,
    describe_call,
    estimate_tokens,
    prefix_len,
    preview,
    project,
    repair_pairs,
    tool_index,
)
from .prompt import AgentState, state_message

BOUNDARY_KIND = "compaction"
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
READ_TOOLS = frozenset({"read_file"})
Summarizer = Callable[[list[dict]], str]


def turns(body: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split a (repaired) body into turns: a message plus the tool results answering it."""
    units: list[list[dict[str, Any]]] = []
    for m in body:
        if m.get("role") == "tool" and units:
            units[-1].append(m)
        else:
            units.append([m])
    return units


def _path_arg(args: str) -> str | None:
    try:
        path = json.loads(args or "{}").get("path")
    except (ValueError, AttributeError):
        return None
    return path if isinstance(path, str) and path else None


def _target(name: str, args: str) -> tuple[str, str]:
    """What a call acts on: a later success on the same target closes an earlier error."""
    path = _path_arg(args)
    if path is None:
        return name, args
    return ("write" if name in WRITE_TOOLS else name), path


def files_touched(messages: Iterable[Mapping]) -> tuple[list[str], list[str]]:
    """``(changed, read)`` paths named by write/edit and read tool calls, sorted."""
    changed, read = set(), set()
    for name, args in tool_index(messages).values():
        path = _path_arg(args)
        if path:
            if name in WRITE_TOOLS:
                changed.add(path)
            elif name in READ_TOOLS:
                read.add(path)
    return sorted(changed), sorted(read - changed)


def is_error_result(m: Mapping[str, Any]) -> bool:
    if m.get("_error") is not None:
        return bool(m["_error"])
    head = content_text(m.get("content")).lstrip()[:40].lower()
    return head.startswith(("error", "[error", "refused", "traceback", "[refused"))


def _line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def extractive_summary(span: Sequence[Mapping[str, Any]]) -> str:
    """A deterministic summary built from the transcript alone (no model)."""
    index = tool_index(span)
    sections: list[str] = []
    earlier = [m for m in span if m.get("_kind") == BOUNDARY_KIND]
    if earlier:
        sections.append("Earlier summary:\n" + _line(content_text(earlier[-1].get("content")), 2000))
    asks = [m for m in span if m.get("role") == "user" and not m.get("_kind")]
    if asks:
        sections.append("User requests:\n" + "\n".join(
            f"- {_line(content_text(m.get('content')), 300)}" for m in asks[-6:]))
    changed, read = files_touched(span)
    if changed or read:
        sections.append(f"Files changed: {', '.join(changed) or 'none'}\nFiles read: {', '.join(read) or 'none'}")
    said = [m for m in span if m.get("role") == "assistant" and content_text(m.get("content")).strip()]
    if said:
        sections.append("Last assistant statements:\n" + "\n".join(
            f"- {_line(content_text(m.get('content')), 400)}" for m in said[-3:]))
    last_by_target: dict[tuple[str, str], Mapping] = {}
    for m in span:
        if m.get("role") == "tool":
            last_by_target[_target(*index.get(m.get("tool_call_id", ""), ("?", "")))] = m
    errors = [(k, m) for k, m in last_by_target.items() if is_error_result(m)]
    if errors:
        sections.append("Open tool errors (not yet retried successfully):\n" + "\n".join(
            f"- {describe_call(index, m.get('tool_call_id', ''))}: {_line(content_text(m.get('content')), 200)}"
            for _, m in errors[-5:]))
    return "\n\n".join(sections) or "Nothing of note happened in the replaced turns."


def summary_request(span: Sequence[Mapping[str, Any]], limit: int = 24_000) -> list[dict]:
    """Messages for a model call that summarizes ``span`` (bounded to ``limit`` chars)."""
    index = tool_index(span)
    blocks = []
    for m in span:
        role, text = m.get("role", "?"), content_text(m.get("content"))
        if role == "tool":
            text = f"RESULT of {describe_call(index, m.get('tool_call_id', ''))}:\n{preview(text, 1500, 'omitted')}"
        else:
            calls = "".join(f"\nCALL {describe_call(index, c)}" for c in call_ids(m))
            text = f"{role.upper()}: {preview(text, 3000, 'omitted')}{calls}"
        blocks.append(text)
    kept: list[str] = []
    size = 0
    for block in reversed(blocks):
        if size + len(block) > limit and kept:
            kept.append(f"[{plural(len(blocks) - len(kept), 'earlier message')} omitted]")
            break
        kept.append(block)
        size += len(block)
    return [
        {"role": "system", "content": (
            "You summarize an agent's working session so the agent can continue after its earlier "
            "turns are removed. Keep: the user's goals and constraints, decisions made, files read and "
            "changed (and how), results of commands and tests, errors still open, and the next steps. "
            "Plain text, under 300 words, no preamble.")},
        {"role": "user", "content": "\n\n".join(reversed(kept))},
    ]


@dataclass
class Compaction:
    """What ``compact`` did."""

    messages: list[dict]
    """The new working transcript: prefix, boundary, state block, kept turns."""
    summary: str
    fallback: bool
    """True when the extractive summary was used."""
    error: str | None
    """Why the summarizer was not used (exception or empty answer)."""
    transcript_path: Path | None
    replaced: int
    """Number of transcript messages folded into the boundary."""


def compact(
    messages: Sequence[dict[str, Any]],
    *,
    state: AgentState,
    summarize: Summarizer | None,
    transcripts_dir: Path,
    keep_units: int = 4,
    reason: str = "requested",
    display_root: Path | None = None,
) -> Compaction:
    """Fold all but the last ``keep_units`` turns into a boundary + state block."""
    p = prefix_len(messages)
    units = turns(repair_pairs(messages[p:]))
    keep_units = min(max(keep_units, 0), max(len(units) - 1, 0))
    old_units = units[: len(units) - keep_units]
    span = [m for u in old_units for m in u]
    if not span:
        return Compaction([dict(m) for m in messages], "", False, "nothing to compact", None, 0)
    tail = [m for u in units[len(units) - keep_units:] for m in u]
    data = "".join(json.dumps(m, ensure_ascii=False, default=str) + "\n" for m in messages)
    seq = 1 + sum(1 for m in messages if m.get("_kind") == BOUNDARY_KIND)
    transcripts_dir.mkdir(parents=True, exist_ok=True)
    path = transcripts_dir / f"compact-{seq:03d}-{hashlib.sha256(data.encode()).hexdigest()[:10]}.jsonl"
    atomic_write(path, data)
    summary, error = "", None
    if summarize is None:
        error = "no summarizer"
    else:
        try:
            summary = (summarize(span) or "").strip()
            error = None if summary else "the summarizer returned an empty summary"
        except Exception as exc:  # any failure of the model call falls back, and is reported
            error = f"{type(exc).__name__}: {exc}"
    fallback = not summary
    if fallback:
        summary = extractive_summary(span)
    shown = path.relative_to(display_root) if display_root and path.is_relative_to(display_root) else path
    boundary = {
        "role": "user",
        "content": (
            f"[compaction boundary #{seq}: {reason}; {plural(len(span), 'earlier message')} "
            f"(~{estimate_tokens(span):,} tokens) replaced by this summary; full transcript: {shown}]\n\n"
            f"{summary}"),
        "_kind": BOUNDARY_KIND,
        "_transcript": str(shown),
    }
    new = [dict(m) for m in messages[:p]] + [boundary, state_message(state)] + tail
    return Compaction(new, summary, fallback, error, path, len(span))


@dataclass
class PreparedRequest:
    messages: list[dict]
    """The working transcript to keep (compacted if ``compaction`` is set)."""
    request: list[dict]
    """What to send to the model now."""
    tokens: int
    compaction: Compaction | None = None


class ContextWindow:
    """Per-agent projection settings; ``prepare`` once before every model call."""

    def __init__(self, *, budget: int, transcripts_dir: Path, summarize: Summarizer | None,
                 threshold: float = 0.8, keep_recent: int = 3, elide_batch: int = 4, keep_units: int = 4,
                 preview_chars: int = 4000, transcript_ref: str | None = None,
                 display_root: Path | None = None):
        self.budget, self.threshold = budget, threshold
        self.transcripts_dir, self.summarize = Path(transcripts_dir), summarize
        self.keep_units, self.display_root = keep_units, display_root
        self.keep_recent, self.elide_batch, self.preview_chars = keep_recent, elide_batch, preview_chars
        self.transcript_ref = transcript_ref

    def project(self, messages: Sequence[Mapping[str, Any]], state: AgentState | None,
                tools: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        return project(messages, budget=self.budget, state=state, tools=tools, keep_recent=self.keep_recent,
                       elide_batch=self.elide_batch, preview_chars=self.preview_chars,
                       transcript_ref=self.transcript_ref)

    def compact(self, messages: Sequence[dict[str, Any]], state: AgentState, reason: str = "requested") -> Compaction:
        return compact(messages, state=state, summarize=self.summarize, transcripts_dir=self.transcripts_dir,
                       keep_units=self.keep_units, reason=reason, display_root=self.display_root)

    def prepare(self, messages: Sequence[dict[str, Any]], state: AgentState,
                tools: Sequence[Mapping[str, Any]] = ()) -> PreparedRequest:
        request = self.project(messages, state, tools)
        tokens = estimate_tokens(request, tools)
        if tokens <= self.threshold * self.budget:
            return PreparedRequest(list(messages), request, tokens)
        done = self.compact(messages, state, reason=f"auto at ~{tokens:,} of {self.budget:,} tokens")
        if not done.replaced:
            return PreparedRequest(list(messages), request, tokens)
        request = self.project(done.messages, state, tools)
        return PreparedRequest(done.messages, request, estimate_tokens(request, tools), done)
