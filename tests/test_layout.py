"""The package's layout, computed from the code's own imports (docs/architecture.md).

Imports point one way::

    {cli, api} → {run, chat, status, board, mcpserver} → runtime → agent → tools
        → {tasks, team, jobs, git, llm, mcpclient, plan, roles, hooks} → core

Every import counts: module level, inside functions, under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parent.parent / "orchestrator"
RANK = {
    "core": 0,
    "tasks": 1, "team": 1, "jobs": 1, "git": 1, "llm": 1, "plan": 1, "roles": 1, "hooks": 1, "mcpclient": 1,
    "tools": 2,
    "agent": 3,
    "runtime": 4,
    "run": 5, "chat": 5, "status": 5, "board": 5, "mcpserver": 5,
    "cli": 6, "api": 6,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    """Absolute names of the orchestrator modules (or packages) ``name`` imports."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "orchestrator" or target.startswith("orchestrator."):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("orchestrator"))
    return found


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANK else None


def folder_edges() -> dict[tuple[str, str], list[str]]:
    """(from folder, to folder) -> the module imports that make the edge."""
    modules = _modules()
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in modules.items():
        src = _folder(name)
        for target in _imports(name, path):
            dst = _folder(target)
            if src and dst and src != dst:
                edges.setdefault((src, dst), []).append(f"{name} → {target}")
    return edges


def test_the_package_root_holds_only_subpackages():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == [], f"modules belong in the subpackage of their concept: {loose}"
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(RANK), "a new subpackage needs its place in RANK and docs/architecture.md"


def test_every_subpackage_maps_its_modules_in_its_docstring():
    for folder in RANK:
        init = PACKAGE / folder / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for module in sorted(p.stem for p in (PACKAGE / folder).glob("*.py") if p.name != "__init__.py"):
            assert f"{module}.py" in doc, f"orchestrator/{folder}/__init__.py does not say what {module}.py is"


def test_no_import_runs_upward():
    upward = {edge: why for edge, why in folder_edges().items() if RANK[edge[0]] < RANK[edge[1]]}
    assert not upward, "imports that run upward:\n" + "\n".join(
        f"  {a} → {b}: {', '.join(sorted(set(why)))}" for (a, b), why in sorted(upward.items()))


def test_no_import_runs_sideways_below_the_top():
    """The middle floor imports only core; packages of one floor never form a circle."""
    edges = folder_edges()
    sideways = {edge: why for edge, why in edges.items() if RANK[edge[0]] == RANK[edge[1]] and RANK[edge[0]] < 5}
    assert not sideways, "imports between packages of one floor:\n" + "\n".join(
        f"  {a} → {b}: {', '.join(sorted(set(why)))}" for (a, b), why in sorted(sideways.items()))
    cycles = list(nx.simple_cycles(nx.DiGraph(list(edges))))
    assert not cycles, f"circles between folders: {cycles}"


def test_nothing_is_imported_by_a_string():
    for name, path in _modules().items():
        text = path.read_text()
        for call in ("import_module(", "__import__("):
            assert call not in text, f"{name} imports by name ({call}): import it, so the graph shows it"


def test_the_layout_test_sees_an_upward_edge(tmp_path, monkeypatch):
    """The checker can fail: a core module importing the CLI is reported."""
    fake = tmp_path / "orchestrator"
    for folder in RANK:
        (fake / folder).mkdir(parents=True)
        (fake / folder / "__init__.py").write_text('"""x"""\n')
    (fake / "__init__.py").write_text("")
    (fake / "core" / "bad.py").write_text("from ..cli import app\n")
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    edges = {edge: sorted(why) for edge, why in folder_edges().items()}
    assert edges == {("core", "cli"): ["orchestrator.core.bad → orchestrator.cli",
                                       "orchestrator.core.bad → orchestrator.cli.app"]}
