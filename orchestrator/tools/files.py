"""File tools: read_file, write_file, edit_file.

The pipeline has already confined every path to the workspace and, for an
edit or overwrite of an existing file, checked the agent's baseline (see
filetruth.py) and handed over the verified bytes in ``call.current``. These
handlers do the work and keep file truth current:

* ``read_file`` shows numbered lines (``   12\\tcode``) from ``offset`` for
  ``limit`` lines, stopping early at the tool's budget so the model always
  sees whole lines and an exact "continue with offset=N" hint. Each read
  records a baseline: full when every line was shown uncut, else partial.
  Binary files are described, not dumped.
* ``write_file`` creates a file (and its directories) or overwrites one;
  the write is atomic and becomes the agent's new baseline.
* ``edit_file`` replaces ``old_string`` with ``new_string``. It must match
  exactly once (or ``replace_all``); zero matches and several matches are
  errors that say how many and where (with a whitespace-insensitive hint).
  The result is a unified diff; the new content becomes the baseline.

Text is handled as UTF-8; line endings are preserved byte for byte.
"""

from __future__ import annotations

import difflib
import re

from pydantic import Field

from ..core.fsutil import atomic_write
from ..core.text import plural
from .base import Args, Call, ToolError, ToolOutput, tool

READ_BUDGET = 24_000
MAX_LINE = 2000
DEFAULT_LIMIT = 2000


def _text(data: bytes, shown: str) -> str:
    if b"\x00" in data[:8192]:
        raise ToolError(f"{shown} is a binary file ({len(data):,} bytes); file tools handle text only")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolError(f"{shown} is not UTF-8 text (byte {e.start}); file tools handle UTF-8 only") from None


def _lines(text: str) -> list[str]:
    """Lines split on ``\n`` only (as file truth counts them), ``\r`` shown stripped."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _lineno(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


# ---------------------------------------------------------------------- read_file
class ReadArgs(Args):
    path: str = Field(description="File path, relative to the workspace.")
    offset: int = Field(1, ge=1, le=100_000_000, description="First line to show (1-based).")
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=10_000, description="Most lines to show.")


@tool("read_file", args=ReadArgs, risk="read", budget=READ_BUDGET, paths={"path": "read"})
def read_file(call: Call) -> ToolOutput:
    """Read a text file as numbered lines ("   12<TAB>code"). Use offset/limit for long files.
    Read the whole file (no offset/limit) before you edit or overwrite it."""
    path, ctx = call.paths["path"], call.ctx
    shown = ctx.rel(path)
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; use glob to list files")
    if not path.exists():
        raise ToolError(f"{shown} does not exist; use glob to find files")
    data = path.read_bytes()
    text = _text(data, shown)
    lines = _lines(text)
    total = len(lines)
    start = call.args.offset
    if total == 0:
        ctx.truth.record_read(path, data, 1, 0)
        return ToolOutput(f"({shown} is empty)")
    if start > total:
        raise ToolError(f"{shown} has {plural(total, 'line')}; offset {start} is past the end")
    out: list[str] = []
    used, cut_lines = 0, False
    end = start - 1
    room = READ_BUDGET - 200
    for n in range(start, min(total, start + call.args.limit - 1) + 1):
        line = lines[n - 1]
        if len(line) > MAX_LINE:
            line = line[:MAX_LINE] + f" … [line cut: {len(lines[n - 1]):,} chars]"
            cut_lines = True
        row = f"{n:>5}\t{line}\n"
        if used + len(row) > room and out:
            break
        out.append(row)
        used += len(row)
        end = n
    ctx.truth.record_read(path, data, start, end, truncated=cut_lines)
    body = "".join(out)
    if start == 1 and end == total and not cut_lines:
        return ToolOutput(body, meta={"lines": [start, end], "total": total})
    note = f"(showing lines {start}-{end} of {total}" if end > start else f"(showing line {start} of {total}"
    if end < total:
        note += f"; continue with offset={end + 1}"
    if cut_lines:
        note += "; long lines were cut"
    return ToolOutput(body + note + ")", meta={"lines": [start, end], "total": total})


# ---------------------------------------------------------------------- write_file
class WriteArgs(Args):
    path: str = Field(description="File path, relative to the workspace.")
    content: str = Field(description="The complete new content of the file.")


@tool("write_file", args=WriteArgs, risk="write", budget=2000, paths={"path": "write"}, fresh="path")
def write_file(call: Call) -> str:
    """Create a file, or overwrite one you have read in full (creates parent directories).
    To change part of an existing file prefer edit_file."""
    path, ctx = call.paths["path"], call.ctx
    shown = ctx.rel(path)
    if path.is_dir():
        raise ToolError(f"{shown} is a directory")
    existed = "path" in call.current
    data = call.args.content.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data)
    ctx.truth.record_write(path, data)
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    verb = "overwrote" if existed else "created"
    return f"{verb} {shown} ({plural(lines, 'line')}, {len(data):,} bytes)"


# ---------------------------------------------------------------------- edit_file
class EditArgs(Args):
    path: str = Field(description="File path, relative to the workspace.")
    old_string: str = Field(description="Exact text to replace, copied from the file (without line numbers).")
    new_string: str = Field(description="Text to put in its place.")
    replace_all: bool = Field(False, description="Replace every occurrence instead of exactly one.")


LINE_PREFIX = re.compile(r"^\s*\d+\t", re.M)


def _no_match_hint(text: str, old: str) -> str:
    if LINE_PREFIX.search(old):
        return " old_string seems to include line-number prefixes from read_file; drop them."
    words = old.split()
    if words:
        loose = r"\s+".join(re.escape(w) for w in words)
        m = re.search(loose, text)
        if m:
            return (
                f" A match that differs only in whitespace starts at line {_lineno(text, m.start())}; "
                f"copy the exact text, including indentation."
            )
    return " Read the file again and copy the exact text."


@tool("edit_file", args=EditArgs, risk="write", budget=8000, paths={"path": "write"}, fresh="path")
def edit_file(call: Call) -> ToolOutput:
    """Replace old_string with new_string in a file you have read in full. old_string must
    match exactly once (add surrounding lines to make it unique) unless replace_all is true.
    Returns a unified diff of the change."""
    path, ctx, a = call.paths["path"], call.ctx, call.args
    shown = ctx.rel(path)
    if path.is_dir():
        raise ToolError(f"{shown} is a directory")
    if "path" not in call.current:
        raise ToolError(f"{shown} does not exist; use write_file to create it")
    if a.old_string == "":
        raise ToolError("old_string is empty; to create or replace a whole file use write_file")
    if a.old_string == a.new_string:
        raise ToolError("old_string and new_string are the same; nothing to change")
    text = _text(call.current["path"], shown)
    starts = [m.start() for m in re.finditer(re.escape(a.old_string), text)]
    if not starts:
        raise ToolError(f"old_string was not found in {shown} (0 matches).{_no_match_hint(text, a.old_string)}")
    if len(starts) > 1 and not a.replace_all:
        where = ", ".join(str(_lineno(text, s)) for s in starts[:20])
        raise ToolError(
            f"old_string matches {len(starts)} times in {shown} (starting at lines {where}); "
            f"include more surrounding lines so it matches exactly once, or set replace_all"
        )
    new_text = text.replace(a.old_string, a.new_string) if a.replace_all else (
        text[: starts[0]] + a.new_string + text[starts[0] + len(a.old_string) :]
    )
    data = new_text.encode("utf-8")
    atomic_write(path, data)
    ctx.truth.record_write(path, data)
    diff = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in difflib.unified_diff(
            text.splitlines(keepends=True), new_text.splitlines(keepends=True), f"a/{shown}", f"b/{shown}"
        )
    )
    count = len(starts) if a.replace_all else 1
    head = f"edited {shown}: {count} replacement{'s' if count > 1 else ''}\n"
    return ToolOutput(head + diff, meta={"replacements": count})


FILE_TOOLS = [read_file, write_file, edit_file]
