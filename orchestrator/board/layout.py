"""Where each task sits on the board: a left-to-right layering of the whole graph. Pure.

* Column (*wave*) = the task's depth: 0 for a task with no dependency in
  the store, else one more than its deepest dependency. Every task is
  placed, finished or not, so a task keeps its place while the run moves on
  (``tasks.graph.waves`` layers only the unfinished work, which shifts).
* Row = the order inside a column: column 0 by id; every later column by
  the mean row of each task's dependencies (the barycenter heuristic, one
  sweep left to right, ties by id), which keeps most edges short and
  uncrossed at O(tasks + edges).
* Tasks on a hand-made dependency cycle (``team doctor`` reports them)
  have no depth; they go to one column after the deepest, by id.

The page turns (column, row) into pixels, folding the completed tasks of a
finished or very large wave into one line (static/board.js).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.models import Task


@dataclass(frozen=True)
class Place:
    """A task's column (its wave, from 0) and its row inside that column (from 0)."""

    col: int
    row: int


def structure(tasks: Sequence[Task]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """What the layout depends on: the ids and their dependencies (compare to skip a relayout)."""
    return tuple((t.id, tuple(t.blockedBy)) for t in sorted(tasks, key=lambda t: t.id))


def layout(tasks: Sequence[Task]) -> dict[int, Place]:
    """Column and row of every task (see the module docstring)."""
    ids = sorted(t.id for t in tasks)
    known = set(ids)
    deps = {t.id: sorted({d for d in t.blockedBy if d in known and d != t.id}) for t in tasks}
    self_loops = {t.id for t in tasks if t.id in t.blockedBy}
    kids: dict[int, list[int]] = {}
    indeg = {}
    for tid in ids:
        indeg[tid] = len(deps[tid])
        for d in deps[tid]:
            kids.setdefault(d, []).append(tid)
    depth: dict[int, int] = {}
    frontier = [tid for tid in ids if indeg[tid] == 0 and tid not in self_loops]
    for tid in frontier:
        depth[tid] = 0
    while frontier:
        nxt = []
        for tid in frontier:
            for k in kids.get(tid, ()):
                indeg[k] -= 1
                if indeg[k] == 0 and k not in self_loops:
                    depth[k] = 1 + max(depth[d] for d in deps[k])
                    nxt.append(k)
        frontier = nxt
    last = max(depth.values(), default=-1) + 1
    for tid in ids:
        depth.setdefault(tid, last)  # on or behind a cycle
    columns: dict[int, list[int]] = {}
    for tid in ids:
        columns.setdefault(depth[tid], []).append(tid)
    row: dict[int, int] = {}
    for col in sorted(columns):
        members = columns[col]
        if col:
            def key(tid: int) -> tuple[float, int]:
                placed = [row[d] for d in deps[tid] if d in row]
                return (sum(placed) / len(placed) if placed else float("inf"), tid)

            members.sort(key=key)
        for i, tid in enumerate(members):
            row[tid] = i
    return {tid: Place(depth[tid], row[tid]) for tid in ids}
