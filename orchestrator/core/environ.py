"""The environment of every process ``team`` starts for a task or an agent: one allow-list.

Plan shell tasks, an agent's ``bash`` commands and its ``background_run``
jobs all get their environment from ``task_environment``, built from three
parts and nothing else:

1. the variables of the lead's environment named on the allow-list
   (``ALLOWED`` and the ``LC_*`` family): what programs need to find each
   other and to speak the user's language::

       PATH HOME USER LOGNAME SHELL LANG LANGUAGE LC_* TERM COLORTERM NO_COLOR TZ TMPDIR

2. what the plan declares for the task (``env:``, the plan's ``defaults.env``
   first), with ``$NAME`` / ``${NAME}`` in a value taken from the lead's
   environment when the task starts (``expand_env``), so a plan can hand a
   task a credential by reference without writing it into the task;
3. the ``TEAM_*`` variables ``team`` sets for the process (``TEAM_TASK_ID``,
   ``TEAM_ROOT``, ``TEAM_AGENT``, the job markers ...). ``TEAM_*`` variables
   of the lead's own environment are not passed on.

Everything else stays with the lead: API keys, tokens, cloud credentials,
proxies with passwords in them, ``PYTHONPATH``, ``VIRTUAL_ENV`` ... A task
that needs one names it in the plan (``env: {GITHUB_TOKEN: $GITHUB_TOKEN}``);
an agent's commands cannot ask for any. An allow-list rather than a
deny-list of credential-looking names, because the next credential has a
name nobody thought of. Whatever does reach a process and comes back in its
output is still scrubbed from every file (core/redact.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

ALLOWED = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL",
    "LANG", "LANGUAGE", "TERM", "COLORTERM", "NO_COLOR", "TZ", "TMPDIR",
})
"""Variables of the lead's environment every task and agent process inherits."""
ALLOWED_PREFIXES = ("LC_",)
"""Families of variables inherited as well (the locale's ``LC_ALL``, ``LC_CTYPE`` ...)."""

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def allowed(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ``."""
    return {k: v for k, v in environ.items() if k in ALLOWED or k.startswith(ALLOWED_PREFIXES)}


def expand_env(value: str, environ: Mapping[str, str] = os.environ) -> str:
    """``$NAME`` / ``${NAME}`` from the lead's environment (unset: left as is); ``$$`` is a literal ``$``."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name is None:
            return "$"
        return environ.get(name, m.group(0))

    return _VAR.sub(sub, value)


def env_names(value: str) -> list[str]:
    """The variables ``$NAME`` / ``${NAME}`` in ``value`` names (``$$`` is none)."""
    return [m.group(1) or m.group(2) for m in _VAR.finditer(value) if m.group(1) or m.group(2)]


def task_environment(environ: Mapping[str, str], *declared: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ``, then each of ``declared`` in order (later wins).

    ``declared`` are the plan's expanded ``env`` and the ``TEAM_*`` variables
    we set; they are taken as given."""
    env = allowed(environ)
    for extra in declared:
        env.update(extra)
    return env
