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

Budget (``team run --ask``; runtime/teammate.py): a teammate that reached
its budget sends ``budget_request{request_id, content=what it reached}`` to
the lead and waits for ``budget_response{request_id}`` in its own inbox:
``approve`` true, or content ``approve``/``yes`` (so ``team send NAME --type
budget_response --request-id ID approve`` answers from any shell), lets it
go on; anything else, or nothing within the timeout, is a no
(``ask_budget``).

Waiting for a response reads the requester's inbox with ``Bus.peek``: it
consumes nothing, so the lead's own agent still gets every message.

A teammate's side of both is ``runtime.handshakes.TeammateHandshakes``: its
harness hands every fetched message to it before the model reads it.

The functions here need only a ``Mailbox`` (send and peek): the inbox bus,
or anything shaped like it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.errors import WorkFailed
from ..core.models import Message


class ProtocolTimeout(WorkFailed):
    """No response to a protocol request arrived in time."""


@dataclass(frozen=True)
class Response:
    request_id: str
    sender: str
    approve: bool
    text: str  # the reason (shutdown) or the feedback (plan approval)


class Mailbox(Protocol):
    """What the protocols need of the bus: send a message, look at an inbox without consuming it."""

    def send(self, to: str, content: str, *, sender: str, type: str = "message",
             request_id: str | None = None, **extra: Any) -> Message: ...

    def peek(self, name: str) -> list[Message]: ...


def new_request_id() -> str:
    return secrets.token_hex(6)


def find(bus: Mailbox, inbox: str, type: str, request_id: str | None = None) -> Message | None:
    """The first unconsumed ``type`` message in ``inbox`` (with ``request_id`` if given)."""
    for m in bus.peek(inbox):
        if m.type == type and (request_id is None or m.request_id == request_id):
            return m
    return None


def wait_for(bus: Mailbox, inbox: str, type: str, request_id: str | None, timeout: float,
             poll: float = 0.01) -> Message | None:
    deadline = time.monotonic() + timeout
    while True:
        msg = find(bus, inbox, type, request_id)
        if msg is not None or time.monotonic() >= deadline:
            return msg
        time.sleep(poll)


def as_response(msg: Message) -> Response:
    return Response(msg.request_id or "", msg.sender, bool(msg.approve), msg.content)


def respond(bus: Mailbox, to: str, type: str, request_id: str, approve: bool, text: str, *, sender: str) -> Message:
    return bus.send(to, text, sender=sender, type=type, request_id=request_id, approve=approve)


def request_shutdown(bus: Mailbox, to: str, *, reason: str = "", timeout: float = 30.0,
                     sender: str = "lead", request_id: str | None = None) -> Response:
    """Ask ``to`` to shut down; its answer, or ``ProtocolTimeout`` after ``timeout`` seconds."""
    rid = request_id or new_request_id()
    bus.send(to, reason or "please shut down", sender=sender, type="shutdown_request", request_id=rid)
    msg = wait_for(bus, sender, "shutdown_response", rid, timeout)
    if msg is None:
        raise ProtocolTimeout(f"{to} did not answer shutdown request {rid} within {timeout:g}s (busy in a long "
                              f"step, or not running: see `team status`); it was not shut down")
    return as_response(msg)


APPROVALS = frozenset({"approve", "approved", "yes", "y", "ok"})
"""Answers in a ``budget_response``'s text that mean yes."""


def ask_budget(bus: Mailbox, name: str, reached: str, *, timeout: float, gone: Callable[[], bool],
               to: str = "lead", on_ask: Callable[[str], None] | None = None, request_id: str | None = None,
               decided: Callable[[], Response | None] | None = None) -> Response | None:
    """``name`` asks ``to`` for more budget; the answer, or None after ``timeout`` seconds or once
    ``gone()`` (the teammate stops, its attempt is cancelled). ``decided``: an answer that came
    another way (the request store, team/requests.py: ``team approve``), looked at between waits;
    ``request_id``: the id it is on record under."""
    rid = request_id or new_request_id()
    how = (f"team send {name} --type budget_response --request-id {rid} approve  (anything else: no; "
           f"no answer in {timeout:g}s: no)")
    if decided is not None:
        how = f"`team approve {rid}` or `team deny {rid} --reason TEXT` (or {how})"
    bus.send(to, f"{name} reached its budget: {reached}. To let it go on: {how}", sender=name,
             type="budget_request", request_id=rid)
    if on_ask is not None:
        on_ask(f"{name} reached its budget ({reached}) and asks for more: {how}")
    deadline = time.monotonic() + timeout
    while not gone() and time.monotonic() < deadline:
        msg = wait_for(bus, name, "budget_response", rid, min(0.2, max(0.0, deadline - time.monotonic())))
        if msg is not None:
            yes = bool(msg.approve) or msg.content.strip().lower() in APPROVALS
            return Response(rid, msg.sender, yes, msg.content)
        other = decided() if decided is not None else None
        if other is not None:
            return other
    return None


def submit_plan(bus: Mailbox, plan: str, *, sender: str, to: str = "lead", request_id: str | None = None) -> str:
    """Send a plan for approval; returns the request id (``request_id``, else a new one)."""
    rid = request_id or new_request_id()
    bus.send(to, plan, sender=sender, type="plan_approval_request", request_id=rid)
    return rid


def review_plan(bus: Mailbox, to: str, request_id: str, approve: bool, feedback: str = "", *,
                sender: str = "lead") -> Message:
    """Answer ``to``'s plan approval request ``request_id``."""
    text = feedback or ("approved: go ahead" if approve else "rejected")
    return respond(bus, to, "plan_approval_response", request_id, approve, text, sender=sender)
