"""``isolation: worktree`` in ``team run``: an executor wrapper around git/worktrees.py.

The scheduler is unchanged: ``Isolation.wrap(executor)`` returns an executor
that runs isolated tasks (``task.isolation == "worktree"``) in their own git
worktree and passes the others straight through (so a plan without isolation
makes no git call at all). Per isolated attempt::

    start ─► [the attempt's thread] fork the worktree (a free one of the pool,
             moved and reset, else a new one) ─► inner executor runs the task
             with cwd (shell) / workspace (agent) inside the worktree
          ─► [the attempt's thread again] commit what it changed, give the worktree
             back to the pool (its merge needs only the branch), tell the
             scheduler it settles (``settle``: it no longer takes a worker slot)
          ─► [merge thread] merge into the integration branch
          ─► done(Outcome) to the scheduler

Because the scheduler only hears of a completion after its merge landed, a
dependent task is prepared from an integration tip that holds the work of all
its ``needs``. Merges run on one thread in completion order (and under the
worktree lock), off the scheduler's thread; prepares and commits run on a
short-lived thread of their attempt (prepares under the worktree lock, commits
in the task's own worktree without it), so they overlap each other and the
tasks. Worktrees are reused (``Worktrees.use_pool``, git/pool.py): a run holds
at most as many as it runs tasks at once, plus the kept ones, and removes the
free ones at its end (``finish``).

* The task's ``cwd`` (absolute, inside the repository) maps to the same
  relative folder of its worktree (the runner refuses a plan whose tasks
  would run outside the repository before anything runs). Shell tasks also
  get ``TEAM_WORKTREE`` and ``TEAM_BRANCH``.
* The merge phase: a finished attempt waits on the merge thread for its
  turn, then merges; ``emit`` reports ``merge_queued`` (with how many are
  ``ahead``) and ``merging``. Its task stays running until its merge landed
  (the scheduler hears of its outcome only then, so its dependents wait),
  but its worker slot is free from the moment its work is committed
  (``Scheduler.settle``): while merges wait their turn, other ready tasks
  run. A pooled task's worktree goes back to the pool at the same moment; a
  merge that conflicts makes it again at the task's path, on its branch.
* A failed attempt keeps its worktree and branch (the task records both). What
  it committed itself is not its result: ``Worktrees.failed_attempt`` records
  that before the failure is reported, the failure says so, and the next
  attempt starts afresh (a commit made on top by hand makes it work to merge
  again). A merge conflict fails the task with ``MergeConflict``'s message (the files,
  the commands to resolve it) plus how to drop the work (``--redo``); the
  branch and worktree are kept.
* Kept work is never dropped here. Per attempt (resumed or retried):
  a task whose merge commit is already on integration (found by its trailer
  when the run starts) completes without running again, and a branch left
  over from that merge is deleted; a branch with commits of its own (after
  its fork point: finished work whose merge never happened, a conflict, a
  resolution by hand) is merged without re-running, and a conflict fails the
  task again; if its worktree also has uncommitted changes the task fails,
  saying so; a branch without commits of its own (an attempt cut short) is
  re-forked fresh. Dropping kept work is ``reconcile``'s, on the user's word
  (``--redo``, ``team task retry``) or ``--fresh``'s.
* A task with ``outputs:`` has only its changes to those paths committed
  (git/keep.py ``commit_outputs``, on its branch in a worktree of its own, not
  the pool's); ``warn_junk``, after the run, says which
  of its merges added files that look like build output.
* ``finish()`` drops the integration worktree (the branch stays, so the user
  may check it out) and returns ``Worktrees.summary()``.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import TeamError, WorkFailed
from ..core.models import Task
from ..core.paths import stored
from ..core.text import plural
from ..git import keep
from ..git.pool import Lease, WorktreePool
from ..git.worktrees import MergeConflict, Summary, Worktrees
from ..jobs.records import JobRecord
from ..plan.model import Plan
from .executor import DoneCallback, Executor, Outcome
from .scheduler import Emit

log = logging.getLogger("orchestrator.isolation")


def warmed_pool(wt: Worktrees, plan: Plan, workers: int, *, started: bool) -> WorktreePool:
    """The run's worktree pool, made as the run starts. When the plan starts now (``started``: no task of
    it ran yet), its first worktrees are made in the background while the run materialises its tasks:
    one per task that will run at once (``workers``, at most the shell tasks with worktree isolation)."""
    pool = WorktreePool(wt)
    if started:
        shell = sum(1 for t in plan.tasks if (t.isolation or plan.isolation) == "worktree" and t.run is not None)
        pool.warm(min(workers, shell))
    return pool


def slug_of(task: Task) -> str:
    return task.plan_task or task.name or str(task.id)


@dataclasses.dataclass
class _Attempt:
    task: Task
    epoch: int
    done: DoneCallback
    inner: Executor
    folder: str = "."  # the task's folder inside its worktree (its ``outputs`` globs are relative to it)
    lease: Lease | None = None  # a shell task's worktree from the pool (agent tasks get their own)
    commit: str | None = None  # what the pool committed of its work (None: it changed nothing)


class Isolation:
    """The plan's worktrees plus the prepare and merge threads (see the module docstring).

    Made once the store and the integration branch agree (``reconcile``), so the
    merges found now are what earlier attempts left. ``rerun`` is the command that
    runs the plan again (for messages); ``emit`` gets the merge-phase events.
    """

    def __init__(self, wt: Worktrees, *, rerun: str = "team run PLAN", emit: Emit | None = None,
                 pool: WorktreePool | None = None):
        self.wt = wt
        self.rerun = rerun
        self.emit: Emit = emit or (lambda ev: None)
        self.settle: Callable[[int, int], None] = lambda task_id, epoch: None  # the scheduler's ``settle``
        self.merged_before = wt.merges()
        self.pool = pool or WorktreePool(wt)
        self._cancelled: set[int] = set()
        self.started_at = wt.git.rev(wt.integration)  # merges after it are this run's (warn_junk)
        self._lock = threading.Lock()
        self._waiting = 0  # attempts queued for their merge or merging (the merge thread's line)
        self._busy: set[threading.Thread] = set()  # attempts' threads preparing or committing
        self._idle = threading.Condition(self._lock)
        self._merge: queue.SimpleQueue[tuple[_Attempt, Outcome, bool] | None] = queue.SimpleQueue()
        self._merger = threading.Thread(target=self._merges, name="team-wt-merge", daemon=True)
        self._merger.start()

    def wrap(self, inner: Executor) -> Executor:
        return _Isolated(inner, self)

    # ---------------------------------------------------------------- threads
    def _merges(self) -> None:
        while True:
            item = self._merge.get()
            if item is None:
                return
            self._guarded(self._finish, *item)

    def _spawn(self, fn: Callable[..., None], a: _Attempt, *args: object) -> None:
        """Run ``fn(a, *args)`` on a thread of its own (guarded like the merge thread's work)."""
        def body() -> None:
            try:
                self._guarded(fn, a, *args)
            finally:
                with self._lock:
                    self._busy.discard(thread)
                    self._idle.notify_all()

        thread = threading.Thread(target=body, name=f"team-wt-{slug_of(a.task)}", daemon=True)
        with self._lock:
            self._busy.add(thread)
        thread.start()

    def _guarded(self, fn: Callable[..., None], attempt: _Attempt, *args: object) -> None:
        try:
            fn(attempt, *args)
        except TeamError as e:  # git failed, a bad cwd, ...: that task fails, the run goes on
            attempt.done(Outcome(attempt.task.id, attempt.epoch, "failed", error=f"{type(e).__name__}: {e}",
                                 fields=self._kept(attempt.task)))
        except Exception as e:  # our bug: log it loudly, fail the task, never hang the scheduler
            log.exception("worktree isolation crashed on task #%s", attempt.task.id)
            attempt.done(Outcome(attempt.task.id, attempt.epoch, "failed",
                                 error=f"internal error in worktree isolation: {type(e).__name__}: {e}"))

    def _kept(self, task: Task) -> dict[str, str]:
        slug = slug_of(task)
        if not self.wt.has_branch(slug):
            return {}
        return {"branch": self.wt.branch(slug), "worktree": stored(self.wt.path(slug), self.wt.root)}

    def _prepare(self, a: _Attempt) -> None:
        task, slug = a.task, slug_of(a.task)
        with self._lock:
            if task.id in self._cancelled:
                self._cancelled.discard(task.id)
                a.done(Outcome(task.id, a.epoch, "killed", error="cancelled before it started"))
                return
        merged = self.merged_before.get(slug)
        if merged is not None:
            self.wt.drop_merged(slug)  # the lead that merged it died before deleting the branch
            a.done(Outcome(task.id, a.epoch, "completed",
                           fields={"branch": self.wt.integration, "worktree": None, "merge_commit": merged},
                           result=f"already merged into {self.wt.integration} by an earlier attempt"))
            return
        kept = self.wt.kept(slug)
        if kept is not None and kept.commits:
            if kept.dirty:
                raise WorkFailed(
                    f"task {slug}: its branch {kept.branch} holds {plural(kept.unmerged, 'commit')} not on "
                    f"{self.wt.integration} and its worktree {self.wt.path(slug)} has uncommitted changes; "
                    f"commit them there (`git add -A && git commit`) and run again to merge them, or drop the "
                    f"branch and run the task afresh: {self.rerun} --redo {slug}")
            self._queue_merge(a, Outcome(task.id, a.epoch, "completed",
                                         result=f"merged the work an earlier attempt committed on {kept.branch}"),
                              resumed=True)
            return
        cwd = Path(task.cwd or self.wt.root).resolve()
        try:
            rel = cwd.relative_to(self.wt.toplevel)
        except ValueError:
            raise WorkFailed(f"task {slug}: cwd {cwd} is outside the git repository {self.wt.toplevel}; "
                              f"isolation: worktree can only run tasks inside it") from None
        if a.inner.kind == "shell" and task.outputs is None:  # a worktree of the pool, reset (a branch
            a.lease = self.pool.prepare(slug, kept)               # without commits of its own goes)
        else:  # an agent, or a task keeping only its outputs: on its branch, in a worktree of its own
            self.wt.prepare(slug, fresh=kept is not None)  # (a branch without commits of its own: re-forked)
        a.folder = rel.as_posix()
        path = self.wt.path(slug)
        env = {**task.env, "TEAM_WORKTREE": str(path), "TEAM_BRANCH": self.wt.branch(slug)}
        copy = task.model_copy(update={"cwd": str(path / rel), "worktree": str(path),
                                       "branch": self.wt.branch(slug), "env": env})
        a.inner.start(copy, a.epoch, lambda out: self._spawn(self._commit, a, out))

    def _commit(self, a: _Attempt, out: Outcome) -> None:
        """A finished attempt's work committed on its branch (off the executor's thread), then its turn to merge."""
        if out.ok:
            message = f"{a.task.subject}\n\nteam task #{a.task.id}, attempt {a.task.attempts}"
            if a.lease is not None:
                a.commit = self.pool.commit(a.lease, message)
            elif a.task.outputs is None:
                self.wt.commit(slug_of(a.task), message)
            else:  # only the changes to its outputs are its result
                keep.commit_outputs(self.wt, slug_of(a.task), message, a.task.outputs, a.folder)
        self._queue_merge(a, out, resumed=False)

    def _queue_merge(self, a: _Attempt, out: Outcome, resumed: bool) -> None:
        """Hand the attempt to the merge thread; a finished one waits there for its turn (and says so)."""
        if out.ok:
            with self._lock:
                ahead = self._waiting
                self._waiting += 1
            self.emit({"event": "merge_queued", "task": a.task.id, "name": slug_of(a.task), "ahead": ahead})
            self.settle(a.task.id, a.epoch)  # its turn to merge is no work of a worker: another task may start
        self._merge.put((a, out, resumed))

    def _finish(self, a: _Attempt, out: Outcome, resumed: bool) -> None:
        slug = slug_of(a.task)
        if not out.ok:
            if a.lease is not None:  # its worktree leaves the pool, on its branch, with what it left
                self.pool.keep(a.lease)
            left = self.wt.failed_attempt(slug)  # before the failure is recorded: its commits are no result
            if left is not None and left.failed:
                out = dataclasses.replace(out, error=(
                    f"{out.describe()}\nthe {plural(left.failed, 'commit')} it made on {left.branch} "
                    f"({left.tip[:10]}) {'is' if left.failed == 1 else 'are'} not merged: the next attempt starts "
                    f"afresh (`git branch {slug}-failed {left.tip[:10]}` keeps a copy)"))
            a.done(dataclasses.replace(out, fields={**(out.fields or {}), **self._kept(a.task)}))
            return
        self.emit({"event": "merging", "task": a.task.id, "name": slug})
        try:
            res = self.wt.merge(slug) if resumed or a.lease is None else self.pool.merge(a.lease, a.commit)
        except MergeConflict as e:
            error = (f"{e}\nor drop the branch and run the task again on the current result: "
                     f"{self.rerun} --redo {slug}")
            a.done(dataclasses.replace(out, status="failed", error=error,
                                       fields={**(out.fields or {}), **self._kept(a.task)}))
            return
        finally:
            with self._lock:
                self._waiting -= 1
        fields = {**(out.fields or {}), "branch": self.wt.integration, "worktree": None}
        if res.commit:
            fields["merge_commit"] = res.commit
        a.done(dataclasses.replace(out, fields=fields))

    def warn_junk(self, id_of: Callable[[str], int | None]) -> list[dict[str, Any]]:
        """After the run (the merge thread stopped): the tasks whose merges in this run added files that
        look like build output (git/keep.py ``JUNK``), each said in a ``junk`` event, as warnings for the
        summary: merged, they would reach the user's branch with ``team land``. One git call for the
        whole run, none on the merge path. ``id_of``: a task slug's store id."""
        warnings = []
        for slug, paths in keep.added_by_merges(self.wt, self.started_at).items():
            found = keep.junk(paths)
            if found.paths:
                warning = {"task": id_of(slug), "name": slug, "count": len(found.paths),
                           "examples": found.paths[:3], "patterns": found.patterns}
                warnings.append(warning)
                self.emit({"event": "junk", **warning})
        return warnings

    # ---------------------------------------------------------------- executor side
    def submit(self, a: _Attempt) -> None:
        with self._lock:
            self._cancelled.discard(a.task.id)  # a cancel of an earlier attempt does not carry over
        self._spawn(self._prepare, a)

    def cancel(self, task_id: int) -> None:
        with self._lock:
            self._cancelled.add(task_id)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the threads after the work queued so far (a merge is never cut short)."""
        with self._lock:
            self._idle.wait_for(lambda: not self._busy, timeout)
        self._merge.put(None)
        self._merger.join(timeout)

    def finish(self) -> Summary:
        """Drop the free worktrees and the integration worktree (the branch stays); say where the result is."""
        self.pool.drain()
        self.wt.release()
        return self.wt.summary()


class _Isolated:
    """The wrapper executor: isolated tasks go through ``Isolation``, others straight through."""

    def __init__(self, inner: Executor, iso: Isolation):
        self.inner, self.iso = inner, iso
        self.kind = inner.kind
        self.inline_start = inner.inline_start  # start() only enqueues either way

    def reap_orphans(self) -> list[JobRecord]:
        return self.inner.reap_orphans()

    def start_now(self, task: Task, epoch: int, done: DoneCallback) -> None:
        self.start(task, epoch, done)

    def start(self, task: Task, epoch: int, done: DoneCallback) -> None:
        if task.isolation != "worktree":
            self.inner.start(task, epoch, done)
            return
        self.iso.submit(_Attempt(task, epoch, done, self.inner))

    def cancel(self, task_id: int) -> None:
        self.iso.cancel(task_id)
        self.inner.cancel(task_id)

    def close(self) -> None:
        self.inner.close()
