"""``team spawn NAME --role ROLE [--prompt TEXT]``: a teammate, now or with the next lead.

The teammate is a thread in the lead process (runtime/runtime.py): with a lead
running, this command sends it a control request (team/control.py) and prints
its answer. With none, the member is enrolled on the roster, so messages can be
sent to it at once, and the next lead starts it (runtime/enrol.py).
Exit 2 for a bad name or unknown role, when the running lead does not take
spawn requests (a plan without agent tasks) or refuses; exit 1 when it does
not answer in time.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .common import JsonOpt, RootOpt, out, print_json, root_of


def spawn_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Teammate name (letters, digits, '.', '_', '-').", show_default=False)],
    role: Annotated[str, typer.Option("--role", "-r", help="Role: coder, tester, reviewer or agents/ROLE.md.")] = "coder",
    prompt: Annotated[str | None, typer.Option("--prompt", "-p", help="First instruction (else it starts idle).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for a running lead's answer.")] = 15.0,
    plan_mode: Annotated[bool, typer.Option("--plan-mode", help="Writes wait until the lead approves its plan.")] = False,
    json_out: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Add a teammate: to the running lead (`team run` or `team chat`), else to the roster for the next lead.

    With no lead running the member is enrolled: `team send NAME ...` works at once and
    the next lead starts it (`team chat` when it opens, `team run` when a task names it)."""
    from ..runtime.enrol import spawn

    done = spawn(root_of(root, ctx, creates=True), name, role, prompt, plan_mode=plan_mode, timeout=timeout)
    if json_out:
        print_json({"name": done.name, "role": done.role, "pid": done.pid, "started": done.started})
        return
    if done.started:
        what = "working on its prompt" if prompt else "idle, waiting for messages and tasks"
    else:
        what = ("no lead is running: the next one starts it (`team chat`, or `team run` of a plan that assigns "
                "it a task); " + ("its prompt waits in its inbox" if prompt else "messages to it wait in its inbox"))
    if plan_mode:
        what += "; in plan mode until the lead approves its plan"
    where = f"in the lead (pid {done.pid})" if done.started else "on the roster"
    out(f"{'spawned' if done.started else 'enrolled'} {done.name} ({done.role}) {where}: {what}")


def register(app: typer.Typer) -> None:
    """Add ``spawn`` to ``app``."""
    app.command("spawn")(spawn_cmd)
