"""The tool registry and the call pipeline.

``ToolRegistry.call(name, raw_arguments, ctx, call_id)`` runs one model
proposal through the contract, in this order::

    (first)   the worktree the agent entered is gone → back to its workspace, a note on the result
    lookup    unknown tool            → error: nearest name + the known tools
    parse     arguments not JSON      → error: the JSON error and where
    validate  pydantic                → error: field: problem, and the signature
    permit    the loaded skill's allowed-tools, then the tool's ``authorize`` against
              the role's permissions (a coder reassigning another's task)
                                      → error: what is refused and what is allowed
    path      confine path fields     → error: resolved location, nothing touched
    fresh     edits of existing files → error: read first / partial / changed lines
    policy    plan mode, shell rules  → error: which rule, command not run
    hook      the run's ``tool_call`` hooks whose ``match`` takes the call (hookgate.py): exit 2,
              or a hook that fails    → error: the hook's stderr (or how it failed); not run
    approval  an ``ask`` rule matches → a person decides (approval.py); denied or no
                                        answer in time → error: the rule, who, why
    execute   the handler             → ToolError/TeamError/OSError: error observation
                                        any other exception: our bug — logged with
                                        traceback, error observation names its type
    scrub     ctx.secrets out of the result (core/redact.py): a key the tool read
                                        reaches neither the model nor a file
    bound     head + tail, full output saved under ctx.outputs_dir
    record    one JSONL line in ctx.call_log (call and result paired by call_id),
              scrubbed whole: arguments, result, error and traceback

Every outcome is an ``Observation``; the agent loop always goes on.

``schemas()`` is the OpenAI ``tools`` list: sorted by name, ``$ref``s
inlined, titles dropped, optional ``X | None`` fields shown as plain ``X``,
``additionalProperties: false``, and every dict key-sorted, so the list is
byte-identical on every turn and across processes (prompt caches hit).
"""

from __future__ import annotations

import difflib
import json
import logging
import time
import traceback
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from ..core.errors import TeamError
from ..core.fsutil import append_line, file_lock
from ..core.jsonutil import canonical, dumps, stable_json
from . import bound, hookgate
from .base import Call, Observation, Refused, Tool, ToolContext, ToolError, ToolOutput
from .policy import check_plan, check_skill, confine
from .shellpolicy import check_shell

log = logging.getLogger("orchestrator.tools")

LOG_ARGS_CHARS = 10_000


class ToolRegistry:
    """Named tools plus the pipeline every call goes through."""

    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {}
        self._schemas: list[dict[str, Any]] | None = None
        self.add(*tools)

    # ------------------------------------------------------------------ contents
    def add(self, *tools: Tool) -> ToolRegistry:
        """Register tools (from any module); a duplicate name is a bug."""
        for t in tools:
            if not isinstance(t, Tool):
                raise TypeError(f"registry.add expects Tool objects, got {type(t).__name__}")
            if t.name in self._tools:
                raise ValueError(f"tool {t.name!r} is already registered")
            self._tools[t.name] = t
        self._schemas = None
        return self

    def only(self, names: Iterable[str]) -> ToolRegistry:
        """A new registry with just ``names`` (a role's tool list)."""
        names = list(names)
        missing = [n for n in names if n not in self._tools]
        if missing:
            raise ValueError(f"unknown tools {missing}; known: {', '.join(self.names())}")
        return ToolRegistry(self._tools[n] for n in names)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    # ------------------------------------------------------------------ schemas
    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list (deterministic; see module docstring)."""
        if self._schemas is None:
            self._schemas = [openai_schema(self._tools[n]) for n in self.names()]
        return json.loads(json.dumps(self._schemas))  # a copy callers may mutate

    def schemas_json(self) -> str:
        """``schemas()`` as canonical JSON text (what goes on the wire)."""
        return stable_json(self.schemas())

    # ------------------------------------------------------------------ pipeline
    def call(
        self, name: str, raw_arguments: str | dict[str, Any] | None, ctx: ToolContext, call_id: str
    ) -> Observation:
        """Run one tool call through the whole contract; never raises for model mistakes.

        ``raw_arguments`` is the model's argument string (a dict is accepted too).
        """
        started = time.monotonic()
        if isinstance(raw_arguments, dict):
            raw_arguments = json.dumps(raw_arguments, ensure_ascii=False)
        tb = None
        moved = ctx.check_worktree()
        try:
            t = self._lookup(name)
            call = Call(tool=t, args=self._validate(t, self._parse(t, raw_arguments)), ctx=ctx, call_id=call_id)
            check_skill(ctx, t.name)
            if t.authorize is not None:
                t.authorize(call)
            self._confine(call)
            self._check_fresh(call)
            check_plan(ctx, t.name, t.risk)
            if t.command is not None:
                check_shell(getattr(call.args, t.command))
            hookgate.check(call)
            if ctx.approvals is not None:
                ctx.approvals.check(call)
            obs = self._execute(call)
        except (ToolError, TeamError, OSError) as e:
            obs = Observation(call_id, name, _message(e), is_error=True, stage=getattr(e, "stage", "execute"))
        except Exception as e:  # our bug: say so, log it loudly, keep the loop alive
            tb = traceback.format_exc()
            log.exception("tool %s crashed on call %s", name, call_id)
            obs = Observation(
                call_id,
                name,
                f"internal error in tool {name}: {type(e).__name__}: {e} — this is a bug in the "
                f"harness, not in your call; it has been logged. Try another way to make progress.",
                is_error=True,
                stage="crash",
            )
        if moved:
            obs.content = moved + obs.content
        obs.meta.setdefault("duration_ms", round((time.monotonic() - started) * 1000, 1))
        self._record(ctx, name, raw_arguments, obs, tb)
        return obs

    def _lookup(self, name: str) -> Tool:
        t = self._tools.get(name)
        if t is not None:
            return t
        near = difflib.get_close_matches(name or "", self.names(), n=1, cutoff=0.5)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise Refused(f"unknown tool {name!r}.{hint} Known tools: {', '.join(self.names())}.", "lookup")

    def _parse(self, t: Tool, raw: str | None) -> dict[str, Any]:
        text = (raw or "").strip() or "{}"
        try:
            value = json.loads(text)
            if isinstance(value, str) and value.strip().startswith("{"):
                value = json.loads(value)  # double-encoded arguments: accept
        except json.JSONDecodeError as e:
            snippet = text[max(0, e.pos - 30) : e.pos + 30]
            raise Refused(
                f"arguments for {t.name} are not valid JSON ({e.msg} at char {e.pos}, near {snippet!r}). "
                f"Send one JSON object: {signature(t)}",
                "parse",
            ) from None
        if not isinstance(value, dict):
            raise Refused(
                f"arguments for {t.name} must be a JSON object, not {type(value).__name__}: {signature(t)}",
                "parse",
            )
        return value

    def _validate(self, t: Tool, data: dict[str, Any]) -> Any:
        if t.schema is not None:
            return _validate_json(t, data)
        try:
            return t.args.model_validate(data)
        except ValidationError as e:
            problems = []
            for err in e.errors()[:8]:
                where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
                got = "" if err["type"] == "missing" else f" (got {_short(err.get('input'))})"
                problems.append(f"{where}: {err['msg']}{got}")
            raise Refused(
                f"invalid arguments for {t.name}: " + "; ".join(problems) + f". Expected {signature(t)}",
                "validate",
            ) from None

    def _confine(self, call: Call) -> None:
        for field_name, access in call.tool.paths:
            raw = getattr(call.args, field_name)
            if raw is not None:
                call.paths[field_name] = confine(call.ctx, raw, access)

    def _check_fresh(self, call: Call) -> None:
        name = call.tool.fresh
        if name is None or name not in call.paths:
            return
        path = call.paths[name]
        if path.is_file():
            call.current[name] = call.ctx.truth.check(path, call.ctx.rel(path))

    def _execute(self, call: Call) -> Observation:
        t, ctx = call.tool, call.ctx
        out = t.handler(call)
        if isinstance(out, str):
            out = ToolOutput(out)
        text = ctx.secrets.scrub(out.text)  # a bounded handler wrote its full output scrubbed already
        if out.bounded:
            full = out.full_output
        else:
            text, full = bound.bound_text(text, t.budget, ctx.outputs_dir, t.name, call.call_id)
        stage = "execute" if out.is_error else "ok"
        return Observation(
            call.call_id, t.name, text, is_error=out.is_error, stage=stage,
            full_output=str(full) if full else None, meta=dict(out.meta),
        )

    def _record(self, ctx: ToolContext, name: str, raw: str | None, obs: Observation, tb: str | None) -> None:
        if ctx.call_log is None:
            return
        raw = raw or ""
        record: dict[str, Any] = {
            "ts": time.time(),
            "agent": ctx.agent,
            "call_id": obs.call_id,
            "tool": name,
            "arguments": bound.cut(raw, LOG_ARGS_CHARS, "(not kept)"),
            "stage": obs.stage,
            "is_error": obs.is_error,
            "content": obs.content,
            "full_output": obs.full_output,
            "meta": obs.meta,
        }
        if tb:
            record["traceback"] = tb
        ctx.call_log.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(ctx.call_log):
            append_line(ctx.call_log, ctx.secrets.scrub(dumps(record)), durable=False)


# ---------------------------------------------------------------------- schema helpers
def _message(e: BaseException) -> str:
    if isinstance(e, OSError) and not isinstance(e, ToolError):
        where = f" ({e.filename})" if e.filename else ""
        return f"{type(e).__name__}: {e.strerror or e}{where}"
    return str(e)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compact_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$ref``s, drop titles and null-defaults, simplify optional fields."""
    defs = schema.get("$defs", {})

    def walk(node: Any, required: bool = True) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = defs[node["$ref"].split("/")[-1]]
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged, required)
        out = {}
        for key, value in node.items():
            if key in ("title", "$defs") or (key == "default" and value is None):
                continue
            if key == "properties":
                req = set(node.get("required", []))
                out[key] = {k: walk(v, k in req) for k, v in value.items()}
            else:
                out[key] = walk(value)
        any_of = out.get("anyOf")
        if not required and isinstance(any_of, list) and len(any_of) == 2 and {"type": "null"} in any_of:
            other = next(s for s in any_of if s != {"type": "null"})
            out.pop("anyOf")
            out = {**other, **out}
        return out

    result = walk(schema)
    if result.get("type") == "object":
        result["additionalProperties"] = False
        result.setdefault("properties", {})
    return result


def _validate_json(t: Tool, data: dict[str, Any]) -> dict[str, Any]:
    """Arguments checked against a tool's JSON ``schema`` (an MCP server's ``inputSchema``)."""
    import jsonschema

    assert t.schema is not None
    validator = jsonschema.validators.validator_for(t.schema)(t.schema)
    problems = []
    for err in sorted(validator.iter_errors(data), key=lambda e: list(e.path))[:8]:
        where = ".".join(str(p) for p in err.path) or "arguments"
        problems.append(f"{where}: {err.message}")
    if problems:
        raise Refused(f"invalid arguments for {t.name}: " + "; ".join(problems) + f". Expected {signature(t)}",
                      "validate")
    return data


def _params(t: Tool) -> dict[str, Any]:
    if t.schema is not None:
        params = {k: v for k, v in t.schema.items() if k not in ("title", "$schema")}
        params.setdefault("type", "object")
        params.setdefault("properties", {})
        return params
    return compact_schema(t.args.model_json_schema())


def openai_schema(t: Tool) -> dict[str, Any]:
    params = _params(t)
    return canonical(
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": params}}
    )


def signature(t: Tool) -> str:
    """``{"path": string, "offset"?: integer}`` — a one-line reminder of the arguments."""
    params = _params(t)
    req = set(params.get("required", []))
    parts = []
    for key, prop in params.get("properties", {}).items():
        kind = prop.get("type") or "|".join(s.get("type", "?") for s in prop.get("anyOf", [])) or "value"
        if "enum" in prop:
            kind = "|".join(json.dumps(v) for v in prop["enum"])
        parts.append(f'"{key}"{"" if key in req else "?"}: {kind}')
    return "{" + ", ".join(parts) + "}"
