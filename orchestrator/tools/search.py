"""Search tools: glob (find files by name) and grep (find lines by regex).

Both walk the tree below a workspace directory with ``os.walk`` (symlinked
directories are not followed; entries that resolve outside the workspace are
skipped), skip state and tool noise below the starting directory (``.git``,
``.tasks``, ``.team``, ``.venv``, ``node_modules``, ``__pycache__``, caches;
pass such a directory as ``path`` to search inside it), list results sorted
by path relative to the workspace, and stop at a result cap with a note saying how to narrow the
search. Glob patterns are relative: ``*`` and ``?`` stay within one path
component, ``**`` spans directories (``**/*.py``); a pattern with ``..`` or
an absolute pattern is refused. grep prints ``path:line:text`` with long
lines cut, skips binary and very large files, and reports an invalid regex
as an error observation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from pydantic import Field

from .base import Args, Call, ToolContext, ToolError, tool

SKIP_DIRS = {
    ".git", ".tasks", ".team", ".venv", "venv", "node_modules", "__pycache__",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox",
}
MAX_FILE_BYTES = 10_000_000
LINE_CHARS = 300


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a ``**``-aware glob into a regex over '/'-joined relative paths."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _check_pattern(pattern: str) -> None:
    if pattern.startswith(("/", "~")) or ".." in Path(pattern).parts:
        raise ToolError(f"glob pattern {pattern!r} must be relative and stay inside the workspace (no '..')")


def walk(ctx: ToolContext, base: Path) -> Iterator[tuple[Path, bool]]:
    """(path, is_dir) below ``base``, sorted per directory, confined to the workspace."""
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        here = Path(dirpath)
        for d in dirnames:
            yield here / d, True
        for f in sorted(filenames):
            p = here / f
            if p.is_symlink():
                target = p.resolve()
                if not (target == ctx.workspace or ctx.workspace in target.parents):
                    continue
            yield p, False


# ---------------------------------------------------------------------- glob
class GlobArgs(Args):
    pattern: str = Field(description="Glob relative to path, e.g. '**/*.py' or 'src/*.txt'.")
    path: str = Field(".", description="Directory to search from, relative to the workspace.")


@tool("glob", args=GlobArgs, risk="read", budget=12_000, paths={"path": "read"})
def glob_tool(call: Call) -> str:
    """Find files and directories whose path matches a glob ('**' spans directories).
    Lists paths relative to the workspace, sorted; directories end with '/'."""
    ctx, base, pattern = call.ctx, call.paths["path"], call.args.pattern
    _check_pattern(pattern)
    if not base.is_dir():
        raise ToolError(f"{ctx.rel(base)} is not a directory")
    rx = glob_regex(pattern.removeprefix("./"))
    found = []
    for p, is_dir in walk(ctx, base):
        rel_base = p.relative_to(base).as_posix()
        if rx.match(rel_base):
            found.append(ctx.rel(p) + ("/" if is_dir else ""))
    found.sort()
    if not found:
        return f"no paths match {pattern!r} under {ctx.rel(base)}"
    cap = 500
    text = "\n".join(found[:cap])
    if len(found) > cap:
        text += f"\n… {len(found) - cap} more; narrow the pattern or the path"
    return text


# ---------------------------------------------------------------------- grep
class GrepArgs(Args):
    pattern: str = Field(description="Python regular expression to search for.")
    path: str = Field(".", description="File or directory to search, relative to the workspace.")
    glob: str | None = Field(None, description="Only files whose name or path matches, e.g. '*.py'.")
    ignore_case: bool = Field(False, description="Case-insensitive match.")
    max_matches: int = Field(200, ge=1, le=2000, description="Stop after this many matching lines.")


def _grep_file(path: Path, rx: re.Pattern[str], shown: str, out: list[str], limit: int) -> None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return
        data = path.read_bytes()
    except OSError:
        return  # unreadable (permissions, vanished): not a match
    if b"\x00" in data[:8192]:
        return
    text = data.decode("utf-8", "replace")
    for n, line in enumerate(text.split("\n"), 1):
        if rx.search(line):
            if len(line) > LINE_CHARS:
                line = line[:LINE_CHARS] + " …"
            out.append(f"{shown}:{n}:{line.rstrip(chr(13))}")
            if len(out) >= limit:
                return


@tool("grep", args=GrepArgs, risk="read", budget=16_000, paths={"path": "read"})
def grep_tool(call: Call) -> str:
    """Search file contents with a regular expression. Prints 'path:line:text' for each
    matching line. Narrow with path and glob (e.g. glob='*.py')."""
    ctx, a, base = call.ctx, call.args, call.paths["path"]
    try:
        rx = re.compile(a.pattern, re.IGNORECASE if a.ignore_case else 0)
    except re.error as e:
        raise ToolError(f"invalid regular expression {a.pattern!r}: {e}") from None
    name_rx = None
    if a.glob:
        _check_pattern(a.glob)
        name_rx = glob_regex(a.glob)
    if not base.exists():
        raise ToolError(f"{ctx.rel(base)} does not exist")
    files = [base] if base.is_file() else [p for p, is_dir in walk(ctx, base) if not is_dir]
    out: list[str] = []
    searched = 0
    for f in files:
        if name_rx and not (name_rx.match(f.name) or name_rx.match(ctx.rel(f))):
            continue
        searched += 1
        _grep_file(f, rx, ctx.rel(f), out, a.max_matches)
        if len(out) >= a.max_matches:
            return "\n".join(out) + f"\n… stopped at {a.max_matches} matches; narrow the pattern, path or glob"
    if not out:
        return f"no matches for {a.pattern!r} in {searched} file{'s' if searched != 1 else ''}"
    return "\n".join(out)


SEARCH_TOOLS = [glob_tool, grep_tool]
