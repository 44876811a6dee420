"""The exception tree. The CLI catches ``TeamError`` at the edge, prints
``TypeName: message`` to stderr and exits with ``exit_code``.

    TeamError                      base; exit 2 unless noted
    ├── UserError                  bad input or usage: the message says what to do
    │   ├── UnknownRef             a task id/name, member or job that does not exist
    │   ├── CycleError             a dependency that would close a cycle
    │   ├── InvalidName            a name with a path separator or other bad characters
    │   ├── PlanError              plan.yaml is invalid (file:line: field: problem)
    │   └── SandboxUnavailable     agent shell commands need a sandbox that cannot be set up here
    ├── StateError                 the state on disk is unusable
    │   ├── CorruptFile            a file under .tasks/ or .team/ does not parse
    │   └── NotWritable            the state root cannot be written
    ├── ConflictError              a compare-and-set lost (claim taken, stale epoch)
    ├── LeadRunning                another lead holds the state root
    ├── ModelError                 the LLM service failed after retries (exit 1)
    └── WorkFailed                 work ran and failed (exit 1)
"""

from __future__ import annotations


class TeamError(Exception):
    """Base of every error ``team`` raises on purpose."""

    exit_code = 2


class UserError(TeamError):
    """Misconfiguration or bad input; the message names the fix."""


class UnknownRef(UserError):
    """A task, member or job reference that does not exist."""


class CycleError(UserError):
    """A dependency change that would close a cycle."""

    def __init__(self, message: str, cycle: list[int] | None = None):
        super().__init__(message)
        self.cycle = cycle or []


class InvalidName(UserError):
    """A name that cannot be used (path separators, empty, too long)."""


class PlanError(UserError):
    """A plan file that failed validation."""


class SandboxUnavailable(UserError):
    """The OS sandbox for agent shell commands cannot be set up (and nobody opted out of it)."""


class StateError(TeamError):
    """State on disk that cannot be used as it is."""


class CorruptFile(StateError):
    """A state file that does not parse."""

    def __init__(self, path: object, detail: str):
        super().__init__(f"{path}: {detail} (run `team doctor` to see what is wrong; fix or remove the file by hand)")
        self.path = path


class NotWritable(StateError):
    """The state root cannot be created or written."""


class ConflictError(TeamError):
    """A compare-and-set lost: the task was claimed, or an epoch is stale."""


class LeadRunning(TeamError):
    """Another lead process holds this state root."""


class ModelError(TeamError):
    """The model service failed after retries, or answered unusably."""

    exit_code = 1


class WorkFailed(TeamError):
    """Work ran and failed."""

    exit_code = 1
