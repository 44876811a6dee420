"""Bounded results: head + tail, with the full output kept on disk.

A result longer than its tool's budget is cut to a head and a tail joined by
a marker line::

    … 9,876,543 chars omitted; full output: /root/.team/outputs/alice/bash-call_1-3f2a.txt …

The head gets about 60% of the budget (errors and headers usually come
first), the tail the rest (the end of a log is where it failed). Cuts snap
to line boundaries when one is near. The full text is written once, under
``outputs_dir``, and the marker names that file; read_file can page through
it (the outputs directory is readable to file tools).

``bound_file`` does the same for output that is already in a file (a 10 MB
command output is never held in memory: only head and tail are read).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

HEAD_SHARE = 0.6
SNAP = 200  # look this far for a newline to cut at


def marker(omitted: int, ref: Path | str) -> str:
    return f"\n… {omitted:,} chars omitted; full output: {ref} …\n"


def output_path(outputs_dir: Path, tool: str, call_id: str, suffix: str = ".txt") -> Path:
    """A fresh, unique file name for one call's full output."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", call_id)[:48] or "call"
    outputs_dir.mkdir(parents=True, exist_ok=True)
    return outputs_dir / f"{tool}-{safe}-{uuid.uuid4().hex[:8]}{suffix}"


def _split(room: int) -> tuple[int, int]:
    head = max(0, int(room * HEAD_SHARE))
    return head, max(0, room - head)


def _snap_head(text: str) -> str:
    cut = text.rfind("\n", max(0, len(text) - SNAP))
    return text[: cut + 1] if cut >= 0 else text


def _snap_tail(text: str) -> str:
    cut = text.find("\n", 0, SNAP)
    return text[cut + 1 :] if cut >= 0 else text


def cut(text: str, budget: int, ref: Path | str) -> str:
    """``text`` cut to about ``budget`` chars with the marker; unchanged if it fits."""
    if len(text) <= budget:
        return text
    room = max(0, budget - len(marker(len(text), ref)))
    head_n, tail_n = _split(room)
    head = _snap_head(text[:head_n])
    tail = _snap_tail(text[len(text) - tail_n :]) if tail_n else ""
    omitted = len(text) - len(head) - len(tail)
    return head + marker(omitted, ref) + tail


def bound_text(text: str, budget: int, outputs_dir: Path, tool: str, call_id: str) -> tuple[str, Path | None]:
    """Cut ``text`` to ``budget``; when cut, save the whole of it and return its path."""
    if len(text) <= budget:
        return text, None
    path = output_path(outputs_dir, tool, call_id)
    path.write_text(text, encoding="utf-8", errors="replace")
    return cut(text, budget, path), path


def bound_file(path: Path, budget: int) -> tuple[str, bool]:
    """The content of ``path`` cut to ``budget`` (reading only head and tail).

    Returns ``(text, was_cut)``. Sizes in the marker are in bytes of the file
    when it is cut, which for ASCII output equals chars.
    """
    size = os.path.getsize(path)
    if size <= budget:
        return path.read_text(encoding="utf-8", errors="replace"), False
    room = max(0, budget - len(marker(size, path)))
    head_n, tail_n = _split(room)
    with open(path, "rb") as f:
        head_b = f.read(head_n)
        f.seek(max(0, size - tail_n))
        tail_b = f.read(tail_n) if tail_n else b""
    head = _snap_head(head_b.decode("utf-8", "replace"))
    tail = _snap_tail(tail_b.decode("utf-8", "replace")) if tail_b else ""
    omitted = size - len(head.encode()) - len(tail.encode())
    return head + marker(omitted, path) + tail, True
