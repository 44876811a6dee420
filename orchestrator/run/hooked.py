"""``task_completed`` hooks for shell tasks: asked before the scheduler records a completion.

``Hooked(inner, hooks)`` wraps the shell executor (runner.build_executors,
only when the run has ``task_completed`` hooks). An attempt that ends
``completed`` is held while the hooks decide, on a thread of its own so the
job watcher and the scheduler are never blocked by a hook; a veto (exit 2)
turns the outcome into ``failed`` with "vetoed by a task_completed hook:
<its stderr>", so the task is not completed and its ``retries`` apply. Any
other outcome passes at once.

Agent tasks are not wrapped: their teammate asks the hooks itself before
reporting, and a veto goes back to the agent as a message within the same
attempt (runtime/teammate.py). On ``--backend ray`` they are: a teammate on a
node runs no hooks, so its completions pass them here, at the lead, like a
shell task's (a veto fails the attempt).
"""

from __future__ import annotations

import dataclasses

from ..core import threads
from ..core.hooks import Hooks
from ..core.models import Task
from ..core.threads import Crash
from .executor import DoneCallback, Executor, Outcome, Wrapper


class Hooked(Wrapper):
    """An executor whose completed attempts pass the ``task_completed`` hooks first."""

    def __init__(self, inner: Executor, hooks: Hooks, *, on_crash: Crash | None = None):
        super().__init__(inner)
        self.hooks, self.on_crash = hooks, on_crash

    def _decided(self, task: Task, done: DoneCallback) -> DoneCallback:
        def report(out: Outcome) -> None:
            if not out.ok:
                done(out)
                return

            def decide() -> None:
                verdict = self.hooks.decide(
                    "task_completed", teammate=task.owner or None, task=task,
                    outcome={"status": out.status, "exit_code": out.exit_code, "result": out.result, "log": out.log})
                if verdict.vetoed:
                    done(dataclasses.replace(out, status="failed",
                                             error=f"vetoed by a task_completed hook: {verdict.feedback}"))
                else:
                    done(out)

            threads.start(f"team-hook-task-{task.id}", decide, on_crash=self.on_crash)
        return report

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.inner.start(task, epoch, self._decided(task, done))

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.inner.start_now(task, epoch, self._decided(task, done))
