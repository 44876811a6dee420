"""Word counting, kept small enough to read in one go."""

from __future__ import annotations

import re
from collections import Counter

WORD = re.compile(r"[a-z']+")


def word_counts(text: str) -> Counter:
    """Lower-cased word frequencies."""
    return Counter(w.strip("'") for w in WORD.findall(text.lower()) if w.strip("'"))


def top_words(text: str, n: int = 5) -> list[tuple[str, int]]:
    """The ``n`` most frequent words, ties broken alphabetically."""
    return sorted(word_counts(text).items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def summarise(name: str, text: str) -> dict:
    """A JSON-ready report for one document."""
    counts = word_counts(text)
    lines = text.splitlines()
    return {
        "name": name,
        "lines": len(lines),
        "words": sum(counts.values()),
        "distinct": len(counts),
        "top": top_words(text),
    }
