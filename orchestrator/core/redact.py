"""Secrets that must never reach disk: a value of the secrets a process knows, and scrubbing.

``Secrets`` is a plain value: the secret strings, longest first. Every
component that writes files takes one (``secrets=``) and, when none is
given, builds it from its environment (``Secrets.from_environ``), which is
where ``team`` gets every credential it has:

* the value of each variable whose *name* says it is a credential
  (``SECRET_NAME``: ``*API_KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``,
  ``*CREDENTIAL*``, ``*PRIVATE_KEY*``, ``*ACCESS_KEY*``), so the model key,
  ``GITHUB_TOKEN``, ``ANTHROPIC_API_KEY`` and the like;
* the password part of any URL in any variable (``scheme://user:PASS@host``),
  e.g. a proxy or ``OPENAI_BASE_URL`` with credentials in it.

Values shorter than ``MIN_LENGTH`` characters, or that are plain words like
``true`` or a number, are not secrets (scrubbing them would mangle
ordinary text). ``scrub`` replaces every occurrence with ``[REDACTED]``;
``add`` returns a value with more secrets (a key handed over in code).

Writers that scrub: task files and event lines (tasks/files.py),
transcripts (agent/transcript.py), job output tails in notifications,
records and task results (jobs/records.py), and what the agents' tools keep
(the call log and saved outputs, tools/registry.py and tools/bound.py).
Variables that a job must not see are found by the same name rule
(``secret_names``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

SECRET_NAME = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY", re.I)
"""A variable whose name matches holds a credential."""
URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:([^/\s@]+)@")
MIN_LENGTH = 8
_PLAIN = frozenset({"true", "false", "yes", "no", "none", "null", "disabled", "enabled"})
MASK = "[REDACTED]"


def secret_names(env: Mapping[str, str]) -> list[str]:
    """Names in ``env`` that look like credentials (a job or a sandbox must not inherit them)."""
    return [name for name in env if SECRET_NAME.search(name)]


def _usable(value: str) -> bool:
    return len(value) >= MIN_LENGTH and value.lower() not in _PLAIN and not value.strip().isdigit()


class Secrets:
    """The secret values one process knows (see the module docstring). Immutable."""

    __slots__ = ("_values",)

    def __init__(self, values: Iterable[str] = ()):
        self._values: tuple[str, ...] = tuple(sorted({v for v in values if v and _usable(v)}, key=len, reverse=True))

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> Secrets:
        """The credentials in ``env`` (default: this process's environment)."""
        env = os.environ if env is None else env
        values = [value for name, value in env.items() if SECRET_NAME.search(name)]
        for value in env.values():
            values += URL_PASSWORD.findall(value)
        return cls(values)

    def add(self, *values: str | None) -> Secrets:
        """This value plus ``values`` (e.g. a key that did not come from the environment)."""
        return Secrets([*self._values, *(v for v in values if v)])

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED]`` (longest first)."""
        for secret in self._values:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def scrub_bytes(self, data: bytes) -> bytes:
        for secret in self._values:
            raw = secret.encode()
            if raw in data:
                data = data.replace(raw, MASK.encode())
        return data

    @property
    def longest(self) -> int:
        """Length in bytes of the longest secret (0 when there is none)."""
        return max((len(v.encode()) for v in self._values), default=0)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Secrets({len(self._values)} values)"  # never the values themselves
