"""glob and grep on a real tree."""

from __future__ import annotations

import pytest
from tools_harness import Harness


@pytest.fixture
def h(tmp_path):
    h = Harness(tmp_path)
    files = {
        "src/app.py": "import os\nTIMEOUT = 30\n\ndef main():\n    return TIMEOUT\n",
        "src/util/helpers.py": "def helper():\n    return 'timeout'\n",
        "src/util/data.json": '{"timeout": 5}\n',
        "README.md": "# Demo\nSet TIMEOUT in src/app.py\n",
        ".git/config": "[core]\ntimeout = 1\n",
    }
    for rel, text in files.items():
        p = h.ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (h.ws / "blob.bin").write_bytes(b"TIMEOUT\x00\x01")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.py").write_text("TIMEOUT = 'leaked'\n")
    (h.ws / "src" / "leak.py").symlink_to(outside / "leak.py")
    (h.ws / "outlink").symlink_to(outside)
    return h


def test_glob_matches_across_directories_sorted_and_confined(h):
    assert h.ok("glob", {"pattern": "**/*.py"}) == "src/app.py\nsrc/util/helpers.py"
    assert h.ok("glob", {"pattern": "*.py", "path": "src"}) == "src/app.py"
    assert h.ok("glob", {"pattern": "src/*"}) == "src/app.py\nsrc/util/"
    assert h.ok("glob", {"pattern": "**/*.json"}) == "src/util/data.json"
    assert h.ok("glob", {"pattern": "*.rs"}) == "no paths match '*.rs' under ."
    assert h.call("glob", {"pattern": "../*"}).content == (
        "glob pattern '../*' must be relative and stay inside the workspace (no '..')"
    )
    assert h.call("glob", {"pattern": "*", "path": "../outside"}).stage == "path"


def test_grep_prints_file_line_text_and_filters(h):
    assert h.ok("grep", {"pattern": "TIMEOUT"}) == (
        "README.md:2:Set TIMEOUT in src/app.py\nsrc/app.py:2:TIMEOUT = 30\nsrc/app.py:5:    return TIMEOUT"
    )
    assert h.ok("grep", {"pattern": "timeout", "ignore_case": True, "glob": "*.py"}) == (
        "src/app.py:2:TIMEOUT = 30\nsrc/app.py:5:    return TIMEOUT\nsrc/util/helpers.py:2:    return 'timeout'"
    )
    assert h.ok("grep", {"pattern": r"def \w+", "path": "src/util/helpers.py"}) == (
        "src/util/helpers.py:1:def helper():"
    )
    assert h.ok("grep", {"pattern": "nothing-here"}) == "no matches for 'nothing-here' in 5 files"


def test_grep_bounds_and_errors(h):
    (h.ws / "many.txt").write_text("hit\n" * 50)
    out = h.ok("grep", {"pattern": "hit", "path": "many.txt", "max_matches": 3})
    assert out == "many.txt:1:hit\nmany.txt:2:hit\nmany.txt:3:hit\n… stopped at 3 matches; narrow the pattern, path or glob"
    obs = h.call("grep", {"pattern": "(unclosed"})
    assert (obs.is_error, obs.content) == (
        True,
        "invalid regular expression '(unclosed': missing ), unterminated subpattern at position 0",
    )
    assert h.call("grep", {"pattern": "x", "path": "missing"}).content == "missing does not exist"


def test_noise_directories_are_skipped_unless_asked_for(h):
    (h.ws / ".venv" / "lib").mkdir(parents=True)
    (h.ws / ".venv" / "lib" / "site.py").write_text("TIMEOUT = 0\n")
    assert h.ok("glob", {"pattern": "**/site.py"}) == "no paths match '**/site.py' under ."
    assert h.ok("grep", {"pattern": "TIMEOUT = 0"}) == "no matches for 'TIMEOUT = 0' in 5 files"
    assert h.ok("grep", {"pattern": "TIMEOUT = 0", "path": ".venv"}) == ".venv/lib/site.py:1:TIMEOUT = 0"
