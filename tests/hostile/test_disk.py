"""A disk that fills during a run, and a root that is read-only (issue 16, item 7).

Real filesystems: a small tmpfs mounted for the test (we run as root), full
for real when a task fills it, or remounted read-only. The run ends with one
line naming the path, the errno and what to do (exit 1); every file stays
readable; ``team doctor`` reports the tasks the dead run left in progress,
and the next run finishes them. ``team run`` and ``team send`` on a
read-only root print one line, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_team

from orchestrator.tasks.store import TaskStore


def _mount(target: Path, *options: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(target)], check=True,
                   capture_output=True)


@pytest.fixture
def small_fs(tmp_path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted afterwards."""
    target = tmp_path / "fs"
    target.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    try:
        _mount(target, "size=2m", "mode=0755")
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot mount a tmpfs here: {e.stderr.decode().strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def unreadable(root: Path) -> list[str]:
    """Every state file that does not parse (a torn JSONL line is a reader's to skip, not a file's)."""
    bad = []
    for path in sorted(root.rglob("*.json")):
        try:
            json.loads(path.read_bytes())
        except ValueError:
            bad.append(str(path))
    return bad


def test_a_disk_that_fills_ends_the_run_with_one_line_and_doctor_finds_what_it_left(small_fs):
    root = small_fs
    (root / "plan.yaml").write_text("""name: full
workers: 2
tasks:
  - {id: fill, run: 'test -e filled || { touch filled; head -c 4000000 /dev/zero > filler; }; true'}
  - {id: long, run: 'sleep 0.5; test -e filler && sleep 30; true'}
  - {id: after, run: 'true', needs: [fill]}
""")
    r = run_team(root, "run", "plan.yaml")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert last.startswith(f"WriteFailed: cannot write {root}/"), last
    assert "No space left on device [ENOSPC]; free space on that filesystem" in last, last
    assert unreadable(root) == []
    left = [t for t in TaskStore(root).all() if t.status.value == "in_progress"]
    (root / "filler").unlink()
    doctor = run_team(root, "doctor")
    for task in left:
        assert f"[dead-owner] task #{task.id} ({task.name}) is in_progress" in doctor.stdout, doctor.stdout
    if left:
        assert doctor.returncode == 1
    again = run_team(root, "run", "plan.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert {t.status.value for t in TaskStore(root).all()} == {"completed"}


def test_doctor_returns_a_dead_runs_tasks_to_pending(tmp_path):
    store = TaskStore(tmp_path)
    task = store.create("left behind", name="x.left")
    store.claim(task.id, "lead", lease=3600)  # the run that claimed it is gone (no lead holds the root)
    doctor = run_team(tmp_path, "doctor")
    assert doctor.returncode == 1
    assert ("[dead-owner] task #1 (x.left) is in_progress, owned by lead, but no lead runs on this root "
            "(the run that held it is gone)") in doctor.stdout, doctor.stdout
    fixed = run_team(tmp_path, "doctor", "--fix")
    assert "returned #1 to pending" in fixed.stdout, fixed.stdout
    after = TaskStore(tmp_path).read(1)
    assert (after.status.value, after.owner, after.interrupted) == ("pending", "", 1)


@pytest.fixture
def read_only(small_fs) -> Path:
    """The tmpfs, remounted read-only, holding ``with-state`` (a task store) and ``empty``."""
    (small_fs / "with-state").mkdir()
    assert run_team(small_fs / "with-state", "task", "create", "exists").returncode == 0
    (small_fs / "empty").mkdir()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True, capture_output=True)
    return small_fs


@pytest.mark.parametrize("state", ["with-state", "empty"])
def test_run_and_send_on_a_read_only_root_say_so_in_one_line(read_only, tmp_path, state):
    root = read_only / state
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "plan.yaml").write_text("name: ro\ntasks:\n  - {id: a, run: 'true'}\n")
    for args in (["run", str(plans / "plan.yaml")], ["send", "lead", "hello"]):
        r = run_team(root, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert r.stderr.startswith(f"NotWritable: cannot write {root}/"), r.stderr
        assert "Read-only file system [EROFS]; pass a writable --root" in r.stderr, r.stderr


def test_a_job_whose_record_cannot_be_written_does_not_run_on(small_fs, tmp_path):
    """The first record is written right after the spawn; when the disk is full the start fails
    with the disk's error, and the job it had spawned is killed (with what it started outside its
    group), not left running unrecorded and unwatched; its log fd is closed."""
    from orchestrator.core import procs
    from orchestrator.core.errors import UserError
    from orchestrator.jobs.manager import JobManager

    mgr = JobManager(small_fs, grace=0.5)
    try:
        with pytest.raises(UserError, match="cannot be written to the job's record"):
            mgr.start("echo \udcff")  # not UTF-8: refused before anything starts
        assert not list((small_fs / ".team" / "jobs").glob("*.log"))
        mgr.start("true")
        mgr.wait("lead", timeout=30)
        fds = set(os.listdir("/proc/self/fd"))
        with open(small_fs / "filler", "wb", buffering=0) as f:  # fill the disk (an empty log still gets an inode)
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        marker = str(tmp_path / "up")
        with pytest.raises(OSError) as e:
            mgr.start(f"setsid sleep 3719 & touch {marker}; sleep 3719")
        assert e.value.errno == 28  # ENOSPC
        # The job's shell (and anything it started) is dead and reaped as soon as start() fails.
        assert [p for p in procs.pids() if "sleep 3719" in procs.cmdline(p)] == []
        assert set(os.listdir("/proc/self/fd")) == fds
    finally:
        for pid in [p for p in procs.pids() if "sleep 3719" in procs.cmdline(p)]:
            procs.kill(pid)
        mgr.shutdown()
