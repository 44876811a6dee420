"""The environment of the processes a bench measures.

``as_installed``: the caller's environment without ``TEAM_*`` (each bench
says where the state root is) and without ``PYTHONDONTWRITEBYTECODE``. With
that set (as on the development VM), Python compiles every module it imports
that has no up-to-date ``.pyc`` at each start: ~60 ms of `team`'s start-up
that no installed copy pays (pip compiles at install time; an editable
checkout writes its ``.pyc`` on first import). Peers get the same
environment.
"""

from __future__ import annotations

import os


def as_installed(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEAM_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env
