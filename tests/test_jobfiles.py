"""jobfiles: spare logs made ahead, deferred records written in order, superseded ones skipped."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from orchestrator.jobs.files import STALE_AFTER, JobFiles
from orchestrator.jobs.records import JobRecord


def record(job_id: str, status: str = "running") -> JobRecord:
    return JobRecord(id=job_id, command="true", started_at=1.0, log=f".team/jobs/{job_id}.log",
                     manager_pid=1, status=status)


def test_spare_logs_are_made_in_quiet_time_taken_by_starts_and_removed_on_close(tmp_path):
    files = JobFiles(tmp_path, spares=3)
    while files.pending():
        files.work_once()
    made = sorted(p.name for p in tmp_path.glob("*.log"))
    assert len(made) == 3
    job_id, fd = files.new_log()
    os.write(fd, b"output\n")
    os.close(fd)
    assert f"{job_id}.log" in made and files.pending()  # one to make again
    files.close()
    assert [p.name for p in tmp_path.glob("*.log")] == [f"{job_id}.log"]  # only the used one stays


def test_deferred_records_are_written_in_order_and_a_superseded_one_is_skipped(tmp_path):
    files = JobFiles(tmp_path, deferred=True)
    written, done = [], []
    write = files._write
    files._write = lambda job_id, data: (written.append(job_id), write(job_id, data))
    files.save(record("j000001"), then=lambda: done.append("first"))
    files.save(record("j000002"))
    files.save(record("j000001", "completed"), then=lambda: done.append("final"))
    assert not (tmp_path / "j000001.json").exists()  # nothing on disk until the owner has a quiet moment
    while files.pending():
        files.work_once()
    assert written == ["j000002", "j000001"] and done == ["first", "final"]
    assert JobRecord.model_validate_json((tmp_path / "j000001.json").read_bytes()).status == "completed"


def test_only_old_empty_logs_without_a_record_are_stale_spares(tmp_path):
    old = time.time() - STALE_AFTER - 5
    for name, data, age in (("jaaaaaa.log", b"", old), ("jbbbbbb.log", b"", None), ("jcccccc.log", b"x", old),
                            ("jdddddd.log", b"", old)):
        (tmp_path / name).write_bytes(data)
        if age:
            os.utime(tmp_path / name, (age, age))
    (tmp_path / "jdddddd.json").write_bytes(record("jdddddd").model_dump_json().encode())
    assert JobFiles(tmp_path, spares=1).remove_stale_spares() == 1
    assert sorted(p.name for p in tmp_path.glob("*.log")) == ["jbbbbbb.log", "jcccccc.log", "jdddddd.log"]


def test_a_stale_looking_log_of_a_job_still_running_is_kept(tmp_path):
    """A lead killed before its job printed anything or was recorded: the log is the job's, not a spare."""
    old = time.time() - STALE_AFTER - 5
    (tmp_path / "jeeeeee.log").write_bytes(b"")
    os.utime(tmp_path / "jeeeeee.log", (old, old))
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                           env={**os.environ, "TEAM_JOB_ID": "jeeeeee"})
    try:
        assert JobFiles(tmp_path, spares=1).remove_stale_spares() == 0
    finally:
        job.kill()
        job.wait()
    assert JobFiles(tmp_path, spares=1).remove_stale_spares() == 1


def test_a_record_that_cannot_be_written_is_noted_and_the_loop_goes_on(tmp_path):
    files = JobFiles(tmp_path, deferred=True)
    done = []

    def disk_full(job_id, data):
        raise OSError(28, "No space left on device")

    files._write = disk_full
    files.save(record("j000001", "completed"), then=lambda: done.append(1))
    files.work_once()
    assert done == [1] and files.write_errors == ["j000001: [Errno 28] No space left on device"]
