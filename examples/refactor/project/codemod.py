"""Rename an identifier in Python files: python3 codemod.py OLD NEW FILE...

Only NAME tokens are renamed (strings and comments are left alone), so it is
safe to run twice: a second run finds nothing to change and writes nothing.
"""

import io
import sys
import tokenize


def rename(source: str, old: str, new: str) -> tuple[str, int]:
    lines = source.splitlines(keepends=True)
    hits = [tok.start for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.NAME and tok.string == old]
    for row, col in reversed(hits):  # right to left keeps earlier columns valid
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old):]
    return "".join(lines), len(hits)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    old, new, *files = argv
    for path in files:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        result, count = rename(source, old, new)
        if count:
            with open(path, "w", encoding="utf-8") as f:
                f.write(result)
        print(f"{path}: renamed {count} x {old} -> {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
