"""The disk's own cost, measured in the same run as a benchmark's numbers."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.core.fsutil import atomic_write  # noqa: E402


def durable_write_ms(n: int = 100) -> float:
    """Median ms of one durable atomic write (temp + fsync + rename + dir fsync)."""
    with tempfile.TemporaryDirectory(prefix="bench-fsync-") as tmp:
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            atomic_write(Path(tmp) / f"t{i % 10}.json", '{"id": 1}')
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1000
