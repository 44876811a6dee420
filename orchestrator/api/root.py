"""``Root``: a state root seen from Python, a thin facade over the library.

Every method calls what the matching ``team`` command calls, and nothing
else: tasks through ``tasks.TaskStore`` (writes are logged with actor
``api``), filters through ``tasks.graph.TaskFilter``, messages through
``team.inbox.Bus``, ``spawn`` through ``runtime.enrol.spawn``, a run through
``run.runner.run_plan``, the status through ``status.overview``. No rule is
implemented twice; the errors are the package's (``TeamError`` and its
subclasses, each with a one-line message).

A run's events go to ``on_event`` as ``RunEvent``s, on the thread that
emits them (the scheduler's, or the merge thread with worktree isolation):
keep the callback quick. A callback that raises stops the run the way a
failing thread of the run does (``run.stop.RunStop.fail``: no new task
starts, running ones are stopped and given back), and ``run`` raises that
exception once the run has cleaned up. The run's notes (what it found on
disk, what it reconciled) go to ``on_note``, else to the ``orchestrator``
logger at level INFO.

Nothing is written when a ``Root`` is made: ``.tasks/`` and ``.team/``
appear with the first write, as with the CLI.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.models import Message, Status, Task
from ..core.paths import resolve_root
from ..tasks.attempts import parse_status
from ..tasks.graph import TaskFilter
from ..tasks.store import TaskStore
from ..team.inbox import Bus
from .records import RunEvent, TeamStatus

if TYPE_CHECKING:
    from ..run.scheduler import RunResult
    from ..runtime.enrol import Spawned

ACTOR = "api"
log = logging.getLogger("orchestrator")


def open_root(path: str | os.PathLike[str] | None = None) -> Root:
    """The state root at ``path``; ``None``: ``$TEAM_ROOT``, else the current directory
    (as ``--root`` for the CLI). Nothing is created until something is written."""
    return Root(path)


class Root:
    """A state root (``.tasks/`` and ``.team/`` under one directory) and what can be done with it."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path: Path = resolve_root(Path(path) if path is not None else None)
        """The directory holding ``.tasks/`` and ``.team/``."""
        self._store = TaskStore(self.path)
        self._bus = Bus(self.path)

    def __repr__(self) -> str:
        return f"Root({str(self.path)!r})"

    # -- tasks ---------------------------------------------------------------------------
    def create_task(self, subject: str, *, description: str = "", blocked_by: Iterable[int | str] = (),
                    owner: str = "", name: str | None = None, estimate: float | None = None) -> Task:
        """A new task with the next id (``team task create``). ``blocked_by``: ids or names of
        existing tasks; an unknown one raises ``UnknownRef``, one closing a cycle ``CycleError``."""
        fields: dict[str, Any] = {}
        if name is not None:
            fields["name"] = name
        if estimate is not None:
            fields["estimate"] = estimate
        return self._store.create(subject, description, list(blocked_by), owner, actor=ACTOR, **fields)

    def task(self, ref: int | str) -> Task:
        """One task by id (``4``, ``"#4"``) or name (``team task show``); ``UnknownRef`` if absent."""
        return self._store.get(ref)

    def tasks(self, *, status: Status | str | None = None, owner: str | None = None, ready: bool = False,
              blocked: bool = False) -> list[Task]:
        """The tasks, by id, that meet every given condition (``team task list``): ``ready``: could
        start now; ``blocked``: pending and waiting on others (both: either)."""
        want = parse_status(status) if status is not None else None
        tasks = self._store.all() if self._store.exists() else []
        return TaskFilter(status=want, owner=owner, ready=ready, blocked=blocked).select(tasks)

    def update_task(self, ref: int | str, *, status: Status | str | None = None, owner: str | None = None,
                    add_blocked_by: Iterable[int | str] = (), remove_blocked_by: Iterable[int | str] = (),
                    subject: str | None = None, description: str | None = None,
                    estimate: float | None = None) -> Task:
        """Change a task (``team task update``): checked, all or nothing; the task afterwards."""
        fields: dict[str, Any] = {k: v for k, v in (("subject", subject), ("description", description),
                                                     ("estimate", estimate)) if v is not None}
        return self._store.update(ref, status=status, owner=owner, add_blocked_by=list(add_blocked_by),
                                  remove_blocked_by=list(remove_blocked_by), actor=ACTOR, **fields)

    # -- a plan ---------------------------------------------------------------------------
    def run(self, plan: str | os.PathLike[str], *, on_event: Callable[[RunEvent], None] | None = None,
            on_note: Callable[[str], None] | None = None, workers: int | None = None, keep_going: bool = False,
            fresh: bool = False, redo: Iterable[str] = (), model: str | None = None) -> RunResult:
        """Run the plan file ``plan`` in this process, as ``team run`` does: validated whole first
        (``PlanError``), resumed if it ran before, one lead per root (``LeadRunning``). Returns
        when every task ended or the run stopped; ``result.ok`` says whether all completed.
        Callbacks: see the module docstring."""
        from ..plan.load import load_plan
        from ..run.runner import check_redo, run_plan
        from ..run.stop import RunStop

        lp = load_plan(plan, model=model)
        redo = check_redo(lp, redo)
        stop = RunStop()
        failed: list[BaseException] = []

        def emit(data: dict[str, Any]) -> None:
            if on_event is None or failed:
                return
            try:
                on_event(RunEvent.of(data))
            except Exception as e:  # the caller's bug: stop the run and hand it back (raised below)
                failed.append(e)
                stop.fail(e)

        result = run_plan(lp, self.path, workers=workers, keep_going=keep_going, fresh=fresh, redo=redo,
                          emit=emit, note=on_note if on_note is not None else log.info, stop=stop)
        if failed:
            raise failed[0]
        return result

    # -- the team -------------------------------------------------------------------------
    def spawn(self, name: str, role: str = "coder", prompt: str | None = None, *, plan_mode: bool = False,
              timeout: float = 15.0) -> Spawned:
        """Add teammate ``name`` (``team spawn``): started by the running lead, else enrolled on the
        roster for the next lead (``result.started`` says which)."""
        from ..runtime.enrol import spawn

        return spawn(self.path, name, role, prompt, plan_mode=plan_mode, timeout=timeout)

    def send(self, to: str, text: str, *, sender: str = "lead", type: str = "message",
             request_id: str | None = None) -> Message:
        """Append a message to ``to``'s inbox (``team send``); returns once it is on disk."""
        return self._bus.send(to, text, sender=sender, type=type, request_id=request_id)

    def broadcast(self, text: str, *, sender: str = "lead") -> list[Message]:
        """Send ``text`` to every member but ``sender`` (``team broadcast``)."""
        return self._bus.broadcast(text, sender=sender)

    def inbox(self, name: str, *, peek: bool = False) -> list[Message]:
        """``name``'s unread messages (``team inbox``), consumed unless ``peek``."""
        return self._bus.peek(name) if peek else self._bus.read(name)

    def status(self) -> TeamStatus:
        """Roster with liveness and unread counts, task counts, jobs, the lead (``team status``)."""
        from ..status.overview import status_data

        data: Mapping[str, Any] = status_data(self.path)
        return TeamStatus.of(data)
