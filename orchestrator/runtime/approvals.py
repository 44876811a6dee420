"""The lead's side of ``ask`` permissions: a teammate's risky call waits for a person.

``gate_for(role, tools, ask)`` builds an agent's ``ApprovalGate``
(tools/approval.py) from its role's ``ask`` entries, or None when the role
has none (a ``UserError`` names a bad entry before the teammate starts).

``StoreAsk`` is the ``ask`` function of teammates (and subagents) in
``team run`` and ``team chat``: it records a ``tool`` request in the request
store (team/requests.py), tells the lead (``notify``: in ``team run`` an
``approval_request`` message in the lead's inbox and a line in the run's
output; in ``team chat`` a line at the terminal), then blocks the agent's
thread until someone answers (``team approve ID``, ``team deny ID``,
``/approve`` in chat), the approval timeout passes, the task's own deadline
comes or the agent is stopped: the last three are denials.

The timeout: ``TEAM_APPROVAL_TIMEOUT`` seconds (default 300), never past the
task's ``timeout``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from ..core.errors import UserError
from ..roles.roles import Role
from ..team.requests import Request, Requests
from ..tools import ToolContext, ToolRegistry
from ..tools.approval import ApprovalGate, ApprovalRequest, Ask, Decision, parse_rules

DEFAULT_TIMEOUT = 300.0


def timeout_from_env(env: Mapping[str, str] = os.environ) -> float:
    """``TEAM_APPROVAL_TIMEOUT`` (seconds > 0), else the default."""
    raw = env.get("TEAM_APPROVAL_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86_400:
        raise UserError(f"TEAM_APPROVAL_TIMEOUT={raw!r} must be a number of seconds between 0 and 86400")
    return value


def gate_for(role: Role, tools: ToolRegistry, ask: Ask) -> ApprovalGate | None:
    """``role``'s ask rules over the ``tools`` it has, answered by ``ask``; None without rules."""
    if not role.ask:
        return None
    have = {n: t for n in tools.names() if (t := tools.get(n)) is not None}
    return ApprovalGate(parse_rules(role.ask, have, where=f"{role.path or role.name}: ask"), ask)


class StoreAsk:
    """Ask through the request store and wait (see the module docstring)."""

    def __init__(self, requests: Requests, *, timeout: float, notify: Callable[[Request], None] | None = None,
                 stopped: Callable[[], bool] = lambda: False):
        self.requests, self.timeout, self.notify, self.stopped = requests, timeout, notify, stopped

    def __call__(self, req: ApprovalRequest, ctx: ToolContext) -> Decision:
        wait = min(self.timeout, ctx.time_left())
        r = self.requests.create("tool", req.agent, req.summary, detail=req.detail, tool=req.tool, rule=req.rule,
                                 task=req.task, timeout=wait)
        if self.notify is not None:
            self.notify(r)
        done = self.requests.wait(r.id, wait, stopped=self.stopped)
        by = done.decided_by or "nobody"
        if done.status == "expired":
            by = "the approval timeout" if "answered" in done.reason else "the harness"
        return Decision(done.approved, done.reason, by, done.always, done.id)

    def with_stop(self, stopped: Callable[[], bool]) -> StoreAsk:
        """The same asker for one agent, which stops waiting once ``stopped()``."""
        return StoreAsk(self.requests, timeout=self.timeout, notify=self.notify, stopped=stopped)


def approval_line(r: Request) -> str:
    """What the lead's user reads about a new request: what, who, how to answer."""
    if r.kind == "plan":
        return (f"{r.sender} submitted a {r.summary} (request {r.id}): `team approve {r.id}` or "
                f"`team reject {r.id} --reason TEXT`; it waits in plan mode until then")
    left = f"; denied if nobody answers within {r.expires - r.created:.0f}s" if r.expires else ""
    return (f"{r.sender} asks to run {r.summary} (rule {r.rule}, request {r.id}): "
            f"`team approve {r.id}` or `team deny {r.id} --reason TEXT`{left}")
