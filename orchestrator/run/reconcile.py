"""Make the task store and the integration branch agree before a run, and check after it.

``reconcile`` runs under the lead lock, after ``materialise`` and before the
scheduler. For each task of the plan it compares the store with the
integration branch (``M``: the task's merge found by its trailer; ``R``: the
``merge_commit`` the store recorded when the task completed)::

    completed,  M present              done (R follows M: a rebuild replays merges)
    completed,  R set, M absent        LOST: its merge is gone (the branch was reset or
                                       rebuilt): run it again, and everything downstream
    not done,   M present, M == R      REOPENED after it was merged (`team task update
                                       --status pending`): take its merge out, run it
                                       again, and everything downstream
    not done,   M present, M != R      merged by an attempt whose completion was never
                                       recorded (the lead died): the run completes it
                                       without running it again (isolation.py)
    redo set (--redo, task retry)      take its merge out, drop its kept branch, run it
                                       again, and everything downstream

A task whose work was landed (``team land``) is done for good and skipped.
Without worktree isolation only the last rule applies (the tasks are reset).

Order, so that a kill at any instant leaves a state the next run reads the
same way (the rules above find the same tasks again):

1. the store: each task to redo, and its dependents, pending with ``redo`` set;
2. git: integration rebuilt without their merges (``history.rebuild_without``:
   one compare-and-set of the branch), their kept branches dropped;
3. the store: ``redo`` and ``merge_commit`` cleared, replayed merges recorded.

The check after a run (a completed task whose recorded merge is not on
integration: the result holds less than the store says) is standing.py's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.errors import UserError
from ..core.models import Status, Task
from ..core.text import plural
from ..git.history import History
from ..git.worktrees import Worktrees
from ..tasks.graph import downstream
from ..tasks.store import TaskStore


def slug(task: Task) -> str:
    return task.plan_task or task.name or str(task.id)


@dataclass
class Reconciled:
    """What ``reconcile`` found and did (``notes`` say it to the user)."""

    redone: list[int] = field(default_factory=list)  # tasks reset to run again
    notes: list[str] = field(default_factory=list)


def _label(t: Task) -> str:
    return f"#{t.id} {slug(t)}"


def _names(tasks: Iterable[Task]) -> str:
    return ", ".join(_label(t) for t in tasks)


def reconcile(store: TaskStore, tasks: list[Task], wt: Worktrees | None, *, redo: Iterable[int] = (),
              rerun: str = "team run PLAN", owner: str = "lead") -> Reconciled:
    """Bring ``tasks`` (one plan's, as materialised) and the integration branch into agreement;
    ``redo``: task ids the user asked to run again (see the module docstring)."""
    by_id = {t.id: t for t in tasks}
    out = Reconciled()
    isolated = [t for t in tasks if t.isolation == "worktree" and not t.landed]
    merges = wt.merges() if wt is not None and isolated else {}
    why: dict[int, str] = {}
    for t in isolated:
        m = merges.get(slug(t))
        if t.status == Status.completed and t.merge_commit and m is None and wt is not None:
            why[t.id] = (f"{_label(t)} was completed but its merge {t.merge_commit[:10]} is no longer on "
                         f"{wt.integration} (the branch was reset or rebuilt)")
        elif t.status != Status.completed and m is not None and m == t.merge_commit:
            why[t.id] = f"{_label(t)} was reopened after it was merged ({m[:10]})"
    announced = set(redo)  # request_redo said so already
    for tid in sorted({t.id for t in tasks if t.redo} - announced):
        why[tid] = f"{_label(by_id[tid])} is to run again (`team task retry`, or a redo that was cut short)"
    for tid in announced:
        why[tid] = ""
    landed = [by_id[i] for i in why if by_id[i].landed]
    if landed:
        raise UserError(f"{_names(landed)} of plan {landed[0].plan} was landed into your branch by `team land` "
                        f"(commit {(landed[0].landed or '')[:10]}) and cannot be redone: revert that landing "
                        f"yourself (`git revert`), or start over with `{rerun} --fresh`")
    if why:
        todo = downstream(tasks, why)
        refuse_unsafe(wt, tasks, todo, rerun)
        for tid, text in sorted(why.items()):
            extra = [by_id[i] for i in downstream(tasks, [tid]) if i != tid and i not in why]
            if text:
                out.notes.append(text + ": running it again"
                                 + (f", and what needs it: {_names(extra)}" if extra else ""))
        # 1. the store: pending with the redo flag (from here on a kill is found again by the flag)
        store.reopen(todo, actor=owner, reason="run again: " + ", ".join(slug(by_id[i]) for i in todo), redo=True)
        if wt is not None:
            todo = _take_out(store, tasks, wt, todo, out, owner)
        # 3. the store: flags cleared
        for tid in todo:
            store.update(tid, actor=owner, redo=False, merge_commit=None, branch=None, worktree=None)
        out.redone = todo
    if wt is not None and isolated:
        now = wt.merges()
        for t in store.all():
            m = now.get(slug(t))
            if (t.id in by_id and t.status == Status.completed and t.merge_commit and m is not None
                    and m != t.merge_commit):
                store.update(t.id, actor=owner, merge_commit=m)  # a rebuild replayed its merge
    return out


def _take_out(store: TaskStore, tasks: list[Task], wt: Worktrees, todo: list[int], out: Reconciled,
              owner: str) -> list[int]:
    """Step 2: the merges of ``todo`` out of integration, their kept branches dropped; the tasks
    to run again (more when a replay conflicted)."""
    by_id = {t.id: t for t in tasks}
    names = {slug(t): t.id for t in tasks}
    drop = {slug(by_id[i]) for i in todo if by_id[i].isolation == "worktree"}
    rebuilt = History(wt).rebuild_without(
        drop, lambda s: [slug(by_id[i]) for i in downstream(tasks, [names[s]])] if s in names else [])
    if rebuilt.changed:
        again = list(rebuilt.replayed)
        out.notes.append(f"rebuilt {wt.integration} without the merges of {', '.join(rebuilt.dropped)} "
                         f"(it was at {(rebuilt.old_tip or '')[:10]}, now {(rebuilt.new_tip or '')[:10]})"
                         + (f"; replayed {', '.join(again)} on top" if again else ""))
    if rebuilt.conflicted:
        more = [names[s] for s in rebuilt.conflicted if s in names]
        extra = [i for i in downstream(tasks, more) if i not in todo]
        out.notes.append(f"{_names(by_id[i] for i in more)} did not apply without them: running again too"
                         + (f", with {_names(by_id[i] for i in extra if i not in more)}" if extra else ""))
        store.reopen(extra, actor=owner, reason="its merge did not apply without the tasks taken out", redo=True)
        todo = sorted(set(todo) | set(extra))
    for tid in todo:
        t = by_id[tid]
        if t.isolation != "worktree":
            continue
        gone = wt.discard(slug(t))
        if gone is not None and (gone.commits or gone.failed):
            what = (f"{plural(gone.unmerged, 'commit')} not merged" if gone.commits
                    else f"{plural(gone.failed, 'commit')} of a failed attempt")
            out.notes.append(f"dropped the kept branch {gone.branch} of {_label(t)} at {gone.tip[:10]} "
                             f"({what}; `git branch {gone.branch} {gone.tip}` brings it back)")
    return todo


def refuse_unsafe(wt: Worktrees | None, tasks: list[Task], todo: list[int], rerun: str) -> None:
    """Refuse a redo of ``todo`` (ids of ``tasks``), before anything changed, when it would lose kept work or
    bring a dropped merge back. Also called by materialise before a changed ``needs:`` flags anything."""
    if wt is None:
        return
    by_id = {t.id: t for t in tasks}
    _refuse_dirty_kept(wt, [by_id[i] for i in todo if by_id[i].isolation == "worktree"], rerun)
    merges = wt.merges()
    dropped = {slug(by_id[i]): merges[slug(by_id[i])] for i in todo if slug(by_id[i]) in merges}
    for t in tasks:
        if t.id in todo or t.isolation != "worktree":
            continue
        kept = wt.kept(slug(t))
        if kept is None or not kept.commits:
            continue
        inside = [name for name, sha in dropped.items() if wt.git.is_ancestor(sha, kept.branch)]
        if inside:
            raise UserError(
                f"{_label(t)} keeps {plural(kept.unmerged, 'commit')} on {kept.branch}, made on top of the merge of "
                f"{', '.join(inside)} that this redo takes out: merging that branch later would bring it back. "
                f"Merge it first (resolve it and `{rerun}`), or redo it too (`--redo {slug(t)}`); nothing was "
                f"changed")


def _refuse_dirty_kept(wt: Worktrees | None, tasks: list[Task], rerun: str) -> None:
    if wt is None:
        return
    for t in tasks:
        kept = wt.kept(slug(t))
        if kept is not None and kept.commits and kept.dirty:
            raise UserError(
                f"{_label(t)} is to run again, but its kept branch {kept.branch} has uncommitted changes in "
                f"{wt.path(slug(t))}: commit them there (`git add -A && git commit`) or throw them away "
                f"(`git checkout -- . && git clean -fd`), then `{rerun}` again; nothing was changed")


@dataclass
class Redo:
    """What ``request_redo`` flagged (pass ``ids`` to ``reconcile``) and what to tell the user."""

    ids: list[int]
    notes: list[str]


def request_redo(store: TaskStore, tasks: list[Task], wt: Worktrees | None, redo: Iterable[str], *,
                 rerun: str = "team run PLAN", owner: str = "lead") -> Redo:
    """``--redo``: flag these tasks (plan ids) and their dependents to run again, before anything
    else is written, so a kill later cannot lose the request; ``reconcile`` does the rest."""
    by_slug = {slug(t): t for t in tasks}
    asked = [by_slug[s] for s in redo if s in by_slug]
    notes = [f"--redo {s}: the task has not run yet; it runs as planned" for s in redo if s not in by_slug]
    if not asked:
        return Redo([], notes)
    landed = [t for t in asked if t.landed]
    if landed:
        raise UserError(f"{_names(landed)} of plan {landed[0].plan} was landed into your branch by `team land` "
                        f"(commit {(landed[0].landed or '')[:10]}) and cannot be redone: revert that landing "
                        f"yourself (`git revert`), or start over with `{rerun} --fresh`")
    todo = downstream(tasks, [t.id for t in asked])
    by_id = {t.id: t for t in tasks}
    refuse_unsafe(wt, tasks, todo, rerun)
    store.reopen(todo, actor=owner, reason="--redo " + ", ".join(slug(t) for t in asked), redo=True)
    extra = [by_id[i] for i in todo if i not in {t.id for t in asked}]
    notes.append(f"--redo: running {_names(asked)} again" + (f", and what needs it: {_names(extra)}" if extra else "")
                 + (f"; their merges come out of {wt.integration} first" if wt is not None else ""))
    return Redo(todo, notes)


WAS = {Status.failed: "failed", Status.in_progress: "was running when the last lead died",
       Status.cancelled: "was cancelled", Status.pending: "is to run"}


def kept_work_notes(tasks: list[Task], wt: Worktrees, rerun: str) -> dict[int, str]:
    """Task id -> what this run does with the work kept on its branch (merged without running the
    task again, or the task fails for uncommitted work there), for the tasks of ``tasks`` (as the
    store has them before ``materialise``: the note says what they were) that are to run. One note a
    task: the caller keeps ``materialise`` quiet about them. Counted is the task's own work: the
    commits integration lacks, not the integration commits a resolution merged into the branch.
    The commits a failed attempt made itself are not merged: the task runs again, and the note
    says how to keep a copy of them."""
    notes = {}
    branches = set(wt.task_branches())  # one listing of the plan's branches, not a lookup per task
    for t in tasks:
        if (t.status == Status.completed or t.isolation != "worktree" or t.redo or t.landed
                or slug(t) not in branches):
            continue
        kept = wt.kept(slug(t))
        if kept is None or not (kept.commits or kept.failed):
            continue
        was = f"{_label(t)} {WAS.get(t.status, 'is to run')}"
        if not kept.commits:
            notes[t.id] = (f"{was}: running it again; the {plural(kept.failed, 'commit')} its failed attempt left on "
                           f"{kept.branch} ({kept.tip[:10]}) {'is' if kept.failed == 1 else 'are'} not merged "
                           f"(`git branch {slug(t)}-failed {kept.tip[:10]}` keeps a copy)")
            continue
        if kept.dirty:
            notes[t.id] = (f"{was}: its branch {kept.branch} holds {plural(kept.unmerged, 'commit')} not on "
                           f"{wt.integration} and uncommitted work in {wt.path(slug(t))}: the task fails until you "
                           f"commit it there, or drop it with `{rerun} --redo {slug(t)}`")
            continue
        fork = wt.fork(slug(t))
        merges = int(wt.git("rev-list", "--count", "--merges", kept.branch, f"^{wt.integration}",
                            *([f"^{fork}"] if fork else [])).stdout)
        resolved = f" (your merge of {wt.integration} into it among them)" if merges else ""
        up_to_date = wt.git.is_ancestor(wt.integration, kept.branch)
        notes[t.id] = (f"{was}: merging the {plural(kept.unmerged, 'commit')} of its own on {kept.branch}{resolved} "
                       f"without running the task again"
                       + ("" if up_to_date else f"; if the merge conflicts, the task fails again (resolve it by hand, or "
                                                f"drop them and run the task afresh with `{rerun} --redo {slug(t)}`)"))
    return notes
