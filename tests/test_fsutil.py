"""fsutil.atomic_write keeps file permissions; a new file follows the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from orchestrator.core import fsutil
from orchestrator.core.fsutil import TMP_PREFIX, atomic_write


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_rewriting_keeps_the_mode_of_the_existing_file(tmp_path):
    for mode in (0o755, 0o640, 0o600, 0o444, 0o2750):
        target = tmp_path / f"f{mode:o}"
        target.write_text("old\n")
        os.chmod(target, mode)
        atomic_write(target, "new\n")
        assert (target.read_text(), _mode(target)) == ("new\n", mode)
    for durable, sync_dir in ((False, True), (True, False)):
        target = tmp_path / "run.sh"
        target.write_text("#!/bin/sh\n")
        os.chmod(target, 0o755)
        atomic_write(target, "#!/bin/sh\necho hi\n", durable=durable, sync_dir=sync_dir)
        assert _mode(target) == 0o755
    assert not [p for p in os.listdir(tmp_path) if p.startswith(TMP_PREFIX)]


def _new_file_mode_in_child(tmp_path, umask: int) -> str:
    """Create a new file with atomic_write in a fresh interpreter started under ``umask``."""
    code = (
        "import os, sys; from pathlib import Path; from orchestrator.core import fsutil; "
        "p = Path(sys.argv[1]); fsutil.atomic_write(p, 'x'); "
        "print(oct(os.stat(p).st_mode & 0o7777), oct(fsutil.UMASK), oct(os.umask(0)))"
    )
    target = tmp_path / f"new-{umask:o}.txt"
    out = subprocess.run(
        ["sh", "-c", f'umask {umask:03o} && exec "$0" -c "$1" "$2"', sys.executable, code, str(target)],
        capture_output=True, text=True, check=True,
    )
    return out.stdout


def test_a_new_file_gets_0644_under_umask_022_and_0600_under_077(tmp_path):
    assert _new_file_mode_in_child(tmp_path, 0o022) == "0o644 0o22 0o22\n"
    assert _new_file_mode_in_child(tmp_path, 0o077) == "0o600 0o77 0o77\n"
    assert _new_file_mode_in_child(tmp_path, 0o002) == "0o664 0o2 0o2\n"


def test_the_umask_is_read_from_procfs_or_by_set_and_restore(tmp_path):
    current = os.umask(0o027)
    try:
        assert fsutil.read_umask() == 0o027  # /proc/self/status on Linux
        assert fsutil.read_umask(str(tmp_path / "no-procfs")) == 0o027  # the fallback
        assert os.umask(0o027) == 0o027  # neither left it changed
    finally:
        os.umask(current)


def test_an_append_cut_short_by_a_kill_is_cut_off_by_the_next_append(tmp_path):
    from orchestrator.core.fsutil import append_line, read_jsonl

    log = tmp_path / "events.jsonl"
    append_line(log, {"n": 1})
    with open(log, "ab") as f:  # what a writer killed mid-write leaves
        f.write(b'{"n": 2, "half')
    offset = append_line(log, {"n": 3})
    assert log.read_bytes() == b'{"n":1}\n{"n":3}\n'
    assert offset == len(b'{"n":1}\n')
    assert [r["n"] for r in read_jsonl(log)] == [1, 3]
    log.write_bytes(b"no newline at all")
    append_line(log, {"n": 4})
    assert log.read_bytes() == b'{"n":4}\n'
