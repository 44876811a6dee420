"""A fake ``ChatModel`` (the agent loop's Protocol) driven by a Python function.

``FakeModel(script)`` calls ``script(messages, n)`` (n = 1-based call number
for this model) and returns its ``Completion``; every call's messages are
recorded. Thread-safe: one instance may serve many teammates.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable

from orchestrator.llm.types import Completion, ToolCall

_ids = itertools.count(1)


def say(text: str) -> Completion:
    return Completion(content=text, finish_reason="stop")


def call(*calls: tuple[str, dict]) -> Completion:
    return Completion(tool_calls=[ToolCall(id=f"call_{next(_ids)}", name=name, arguments=json.dumps(args))
                                  for name, args in calls], finish_reason="tool_calls")


def last_user(messages: list[dict]) -> str:
    return next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")


def tool_results(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m.get("role") == "tool"]


class FakeModel:
    def __init__(self, script: Callable[[list[dict], int], Completion]):
        self.script = script
        self.calls: list[list[dict]] = []
        self._lock = threading.Lock()

    def complete(self, messages, tools=None, *, stream=True, on_text=None, deadline=None) -> Completion:
        with self._lock:
            self.calls.append(list(messages))
            n = len(self.calls)
        return self.script(messages, n)
