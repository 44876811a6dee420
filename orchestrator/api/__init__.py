"""The Python API: what ``orchestrator`` exports (its ``__all__``), for programs that embed a team.

    root.py      Root (a state root: tasks, a plan's run with event callbacks, the team,
                 the status) and open_root
    records.py   RunEvent, TeamStatus, MemberStatus: the records only the API needs

Thin facades over the library: each method calls what the matching ``team``
command calls (docs/api.md). The other records it returns are the package's
own (``Task``, ``Message``, ``RunResult``, ``Spawned``). ``orchestrator``
loads this package on first use of a public name, so ``import orchestrator``
stays cheap.
"""

from __future__ import annotations

from ..core.errors import (
    ConflictError,
    CycleError,
    InvalidName,
    LeadRunning,
    PlanError,
    TeamError,
    UnknownRef,
    UserError,
    WorkFailed,
)
from ..core.models import Message, Status, Task
from ..run.scheduler import RunResult, TaskRun
from ..runtime.enrol import Spawned
from .records import MemberStatus, RunEvent, TeamStatus
from .root import Root, open_root

TaskStatus = Status

__all__ = [
    "ConflictError", "CycleError", "InvalidName", "LeadRunning", "MemberStatus", "Message", "PlanError",
    "Root", "RunEvent", "RunResult", "Spawned", "Task", "TaskRun", "TaskStatus", "TeamError", "TeamStatus",
    "UnknownRef", "UserError", "WorkFailed", "open_root",
]
