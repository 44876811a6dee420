"""The plain progress lines of ``team run``: the ``[done/total]`` count and the per-state tallies
stay right through retries, lost attempts, merges and failures (they are kept as events arrive,
not recounted per line)."""

from __future__ import annotations

import io
import random
import re

import pytest

from orchestrator.cli.progress import STATES, PlainProgress

FINAL = ("completed", "failed", "cancelled")


def _events(seed: int, n: int) -> list[dict]:
    """A plausible run: each task starts, may be retried or lost (then starts again), may wait to
    merge, and ends completed, failed or cancelled (a cancelled task never started)."""
    rnd = random.Random(seed)
    queue: list[dict] = []
    for tid in range(1, n + 1):
        name = f"t{tid}"
        if rnd.random() < 0.1:
            queue.append({"event": "cancelled", "task": tid, "name": name, "reason": "a dependency failed"})
            continue
        attempt = 1
        while True:
            queue.append({"event": "started", "task": tid, "name": name, "attempt": attempt})
            r = rnd.random()
            if r < 0.15:
                queue.append({"event": "retry", "task": tid, "name": name, "error": "exit 1", "delay": 0.1})
            elif r < 0.2:
                queue.append({"event": "lost", "task": tid, "name": name, "attempt": attempt, "node": "n1"})
            else:
                break
            attempt += 1
        if rnd.random() < 0.3:
            queue.append({"event": "merge_queued", "task": tid, "name": name, "ahead": rnd.randrange(3)})
            queue.append({"event": "merging", "task": tid, "name": name})
        if rnd.random() < 0.1:
            queue.append({"event": "failed", "task": tid, "name": name, "error": "exit 2"})
        else:
            queue.append({"event": "completed", "task": tid, "name": name, "duration": rnd.random()})
    # interleave tasks the way parallel workers do, keeping each task's own order
    per_task: dict[int, list[dict]] = {}
    for ev in queue:
        per_task.setdefault(ev["task"], []).append(ev)
    out = []
    while per_task:
        tid = rnd.choice(sorted(per_task))
        out.append(per_task[tid].pop(0))
        if not per_task[tid]:
            del per_task[tid]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_done_count_and_tallies_follow_every_event(seed: int) -> None:
    n, before = 300, 7
    stream = io.StringIO()
    progress = PlainProgress(stream)
    progress({"event": "run_started", "total": n + before, "workers": 4, "completed": before})
    state: dict[int, str] = {}
    for ev in _events(seed, n):
        progress(ev)
        kind = ev["event"]
        state[ev["task"]] = {"started": "running", "merge_queued": "merging", "merging": "merging",
                             "retry": "retrying", "lost": "retrying"}.get(kind, kind)
        expected = {s: sum(1 for v in state.values() if v == s) for s in STATES}
        expected["completed"] += before
        expected["pending"] = n + before - sum(expected.values())
        assert progress.t.counts() == expected
        if kind == "completed":
            last = stream.getvalue().rstrip("\n").rsplit("\n", 1)[-1]
            assert re.search(rf"\[{expected['completed']}/{n + before}\]$", last), last
    done_lines = re.findall(r"\[(\d+)/\d+\]$", stream.getvalue(), re.M)
    assert [int(d) for d in done_lines] == list(range(before + 1, before + 1 + len(done_lines)))
    assert progress.t.counts()["running"] == 0 and progress.t.counts()["pending"] == 0
