"""Token usage and what it costs: US dollars per 1M tokens, well-known OpenAI models.

``Usage`` is the token count of one call (or a sum: ``a + b``) with its cost.
``cost(price, prompt, completion, cached)`` prices one call. Cached prompt
tokens (``usage.prompt_tokens_details.cached_tokens``) are part of
``prompt_tokens`` and are billed at the cached-input price instead of the
input price:

    cost = ((prompt - cached) * input + cached * cached_input + completion * output) / 1e6

The lookup is by exact model name (the name asked for, or the dated snapshot
the service reports back). An unknown model — a local llama.cpp / Ollama /
vLLM model, a fine-tune, a provider we do not list — has no price: ``cost``
returns ``None`` and nothing is guessed. Prices are the public list prices
(standard tier) as of ``PRICES_AS_OF``; check https://openai.com/api/pricing
when it matters.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

PRICES_AS_OF = "2025-08"


class Price(NamedTuple):
    """List price of one model, US dollars per 1M tokens."""

    input: float
    cached_input: float
    output: float


# Models without prompt caching bill cached tokens at the input price.
PRICES: dict[str, Price] = {
    "gpt-5": Price(1.25, 0.125, 10.00),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-4.1-2025-04-14": Price(2.00, 0.50, 8.00),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-4.1-mini-2025-04-14": Price(0.40, 0.10, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.025, 0.40),
    "gpt-4.1-nano-2025-04-14": Price(0.10, 0.025, 0.40),
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4o-2024-08-06": Price(2.50, 1.25, 10.00),
    "gpt-4o-2024-11-20": Price(2.50, 1.25, 10.00),
    "gpt-4o-2024-05-13": Price(5.00, 5.00, 15.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "gpt-4o-mini-2024-07-18": Price(0.15, 0.075, 0.60),
    "o3": Price(2.00, 0.50, 8.00),
    "o3-mini": Price(1.10, 0.55, 4.40),
    "o4-mini": Price(1.10, 0.275, 4.40),
    "o1": Price(15.00, 7.50, 60.00),
    "gpt-4-turbo": Price(10.00, 10.00, 30.00),
    "gpt-3.5-turbo": Price(0.50, 0.50, 1.50),
}


def price_of(*models: str | None) -> Price | None:
    """The price of the first of ``models`` that is in the table, else None."""
    for model in models:
        if model and model in PRICES:
            return PRICES[model]
    return None


def cost(
    price: Price | None, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0
) -> float | None:
    """Dollars for one call, or None when the price is unknown."""
    if price is None:
        return None
    cached = min(max(cached_tokens, 0), prompt_tokens)
    total = (
        (prompt_tokens - cached) * price.input
        + cached * price.cached_input
        + completion_tokens * price.output
    )
    return total / 1_000_000


class Usage(BaseModel):
    """Tokens and dollars; ``a + b`` sums them. ``cost`` None = unknown price."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = Field(0, description="Prompt tokens served from the provider's cache.")
    cost: float | None = Field(0.0, description="US dollars; None when any summed call had no price.")
    calls: int = Field(0, description="Model calls summed into this record.")

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cost=cost,
            calls=self.calls + other.calls,
        )
