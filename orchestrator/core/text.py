"""Text that came from a user, a plan or a model, made safe to show and to store.

Subjects, names, messages, errors and job output reach the terminal. A
control character in them could forge output: ``\\x1b[2J`` clears the
screen, ``\\r`` overwrites a line, ``\\n`` starts a fake one (``[x] #99: done``),
and the bidirectional overrides (``U+202A``–``U+202E``, ``U+2066``–``U+2069``)
reorder what the reader sees. So:

* ``shown(text)`` is what every printer uses for such a field on one line:
  each of those characters becomes a visible escape (``\\x1b``, ``\\n``,
  ``\\u202e``), so a field can never end its line or steer the terminal;
  ``shown(text, lines=True)`` keeps newlines and tabs (a description, a
  message body, a log tail shown as a block).
* ``plural(n, word)`` is how a count is said (``1 task``, ``2 tasks``): never
  ``1 tasks`` or ``task(s)``.
* ``control_chars(text)`` lists what a *stored* one-line field must not
  contain: subjects and names are refused with that list (newline and tab
  are allowed in longer text: descriptions, messages, prompts).
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_LINES = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str | None, *, lines: bool = False) -> str:
    """``text`` with its control characters made visible (``lines``: keep newlines and tabs)."""
    if not text:
        return ""
    return (_CONTROL if lines else _CONTROL_OR_LINES).sub(_escape, text)


def control_chars(text: str, *, allow_lines: bool = False) -> list[str]:
    """The control characters in ``text`` as visible escapes (empty when there are none)."""
    pattern = _CONTROL if allow_lines else _CONTROL_OR_LINES
    return sorted({_escape(m) for m in pattern.finditer(text)})


def plural(n: int, word: str, words: str | None = None) -> str:
    """``n`` and the noun agreeing with it: ``1 task``, ``2 tasks``, ``0 tasks``
    (``words``: the plural when it is not ``word + "s"``: ``plural(n, "entry", "entries")``)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"
