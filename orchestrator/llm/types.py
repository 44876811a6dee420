"""Records and config of the LLM client, with no ``openai`` import.

What callers of the model need without pulling in the SDK: ``LLMConfig``
(and ``LLMConfig.resolve``, the precedence ``--model`` > plan ``model:`` >
``$TEAM_MODEL`` plus the ``$OPENAI_*`` / ``$TEAM_LLM_*`` environment, or a
model's own endpoint, key variable and price from a ``models:`` entry:
core/modelspec.py),
``ToolCall`` and ``Completion`` (one model answer, with ``to_message`` for
the conversation), ``RetryEvent`` (one wait before a retry), the
``ChatModel`` Protocol the agent loop talks to, and the pure arithmetic of
the retry policy: ``retry_after_seconds`` (what a server asked us to wait)
and ``backoff_delay`` (exponential backoff with jitter). ``client.py`` holds the
client; see its docstring for the policy.
"""

from __future__ import annotations

import email.utils
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ..core.errors import UserError
from ..core.modelspec import ModelSpec
from .pricing import Price, Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class LLMConfig(BaseModel):
    """How to reach the model service. ``api_key`` never leaves this object."""

    model_config = ConfigDict(frozen=True)

    model: str = Field(description="Model name sent to the server.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint; None = api.openai.com.")
    api_key: SecretStr = Field(exclude=True, repr=False, description="Bearer token; any non-empty value for local servers.")
    timeout: float = Field(120.0, gt=0, description="Seconds per HTTP request (connect/read).")
    max_retries: int = Field(4, ge=0, description="Retries after the first attempt on transient failures.")
    backoff_base: float = Field(1.0, ge=0, description="First backoff delay in seconds; doubles per retry.")
    backoff_max: float = Field(30.0, ge=0, description="Upper bound of one backoff delay in seconds.")
    retry_after_max: float = Field(120.0, ge=0, description="Longest Retry-After we wait; longer fails at once.")
    stream: bool = Field(True, description="Stream answers; False sends every request non-streaming.")
    stream_usage: bool = Field(True, description="Ask for usage in the stream (stream_options.include_usage).")
    price: Price | None = Field(None, description="Its price from a `models:` entry; None: the built-in table.")
    key_env: str = Field("OPENAI_API_KEY", description="The variable the key came from (named in errors).")

    @property
    def endpoint(self) -> str:
        return (self.base_url or DEFAULT_BASE_URL).rstrip("/")

    @classmethod
    def resolve(
        cls,
        plan_model: str | None = None,
        cli_model: str | None = None,
        env: Mapping[str, str] | None = None,
        *,
        plan: bool = True,
        spec: ModelSpec | None = None,
    ) -> LLMConfig:
        """Build the config from ``--model`` > plan ``model:`` > ``$TEAM_MODEL`` and the env.
        ``plan``: a plan is involved (its ``model:`` is one of the ways the error names).
        ``spec``: the model's ``models:`` entry: its endpoint, the variable holding its key, its price."""
        env = os.environ if env is None else env
        model = (cli_model or plan_model or env.get("TEAM_MODEL") or "").strip()
        if not model:
            raise UserError("no model configured: pass --model, or set TEAM_MODEL"
                            + (" or model: in the plan" if plan else ""))
        key_env = spec.api_key_env if spec is not None and spec.api_key_env else "OPENAI_API_KEY"
        key = env.get(key_env, "").strip()
        if not key and key_env != "OPENAI_API_KEY":
            raise UserError(f"no API key for model {model}: set {key_env} (its `models:` entry names it as "
                            "api_key_env)")
        if not key:
            raise UserError("no API key: set OPENAI_API_KEY (any non-empty value for local servers)")
        extra: dict[str, Any] = {}
        stream_env = env.get("TEAM_LLM_STREAM", "").strip().lower()
        if stream_env:
            if stream_env not in ("0", "1", "false", "true", "no", "yes"):
                raise UserError(f"TEAM_LLM_STREAM={stream_env!r}: use 1 or 0")
            extra["stream"] = stream_env in ("1", "true", "yes")
        for var, field, kind in (
            ("TEAM_LLM_TIMEOUT", "timeout", float),
            ("TEAM_LLM_MAX_RETRIES", "max_retries", int),
            ("TEAM_LLM_BACKOFF_BASE", "backoff_base", float),
            ("TEAM_LLM_BACKOFF_MAX", "backoff_max", float),
        ):
            raw = env.get(var, "").strip()
            if raw:
                try:
                    value = kind(raw)
                except ValueError:
                    raise UserError(f"{var}={raw!r} is not a number: unset it or give a {kind.__name__}") from None
                if value < 0:
                    raise UserError(f"{var}={raw!r} must not be negative")
                extra[field] = value
        price = spec.price if spec is not None else None
        return cls(
            model=model,
            base_url=(spec.base_url if spec is not None and spec.base_url else None)
            or env.get("OPENAI_BASE_URL", "").strip() or None,
            api_key=SecretStr(key),
            key_env=key_env,
            price=Price(price.input, price.input if price.cached_input is None else price.cached_input, price.output)
            if price is not None else None,
            **extra,
        )


class ToolCall(BaseModel):
    """One tool call asked for by the model; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str

    def to_message(self) -> dict[str, Any]:
        """The OpenAI wire form, as it goes into an assistant message."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class Completion(BaseModel):
    """One model answer."""

    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = Field(default_factory=Usage)
    model: str = ""

    def to_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation.

        ``content`` is ``""`` rather than null with tool calls: llama-cpp-python's
        server rejects a null assistant content (500); OpenAI accepts both.
        """
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_message() for tc in self.tool_calls]
        return msg


@dataclass(frozen=True)
class RetryEvent:
    """A failed attempt that will be retried after ``delay`` seconds."""

    attempt: int
    max_attempts: int
    delay: float
    reason: str
    status: int | None = None
    discarded_output: bool = False
    """True when text of the failed attempt already went to ``on_text``."""

    def __str__(self) -> str:
        return f"retrying in {self.delay:.1f} s ({self.reason}), attempt {self.attempt + 1} of {self.max_attempts}"


class ChatModel(Protocol):
    """What the agent loop needs from a model. ``deadline``: ``time.monotonic()`` by which the
    answer must have come (an agent task's ``timeout``); past it the call gives up with a
    ``ModelError`` rather than keep the task running."""

    def complete(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        *,
        stream: bool = True,
        on_text: Callable[[str], None] | None = None,
        deadline: float | None = None,
    ) -> Completion: ...


def retry_after_seconds(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds the server asked us to wait: retry-after-ms, Retry-After seconds or HTTP date."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass  # fall through to Retry-After
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass  # not seconds: an HTTP date
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def backoff_delay(config: LLMConfig, attempt: int, retry_after: float | None, rand: float) -> float:
    """Seconds to wait before retrying after failed attempt ``attempt`` (1-based).

    The server's ``retry_after`` wins when given; else
    ``min(backoff_max, backoff_base * 2**(attempt-1))`` scaled by a jitter of
    ``0.5 + 0.5 * rand`` (``rand`` in [0, 1)).
    """
    if retry_after is not None:
        return max(0.0, retry_after)
    step = min(config.backoff_max, config.backoff_base * 2 ** (attempt - 1))
    return step * (0.5 + 0.5 * rand)
