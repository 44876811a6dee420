"""The exception tree. The CLI catches ``TeamError`` at the edge, prints
``TypeName: message`` to stderr and exits with ``exit_code``.

    TeamError                      base; exit 2 unless noted
    ├── UserError                  bad input or usage: the message says what to do
    │   ├── UnknownRef             a task id/name, member or job that does not exist
    │   │   └── AmbiguousRef       a bare plan task id that several plans have
    │   ├── CycleError             a dependency that would close a cycle
    │   ├── InvalidName            a name with a path separator or other bad characters
    │   ├── PlanError              plan.yaml is invalid (file:line: field: problem)
    │   ├── NotAllowed             the actor's permissions, or a hook's veto, refuse the change
    │   └── SandboxUnavailable     agent shell commands need a sandbox that cannot be set up here
    ├── StateError                 the state on disk is unusable
    │   ├── CorruptFile            a file under .tasks/ or .team/ does not parse
    │   ├── NotWritable            the state root cannot be written (read-only, no permission)
    │   └── WriteFailed            a write failed: the disk is full, an I/O error (exit 1)
    ├── ConflictError              a compare-and-set lost (claim taken, stale epoch)
    ├── LeadRunning                another lead holds the state root
    ├── ModelError                 the LLM service failed after retries (exit 1)
    ├── WorkFailed                 work ran and failed (exit 1)
    ├── ClusterUnreachable         the Ray cluster named does not answer (exit 1)
    ├── ThreadDied                 a thread the process depends on died of an exception (exit 1)
    └── JobServerDied              team run's job server process died under it (exit 1)

    KeyboardInterrupt
    └── Signalled                  SIGINT, SIGTERM or SIGHUP asked the process to stop
                                   (not an error: the CLI says so in one word, exit 128 + N)
"""

from __future__ import annotations

import errno
import os


class TeamError(Exception):
    """Base of every error ``team`` raises on purpose."""

    exit_code = 2


class UserError(TeamError):
    """Misconfiguration or bad input; the message names the fix."""


class UnknownRef(UserError):
    """A task, member or job reference that does not exist."""


class AmbiguousRef(UnknownRef):
    """A bare plan task id (``build``) that tasks of several plans have: it names none of them."""


class CycleError(UserError):
    """A dependency change that would close a cycle."""

    def __init__(self, message: str, cycle: list[int] | None = None):
        super().__init__(message)
        self.cycle = cycle or []


class InvalidName(UserError):
    """A name that cannot be used (path separators, empty, too long)."""


class PlanError(UserError):
    """A plan file that failed validation."""


class NotAllowed(UserError):
    """A change the actor may not make (its role's permissions), or one a hook vetoed; nothing was written."""


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


class WriteFailed(StateError):
    """A write to the state root failed (disk full, quota, file too large, I/O error)."""

    exit_code = 1


_FULL = {errno.ENOSPC: "ENOSPC", errno.EDQUOT: "EDQUOT", errno.EFBIG: "EFBIG", errno.EIO: "EIO"}
_READ_ONLY = {errno.EROFS: "EROFS", errno.EACCES: "EACCES", errno.EPERM: "EPERM"}


def storage_error(e: OSError, then: str = "") -> StateError | None:
    """The one-line error for an ``OSError`` that a write of the state hit, or None when ``e`` is
    not a storage failure (a bug, or something else: let it crash loudly).

    The message names the path (when known), the errno and what to do; ``then`` is added
    (what became of the work, how to go on)."""
    code = e.errno or 0
    name = _FULL.get(code) or _READ_ONLY.get(code)
    if name is None:
        return None
    where = f"cannot write {e.filename}" if e.filename else "a write failed"
    head = f"{where}: {e.strerror or os.strerror(code)} [{name}]"
    if code in _FULL:
        fix = ("free space on that filesystem (or pass another --root)" if code != errno.EIO
               else "check the disk (dmesg), or pass another --root")
        tail = f"; {fix}, then run the command again" + (f"; {then}" if then else "")
        return WriteFailed(head + tail)
    tail = "; pass a writable --root (or set TEAM_ROOT)" + (f"; {then}" if then else "")
    return NotWritable(head + tail)


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


class ClusterUnreachable(TeamError):
    """The Ray cluster a run was pointed at does not answer (a wrong address, a head that is down)."""

    exit_code = 1


class ThreadDied(TeamError):
    """A thread of ours (a job watcher, a heartbeat, the store's writer...) died of an
    uncaught exception: a bug. ``__cause__`` is that exception, with its traceback."""

    exit_code = 1

    def __init__(self, name: str, error: BaseException):
        super().__init__(f"the {name} thread died ({type(error).__name__}: {error}); the run was stopped "
                         "rather than left waiting for it. This is a bug in team: please report it with the "
                         "traceback above. Run again to resume.")
        self.thread = name
        self.error = error


class JobServerDied(TeamError):
    """The job server process of a run died (killed from outside, or a bug): the run stops."""

    exit_code = 1


class Signalled(KeyboardInterrupt):
    """A signal asked the process to stop. A ``KeyboardInterrupt``, so it unwinds
    everything that a Ctrl-C would (no ``except Exception`` stops it)."""

    WORDS = {2: "Interrupted.", 15: "Terminated.", 1: "Hung up."}

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process killed by it."""
        return 128 + self.signum

    @property
    def word(self) -> str:
        """What the CLI prints: ``Interrupted.`` (SIGINT), ``Terminated.`` (SIGTERM)..."""
        return self.WORDS.get(self.signum, f"Stopped by signal {self.signum}.")
