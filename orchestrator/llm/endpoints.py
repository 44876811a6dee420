"""Which endpoint, key and price each model gets, and one client per endpoint.

A plan's ``models:`` and a role file's ``models:`` (core/modelspec.py) say, per model name,
where that model is served (``base_url``), which environment variable holds its key
(``api_key_env``) and what it costs (``price``). So one plan can mix providers: a teammate on
``gpt-4.1`` talks to OpenAI with ``$OPENAI_API_KEY`` while one on a local ``llama3`` talks to
``http://127.0.0.1:8080/v1`` with ``$LOCAL_API_KEY``.

For model ``M`` wanted by a teammate of role ``R`` (its ``team:`` entry's model, else its role's,
else the run's): the plan's ``models[M]``, else ``R``'s ``models[M]`` (the plan author's word wins,
as a ``team:`` entry's wins over its role's), else nothing: ``$OPENAI_BASE_URL``,
``$OPENAI_API_KEY`` and the built-in price table (pricing.py).

``Endpoints.client(model, spec)`` returns the one ``LLMClient`` for that model and entry (made on
first use, closed by ``close``); ``config`` the ``LLMConfig`` (``UserError`` when the key's
variable is not set); ``price`` the price a dollar budget counts (None: unknown, and such a model
cannot be held by a dollar budget: ``unpriced`` says what to do, and the run refuses it before
it starts).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping

from ..core.modelspec import ModelSpec
from . import pricing
from .client import LLMClient
from .types import LLMConfig, RetryEvent


def price_of(model: str, spec: ModelSpec | None) -> pricing.Price | None:
    """What a call of ``model`` costs per 1M tokens: its entry's ``price``, else the built-in table's."""
    if spec is not None and spec.price is not None:
        p = spec.price
        return pricing.Price(p.input, p.input if p.cached_input is None else p.cached_input, p.output)
    return pricing.price_of(model)


def unpriced(who: str, model: str) -> str:
    """Why a dollar budget cannot hold ``who`` on ``model``, and the two ways out."""
    return (f"{who} talks to model {model!r}, which has no known price, so a dollar budget cannot hold it: give "
            f"the model a price (in the plan or the role file: `models: {{{model}: {{price: {{input: D, output: "
            f"D}}}}}}`, US dollars per 1M tokens) or cap it in tokens instead (`budget: {{tokens: N}}`)")


class Endpoints:
    """The clients of one run (or chat session), one per model and ``models:`` entry; thread-safe."""

    def __init__(self, plan: Mapping[str, ModelSpec] | None = None, *, env: Mapping[str, str] | None = None,
                 on_retry: Callable[[RetryEvent], None] | None = None):
        """``plan``: the plan's ``models:``; ``env``: where keys are read (default: this process's)."""
        self.plan = dict(plan or {})
        self.env = os.environ if env is None else env
        self.on_retry = on_retry
        self._clients: dict[tuple[str, ModelSpec | None], LLMClient] = {}
        self._lock = threading.Lock()

    def spec(self, model: str, role: ModelSpec | None = None) -> ModelSpec | None:
        """The entry of ``model``: the plan's, else the role's (``role``: what its ``models:`` says)."""
        return self.plan.get(model) or role

    def config(self, model: str, spec: ModelSpec | None) -> LLMConfig:
        return LLMConfig.resolve(None, model, self.env, spec=spec)

    def client(self, model: str, spec: ModelSpec | None) -> LLMClient:
        with self._lock:
            key = (model, spec)
            if key not in self._clients:
                self._clients[key] = LLMClient(self.config(model, spec), on_retry=self.on_retry)
            return self._clients[key]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()
