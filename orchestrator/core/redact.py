"""Secrets that must never reach disk: a transcript, a log or a task file.

The process keeps a set of secret values: the model API key from the
environment (``OPENAI_API_KEY``, registered by every ``team`` command at
start) and anything passed to ``register_secret``. Writers scrub them:

* transcripts (agent/transcript.py), every task file and event line the store
  writes (tasks/files.py), so an agent's echo of the key or an
  error message quoting it lands as ``[REDACTED]``;
* job output tails (jobrecords.read_tail), which go into notifications, job
  records and task results.

And we do not hand them out: shell tasks and agent shell tools run without
``OPENAI_API_KEY`` or any variable holding a registered secret unless the
plan sets it for the task (run/executor.py; the agents' bash tool drops every
secret-looking variable, tools/shell.py). A job's full log is written by the
command itself, so not passing the key is what keeps it out of there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

KEY_VARS = ("OPENAI_API_KEY",)
"""Variables that hold the model key: never passed to jobs unless asked for."""

_SECRETS: set[str] = set()
generation = 0
"""Bumped whenever a secret is registered (so callers can cache ``secret_env_names``)."""
_ORDERED: tuple[str, ...] = ()  # longest first, so a secret containing another is replaced whole
_LOCK = threading.Lock()


def register_secret(value: str | None) -> None:
    """Never write ``value`` to a transcript, log or task file."""
    global _ORDERED, generation
    if value and len(value) >= 4:
        with _LOCK:
            _SECRETS.add(value)
            _ORDERED = tuple(sorted(_SECRETS, key=len, reverse=True))
            generation += 1


def register_env_secrets(env: Mapping[str, str] = os.environ) -> None:
    for name in KEY_VARS:
        register_secret(env.get(name))


def secret_env_names(env: Mapping[str, str]) -> list[str]:
    """Names in ``env`` a job must not inherit: the key variables and any
    variable whose value is a registered secret."""
    with _LOCK:
        secrets = set(_SECRETS)
    return [name for name, value in env.items() if name in KEY_VARS or value in secrets]


def scrub(text: str) -> str:
    for secret in _ORDERED:
        if secret in text:
            text = text.replace(secret, "[REDACTED]")
    return text
