"""What the board may change, with ``team board --allow-actions``: retry, cancel, send.

Each action goes through the same store and bus methods as the CLI (locked,
validated, logged with actor ``board``), so it is as safe as
``team task update`` or ``team send`` from another shell, and each returns
one sentence saying what happened and what comes next. Who may call them is
app.py's business (127.0.0.1, the session token, ``--allow-actions``).

* ``retry``: a failed or cancelled task goes back to ``pending``, unowned,
  its error cleared. A lead that is running picks it up only if it claims
  work from the graph (``team chat``'s teammates do); ``team run`` runs the
  plan it started with, so its tasks are retried by running the plan again
  (materialise also re-opens what was cancelled because of the failure).
* ``cancel``: a pending or running task becomes ``cancelled`` with the
  reason. That fences a running attempt (the store refuses its completion)
  and its running background jobs are killed (``JobManager.kill``), so
  nothing keeps working for it.
* ``send``: a message to ``lead`` or a member, as ``team send TO TEXT --from NAME``.
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import ConflictError, UserError
from ..core.models import TERMINAL, Status
from ..jobs.manager import JobManager
from ..tasks.store import TaskStore
from ..team.inbox import Bus
from .watch import lead_holder

ACTOR = "board"
MESSAGE_LIMIT = 20000
"""Most characters of a message sent from the board."""


class Actions:
    """Retry, cancel and send on one state root (see the module docstring)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.store = TaskStore(self.root)

    def _lead_runs_plan(self) -> str | None:
        lead = lead_holder(self.root)
        if lead is None:
            return None
        plan = lead.info.get("plan")
        return plan if isinstance(plan, str) else ""

    def retry(self, tid: int) -> str:
        task = self.store.read(tid)
        if task.status not in (Status.failed, Status.cancelled):
            raise ConflictError(f"#{tid} is {task.status.value}: only a failed or cancelled task can be retried")
        self.store.update(tid, status=Status.pending, owner="", error=None, actor=ACTOR)
        plan = self._lead_runs_plan()
        if task.plan and plan == task.plan:
            nxt = (f"the running `team run` of plan {task.plan} does not start tasks it has finished; "
                   f"run the plan again when it ends (`team run` resumes it)")
        elif task.plan:
            nxt = f"`team run` of plan {task.plan} runs it"
        else:
            nxt = "a teammate claiming ready work, or `team task update`, takes it from here"
        return f"#{tid} is pending again; {nxt}"

    def cancel(self, tid: int) -> str:
        task = self.store.read(tid)
        if task.status in TERMINAL:
            raise ConflictError(f"#{tid} is already {task.status.value}")
        self.store.cancel(tid, "cancelled on the board", actor=ACTOR)
        jobs = JobManager(self.root)
        killed = [jobs.kill(j.id).id for j in jobs.list() if j.task == tid and j.status == "running"]
        if task.status == Status.in_progress:
            also = f"; killed job {', '.join(killed)}" if killed else ""
            return f"#{tid} is cancelled: its running attempt is fenced (its result will be refused){also}"
        return f"#{tid} is cancelled: it will not start"

    def send(self, to: str, content: str, sender: str = "lead") -> str:
        if not content.strip():
            raise UserError("the message is empty: write something to send")
        if len(content) > MESSAGE_LIMIT:
            raise UserError(f"the message has {len(content)} characters: the board sends at most {MESSAGE_LIMIT}")
        msg = Bus(self.root).send(to, content, sender=sender)
        return f"sent {msg.id} to {to}"
