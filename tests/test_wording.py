"""How counts are said in what ``team`` prints and tells models: ``1 task``, ``2 tasks``
(``core.text.plural``), never ``1 tasks`` or ``task(s)``. Computed from the code's own f-strings."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from orchestrator.core.text import plural

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"
HEDGED = re.compile(r"[a-z]\(s\)")
# a count placed straight before a plural noun: "{n} tasks" reads "1 tasks" when n is 1
COUNTED = re.compile(r"^ (earlier |new |running |unread )?(task|message|commit|line|worker|problem|file|step|"
                     r"attempt|call|member|job|record)s\b")


def _offences() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.JoinedStr):
                continue
            parts = node.values
            for i, part in enumerate(parts):
                if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                    continue
                after_value = i > 0 and isinstance(parts[i - 1], ast.FormattedValue)
                if after_value and (HEDGED.search(part.value) or COUNTED.match(part.value)):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {part.value[:40]!r}")
    return found


def test_no_count_is_followed_by_a_hedged_or_fixed_plural():
    assert _offences() == []


def test_plural():
    assert [plural(n, "task") for n in (0, 1, 2)] == ["0 tasks", "1 task", "2 tasks"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"
