"""Run the test suite N times and report every test that failed in any run.

Usage: python scripts/flaky.py [RUNS] [-- PYTEST ARGS...]   (``make flaky RUNS=10``)

Each run is a separate ``pytest`` process writing a JUnit XML report; a test
that failed (or errored) in any run is listed with the runs it failed in and
the first line of its first failure; under each run's line, the ``E`` lines of each
failure it had (what was asserted and what came instead), so a flake that shows once
is not lost. Exit 0 only when every run was clean.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DETAIL_LINES = 12


def failures(report: Path) -> dict[str, tuple[str, list[str]]]:
    """``test id -> (first line of its failure, its E lines)`` for one JUnit XML report."""
    out: dict[str, tuple[str, list[str]]] = {}
    if not report.exists():
        return out
    for case in ET.parse(report).getroot().iter("testcase"):
        for tag in ("failure", "error"):
            bad = case.find(tag)
            if bad is not None:
                name = f"{case.get('classname', '')}::{case.get('name', '')}"
                message = (bad.get("message") or bad.text or "").strip().splitlines()
                detail = [line for line in (bad.text or "").splitlines() if line.startswith("E ")]
                out[name] = (message[0][:200] if message else tag, detail[:DETAIL_LINES])
    return out


def main(argv: list[str]) -> int:
    runs = 10
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    if argv:
        if not argv[0].isdigit() or int(argv[0]) < 1:
            print(f"usage: flaky.py [RUNS] [-- PYTEST ARGS]; RUNS must be a positive number, got {argv[0]!r}",
                  file=sys.stderr)
            return 2
        runs = int(argv[0])
    failed: dict[str, list[int]] = defaultdict(list)
    first: dict[str, str] = {}
    bad_runs = 0
    with tempfile.TemporaryDirectory(prefix="team-flaky-") as tmp:
        for n in range(1, runs + 1):
            report = Path(tmp) / f"run{n}.xml"
            started = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   f"--junitxml={report}", *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            summary = next((line for line in reversed(proc.stdout.splitlines()) if line.strip()), "")
            these = failures(report)
            if proc.returncode != 0 and not these:
                these = {f"(run {n}: pytest exit {proc.returncode})": (summary, proc.stdout.splitlines()[-20:])}
            print(f"run {n}/{runs}: {summary} ({time.monotonic() - started:.0f}s)")
            for name, (message, detail) in these.items():
                failed[name].append(n)
                first.setdefault(name, message)
                print(f"  failed: {name}", *(f"    {line}" for line in detail), sep="\n")
            sys.stdout.flush()
            bad_runs += bool(these) or proc.returncode != 0
    if not failed:
        print(f"clean: {runs} of {runs} runs passed")
        return 0
    print(f"\n{bad_runs} of {runs} runs had failures; tests that ever failed:")
    for name in sorted(failed):
        print(f"  {name}: failed in run(s) {', '.join(map(str, failed[name]))}\n      {first[name]}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
