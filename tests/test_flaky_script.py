"""scripts/flaky.py (``make flaky``): N runs of a suite, every test that failed in any run, with
what it asserted, and exit 1 unless every run was clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO

SUITE = '''\
from pathlib import Path


def test_steady():
    assert True


def test_fails_the_first_time_only():
    seen = Path(__file__).with_name("seen")
    first = not seen.exists()
    seen.touch()
    count = 3
    assert not first and count == 3, "the first run is red"
'''


def flaky(where: Path, runs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "flaky.py"), runs, "--", "-p", "no:xdist",
                           "-p", "no:cacheprovider", "test_suite.py"],
                          cwd=where, capture_output=True, text=True, timeout=120)


def test_a_test_red_in_one_run_of_two_is_named_with_its_run_and_what_it_asserted(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    r = flaky(tmp_path, "2")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("run 1/2: 1 failed, 1 passed")
    assert lines[1:3] == ["  failed: test_suite::test_fails_the_first_time_only",
                          "    E       AssertionError: the first run is red"]
    assert any(line.startswith("run 2/2: 2 passed") for line in lines)
    assert "1 of 2 runs had failures; tests that ever failed:" in r.stdout
    assert "  test_suite::test_fails_the_first_time_only: failed in run(s) 1\n" in r.stdout


def test_clean_runs_exit_0_and_a_bad_count_is_refused(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "seen").touch()
    r = flaky(tmp_path, "2")
    assert (r.returncode, r.stdout.splitlines()[-1]) == (0, "clean: 2 of 2 runs passed"), r.stdout + r.stderr
    r = flaky(tmp_path, "zero")
    assert r.returncode == 2 and "RUNS must be a positive number, got 'zero'" in r.stderr
