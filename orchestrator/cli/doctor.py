"""``team doctor [--fix] [--json]``: explain (and optionally repair) local state.

Exit 0 when healthy (or everything found was fixed), 1 when problems remain.
The checks live in ``orchestrator.doctor.CHECKS``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..core.text import plural
from .common import JsonOpt, RootOpt, out, print_json, root_of


def doctor_cmd(
    ctx: typer.Context,
    fix: Annotated[bool, typer.Option("--fix", help="Repair what is safe to repair; report the rest.")] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Check .tasks/ and .team/ for damage: corrupt files, missing or cyclic
    dependencies, leftover temp files, expired leases, stale indexes."""
    from ..status import doctor

    where = root_of(root, ctx)
    findings = doctor.diagnose(where)
    left = doctor.repair(findings) if fix else [f for f in findings]
    if as_json:
        print_json({"root": str(where), "healthy": not left, "findings": [f.to_json() for f in findings]})
        raise typer.Exit(1 if left else 0)
    out(f"team doctor: {where}")
    if not findings:
        out("OK: no problems found.")
        return
    for f in findings:
        if f.fixed:
            out(f"  fixed   [{f.kind}] {f.message}\n          → {f.fixed}")
    for f in left:
        can = " (fixable: run `team doctor --fix`)" if f.fix is not None else ""
        out(f"  problem [{f.kind}] {f.message}{can}")
        if f.hint:
            out(f"          → {f.hint}")
    done = len(findings) - len(left)
    if left:
        need = sum(1 for f in left if f.fix is None)
        tail = f"; {need} need{'s' if need == 1 else ''} a human" if need else ""
        out(f"{plural(len(left), 'problem')} remain{'s' if len(left) == 1 else ''}{tail}" + (f"; fixed {done}." if fix else "."))
        raise typer.Exit(1)
    out(f"Fixed {plural(done, 'problem')}; nothing else needs attention.")


def register(app: typer.Typer) -> None:
    """Add ``team doctor`` to ``app``."""
    app.command("doctor")(doctor_cmd)
