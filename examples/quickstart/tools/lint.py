"""A tiny linter: no tabs, no trailing spaces, lines <= 100 chars. Exit 1 on findings."""

import sys
from pathlib import Path

problems = 0
for root in sys.argv[1:]:
    for path in sorted(Path(root).rglob("*.py")):
        for no, line in enumerate(path.read_text().splitlines(), 1):
            for bad, what in (("\t" in line, "tab"), (line != line.rstrip(), "trailing space"),
                              (len(line) > 100, "line longer than 100")):
                if bad:
                    print(f"{path}:{no}: {what}")
                    problems += 1
print(f"lint: {problems} problem(s)")
sys.exit(1 if problems else 0)
