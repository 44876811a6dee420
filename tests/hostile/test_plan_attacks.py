"""Plans that attack the loader, and a job request that attacks the job server (issue 16, item 6).

The loader is bounded before memory can blow up: a YAML alias bomb (also one
hidden under unknown keys), nesting deeper than any plan needs and a plan
file over the size limit are refused with exit 2 and ``file:line``, quickly
and in bounded memory (the child's peak RSS is measured with ``wait4``).
A NUL byte, which no environment, argument or path can carry, is refused at
validation; and a job request the job server cannot start fails that one
job, not the server and every other task.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import team_env
from util import wait_until

from orchestrator.jobs.server import JobServer

PEAK_RSS_MB = 200  # a `team plan check` process with every import loaded stays well under this
ADDRESS_SPACE = 2 << 30  # a loader that is not bounded fails fast under this, not after eating the VM


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def check(root: Path, plan: str) -> tuple[int, str, float, float]:
    """``team plan check PLAN`` in a child: (exit code, stderr, seconds, peak RSS in MB)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "plan", "check", plan], cwd=root,
                            env=team_env(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_bounded)
    assert proc.stderr is not None
    try:
        err = proc.stderr.read().decode()
    except BaseException:
        proc.kill()
        raise
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err, time.monotonic() - t0, usage.ru_maxrss / 1024


def bomb(levels: int = 9, width: int = 9, indent: str = "") -> str:
    lines = [f"{indent}l0: &l0 [{', '.join(['lol'] * width)}]"]
    for n in range(1, levels):
        lines.append(f"{indent}l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_quickly_in_bounded_memory(tmp_path):
    (tmp_path / "bomb.yaml").write_text("name: bomb\ntasks:\n  - {id: a, run: 'true'}\n" + bomb())
    code, err, seconds, rss = check(tmp_path, "bomb.yaml")
    assert code == 2, err
    assert err.startswith("PlanError: bomb.yaml:") and "alias" in err and "Traceback" not in err, err
    line = int(err.split(":")[2])
    assert 4 <= line <= 12, err  # the line of the alias that crossed the limit
    assert seconds < 10 and rss < PEAK_RSS_MB, (seconds, rss)


def test_an_alias_bomb_hidden_under_unknown_keys_is_refused_too(tmp_path):
    (tmp_path / "hidden.yaml").write_text("name: hidden\ntasks:\n  - id: a\n    run: 'true'\n    x-notes:\n"
                                          + bomb(indent="      "))
    code, err, seconds, rss = check(tmp_path, "hidden.yaml")
    assert code == 2 and err.startswith("PlanError: hidden.yaml:") and "alias" in err, err
    assert seconds < 10 and rss < PEAK_RSS_MB, (seconds, rss)


def test_a_plan_nested_deeper_than_any_plan_needs_is_refused_without_a_traceback(tmp_path):
    (tmp_path / "deep.yaml").write_text("name: deep\ntasks:\n  - {id: a, run: 'true'}\nx: " + "[" * 5000 + "]" * 5000 + "\n")
    code, err, _, _ = check(tmp_path, "deep.yaml")
    assert code == 2 and err.startswith("PlanError: deep.yaml:4:") and "deep" in err and "Traceback" not in err, err


def test_a_plan_file_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path):
    with open(tmp_path / "big.yaml", "w") as f:
        f.write("name: big\ntasks:\n  - {id: a, run: 'true'}\n")
        f.write(("# " + "x" * 1022 + "\n") * (20 * 1024))  # 20 MiB of comments (the limit is 16)
    code, err, seconds, rss = check(tmp_path, "big.yaml")
    assert code == 2 and err.startswith("PlanError: big.yaml:1: ") and "MiB" in err, err
    assert seconds < 10 and rss < PEAK_RSS_MB, (seconds, rss)


@pytest.mark.parametrize(("field", "value", "where"), [
    ("env", '{X: "a\\0b"}', "tasks[0].env.X"),
    ("run", '"echo a\\0b"', "tasks[0].run"),
    ("cwd", '"sub\\0dir"', "tasks[0].cwd"),
])
def test_a_nul_byte_is_refused_at_validation(tmp_path, field, value, where):
    body = f"    run: {value}\n" if field == "run" else f"    run: 'true'\n    {field}: {value}\n"
    (tmp_path / "nul.yaml").write_text("name: nul\ntasks:\n  - id: a\n" + body)
    code, err, _, _ = check(tmp_path, "nul.yaml")
    assert code == 2, err
    assert f"nul.yaml:{4 if field == 'run' else 5}: {where}: " in err and "NUL" in err, err


def test_an_env_name_no_environment_can_hold_is_refused(tmp_path):
    (tmp_path / "eq.yaml").write_text("name: eq\ntasks:\n  - id: a\n    run: 'true'\n    env: {'A=B': x}\n")
    code, err, _, _ = check(tmp_path, "eq.yaml")
    assert code == 2 and "eq.yaml:5: tasks[0].env: " in err and "'A=B'" in err, err


@pytest.mark.parametrize("bad", [
    {"env": {"X": "a\0b"}},
    {"command": "echo a\0b"},
    {"env": {"A=B": "x"}},  # a name no environment can hold
    {"env": {"X": "\ud800"}},  # text no file system encoding can carry
])
def test_one_bad_job_request_fails_that_job_not_the_job_server(tmp_path, bad):
    notes, errors = {}, {}
    done = threading.Event()

    def on_note(ref, note):
        notes[ref] = note
        done.set()

    def on_error(ref, error):
        errors[ref] = error

    server = JobServer.fork(tmp_path, on_note, on_error)
    try:
        args = {"owner": "t", "cwd": None, "env": {}, "timeout": None, "task": None, "command": "echo ok"}
        args.update(bad)
        command = args.pop("command")
        server.start("bad", command, **args)
        wait_until(lambda: "bad" in errors, timeout=10, what="the bad request to fail")
        assert errors["bad"].startswith("job "), errors
        server.start("good", "echo ok", owner="t", cwd=None, env={}, timeout=None, task=None)
        assert done.wait(10), "the job server no longer starts jobs"
        assert notes["good"].status == "completed" and notes["good"].tail == "ok\n"
    finally:
        server.close()
