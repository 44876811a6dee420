"""The README's tour runs as written, from an empty directory.

Every ```console block of README.md is run, in order, in one shell session in an
empty temporary directory holding only a copy of the repository's ``examples/``
(the tour's commands are typed in a clone's root); ```sh blocks need a model
server or setup of your own and are not run. ``team`` is this checkout's.

Each ``$ COMMAND`` line runs with stdout and stderr together; the lines under it
are what it must print, in order:

* numbers (times, durations, counts, ids) and hex hashes may differ;
* a line ``...`` stands for any number of lines (the README leaves them out);
* a line ending in `` …`` only has to start the same (what follows varies);
* an ``XxxError: …`` line means the command must exit 2; otherwise it must exit 0;
* ``/tmp/refactor`` is the tour's scratch repository: a fresh directory here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conftest import REPO

SEP = "\x1e"
NUMBER = re.compile(r"\d+(?:\.\d+)?")
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


def tour(readme: str) -> list[Step]:
    steps: list[Step] = []
    for block in re.findall(r"^```console\n(.*?)^```", readme, re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append(Step(line[2:]))
            elif steps:
                steps[-1].expected.append(line)
    return steps


def _pattern(line: str) -> re.Pattern[str]:
    prefix = line.endswith(" …")
    text = line[:-2] if prefix else line
    out, last = [], 0
    for m in re.finditer(f"{HEX.pattern}|{NUMBER.pattern}", text):
        out.append(re.escape(text[last:m.start()]))
        out.append(r"[0-9a-f]+" if HEX.fullmatch(m.group()) else r"\d+(?:\.\d+)?")
        last = m.end()
    out.append(re.escape(text[last:]))
    return re.compile("".join(out) + (".*" if prefix else "") + r"\Z")


def matches(expected: list[str], actual: list[str]) -> bool:
    """``actual`` is what ``expected`` describes (the module docstring's rules)."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and bool(_pattern(head).match(actual[0])) and matches(rest, actual[1:])


def test_the_matcher_can_fail():
    assert matches(["[   0.01s] start #1 prepare (attempt 1)"], ["[   2.50s] start #1 prepare (attempt 3)"])
    assert not matches(["[   0.01s] start #1 prepare"], ["[   0.01s] start #1 compile"])
    assert matches(["a", "...", "z"], ["a", "b", "c", "z"]) and matches(["a", "...", "z"], ["a", "z"])
    assert not matches(["a", "z"], ["a", "b", "z"]) and not matches([], ["unexpected output"])
    assert matches(["critical path: a → …"], ["critical path: a → b → c"])
    assert matches(["sent c929adab6a86-1 to alice"], ["sent 0f9e1d2c3b4a-1 to alice"])


def test_the_readme_tour_runs_as_written_from_an_empty_directory(tmp_path):
    steps = tour((REPO / "README.md").read_text())
    assert len(steps) >= 20 and any(s.command.startswith("team spawn alice") for s in steps)
    work = tmp_path / "tour"
    shutil.copytree(REPO / "examples", work / "examples")
    scratch = tmp_path / "refactor"
    script = "\n".join(
        f"printf '{SEP}%s\\n' {_quote(s.command)}\n{{ {s.command.replace('/tmp/refactor', str(scratch))}\n}} 2>&1\n"
        f"printf '{SEP}rc=%s\\n' $?" for s in steps)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEAM_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert r.stderr == ""
    chunks = r.stdout.split(SEP)[1:]  # "COMMAND\nOUTPUT", "rc=N\n", for each step
    ran = [(chunks[i].split("\n", 1), int(chunks[i + 1].strip().removeprefix("rc=")))
           for i in range(0, len(chunks), 2)]
    assert [c for (c, _), _ in ran] == [s.command for s in steps]
    for step, ((_, output), code) in zip(steps, ran, strict=True):
        lines = output.splitlines()
        wanted = 2 if any(re.match(r"^\w+Error: ", e) for e in step.expected) else 0
        shown = "\n".join(lines)
        assert code == wanted, f"$ {step.command}\nexit {code}, expected {wanted}:\n{shown}"
        expected = [e.replace("/tmp/refactor", str(scratch)) for e in step.expected]
        assert matches(expected, lines), (f"$ {step.command}\nthe README says:\n" + "\n".join(step.expected)
                                               + f"\nit printed:\n{shown}")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_no_tracked_file_is_ignored_by_git():
    """A newcomer's clone has every file the tour uses (``examples/quickstart.yaml`` was once in
    .gitignore)."""
    if not (REPO / ".git").exists():
        return  # not a git checkout (an sdist): nothing to compare
    r = subprocess.run(["git", "ls-files", "--cached", "--ignored", "--exclude-standard"], cwd=REPO,
                       capture_output=True, text=True, check=True)
    assert r.stdout == ""
