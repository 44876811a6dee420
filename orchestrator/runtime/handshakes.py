"""A teammate's side of the shutdown and plan-approval protocols (``team.protocols``).

The teammate's harness hands every message it fetches to ``see`` before the
model reads it:

* ``shutdown_request``: an idle teammate approves at once, without a model
  call (nothing to lose), and stops; a busy one keeps the request for its
  model, which answers with the ``respond_shutdown`` tool (approve: the
  current attempt ends as interrupted; refuse: with a reason).
* ``submit_plan``: the plan goes to the lead's inbox and, as a ``plan``
  request, to the request store (team/requests.py), where ``team approve``
  or ``team reject`` answers it from any shell.
* ``plan_approval_response`` to the plan it submitted: an approval switches
  the teammate out of plan mode (``ToolContext.mode``) before the model sees
  the response; a rejection keeps plan mode and the feedback reaches the model.

It is the ``Handshakes`` service of the teammate's tools (``tools.services``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.models import Message
from ..team.protocols import Mailbox, new_request_id, respond, submit_plan
from ..team.requests import Request, Requests
from ..tools.base import ToolContext, ToolError


class TeammateHandshakes:
    """One teammate's side: acts on requests and responses before the model sees them."""

    def __init__(self, bus: Mailbox, name: str, ctx: ToolContext, *, idle: Callable[[], bool],
                 stop: threading.Event, cancelled: threading.Event, requests: Requests | None = None,
                 on_request: Callable[[Request], None] | None = None):
        """``requests``: where a submitted plan is recorded for people (``team approve``);
        ``on_request``: told of it."""
        self.bus, self.name, self.ctx, self.idle, self.requests = bus, name, ctx, idle, requests
        self.on_request = on_request
        self.stop, self.cancelled = stop, cancelled
        self.plan_request: str | None = None  # id of the plan awaiting the lead's approval
        self.shutdown_requests: dict[str, str] = {}  # request id -> requester, not answered yet

    def see(self, m: Message) -> None:
        """Act on one fetched message: approve a shutdown when idle, apply a plan approval."""
        if m.type == "shutdown_request" and m.request_id:
            if self.idle():  # idle: approve without asking the model
                respond(self.bus, m.sender, "shutdown_response", m.request_id, True,
                        "idle: shutting down", sender=self.name)
                self.stop.set()
            else:
                self.shutdown_requests[m.request_id] = m.sender
        elif m.type == "plan_approval_response" and m.request_id and m.request_id == self.plan_request:
            if m.approve:
                self.ctx.mode = "normal"
                self.plan_request = None

    def respond_shutdown(self, request_id: str, approve: bool, reason: str) -> str:
        """The respond_shutdown tool: answer a pending request; approving ends this teammate."""
        to = self.shutdown_requests.pop(request_id, None)
        if to is None:
            known = ", ".join(self.shutdown_requests) or "none"
            raise ToolError(f"no pending shutdown request {request_id!r} (pending: {known})")
        respond(self.bus, to, "shutdown_response", request_id, approve, reason, sender=self.name)
        if not approve:
            return f"refused shutdown request {request_id}; carry on with your work"
        self.stop.set()
        self.cancelled.set()
        return "approved: you stop after this step (the current attempt ends as interrupted)"

    def submit_plan(self, plan: str) -> str:
        """The submit_plan tool: send the plan to the lead; write tools stay refused until approved."""
        if self.ctx.mode != "plan":
            raise ToolError("you are not in plan mode: go ahead with the work")
        rid = new_request_id()
        recorded = None
        if self.requests is not None:  # on record before the lead can see it: `team approve` answers it
            first = next((line for line in plan.splitlines() if line.strip()), plan)
            recorded = self.requests.create("plan", self.name, f"plan: {first}", detail=plan, rid=rid,
                                            task=self.ctx.task_id)
        self.plan_request = submit_plan(self.bus, plan, sender=self.name, request_id=rid)
        if recorded is not None and self.on_request is not None:
            self.on_request(recorded)
        return (f"plan sent to the lead for approval (request {self.plan_request}); call idle to wait for "
                "the answer. Write and execute tools stay refused until it is approved.")
