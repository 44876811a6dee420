"""The web board at 1,000 tasks, in Debian's headless Chromium: load time and live-update latency.

    python bench/board_bench.py [--tasks N] [--changes N]

1. A state root with N tasks (waves of 50, part way through a run: done,
   running, failed, waiting) is served by a real ``team board`` process.
2. Load: the browser opens the URL; "first render" is the page's own clock
   (``performance.now()`` since navigation started) when the first snapshot
   is drawn (every card in the DOM); "loaded" is the wall time seen from here
   until the page says it is ready (including WebDriver's round trips).
3. Latency: ``--changes`` times, a task's state is changed on disk through
   the store (as a run or ``team task update`` does) and the page stamps the
   card with ``Date.now()`` when it shows the new state (``data-changed``);
   latency = that stamp minus the wall time just before the write. Both
   clocks are this machine's.

The targets are the issue's: a 1,000-task board loads in under 2 s and a
state change reaches the page in under 500 ms. Nothing is asserted: the
table prints measured / target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import boardkit  # noqa: E402

from orchestrator.core.models import Status  # noqa: E402
from orchestrator.tasks.store import TaskStore  # noqa: E402

WAVE = 50


def build(root: Path, n: int) -> list[int]:
    """N tasks in waves of WAVE, the first 40% done; returns ids of waiting tasks to change."""
    store = TaskStore(root, durable=False)
    specs = []
    for i in range(n):
        wave, k = divmod(i, WAVE)
        deps = [] if wave == 0 else sorted({(wave - 1) * WAVE + k, (wave - 1) * WAVE + (k * 7 + 3) % WAVE})
        specs.append({"subject": f"port module {i:04d} from requests to httpx", "name": f"m{i:04d}",
                      "plan": "bench", "estimate": 10 + i % 7, "blockedBy": [("new", d) for d in deps]})
    store.create_many(specs)
    done = int(n * 0.4)
    for tid in range(1, done + 1):
        store.update(tid, status=Status.completed)
    for tid in range(done + 1, min(n, done + WAVE // 2) + 1):
        store.update(tid, status=Status.failed if tid % 11 == 0 else Status.in_progress, owner="lead")
    return list(range(min(n, done + WAVE) + 1, n + 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--changes", type=int, default=20, help="state changes timed")
    args = ap.parse_args()
    why = boardkit.missing()
    if why:
        skipping = os.environ.get(boardkit.SKIP_ENV) == "1"
        print(("skipped: " if skipping else "") + why, file=sys.stderr)
        return 0 if skipping else 2
    with tempfile.TemporaryDirectory(prefix="board-bench-") as tmp:
        root = Path(tmp)
        waiting = build(root, args.tasks)
        store = TaskStore(root)
        driver = boardkit.start(1400, 900)
        try:
            with boardkit.board_process(root) as url:
                t0 = time.monotonic()
                driver.get(url)
                while not driver.execute_script("return document.body.dataset.ready === '1'"):
                    time.sleep(0.005)
                loaded = time.monotonic() - t0
                first = driver.execute_script("return window.boardStats.firstRender") / 1000
                cards = driver.execute_script("return document.querySelectorAll('.card').length")
                assert cards == args.tasks, f"{cards} cards for {args.tasks} tasks"
                latencies = []
                for tid in waiting[: args.changes]:
                    before = driver.execute_script(f"return document.querySelector('.card[data-id=\"{tid}\"]')"
                                                   ".dataset.changed || ''")
                    start = time.time() * 1000
                    store.update(tid, status=Status.cancelled)
                    deadline = time.monotonic() + 10
                    while True:
                        stamp = driver.execute_script(f"return document.querySelector('.card[data-id=\"{tid}\"]')"
                                                      ".dataset.changed || ''")
                        if stamp and stamp != before:
                            break
                        if time.monotonic() > deadline:
                            raise SystemExit(f"#{tid}: the page did not show the change within 10 s")
                        time.sleep(0.002)
                    latencies.append((int(stamp) - start) / 1000)
                    time.sleep(0.05)  # one change per tick: each is timed alone
                apply_ms = driver.execute_script("return window.boardStats.lastDeltaMs")
        finally:
            driver.quit()
    latencies.sort()
    p50 = statistics.median(latencies)
    worst = latencies[-1]
    print(f"board: {args.tasks} tasks in waves of {WAVE}, {len(latencies)} state changes, headless Chromium")
    print(f"{'what':<34} {'measured':>9} {'target':>8} {'ratio':>6}")
    for what, value, target in (("first render (page clock)", first, 2.0), ("loaded (seen from WebDriver)", loaded, 2.0),
                                ("state change -> page, median", p50, 0.5), ("state change -> page, worst", worst, 0.5)):
        print(f"{what:<34} {value:>8.3f}s {target:>7.1f}s {value / target:>6.2f}")
    print(f"applying one delta in the page: {apply_ms:.1f} ms (the rest is the board's tick, "
          "the disk scan and the stream)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
