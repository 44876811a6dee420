"""Per-agent transcripts: ``.team/transcripts/<name>.jsonl``.

Every message an agent's conversation gains (system excluded: it is rebuilt
from the role and the workspace) is appended as one JSON line *before* the
agent acts on it, so a teammate killed at any instant resumes with exactly
the conversation it had. Lines carry a ``kind``:

* ``message`` — an OpenAI-format chat message (``msg``). A message that
  carries inbox messages (the user message of a drain, or a ``read_inbox``
  tool result) also lists their bus ids in ``inbox_ids``: the text and the
  ids are one line, so they are on disk together or not at all. On resume
  those ids are skipped if the bus delivers them again (the window between
  persisting a message and acknowledging it on the bus).
* ``inbox``   — (older transcripts) inbox ids on a line of their own; still read.
* ``compaction`` — the conversation was compacted: ``msg`` list replaces
  everything before this line (the full history stays above it on disk).
* ``task``    — the agent started working on a task (id, epoch).

Secrets: every string written is scrubbed of the secrets the transcript was
given (default: the credentials in the environment, see core/redact.py) before
it reaches disk.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..core.fsutil import append_line, parse_jsonl
from ..core.jsonutil import dumps
from ..core.paths import team_dir
from ..core.redact import Secrets


def transcript_path(root: Path, name: str) -> Path:
    return team_dir(root) / "transcripts" / f"{name}.jsonl"


class Transcript:
    """Append-only, crash-safe record of one agent's conversation."""

    def __init__(self, path: Path, *, durable: bool = True, secrets: Secrets | None = None):
        self.path = Path(path)
        self.durable = durable
        self.secrets = Secrets.from_environ() if secrets is None else secrets
        self._lock = threading.Lock()
        self._dir_ready = False

    def _append(self, record: dict[str, Any]) -> None:
        line = self.secrets.scrub(dumps(record))
        with self._lock:
            if not self._dir_ready:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._dir_ready = True
            append_line(self.path, line, durable=self.durable)

    def add(self, msg: dict[str, Any], *, inbox_ids: list[str] | tuple[str, ...] = ()) -> None:
        """Append ``msg``; ``inbox_ids``: the bus messages it carries (same line, one write)."""
        record: dict[str, Any] = {"kind": "message", "msg": msg}
        if inbox_ids:
            record["inbox_ids"] = list(inbox_ids)
        self._append(record)

    def add_compaction(self, messages: list[dict[str, Any]], **info: Any) -> None:
        self._append({"kind": "compaction", "msg": messages, **info})

    def add_task(self, task_id: int, epoch: int) -> None:
        self._append({"kind": "task", "task": task_id, "epoch": epoch})

    def load(self) -> tuple[list[dict[str, Any]], set[str], dict[str, Any] | None]:
        """(messages after the last compaction, inbox ids seen, last task line)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], set(), None
        messages: list[dict[str, Any]] = []
        seen: set[str] = set()
        task: dict[str, Any] | None = None
        for rec in parse_jsonl(data):
            kind = rec.get("kind")
            if kind == "message" and isinstance(rec.get("msg"), dict):
                messages.append(rec["msg"])
                seen.update(rec.get("inbox_ids") or [])
            elif kind == "compaction" and isinstance(rec.get("msg"), list):
                messages = list(rec["msg"])
            elif kind == "inbox":
                seen.update(rec.get("ids") or [])
            elif kind == "task":
                task = rec
        return _drop_dangling_tool_calls(messages), seen, task

    def exists(self) -> bool:
        return self.path.exists() and os.path.getsize(self.path) > 0


def _drop_dangling_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A kill between an assistant's tool_calls and their results leaves calls
    with no answer, which the API rejects. Answer them as interrupted."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for msg in messages:
        if pending and msg.get("role") != "tool":
            out.extend(_interrupted(pending))
            pending = []
        out.append(msg)
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            pending = [c["id"] for c in msg["tool_calls"]]
        elif msg.get("role") == "tool" and msg.get("tool_call_id") in pending:
            pending.remove(msg["tool_call_id"])
    out.extend(_interrupted(pending))
    return out


def _interrupted(call_ids: list[str]) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": cid, "content": "error: interrupted (the agent was restarted); re-run if needed"}
        for cid in call_ids
    ]
