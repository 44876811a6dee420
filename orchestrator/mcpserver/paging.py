"""Bounded reads: every ``team mcp`` read returns one page that fits a model's context.

A client's model reads a tool's whole result, so no read may return the whole of a big graph (a
2,000-task graph once made ``task_blocked`` return 6.4 MB and ``task_list`` ~59k tokens). Each
read tool takes ``limit`` (entries per page, with a default and a ceiling) and ``cursor`` (where
the next page starts), and every page stops at ``MAX_CHARS`` characters whatever ``limit`` says.
A page ends with one line that states the total and, when there is more, the exact call that
returns the next page::

    — 100 of 2000 tasks (#1–#100); next page: task_list(cursor=100)

Cursors are task ids (or a position, for inboxes read with ``peek`` and the critical path's
waves): "after this one". Ids only grow, so a page boundary stays put while other clients add
tasks, and a task created meanwhile shows up on a later page instead of shifting every page.

``MAX_CHARS`` is 16,000 characters: at the two to four characters per token that task lines,
ids and JSON come to in OpenAI's cl100k encoding, a page is at most ~8k tokens, and usually
~4-5k (``bench/mcp_bench.py`` measures the largest default read on a 2,000-task graph with a
real tokenizer). One entry longer than a page is cut, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_CHARS = 16_000
"""Characters of one read result at most (the footer line aside)."""
CUT = "… (cut: {n} more characters)"


def clip(text: str, limit: int, how: str = "") -> str:
    """``text``, or its first ``limit`` characters and how many were left out (``how``: where to
    read the rest)."""
    if len(text) <= limit:
        return text
    rest = len(text) - limit
    return text[:limit] + CUT.format(n=rest) + (f"; {how}" if how else "")


@dataclass(frozen=True)
class Page:
    """The entries chosen for one page and what the footer says about them."""

    shown: list[tuple[int, str]]
    total: int
    more: bool


def take(keys: Sequence[int], text: Callable[[int], str], *, after: int | None, limit: int,
         budget: int = MAX_CHARS) -> Page:
    """The entries with ``keys`` (ascending) after key ``after``: at most ``limit`` of them and
    ``budget`` characters (the first is always shown, clipped to the budget). ``text`` renders
    one entry; only the entries looked at are rendered, so a page costs what it shows."""
    rest = [k for k in keys if after is None or k > after]
    shown: list[tuple[int, str]] = []
    used = 0
    for key in rest[:limit]:
        entry = text(key)
        if shown and used + len(entry) + 1 > budget:
            break
        if not shown:
            entry = clip(entry, budget)
        shown.append((key, entry))
        used += len(entry) + 1
    return Page(shown, len(keys), len(shown) < len(rest))


def footer(page: Page, what: str, again: Callable[[int], str], *, mark: str = "#") -> str:
    """The page's last line: how many of how many, and the call for the next page if any."""
    if not page.shown:
        return f"— none of {page.total} {what} past that cursor"
    first, last = page.shown[0][0], page.shown[-1][0]
    span = f"{mark}{first}" if first == last else f"{mark}{first}–{mark}{last}"
    head = f"— {len(page.shown)} of {page.total} {what} ({span})"
    if page.more:
        return f"{head}; next page: {again(last)}"
    return head if len(page.shown) < page.total else f"— all {page.total} {what}"


def render(page: Page, what: str, again: Callable[[int], str], *, mark: str = "#") -> str:
    return "\n".join([*(text for _, text in page.shown), footer(page, what, again, mark=mark)])


def call(tool: str, **args: object) -> Callable[[int], str]:
    """The next page's call: ``tool(arg=..., cursor=N)``, repeating the arguments given."""

    def again(cursor: int) -> str:
        given = [f"{k}={json.dumps(v)}" for k, v in args.items() if v not in (None, False)]
        return f"{tool}({', '.join([*given, f'cursor={cursor}'])})"

    return again
