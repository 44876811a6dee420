"""``team spawn NAME --role ROLE [--prompt TEXT]``: ask the running lead for a teammate.

The teammate is a thread in the lead process (runtime/runtime.py), so this command
only sends a control request (team/control.py) and prints the lead's answer.
Exit 2 when no lead is running, when it does not take spawn requests (a plan
without agent tasks) or when it refuses (bad name, unknown role); exit 1
when it does not answer in time.
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
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for the lead's answer.")] = 15.0,
    plan_mode: Annotated[bool, typer.Option("--plan-mode", help="Writes wait until the lead approves its plan.")] = False,
    json_out: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Add a teammate to the running lead (`team run` or `team chat`); it works messages and tasks."""
    from ..team.control import request
    from ..team.roster import check_name

    check_name(name)
    reply = request(root_of(root, ctx), "spawn", {"name": name, "role": role, "prompt": prompt, "plan_mode": plan_mode},
                    timeout=timeout)
    if json_out:
        print_json(reply)
        return
    what = "working on its prompt" if prompt else "idle, waiting for messages and tasks"
    if plan_mode:
        what += "; in plan mode until the lead approves its plan"
    out(f"spawned {reply['name']} ({reply['role']}) in the lead (pid {reply['pid']}): {what}")


def register(app: typer.Typer) -> None:
    """Add ``spawn`` to ``app``."""
    app.command("spawn")(spawn_cmd)
