"""The lead's controls over MCP, for ``team mcp --as lead`` only: ``spawn``, ``shutdown``,
``approve``, ``deny``.

Each calls what its CLI command calls, so a client acting as the lead (Claude Code steering a
team, say) has the lead's reach without a shell: ``spawn`` is ``team spawn`` (runtime/enrol.py:
asks the running lead, else enrols the member for the next one), ``shutdown`` is ``team
shutdown`` (team/control.py ``ask_shutdown``: the handshake through the running lead),
``approve``/``deny`` are ``team approve``/``team reject`` (team/requests.py ``answer``: a
plan-mode teammate's plan, a call its role marks ``ask``, a budget request; the first answer
wins, and it is recorded as the lead's).

Server.py lists these tools only to the lead; a call from anyone else is refused here as well
(``Caller.need_lead``), so a second check does not depend on what a client was shown.
"""

from __future__ import annotations

from ..core.text import shown
from ..runtime.enrol import spawn as enrol
from ..team.control import ask_shutdown
from ..team.requests import Requests, answer
from .caller import Caller


def spawn(c: Caller, name: str, role: str, prompt: str | None, plan_mode: bool) -> str:
    c.need_lead("spawn")
    done = enrol(c.root, name, role, prompt, plan_mode=plan_mode)
    if done.started:
        return f"spawned {done.name} ({done.role}) in the lead (pid {done.pid})"
    return (f"enrolled {done.name} ({done.role}) on the roster: no lead is running; the next one starts it "
            "(messages to it wait in its inbox)")


def shutdown(c: Caller, name: str, reason: str, timeout: float, force: bool) -> str:
    c.need_lead("shutdown")
    reply, text = ask_shutdown(c.root, name, reason=reason, timeout=timeout, force=force)
    if not reply.get("approved") and not reply.get("forced"):
        text += "; it was not shut down (force=true stops it anyway)"
    return text


def decide(c: Caller, request: str, approve: bool, reason: str, always: bool) -> str:
    c.need_lead("approve" if approve else "deny")
    r = answer(Requests(c.root), c.bus, request, approve, by=c.name, reason=reason, always=always)
    what = "approved" + (" (always, for this rule)" if r.always else "") if approve else "denied"
    return f"{what} {r.id}: {r.kind} request of {shown(r.sender)}: {shown(r.summary)}"
