"""The LLM client: the only module that imports ``openai``.

``LLMClient.complete(messages, tools)`` sends one chat completion to any
OpenAI-compatible server and returns a ``Completion`` (text, tool calls,
finish reason, usage with cost). It streams by default: text deltas go to
``on_text`` as they arrive and tool-call deltas are assembled by their
``index`` (id and name come in the first delta of a call, the argument
string is concatenated), so parallel tool calls come out whole. Arguments
stay a *string*: malformed JSON is the model's mistake and the tool layer
turns it into an observation.

Retry policy (ours; the SDK's own retries are off, ``max_retries=0``)::

    attempt ──ok──► Completion
       │ 408 · 409 · 429 · 5xx · timeout · connection refused/dropped
       │ · a stream that ends before a finish_reason (cut mid-response)
       ▼
    wait: Retry-After / retry-after-ms if the server sent one (seconds or
          HTTP date), else min(backoff_max, backoff_base * 2**n) with jitter
          in [50 %, 100 %]; then the WHOLE request again, up to
          max_retries + 1 attempts ──► ModelError("model service failed after N attempts: ...")
    other 4xx ──► ModelError at once (401/403/404 name the setting to fix)

Every wait is reported to ``on_retry`` as a ``RetryEvent`` before sleeping.
With a ``deadline`` (an agent task's ``timeout``) no request outlives it:
each attempt's HTTP timeout is the time left (if shorter than the
configured one), a retry that would start past it is not made, and the call
then fails with ``ModelError`` ("... the task's time ran out"), so a slow or
silent server cannot keep a task running past its limit.
``sleep``, ``rng`` and ``clock`` are injected so tests observe the delays.
Server quirks, handled without counting as retries: a server that rejects
``stream_options`` (usage in the stream) gets the request again without it;
one that answers a stream with no chunks at all (llama-cpp-python refuses to
stream with ``tool_choice="auto"``) gets it again non-streaming, and later
requests with tools from this client go non-streaming. A server that never
sends usage gives ``Usage`` with zero tokens and ``cost=None``.

The records (``LLMConfig``, ``ToolCall``, ``Completion``, ``RetryEvent``,
``ChatModel``) and the backoff arithmetic live in ``types.py``, which
needs no SDK (import them from there). Configuration
(``LLMConfig.resolve``): model from ``--model``, else the plan's
``model:``, else ``$TEAM_MODEL``; ``$OPENAI_BASE_URL`` and
``$OPENAI_API_KEY``; optional ``$TEAM_LLM_TIMEOUT``,
``$TEAM_LLM_MAX_RETRIES``, ``$TEAM_LLM_BACKOFF_BASE``,
``$TEAM_LLM_BACKOFF_MAX``, ``$TEAM_LLM_STREAM=0``. The key is a ``SecretStr``: never serialized,
never in a repr, and scrubbed from every error message we build.
"""

from __future__ import annotations

import http
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import ModelError
from ..core.text import plural
from . import pricing
from .pricing import Usage
from .types import (
    Completion,
    LLMConfig,
    RetryEvent,
    ToolCall,
    backoff_delay,
    retry_after_seconds,
)


class _Incomplete(Exception):
    """The stream ended before any choice carried a finish_reason."""

    def __init__(self, message: str, empty: bool):
        super().__init__(message)
        self.empty = empty


@dataclass
class _Failure:
    reason: str
    status: int | None
    retryable: bool
    retry_after: float | None = None
    detail: str = ""


class LLMClient:
    """Chat completions with our retry policy. Thread-safe; one per process is fine."""

    def __init__(
        self,
        config: LLMConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
        on_retry: Callable[[RetryEvent], None] | None = None,
    ):
        self.config = config
        self._sleep, self._rng, self._clock, self._on_retry = sleep, rng, clock, on_retry
        self._client: Any = None
        self._lock = threading.Lock()
        self._tools_unstreamable = False  # set once a server sent an empty stream for a request with tools

    def __repr__(self) -> str:
        return f"LLMClient(model={self.config.model!r}, base_url={self.config.endpoint!r})"

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def priced(self) -> bool:
        """Its calls have a known cost: a price from its ``models:`` entry or the built-in table."""
        return self.config.price is not None or pricing.price_of(self.config.model) is not None

    def _openai(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(
                    api_key=self.config.api_key.get_secret_value(),
                    base_url=self.config.endpoint,
                    timeout=self.config.timeout,
                    max_retries=0,
                )
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        stream: bool = True,
        on_text: Callable[[str], None] | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        tool_choice: str | dict | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """One chat completion, retried per the module's policy; raises ``ModelError``.
        ``deadline``: ``time.monotonic()`` it must not run past (module docstring).

        With ``tools``, ``tool_choice`` defaults to ``"auto"`` and is always sent:
        OpenAI assumes it, but llama.cpp's chatml-function-calling ignores the
        tools when it is missing.
        """
        cfg = self.config
        on_retry = on_retry or self._on_retry
        params: dict[str, Any] = {"model": cfg.model, "messages": messages}
        if tools:
            params["tools"] = tools
            params["tool_choice"] = tool_choice or "auto"
        include_usage = cfg.stream_usage
        stream = stream and cfg.stream and not (tools and self._tools_unstreamable)
        attempts = cfg.max_retries + 1
        attempt = 0
        while True:
            attempt += 1
            emitted: list[bool] = [False]
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ModelError(f"no answer from {cfg.endpoint} (model {cfg.model}) before the task's time "
                                     f"ran out (attempt {attempt} not made)")
                if left < cfg.timeout:
                    params["timeout"] = left  # this request may not outlive the task (the SDK's per-request option)
            try:
                if stream:
                    return self._stream_once(params, include_usage, on_text, emitted)
                done = self._once(params)
                if on_text is not None and done.content:
                    on_text(done.content)  # the whole text at once, so callers need not care
                return done
            except _Incomplete as exc:
                if exc.empty:  # a server that cannot stream this request: ask without streaming
                    self._tools_unstreamable = self._tools_unstreamable or bool(tools)
                    stream, attempt = False, attempt - 1
                    continue
                failure = _Failure("stream ended before the response was complete", None, True, detail=str(exc))
            except Exception as exc:
                classified = self._classify(exc, params.get("timeout", cfg.timeout))
                if classified is None:
                    raise  # not a model-service failure: our own bug, crash loudly
                failure = classified
            if stream and include_usage and failure.status in (400, 422) and "stream_options" in failure.detail:
                include_usage = False  # a server without usage-in-stream support: ask again without
                attempt -= 1
                continue
            if not failure.retryable:
                raise ModelError(self._message("model service refused the request", failure)) from None
            if failure.retry_after is not None and failure.retry_after > cfg.retry_after_max:
                head = (
                    f"model service asked to wait {failure.retry_after:.0f} s (Retry-After), "
                    f"more than the {cfg.retry_after_max:.0f} s we wait"
                )
                raise ModelError(self._message(head, failure)) from None
            if attempt >= attempts:
                raise ModelError(self._message(f"model service failed after {plural(attempt, 'attempt')}", failure)) from None
            delay = self._delay(attempt, failure.retry_after)
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise ModelError(self._message(f"model service failed after {plural(attempt, 'attempt')} and the task's "
                                               "time ran out before another", failure)) from None
            if on_retry is not None:
                on_retry(RetryEvent(attempt, attempts, delay, failure.reason, failure.status, emitted[0]))
            self._sleep(delay)

    # -- one attempt -------------------------------------------------------

    def _stream_once(
        self,
        params: dict[str, Any],
        include_usage: bool,
        on_text: Callable[[str], None] | None,
        emitted: list[bool],
    ) -> Completion:
        kwargs = dict(params, stream=True)
        if include_usage:
            kwargs["stream_options"] = {"include_usage": True}
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish: str | None = None
        usage: Any = None
        model = ""
        chunks = 0
        with self._openai().chat.completions.create(**kwargs) as stream:
            for chunk in stream:
                chunks += 1
                model = getattr(chunk, "model", None) or model
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                for choice in chunk.choices or ():
                    if choice.index not in (0, None):
                        continue  # n > 1 is never asked for
                    delta = choice.delta
                    if delta is not None and delta.content:
                        text.append(delta.content)
                        emitted[0] = True
                        if on_text is not None:
                            on_text(delta.content)
                    for pos, tc in enumerate((delta.tool_calls if delta is not None else None) or ()):
                        slot = calls.setdefault(
                            tc.index if tc.index is not None else pos, {"id": "", "name": "", "args": []}
                        )
                        slot["id"] = slot["id"] or (tc.id or "")
                        if tc.function is not None:
                            slot["name"] = slot["name"] or (tc.function.name or "")
                            if tc.function.arguments:
                                slot["args"].append(tc.function.arguments)
                    if choice.finish_reason:
                        finish = choice.finish_reason
        if finish is None:
            raise _Incomplete(f"{len(text)} text and {len(calls)} tool-call deltas, no finish_reason", chunks == 0)
        tool_calls = [
            ToolCall(id=slot["id"] or f"call_{idx}", name=slot["name"], arguments="".join(slot["args"]))
            for idx, slot in sorted(calls.items())
        ]
        return Completion(
            content="".join(text) if text else None,
            tool_calls=tool_calls,
            finish_reason=finish,
            usage=self._usage(usage, model),
            model=model or self.config.model,
        )

    def _once(self, params: dict[str, Any]) -> Completion:
        resp = self._openai().chat.completions.create(**params)
        if not resp.choices:
            raise ModelError(f"model service at {self.config.endpoint} returned no choices (model {self.config.model})")
        choice = resp.choices[0]
        msg = choice.message
        tool_calls = [
            ToolCall(id=tc.id or f"call_{i}", name=tc.function.name or "", arguments=tc.function.arguments or "")
            for i, tc in enumerate(msg.tool_calls or ())
            if getattr(tc, "function", None) is not None
        ]
        return Completion(
            content=msg.content,
            tool_calls=tool_calls,
            finish_reason=choice.finish_reason,
            usage=self._usage(resp.usage, resp.model),
            model=resp.model or self.config.model,
        )

    def _usage(self, usage: Any, reported_model: str) -> Usage:
        if usage is None:
            return Usage(cost=None, calls=1)
        prompt = usage.prompt_tokens or 0
        completion = usage.completion_tokens or 0
        details = getattr(usage, "prompt_tokens_details", None)
        cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
        price = self.config.price or pricing.price_of(self.config.model, reported_model)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            cached_tokens=cached,
            cost=pricing.cost(price, prompt, completion, cached),
            calls=1,
        )

    # -- failures ----------------------------------------------------------

    def _classify(self, exc: Exception, timeout: float) -> _Failure | None:
        """What went wrong, or None when ``exc`` is not a model-service failure."""
        import openai

        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            try:
                phrase = http.HTTPStatus(status).phrase
            except ValueError:
                phrase = "HTTP error"
            return _Failure(
                f"{status} {phrase}",
                status,
                status in (408, 409, 429) or status >= 500,
                retry_after_seconds(exc.response.headers, self._clock()),
                _detail(exc),
            )
        if isinstance(exc, openai.APITimeoutError):
            return _Failure(f"timed out after {timeout:.3g} s", None, True)
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            kind = type(cause).__name__ if cause is not None else ""
            reason = {"ConnectError": "connection refused", "RemoteProtocolError": "connection dropped mid-response",
                      "ReadError": "connection dropped mid-response"}.get(kind, "connection failed")
            return _Failure(reason, None, True, detail=f"{kind}: {cause}" if cause is not None else "")
        if isinstance(exc, openai.APIResponseValidationError):
            return _Failure("response did not match the chat-completions schema", None, False, detail=_detail(exc))
        if isinstance(exc, openai.APIError):  # an error event inside the stream
            return _Failure("error event in the stream", None, True, detail=_detail(exc))
        return None

    def _message(self, head: str, failure: _Failure) -> str:
        cfg = self.config
        text = f"{head}: {failure.reason} from {cfg.endpoint} (model {cfg.model})"
        if failure.detail:
            text += f": {failure.detail[:300]}"
        hint = {
            401: f"check {cfg.key_env}",
            403: f"check {cfg.key_env} and that it may use this model",
            404: "check the model name (--model, plan model:, TEAM_MODEL) and OPENAI_BASE_URL (usually ends in /v1)",
        }.get(failure.status or 0)
        if hint:
            text += f"; {hint}"
        key = cfg.api_key.get_secret_value()
        return text.replace(key, "***") if len(key) >= 6 else text

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        return backoff_delay(self.config, attempt, retry_after, 0.0 if retry_after is not None else self._rng())


def _detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        msg = body.get("message") or body.get("error") or body
        return str(msg)
    if isinstance(body, str) and body.strip():
        return body.strip()
    return str(getattr(exc, "message", "") or "")
