"""Spending caps: ``budget:`` of a run, a role or a teammate (docs/agents.md, "Budgets").

``Budget`` holds a cap on tokens (prompt + completion, as the model server
reports them) and/or on US dollars (priced by llm/pricing.py; a model
without a price has no known cost, so only its token cap can be enforced).
``over(budget, tokens, dollars)`` says which cap a spend has reached, as
the reason a task fails with ("budget reached: ..."); ``describe`` shows a
spend against a budget (``team status``, the run summary, ``/cost``).

``money(x)`` is how every report prints money: cents from $1 up
(``$12.35``), below that three significant digits with trailing zeros
dropped down to cents (``$0.50``, ``$0.123``, ``$0.0004``, ``$0.000042``),
so a small cap or a cheap model's spend is never shown as ``$0.00``.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Budget(BaseModel):
    """A cap on tokens and/or dollars."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    tokens: int | None = Field(None, ge=1, description="Most tokens (prompt + completion) it may use.")
    dollars: float | None = Field(None, gt=0, description="Most US dollars it may spend (priced models only).")

    @model_validator(mode="before")
    @classmethod
    def _one_number(cls, value: Any) -> Any:
        """``budget: 50000`` is a token cap."""
        if isinstance(value, int) and not isinstance(value, bool):
            return {"tokens": value}
        return value

    @model_validator(mode="after")
    def _something(self) -> Budget:
        if self.tokens is None and self.dollars is None:
            raise ValueError("a budget needs tokens and/or dollars")
        return self


def money(x: float) -> str:
    """Money as every report prints it (see the module docstring): ``$0.0004``, never ``$0.00``."""
    if x == 0:
        return "$0.00"
    if abs(x) >= 1:
        return f"${x:,.2f}"
    places = max(2, -math.floor(math.log10(abs(x))) + 2)
    text = f"{x:.{places}f}"
    whole, frac = text.split(".")
    frac = frac.rstrip("0").ljust(2, "0")
    return f"${whole}.{frac}"


def over(budget: Budget | None, tokens: int, dollars: float | None) -> str | None:
    """Which cap ``tokens`` / ``dollars`` reached (``"120 of 100 tokens"``); None: within the budget."""
    if budget is None:
        return None
    if budget.tokens is not None and tokens >= budget.tokens:
        return f"{tokens:,} of {budget.tokens:,} tokens"
    if budget.dollars is not None and dollars is not None and dollars >= budget.dollars:
        return f"{money(dollars)} of {money(budget.dollars)}"
    return None


def describe(budget: Budget | None, tokens: int, dollars: float | None) -> str:
    """A spend, against its budget when there is one: ``1,200/5,000 tok, $0.0012/$1.00``."""
    tok = f"{tokens:,}" + (f"/{budget.tokens:,}" if budget is not None and budget.tokens is not None else "") + " tok"
    cap = f"/{money(budget.dollars)}" if budget is not None and budget.dollars is not None else ""
    return f"{tok}, {'$?' if dollars is None else money(dollars)}{cap}"
