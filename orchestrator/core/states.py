"""The names and states of tasks and messages, without pydantic (``core.models`` re-exports them).

Kept apart from the pydantic records so that a command that only reads task
files through the index (``team task list``: tasks/index.py) imports no
pydantic: start-up time is part of every command (issue 13).
"""

from __future__ import annotations

import re
from enum import Enum

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""Names of tasks (slugs), members and plans: no path separators, no spaces."""
MAX_TASK_ID = 10**15
"""The largest task id: a ref past it names no task (and no file name the OS would refuse)."""


class Status(str, Enum):
    pending = "pending"
    in_progress = "in_progress"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"

    def __str__(self) -> str:  # so f-strings print the value
        return self.value


TERMINAL = frozenset({Status.completed, Status.failed, Status.cancelled})

MARKERS = {
    Status.pending: "[ ]",
    Status.in_progress: "[>]",
    Status.completed: "[x]",
    Status.failed: "[!]",
    Status.cancelled: "[-]",
}


MESSAGE_TYPES = (
    "message",
    "broadcast",
    "shutdown_request",
    "shutdown_response",
    "plan_approval_request",
    "plan_approval_response",
    "approval_request",
    "job_done",
    "budget_request",
    "budget_response",
)
PROTOCOL_TYPES = frozenset(
    {"shutdown_request", "shutdown_response", "plan_approval_request", "plan_approval_response",
     "approval_request", "budget_request", "budget_response"}
)
