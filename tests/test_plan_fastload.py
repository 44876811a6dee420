"""The fast plan loader (plan/load.py ``_compose_fast``) against the checked one (``_compose_checked``).

Every text of a corpus goes through both: the plans of examples/ and tests/plans/, every plan
written as a string constant in the tests, generated plans (a random DAG, anchors, aliases,
merge keys, odd scalars, every kind of YAML and bound error). Both must give the same data
(``repr``: types and key order too), the same line of every key and value, the same errors in the
same order, or raise the same exception. ``_compose_fast`` may decline (``_Fallback``: then
``_compose`` is the checked path itself), but not for an ordinary plan. The deepest nesting
libyaml accepts and a 16 MiB file of ``[`` go through the fast path in a child process, which
must neither crash nor answer differently.
"""

from __future__ import annotations

import ast
import random
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.plan import load

REPO = Path(__file__).resolve().parent.parent


def _outcome(fn, text: str) -> tuple[str, str]:
    try:
        data, lines, errors = fn(text, "plan.yaml")
    except load._Fallback:
        raise
    except Exception as e:  # the checked path lets a constructor's error through: the fast one must too
        return "raised", f"{type(e).__name__}: {e}"
    return "ok", repr((data, list(lines.items()), errors))


def same(text: str) -> bool:
    """Both paths answer alike; True when the fast path answered (False: it declined)."""
    expected = _outcome(load._compose_checked, text)
    try:
        data = load._data_fast(text)  # the data of a plan without problems, without its marks
    except load._Fallback:
        pass
    except Exception as e:
        assert expected == ("raised", f"{type(e).__name__}: {e}")
    else:
        checked = load._compose_checked(text, "plan.yaml")
        assert not checked[2] and repr(data) == repr(checked[0])
    try:
        got = _outcome(load._compose_fast, text)
    except load._Fallback:
        assert _outcome(load._compose, text) == expected
        return False
    assert got == expected, text[:300]
    assert _outcome(load._compose, text) == expected
    return True


def _test_strings() -> list[str]:
    """String constants in the tests that look like a plan."""
    out = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "tasks:" in node.value:
                out.append(node.value)
    return out


FILES = sorted([*(REPO / "examples").rglob("*.yaml"), *(REPO / "tests" / "plans").glob("*.yaml")])


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REPO)) for p in FILES])
def test_plan_files_load_alike(path):
    same(path.read_text())


def test_plans_written_in_the_tests_load_alike():
    texts = _test_strings()
    assert len(texts) >= 50
    fast = sum(same(t) for t in texts)
    assert fast >= len(texts) // 2  # most are ordinary plans: the fast path answers for them


def _dag(n: int) -> str:
    """A plan of ``n`` tasks, each needing up to two of the 50 before it (as bench/scale_bench.py's)."""
    rnd = random.Random(13)
    lines = ["name: big", "workers: 8", "tasks:"]
    for i in range(n):
        lines += [f"  - id: t{i}", "    run: \"cd sub && ls *.py || true\""]
        if i:
            needs = sorted(rnd.sample(range(max(0, i - 50), i), min(i, 2)))
            lines.append(f"    needs: [{', '.join(f't{d}' for d in needs)}]")
    return "\n".join(lines) + "\n"


def test_a_big_generated_plan_loads_alike_on_the_fast_path():
    assert same(_dag(2000))  # `&&` and `*` in every command: the alias pass runs and finds none


HEAD = "name: p\ntasks:\n  - id: a\n    run: 'true'\n"
ODD = [
    # scalars as YAML 1.1 reads them
    HEAD + "x: [yes, no, on, off, y, n, ~, null, Null, '', 1_000, 0o17, 017, 0x1f, 0b101, 190:20:30, -1:30,"
           " 1.5e3, .5, 6.8523015e+5, 685.230_15e+03, .inf, -.Inf, .NaN, 2001-12-14, 2001-12-14t21:59:43.10-05:00,"
           " 2001-12-14 21:59:43.10, '2001-12-14', +12, -0, 0., =, <<]\n",
    HEAD + "x: !!binary aGVsbG8=\ny: !!set {a, b}\nz: !!omap [{a: 1}, {b: 2}]\nw: !!str 12\nv: !!float 1\n",
    HEAD + "x: !!int abc\n",  # a constructor error (the checked path lets it through)
    HEAD + "x: !custom thing\n",
    HEAD + "x: |\n  block\n  text\ny: >-\n  folded\n  text\nz: \"esc \\t \\u00e9 \\x41\"\n",
    # keys
    HEAD + "1: a\n1.5: b\ntrue: c\n~: d\n[a, b]: e\n{a: 1}: f\n2001-01-01: g\n",
    HEAD + "? [a]\n: x\n? {[a]: 1}\n: y\n",
    HEAD + "x: 1\nx: 2\n1: a\ntrue: b\n1.0: c\n",
    "name: p\nname: q\ntasks: []\ntasks:\n  - id: a\n",
    # anchors, aliases, merge keys
    "d: &d {run: 'true', retries: 2}\nname: p\ntasks:\n  - <<: *d\n    id: a\n  - <<: *d\n    id: b\n    retries: 3\n",
    "d: &d {x: 1}\ne: &e {y: 2, x: 3}\nname: p\ntasks:\n  - <<: [*d, *e]\n    id: a\n    run: 'true'\n",
    "name: p\ntasks:\n  - <<: {id: a, run: 'true'}\n  - <<: 5\n    id: b\n",
    "name: p\ntasks:\n  - <<: [1, 2]\n    id: a\n",
    "name: p\n=: v\ntasks:\n  - {id: a, run: 'true', =: x}\n",
    "a: &a hello\nb: *a\nname: *a\ntasks:\n  - {id: *a, run: *a, needs: [*a]}\n",
    "a: &a [x, y]\nb: &b [*a, *a]\nname: p\ntasks:\n  - {id: a, run: 'true', needs: *b}\n",
    "a: &a [*a]\nname: p\ntasks:\n  - {id: a, run: 'true'}\n",  # an alias inside its own anchor
    "a: &a {k: *a}\nname: p\ntasks:\n  - {id: a, run: 'true'}\n",
    "name: p\ntasks:\n  - {id: a, run: *nowhere}\n",  # undefined alias
    "a: &x 1\nb: &x 2\nname: p\ntasks:\n  - {id: a, run: 'true'}\n",  # duplicate anchor
    "name: &n p\ntasks:\n  - {id: a, run: 'a && b *c'}\n",  # an anchor, no alias
    # documents and syntax
    "", "---\n", "# only a comment\n", "~\n", "- a\n- b\n", "just text\n",
    HEAD + "---\nname: q\n",
    "name: p\ntasks:\n  - id: a\n   run: x\n", "name: [p\n", "name: 'p\n", "\tname: p\n", "a: b: c\n",
    "name: p\ntasks:\n  - {id: a, run: \"x\\0y\", env: {A: \"\\0\"}}\n  - [\"\\0\"]\n",  # NUL bytes
    "name: p\ntasks:\n  - {id: a, run: 'true', needs: a}\n  - {id: a, run: x, prompt: y, needs: [a, a, zz]}\n",
]


def bomb(levels: int, width: int) -> str:
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels)]
    return HEAD + "\n".join(lines) + "\n"


def nested(depth: int, *, flow: bool, alias: bool = False) -> str:
    """A value ``depth`` levels below the document's top mapping (which is level 1)."""
    if flow:
        value = "[" * (depth - 2) + "x" + "]" * (depth - 2)
    else:
        value = "\n" + "".join(" " * (2 * i + 2) + "- \n" for i in range(depth - 3)) + " " * (2 * depth - 4) + "- x"
    extra = "y: &y [1]\nz: *y\n" if alias else ""
    return HEAD + extra + "x: " + value + "\n"


BOUNDS = [
    bomb(5, 9), bomb(6, 9), bomb(9, 9),  # 59,049 values (under the limit), 531,441 and 387 million (over)
    *(nested(d, flow=f, alias=a) for d in (48, 49, 50, 51, 52, 60) for f in (True, False) for a in (False, True)),
    # an alias nesting a deep anchor deeper than the document itself is
    HEAD + "a: &a " + "[" * 40 + "x" + "]" * 40 + "\nb: " + "[" * 20 + "*a" + "]" * 20 + "\n",
    HEAD + "x: " + "[" * 5000 + "]" * 5000 + "\n",
    HEAD + "x: " + "{a: " * 30 + "1" + "}" * 30 + "\n" + "y: " + "[b: " * 30 + "1" + "]" * 30 + "\n",
]


@pytest.mark.parametrize("text", ODD + BOUNDS, ids=[f"odd{i}" for i in range(len(ODD))] + [f"bound{i}" for i in range(len(BOUNDS))])
def test_odd_and_hostile_texts_load_alike(text):
    same(text)


def test_the_fast_path_answers_for_aliases_and_merges_within_the_bounds():
    assert same(ODD[9]) and same(ODD[14]) and same(bomb(5, 9))
    assert not same(bomb(6, 9)) and not same(nested(51, flow=True))


CHILD = """
import sys
from orchestrator.plan import load
text = sys.stdin.read()
try:
    load._compose_fast(text, "plan.yaml")
except load._Fallback:
    print("fallback")
else:
    print("answered")
print(load._compose(text, "plan.yaml")[2])
"""


@pytest.mark.parametrize("text", [
    "x: " + "[" * (load.MAX_PLAN_BYTES - 8),  # a 16 MiB file of `[`
    "x: " + "[a: " * 999 + "]" * 999,  # as deep as libyaml lets a document be: two nodes a level
    "x:\n" + "".join(" " * i + "- \n" for i in range(999)),
])
def test_deep_nesting_neither_crashes_the_fast_path_nor_changes_the_answer(text):
    r = subprocess.run([sys.executable, "-c", CHILD], input=text, capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[0] == "fallback"
    assert r.stdout.splitlines()[1] == repr(load._compose_checked(text, "plan.yaml")[2])


def test_a_loaded_plan_makes_its_line_marks_when_first_asked(tmp_path):
    text = _dag(300)
    (tmp_path / "plan.yaml").write_text(text)
    lp = load.load_plan(tmp_path / "plan.yaml")
    assert "lines" not in vars(lp)  # a plan that loads cleanly is read without them
    assert list(lp.lines.items()) == list(load._compose_checked(text, "plan.yaml")[1].items())
    assert lp.lines[("tasks", 299, "needs", 1)] == text.splitlines().index("  - id: t299") + 3


THREAD_CHILD = """
import sys, threading
from orchestrator.plan import load
text = sys.stdin.read()
threading.stack_size(512 << 10)  # smaller than the deepest document takes the Cython composer
out = []
thread = threading.Thread(target=lambda: out.append(load._compose(text, "plan.yaml")[2]))
thread.start()
thread.join()
print(out[0])
"""


def test_a_thread_whose_stack_is_not_known_to_be_big_enough_takes_the_checked_path():
    text = "x: " + "[a: " * 998 + "]" * 998
    r = subprocess.run([sys.executable, "-c", THREAD_CHILD], input=text, capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == repr(load._compose_checked(text, "plan.yaml")[2])
