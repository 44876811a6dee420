"""Test helper for the tool tests: a real workspace, store and registry in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.core.fsutil import read_jsonl
from orchestrator.tasks.store import TaskStore
from orchestrator.tools import FileTruth, Observation, ToolContext, ToolRegistry, default_registry


class Harness:
    """``h.call("read_file", {"path": "a.py"})`` -> Observation, as the agent loop would."""

    def __init__(self, tmp_path: Path, agent: str = "alice", registry: ToolRegistry | None = None,
                 store: TaskStore | None = None):
        self.root = tmp_path
        self.ws = tmp_path / "ws"
        self.ws.mkdir(exist_ok=True)
        self.store = store or TaskStore(tmp_path)
        self.ctx = ToolContext(
            workspace=self.ws,
            root=tmp_path,
            agent=agent,
            truth=FileTruth(),
            store=self.store,
            outputs_dir=tmp_path / ".team" / "outputs" / agent,
            call_log=tmp_path / ".team" / "calls" / f"{agent}.jsonl",
        )
        self.registry = registry or default_registry()
        self._n = 0

    def call(self, name: str, args: Any) -> Observation:
        self._n += 1
        raw = args if isinstance(args, str) else json.dumps(args)
        return self.registry.call(name, raw, self.ctx, f"call_{self._n}")

    def ok(self, name: str, args: Any) -> str:
        obs = self.call(name, args)
        assert not obs.is_error, f"{name} failed at {obs.stage}: {obs.content}"
        return obs.content

    def log(self) -> list[dict]:
        return read_jsonl(self.ctx.call_log)
