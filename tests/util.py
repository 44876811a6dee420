"""Test helpers: wait for observable state instead of sleeping."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.01, what: str = "") -> T:
    """Poll ``predicate`` until it returns a truthy value; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def pids_running(argv: list[str]) -> list[int]:
    """Live (not zombie) processes, in any PID namespace, whose command line is exactly ``argv``.

    A pid printed inside a sandbox is its namespace's, not ours: tests find the
    processes a command started by a unique command line instead."""
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if f.read() != want:
                    continue
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    continue
        except (FileNotFoundError, ProcessLookupError):
            continue
        found.append(int(name))
    return found


def llm_env(base_url: str, key: str, **extra: str) -> dict[str, str]:
    """The environment a `team` process needs to reach the scripted model server at ``base_url``
    (no back-off between retries), plus ``extra``."""
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": key, "TEAM_MODEL": "gpt-4o-mini",
            "TEAM_LLM_BACKOFF_BASE": "0", "TEAM_LLM_BACKOFF_MAX": "0", **extra}


def tasks_by_name(root: Path) -> dict[str, dict]:
    """Every task file under ``root`` as raw JSON, by its plan task id (else its id)."""
    out = {}
    for f in sorted((root / ".tasks").glob("task_*.json")):
        t = json.loads(f.read_text())
        out[t.get("plan_task") or t["id"]] = t
    return out
