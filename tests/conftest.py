"""Shared fixtures: run the real ``team`` entry point in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# A suite started in the background by a non-interactive shell (``make test &``,
# some CI runners) inherits SIGINT and SIGQUIT ignored, and so would every
# process it starts: the tests that interrupt a lead with SIGINT would then
# test nothing. Give this process (and so its children) the default handling.
for _sig in (signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.default_int_handler if _sig == signal.SIGINT else signal.SIG_DFL)


def team_env(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TEAM_"))}
    env["TEAM_ROOT"] = str(root)
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run_team(root: Path, *args: str, input: str | None = None, timeout: float = 60, **env: str):
    """Run ``python -m orchestrator ARGS`` against state root ``root``."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=root,
        env=team_env(root, **env),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def team(tmp_path):
    """``team("task", "list")`` -> CompletedProcess, rooted at ``tmp_path``."""

    def _run(*args: str, **kw):
        return run_team(tmp_path, *args, **kw)

    _run.root = tmp_path
    return _run
