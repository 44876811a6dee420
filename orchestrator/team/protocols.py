"""Request/response protocols between the lead and teammates, over the inbox bus.

Both are a pair of bus messages matched by ``request_id`` (models.PROTOCOL_TYPES)::

    shutdown        lead ──shutdown_request{request_id}──► teammate
                    lead ◄──shutdown_response{request_id, approve, content=reason}──
    plan approval   teammate ──plan_approval_request{request_id, content=plan}──► lead
                    teammate ◄──plan_approval_response{request_id, approve, content=feedback}──

Shutdown. The teammate's harness answers for an *idle* teammate at once
(approve: nothing to lose) without a model call; a *busy* teammate's model
sees the request and answers with ``respond_shutdown`` -- it may refuse with
a reason ("busy with #4"). Approved: the teammate's current attempt (if any)
ends as interrupted, its thread exits and the roster says ``shutdown``. The
requester waits up to ``timeout`` seconds for the response and raises
``ProtocolTimeout`` (exit 1) naming the teammate when none came.

Plan approval. A teammate in plan mode (``spawn(..., plan_mode=True)``, or
``plan_mode: true`` on a plan's ``team:`` member) has ``ToolContext.mode ==
"plan"``: the tool pipeline refuses every ``write``/``execute`` tool. It
reads, then ``submit_plan``; the lead answers with ``review_plan``. The
teammate's harness applies an approval (mode becomes ``normal``) before the
model sees the response; a rejection keeps plan mode and the feedback
reaches the model, which may submit a revised plan.

Waiting for a response reads the requester's inbox with ``Bus.peek``: it
consumes nothing, so the lead's own agent still gets every message.

A teammate's side of both (``TeammateProtocols``, one per teammate, in
``ctx.extra["protocol"]`` for the ``respond_shutdown``/``submit_plan`` tools):
its harness hands every fetched message to ``see`` before the model reads it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import WorkFailed
from ..core.models import Message
from ..tools.base import ToolContext, ToolError
from .inbox import Bus


class ProtocolTimeout(WorkFailed):
    """No response to a protocol request arrived in time."""


@dataclass(frozen=True)
class Response:
    request_id: str
    sender: str
    approve: bool
    text: str  # the reason (shutdown) or the feedback (plan approval)


def new_request_id() -> str:
    return secrets.token_hex(6)


def find(bus: Bus, inbox: str, type: str, request_id: str | None = None) -> Message | None:
    """The first unconsumed ``type`` message in ``inbox`` (with ``request_id`` if given)."""
    for m in bus.peek(inbox):
        if m.type == type and (request_id is None or m.request_id == request_id):
            return m
    return None


def wait_for(bus: Bus, inbox: str, type: str, request_id: str | None, timeout: float,
             poll: float = 0.01) -> Message | None:
    deadline = time.monotonic() + timeout
    while True:
        msg = find(bus, inbox, type, request_id)
        if msg is not None or time.monotonic() >= deadline:
            return msg
        time.sleep(poll)


def as_response(msg: Message) -> Response:
    return Response(msg.request_id or "", msg.sender, bool(getattr(msg, "approve", False)), msg.content)


def respond(bus: Bus, to: str, type: str, request_id: str, approve: bool, text: str, *, sender: str) -> Message:
    return bus.send(to, text, sender=sender, type=type, request_id=request_id, approve=approve)


def request_shutdown(bus: Bus, to: str, *, reason: str = "", timeout: float = 30.0,
                     sender: str = "lead") -> Response:
    """Ask ``to`` to shut down; its answer, or ``ProtocolTimeout`` after ``timeout`` seconds."""
    rid = new_request_id()
    bus.send(to, reason or "please shut down", sender=sender, type="shutdown_request", request_id=rid)
    msg = wait_for(bus, sender, "shutdown_response", rid, timeout)
    if msg is None:
        raise ProtocolTimeout(f"{to} did not answer shutdown request {rid} within {timeout:g}s (busy in a long "
                              f"step, or not running: see `team status`); it was not shut down")
    return as_response(msg)


def submit_plan(bus: Bus, plan: str, *, sender: str, to: str = "lead") -> str:
    """Send a plan for approval; returns the request id."""
    rid = new_request_id()
    bus.send(to, plan, sender=sender, type="plan_approval_request", request_id=rid)
    return rid


def review_plan(bus: Bus, to: str, request_id: str, approve: bool, feedback: str = "", *,
                sender: str = "lead") -> Message:
    """Answer ``to``'s plan approval request ``request_id``."""
    text = feedback or ("approved: go ahead" if approve else "rejected")
    return respond(bus, to, "plan_approval_response", request_id, approve, text, sender=sender)


class TeammateProtocols:
    """One teammate's side: the harness acts on requests and responses before the model sees them."""

    def __init__(self, bus: Bus, name: str, ctx: ToolContext, *, idle: Callable[[], bool],
                 stop: threading.Event, cancelled: threading.Event):
        self.bus, self.name, self.ctx, self.idle = bus, name, ctx, idle
        self.stop, self.cancelled = stop, cancelled
        self.plan_request: str | None = None  # id of the plan awaiting the lead's approval
        self.shutdown_requests: dict[str, str] = {}  # request id -> requester, not answered yet

    def see(self, m: Any) -> None:
        """Act on one fetched message: approve a shutdown when idle, apply a plan approval."""
        if m.type == "shutdown_request" and m.request_id:
            if self.idle():  # idle: approve without asking the model
                respond(self.bus, m.sender, "shutdown_response", m.request_id, True,
                        "idle: shutting down", sender=self.name)
                self.stop.set()
            else:
                self.shutdown_requests[m.request_id] = m.sender
        elif m.type == "plan_approval_response" and m.request_id and m.request_id == self.plan_request:
            if getattr(m, "approve", False):
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
        self.plan_request = submit_plan(self.bus, plan, sender=self.name)
        return (f"plan sent to the lead for approval (request {self.plan_request}); call idle to wait for "
                "the answer. Write and execute tools stay refused until it is approved.")
