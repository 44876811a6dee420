"""The lead's controls for people, from any shell: ``team shutdown``, ``team approve``,
``team reject`` (alias ``team deny``).

``team shutdown NAME`` asks the running lead (team/control.py) to run the
shutdown handshake with NAME (team/protocols.py): the request id goes to the
teammate, the command waits for its answer and prints it. An idle teammate
approves at once; a busy one's model answers (it may refuse, with a reason).
``--force`` stops it anyway after a refusal or when no answer came within
``--timeout`` (its running attempt ends as interrupted). Exit 0 when it has
shut down, 1 when it refused or did not answer (and was not forced), 2 for a
name that is not a running teammate or when no lead is running.

``team approve [REQ]`` / ``team reject REQ --reason TEXT`` answer an approval
request (team/requests.py): a plan-mode teammate's plan, or a tool call its
role marks ``ask`` (tools/approval.py). The answer is written to the request
store directly (the first answer wins, from any process); a plan's teammate
also gets its ``plan_approval_response`` message. ``team approve`` without
an id lists the pending requests (so does ``team status``). ``--always``
approves that ask rule for the rest of the teammate's session.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..core.errors import WorkFailed
from ..core.text import shown
from .common import JsonOpt, RootOpt, out, print_json, root_of


def shutdown_cmd(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The teammate to shut down (see `team status`).", show_default=False)],
    reason: Annotated[str, typer.Option("--reason", help="Why (the teammate sees it).")] = "",
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, max=3600,
                                           help="Seconds to wait for the teammate's answer.")] = 30.0,
    force: Annotated[bool, typer.Option("--force", help="Stop it anyway if it refuses or does not answer in time "
                                                        "(its running task attempt ends as interrupted).")] = False,
    json_out: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Ask a teammate of the running lead to shut down, wait for its answer and print it."""
    from ..team.control import ask_shutdown

    reply, msg = ask_shutdown(root_of(root, ctx), name, reason=reason, timeout=timeout, force=force)
    if json_out:
        print_json(reply)
    else:
        out(shown(msg))
    if not reply.get("approved") and not reply.get("forced"):
        raise WorkFailed(f"{name} was not shut down; `team shutdown {name} --force` stops it anyway")


def _decide(ctx: typer.Context, ref: str, approve: bool, reason: str, always: bool, by: str, root: RootOpt,
            json_out: bool) -> None:
    from ..team.inbox import Bus
    from ..team.lead import lead_info
    from ..team.requests import Requests, answer

    where = root_of(root, ctx)
    r = answer(Requests(where), Bus(where), ref, approve, by=by, reason=reason, always=always)
    if json_out:
        print_json(r.model_dump(exclude_none=True))
        return
    what = "approved" + (" (always, for this rule)" if r.always else "") if approve else "rejected"
    out(f"{what} {r.id}: {r.kind} request of {shown(r.sender)}: {shown(r.summary)}")
    if lead_info(where) is None:
        out(f"(no lead is running: {r.sender} sees the answer when it next runs)")


def approve_cmd(
    ctx: typer.Context,
    request_id: Annotated[str | None, typer.Argument(help="Request id or a unique prefix; omit to list the "
                                                          "pending requests.", show_default=False)] = None,
    always: Annotated[bool, typer.Option("--always", help="A tool request: approve this ask rule for the rest of "
                                                          "the teammate's session.")] = False,
    reason: Annotated[str, typer.Option("--reason", help="A note for the teammate.")] = "",
    by: Annotated[str, typer.Option("--by", help="Who answers (recorded).")] = "user",
    json_out: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Approve a teammate's plan or risky tool call; without an id, list the pending requests."""
    if request_id is not None:
        _decide(ctx, request_id, True, reason, always, by, root, json_out)
        return
    from ..team.requests import Requests

    pending = Requests(root_of(root, ctx)).pending()
    if json_out:
        print_json([r.model_dump(exclude_none=True) for r in pending])
    elif not pending:
        out("no pending approval requests")
    else:
        out("\n".join(shown(r.line()) for r in pending))
        out("answer with `team approve ID` or `team reject ID --reason TEXT`")


def reject_cmd(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(help="Request id or a unique prefix (see `team approve`).",
                                              show_default=False)],
    reason: Annotated[str, typer.Option("--reason", help="Why: the teammate reads it (what to do instead).")] = "",
    by: Annotated[str, typer.Option("--by", help="Who answers (recorded).")] = "user",
    json_out: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Reject a teammate's plan or deny a risky tool call; the teammate reads the reason."""
    _decide(ctx, request_id, False, reason, False, by, root, json_out)


def register(app: typer.Typer) -> None:
    """Add ``shutdown``, ``approve``, ``reject`` and its alias ``deny`` to ``app``."""
    app.command("shutdown")(shutdown_cmd)
    app.command("approve")(approve_cmd)
    app.command("reject")(reject_cmd)
    app.command("deny", help="Same as `team reject`: deny a risky tool call or reject a plan, with a reason.")(
        reject_cmd)
