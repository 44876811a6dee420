"""Changed ``needs:`` of a plan that ran: which completed work stays valid, and what runs again.

An edge ``T needs X`` promises that T runs on X's work: in a shared folder
(no isolation), X finished before T started; with ``isolation: worktree``,
T's branch forked from an integration tip holding X's merge. Completed work
stays valid under a changed plan exactly when the way it was made is a run
the changed plan allows, that is when every need T has *now* was kept:

* **a need taken away** never invalidates T: T ran after X, and a plan
  without the edge allows that order too. Nothing runs again.
* **a need added** (``T needs X`` is new), with T completed:

  - X is not completed (pending, failed, or a task new to the plan): T ran
    without X's work. T runs again, after X.
  - no isolation: X finished before T's (last) attempt started
    (``X.finished_at <= T.started_at``: T saw X's files) keeps T; else T
    ran beside or before X, and runs again.
  - ``isolation: worktree``: X's merge is in the commit T's branch forked
    from (the merge base of T's merge commit's parents) keeps T; X completed
    without a merge (it changed nothing) keeps T too; T without a merge (it
    changed nothing: a check) is judged by time, as above. Else T's work was
    made on a base without X's and runs again.

* a task not completed just waits for its new needs; but one whose kept
  branch holds commits (a conflict kept, a resolution by hand) made on a
  base without an added need's work is refused: merging those commits
  would claim the new order was kept. ``--redo T`` drops them.

A task that runs again takes everything that needs it (in the changed plan)
along: ``reconcile`` takes their merges out of the integration branch and
runs them, as for ``--redo``. A redo ``reconcile`` would refuse (it would drop
uncommitted work kept in a worktree of one of them, or bring a merge taken
out back through another task's kept branch) is refused before anything is
written (``again`` names the tasks; materialise.py asks the caller's
``refuse``), so "nothing was changed" holds and putting the needs back undoes
the change. Order, for crash safety (materialise.py's ``prepare``): the tasks
to run again are flagged first (``redo``, one store
write), then the edges change; a kill in between finds the flags, and the
edges still to change, on the next run, which decides the same (the
decision reads what happened, never the edges).

``Witness`` is the seam: ``ByTime`` (no isolation) and ``ByHistory``
(worktree isolation: git).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..core.errors import UserError
from ..core.models import Status, Task
from ..core.text import plural
from ..git.worktrees import Worktrees
from ..plan.model import PlanTask
from ..tasks.graph import reach


def slug(task: Task) -> str:
    return task.plan_task or task.name or str(task.id)


class Witness(Protocol):
    def saw(self, task: Task, need: Task) -> str | None:
        """Why completed ``task``'s work holds completed ``need``'s (kept), or None (it does not)."""
        ...

    def kept_without(self, task: Task, needs: list[Task]) -> str | None:
        """For a task not completed: what of its kept work was made without ``needs``' work, or None."""
        ...


def _by_time(task: Task, need: Task) -> str | None:
    if need.finished_at is not None and task.started_at is not None and need.finished_at <= task.started_at:
        return f"{slug(need)} had finished before it started"
    return None


class ByTime:
    """No isolation: a task saw what had finished before it started."""

    def saw(self, task: Task, need: Task) -> str | None:
        return _by_time(task, need)

    def kept_without(self, task: Task, needs: list[Task]) -> str | None:
        return None  # nothing is kept between attempts in a shared folder


class ByHistory:
    """Worktree isolation: a task saw the merges in the commit its branch forked from."""

    def __init__(self, wt: Worktrees):
        self.wt = wt
        self._merges: dict[str, str] | None = None

    def merges(self) -> dict[str, str]:
        if self._merges is None:
            self._merges = self.wt.merges()
        return self._merges

    def saw(self, task: Task, need: Task) -> str | None:
        if task.isolation != "worktree" or need.isolation != "worktree":
            return _by_time(task, need)
        mx, mt = self.merges().get(slug(need)), self.merges().get(slug(task))
        if mx is None:
            return f"{slug(need)} changed nothing"
        if mt is None:
            return _by_time(task, need)
        fork = self.wt.git("merge-base", f"{mt}^1", f"{mt}^2", check=False).stdout.strip()
        if fork and self.wt.git.is_ancestor(mx, fork):
            return f"{slug(need)}'s merge is in the base it ran on"
        return None

    def kept_without(self, task: Task, needs: list[Task]) -> str | None:
        if task.isolation != "worktree" or task.redo:
            return None
        kept = self.wt.kept(slug(task))
        if kept is None or not kept.commits:
            return None
        fork = self.wt.fork(slug(task))

        def without(need: Task) -> bool:
            if need.status != Status.completed:
                return True
            merge = self.merges().get(slug(need))
            return merge is not None and not (fork and self.wt.git.is_ancestor(merge, fork))

        missing = [n for n in needs if without(n)]
        if not missing:
            return None
        return (f"its branch {kept.branch} keeps {plural(kept.commits, 'commit')} made on a base without the work of "
                f"{', '.join(slug(n) for n in missing)}, which its changed `needs` ask for")


@dataclass
class Change:
    """One task whose ``needs`` in the plan differ from its ``blockedBy``: the needs to add (plan ids: a
    task new to the plan has no store id yet) and the store ids to remove (with their plan ids)."""

    task: Task
    add: list[str]
    remove: dict[int, str]


@dataclass
class Decision:
    """What ``decide`` found: the completed tasks to run again (flag them first), and what to say."""

    redo: dict[int, str] = field(default_factory=dict)  # task id -> why its work is no longer valid
    notes: list[str] = field(default_factory=list)


def decide(changes: list[Change], tasks: dict[str, Task], witness: Witness, rerun: str) -> Decision:
    """Which completed tasks of ``changes`` run again (module docstring). ``tasks``: the plan's tasks that
    exist, by plan id. Raises ``UserError`` (nothing written) for kept work made without an added need."""
    out = Decision()
    for c in changes:
        t = c.task
        diff = ", ".join([f"+{k}" for k in c.add] + [f"-{k}" for k in c.remove.values()])
        head = f"#{t.id} {slug(t)}: its needs changed ({diff})"
        if t.status != Status.completed:
            needs = [tasks.get(k) or Task(id=t.id, subject=k, plan_task=k) for k in c.add]  # (new: not completed)
            problem = witness.kept_without(t, needs)
            if problem is not None:
                raise UserError(f"{head}, but {problem}: drop them and run it again with `{rerun} --redo "
                                f"{slug(t)}`, or put its needs back, run the plan to merge them, then change "
                                f"them; nothing was changed")
            out.notes.append(f"{head}; it has not completed: " + ("it runs once they have" if c.add
                                                                      else "it no longer waits for them"))
            continue
        if t.landed:
            out.notes.append(f"{head}; its work was landed already: it stays done")
            continue
        why_not = None
        kept: list[str] = []
        for k in c.add:
            need = tasks.get(k)
            if need is None or need.status != Status.completed:
                why_not = f"{k} has not completed" + (" (it is new to the plan)" if need is None else "")
                break
            saw = witness.saw(t, need)
            if saw is None:
                why_not = f"it ran without {slug(need)}'s work"
                break
            kept.append(saw)
        if why_not is not None:
            out.redo[t.id] = f"{head} and {why_not}"
        else:
            because = "; ".join(kept) if kept else "taking a need away never invalidates work done after it"
            out.notes.append(f"{head}; its completed work stays valid ({because}): not running it again")
    return out


def again(decision: Decision, plan: Iterable[PlanTask], tasks: Mapping[str, Task]) -> list[int]:
    """The ids of the tasks that exist (``tasks``, by plan id) and run again after ``decision``: those it
    flags, those flagged already, and what needs one of them in the changed ``plan``, by plan id (a task
    new to the plan has no id yet, but may lead to one that exists)."""
    kids: dict[str, list[str]] = {}
    for p in plan:
        for n in p.needs:
            kids.setdefault(n, []).append(p.id)
    seen: set[str] = set()
    stack = [k for k, t in tasks.items() if t.id in decision.redo or t.redo]
    while stack:
        k = stack.pop()
        if k not in seen:
            seen.add(k)
            stack.extend(kids.get(k, []))
    return sorted(tasks[k].id for k in seen if k in tasks)


def downstream_in_plan(roots: Iterable[int], needs: dict[int, list[int]]) -> list[int]:
    """``roots`` and every task that needs one of them in the changed plan (``needs``: id -> ids), sorted."""
    kids: dict[int, list[int]] = {}
    for tid, ns in needs.items():
        for n in ns:
            kids.setdefault(n, []).append(tid)
    return reach(kids, roots)
