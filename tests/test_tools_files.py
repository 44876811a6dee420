"""read_file / write_file / edit_file and file truth, on real files."""

from __future__ import annotations

import json
import os

import pytest
from tools_harness import Harness

from orchestrator.tools import FileTruth

CONFIG = "import os\n\nTIMEOUT = 30\nRETRIES = 3\n\n\ndef load():\n    return TIMEOUT\n"


@pytest.fixture
def h(tmp_path):
    h = Harness(tmp_path)
    (h.ws / "config.py").write_text(CONFIG)
    return h


def test_read_file_numbers_lines_and_pages(h):
    assert h.ok("read_file", {"path": "config.py"}) == (
        "    1\timport os\n    2\t\n    3\tTIMEOUT = 30\n    4\tRETRIES = 3\n    5\t\n    6\t\n"
        "    7\tdef load():\n    8\t    return TIMEOUT\n"
    )
    assert h.ok("read_file", {"path": "config.py", "offset": 3, "limit": 2}) == (
        "    3\tTIMEOUT = 30\n    4\tRETRIES = 3\n(showing lines 3-4 of 8; continue with offset=5)"
    )
    assert h.call("read_file", {"path": "config.py", "offset": 9}).content == (
        "config.py has 8 lines; offset 9 is past the end"
    )


def test_read_file_refuses_binary_directories_and_missing_files(h):
    (h.ws / "blob.bin").write_bytes(b"\x00\x01" * 100)
    (h.ws / "d").mkdir()
    assert h.call("read_file", {"path": "blob.bin"}).content == (
        "blob.bin is a binary file (200 bytes); file tools handle text only"
    )
    assert h.call("read_file", {"path": "d"}).content == "d is a directory; use glob to list files"
    assert h.call("read_file", {"path": "nope.py"}).content == "nope.py does not exist; use glob to find files"


def test_edit_after_an_external_change_is_refused_and_shows_changed_lines(h):
    h.ok("read_file", {"path": "config.py"})
    changed = CONFIG.replace("TIMEOUT = 30\n", "REQUEST_TIMEOUT = 45\nRETRY_TIMEOUT = 30\n")
    (h.ws / "config.py").write_text(changed)  # a formatter / the user / git checkout
    obs = h.call("edit_file", {"path": "config.py", "old_string": "RETRIES = 3", "new_string": "RETRIES = 5"})
    assert (obs.is_error, obs.stage) == (True, "fresh")
    assert obs.content == (
        "config.py changed on disk since you last read it (size 69 → 96 bytes); your copy is stale, "
        "so the edit was refused. Changed lines:\n"
        "--- config.py (when you read it)\n"
        "+++ config.py (on disk now)\n"
        "@@ -2,3 +2,4 @@\n"
        " \n"
        "-TIMEOUT = 30\n"
        "+REQUEST_TIMEOUT = 45\n"
        "+RETRY_TIMEOUT = 30\n"
        " RETRIES = 3\n"
        "Read config.py again and redo the change against the current content."
    )
    assert (h.ws / "config.py").read_text() == changed
    # overwrite is refused the same way; a fresh read makes the edit possible
    assert h.call("write_file", {"path": "config.py", "content": "x\n"}).stage == "fresh"
    h.ok("read_file", {"path": "config.py"})
    h.ok("edit_file", {"path": "config.py", "old_string": "RETRIES = 3", "new_string": "RETRIES = 5"})
    assert (h.ws / "config.py").read_text() == changed.replace("RETRIES = 3", "RETRIES = 5")


def test_partial_read_then_edit_is_refused_until_the_whole_file_is_seen(h):
    h.ok("read_file", {"path": "config.py", "offset": 3, "limit": 2})
    obs = h.call("edit_file", {"path": "config.py", "old_string": "TIMEOUT = 30", "new_string": "TIMEOUT = 60"})
    assert (obs.stage, obs.content) == (
        "fresh",
        "config.py: your read is partial (you have seen only lines 3-4 of 8); read the whole file "
        "(read_file without offset/limit) before editing or overwriting it",
    )
    assert (h.ws / "config.py").read_text() == CONFIG
    # pages that together cover the file count as a full read
    h.ok("read_file", {"path": "config.py", "limit": 2})
    assert h.call("edit_file", {"path": "config.py", "old_string": "TIMEOUT = 30", "new_string": "T = 1"}).stage == "fresh"
    h.ok("read_file", {"path": "config.py", "offset": 5})
    h.ok("edit_file", {"path": "config.py", "old_string": "TIMEOUT = 30", "new_string": "TIMEOUT = 60"})


def test_unread_existing_files_cannot_be_edited_or_overwritten_but_new_files_can_be_written(h):
    for name, args in (
        ("edit_file", {"path": "config.py", "old_string": "os", "new_string": "sys"}),
        ("write_file", {"path": "config.py", "content": "gone\n"}),
    ):
        obs = h.call(name, args)
        assert (obs.stage, obs.content) == (
            "fresh",
            "config.py exists and you have not read it in this session: read_file config.py "
            "(the whole file) before editing or overwriting it",
        )
    assert (h.ws / "config.py").read_text() == CONFIG
    assert h.ok("write_file", {"path": "pkg/new.py", "content": "a = 1\n"}) == "created pkg/new.py (1 line, 6 bytes)"


def test_own_writes_and_edits_become_the_baseline(h):
    h.ok("write_file", {"path": "m.py", "content": "a = 1\nb = 2\n"})
    h.ok("edit_file", {"path": "m.py", "old_string": "a = 1", "new_string": "a = 10"})
    h.ok("edit_file", {"path": "m.py", "old_string": "b = 2", "new_string": "b = 20"})
    assert h.ok("write_file", {"path": "m.py", "content": "c = 3\n"}) == "overwrote m.py (1 line, 6 bytes)"
    assert (h.ws / "m.py").read_text() == "c = 3\n"
    assert h.ctx.truth.written() == [str(h.ws / "m.py")]
    # someone else changes it after our write: refused, showing the change against our own write
    (h.ws / "m.py").write_text("c = 4\n")
    obs = h.call("edit_file", {"path": "m.py", "old_string": "c = 4", "new_string": "c = 5"})
    assert obs.stage == "fresh" and "changed on disk since you last wrote it" in obs.content
    assert "-c = 3\n+c = 4\n" in obs.content


def test_a_timestamp_only_change_is_not_a_change(h):
    h.ok("read_file", {"path": "config.py"})
    os.utime(h.ws / "config.py", ns=(1, 1))
    assert [c.path for c in h.ctx.truth.changes()] == []
    h.ok("edit_file", {"path": "config.py", "old_string": "import os", "new_string": "import sys"})


def test_edit_file_unique_match_rules_and_the_diff(h):
    (h.ws / "dup.py").write_text("x = 1\ny = 1\nx = 1\n")
    h.ok("read_file", {"path": "dup.py"})
    h.ok("read_file", {"path": "config.py"})
    obs = h.call("edit_file", {"path": "dup.py", "old_string": "x = 1", "new_string": "x = 2"})
    assert (obs.stage, obs.content) == (
        "execute",
        "old_string matches 2 times in dup.py (starting at lines 1, 3); include more surrounding "
        "lines so it matches exactly once, or set replace_all",
    )
    obs = h.call("edit_file", {"path": "config.py", "old_string": "def load():\n  return TIMEOUT", "new_string": "x"})
    assert obs.content == (
        "old_string was not found in config.py (0 matches). A match that differs only in whitespace "
        "starts at line 7; copy the exact text, including indentation."
    )
    obs = h.call("edit_file", {"path": "config.py", "old_string": "    3\tTIMEOUT = 30", "new_string": "x"})
    assert "line-number prefixes" in obs.content
    assert (h.ws / "dup.py").read_text() == "x = 1\ny = 1\nx = 1\n"
    assert h.ok("edit_file", {"path": "dup.py", "old_string": "y = 1\nx = 1", "new_string": "y = 1\nx = 3"}) == (
        "edited dup.py: 1 replacement\n"
        "--- a/dup.py\n+++ b/dup.py\n@@ -1,3 +1,3 @@\n x = 1\n y = 1\n-x = 1\n+x = 3\n"
    )
    out = h.ok("edit_file", {"path": "dup.py", "old_string": "1", "new_string": "one", "replace_all": True})
    assert out.startswith("edited dup.py: 2 replacements\n")
    assert (h.ws / "dup.py").read_text() == "x = one\ny = one\nx = 3\n"
    assert h.call("edit_file", {"path": "dup.py", "old_string": "", "new_string": "z"}).content.startswith(
        "old_string is empty"
    )
    assert h.call("edit_file", {"path": "ghost.py", "old_string": "a", "new_string": "b"}).content == (
        "ghost.py does not exist; use write_file to create it"
    )


def test_edit_preserves_crlf_line_endings(h):
    (h.ws / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    assert h.ok("read_file", {"path": "win.txt"}) == "    1\tone\n    2\ttwo\n"
    h.ok("edit_file", {"path": "win.txt", "old_string": "two", "new_string": "TWO"})
    assert (h.ws / "win.txt").read_bytes() == b"one\r\nTWO\r\n"


def test_a_long_file_is_read_in_pages_within_the_budget(h):
    (h.ws / "big.txt").write_text("".join(f"line {i:05d} " + "x" * 80 + "\n" for i in range(1, 1001)))
    first = h.call("read_file", {"path": "big.txt"})
    assert len(first.content) <= 24_000 and first.full_output is None
    last_line = first.content.rstrip().splitlines()[-2]
    end = int(last_line.split("\t")[0])
    assert first.content.endswith(f"(showing lines 1-{end} of 1000; continue with offset={end + 1})")
    assert h.ctx.truth.baseline(h.ws / "big.txt").full is False
    offset = end + 1
    while offset <= 1000:
        out = h.ok("read_file", {"path": "big.txt", "offset": offset})
        offset = int(out.rstrip().splitlines()[-2 if out.endswith(")") else -1].split("\t")[0]) + 1
    assert h.ctx.truth.baseline(h.ws / "big.txt").full is True
    h.ok("edit_file", {"path": "big.txt", "old_string": "line 01000 ", "new_string": "LAST "})


def test_baselines_survive_a_resume_through_json(h):
    h.ok("read_file", {"path": "config.py"})
    h.ok("write_file", {"path": "own.py", "content": "v = 1\n"})
    saved = json.dumps(h.ctx.truth.to_json())
    h.ctx.truth = FileTruth.from_json(json.loads(saved))  # a resumed agent
    h.ok("edit_file", {"path": "own.py", "old_string": "v = 1", "new_string": "v = 2"})
    (h.ws / "config.py").write_text(CONFIG.replace("RETRIES = 3", "RETRIES = 9"))
    obs = h.call("edit_file", {"path": "config.py", "old_string": "import os", "new_string": "import sys"})
    assert obs.stage == "fresh" and "-RETRIES = 3\n+RETRIES = 9\n" in obs.content


def test_changes_reports_external_edits_and_deletions(h):
    h.ok("read_file", {"path": "config.py"})
    h.ok("write_file", {"path": "gone.py", "content": "g\n"})
    (h.ws / "config.py").write_text("TIMEOUT = 1\n")
    (h.ws / "gone.py").unlink()
    changes = {os.path.basename(c.path): c for c in h.ctx.truth.changes()}
    assert sorted(changes) == ["config.py", "gone.py"]
    assert changes["gone.py"].kind == "deleted"
    assert changes["config.py"].kind == "changed" and changes["config.py"].detail.endswith("-    return TIMEOUT\n+TIMEOUT = 1")


def test_content_cache_is_bounded_and_large_files_are_tracked_by_hash(tmp_path):
    truth = FileTruth(max_cache_bytes=3000, max_file_bytes=2000)
    paths = []
    for i in range(5):
        p = tmp_path / f"f{i}.txt"
        p.write_text(f"{i}" * 1000)
        truth.record_read(p, p.read_bytes(), 1, 1)
        paths.append(p)
    assert truth._cache_bytes <= 3000
    big = tmp_path / "big.txt"
    big.write_text("b" * 5000)
    truth.record_read(big, big.read_bytes(), 1, 1)
    big.write_text("c" * 5000)
    with pytest.raises(Exception, match="too large to diff"):
        truth.check(big, "big.txt")


def test_editing_an_executable_script_keeps_it_executable(h):
    script = h.ws / "build.sh"
    script.write_text("#!/bin/sh\necho building v1\n")
    os.chmod(script, 0o755)
    h.ok("read_file", {"path": "build.sh"})
    h.ok("edit_file", {"path": "build.sh", "old_string": "v1", "new_string": "v2"})
    assert os.stat(script).st_mode & 0o7777 == 0o755
    assert h.ok("bash", {"command": "./build.sh"}) == "exit code: 0\nbuilding v2\n"
    h.ok("write_file", {"path": "build.sh", "content": "#!/bin/sh\necho building v3\n"})
    assert os.stat(script).st_mode & 0o7777 == 0o755
    assert h.ok("bash", {"command": "./build.sh"}) == "exit code: 0\nbuilding v3\n"
