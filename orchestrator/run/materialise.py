"""A plan's tasks become store tasks, and the run starts before the last one is written.

A store task belongs to the plan through its ``plan`` and ``plan_task``
fields and is named ``<plan>.<id>`` (so ``team task show demo.build``
works). The match is made once per run from one directory scan.

``prepare`` (under the lead lock, before the scheduler) brings the tasks that
exist in line with the plan, and says what is left to create:

* ``completed`` tasks stay done (even if their command changed: use
  ``--redo`` or ``--fresh`` to redo them).
* ``failed`` and ``cancelled`` tasks go back to ``pending`` with a fresh
  retry budget: a new run retries them.
* ``in_progress`` tasks were being run by a lead that is now dead (we hold
  its lock): they are released to ``pending`` at once; the attempt stays
  counted and the event log says why. So are claims the event log has but
  the task file never got (the lead starts a job once its claim is logged,
  before the file is written: ``TaskStore.commit``).
* A pending task whose command/env/timeout changed in the plan is updated.
  Changed ``needs`` of an existing task are decided by rewire.py before
  anything is written: a completed task whose work the change invalidates is
  flagged to run again (``redo``; ``reconcile`` does the rest, with what needs
  it), then the edges change (taken away, tasks new to the plan created when
  an edge goes to one, added).
* Tasks of this plan no longer in the file are cancelled ("removed from the
  plan").
* The plan's tasks that do not exist yet are a ``Creation``.

Creating 10,000 task files takes seconds (each file create costs 0.3–0.8 ms
in the kernel), so the run does not wait for it. A ``Creation``:

1. takes the ids of every task it will create up front (``TaskStore.reserve``:
   the id counter moved past them, fsynced), so the ``blockedBy`` of every
   task is known before any file is written;
2. writes the *creation record* ``.team/materialising/<plan>.json`` (atomic,
   fsynced): the plan, a fingerprint of the plan file, how many tasks the
   plan has, and the id of each task to create;
3. creates the tasks in dependency order (Kahn's, the plan's order among the
   ready ones), a chunk at a time (``CHUNKS``: small first, then doubling):
   each chunk is one locked, durable store batch at its reserved ids (files,
   fsync, the name index and the ``created`` event lines), never over a file
   that exists (``TaskStore.create_reserved``);
4. removes the record once the last chunk is durable.

The runner creates the first chunk itself, then hands the scheduler the
tasks that exist and the ``Creation`` as its ``Feed``: a thread creates the
other chunks and gives each to the scheduler once it is durable. A task can
be claimed only once the scheduler has it, so only once it is durable; it
becomes ready only once its dependencies are completed, and they were
created before it (dependency order). Claims are as durable as ever before a
process starts (``TaskStore.commit``).

Crash safety. A lead killed during creation leaves the record, every chunk
before the one being written, and any subset of that chunk (its files are
renamed in parallel), each file whole; tasks of earlier chunks may have run
or be running. The next ``team run`` reads the record: tasks that exist are
existing tasks like any other (completed stay done, in-flight ones are
released), the missing ones are created at the ids the record gave them, so
the ``blockedBy`` of the tasks that exist point at the right tasks and each
plan task exists once. A record whose task is at another id, or whose id is
held by a task of something else, is refused (``--fresh`` starts over). If
the plan file changed since the record was written and nothing of the plan
was ever claimed, the tasks that exist are deleted and the plan is created
again (as before early starts); if something ran, the changed plan is taken
like any changed plan (a changed ``needs`` of an existing task: rewire.py).
``--fresh`` deletes the record with the plan's tasks; ``team run --dry-run``
says that a creation was interrupted; ``team task list`` shows the tasks
that exist.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import threads
from ..core.errors import CorruptFile, PlanError, UserError
from ..core.fsutil import atomic_write, fsync_dir
from ..core.models import Status, Task
from ..core.paths import creation_record, stored
from ..core.text import plural
from ..core.threads import Crash
from ..plan.analysis import analyse
from ..plan.model import LoadedPlan, PlanTask
from ..tasks.store import TaskStore
from . import rewire
from .keptwork import REMOVED

CHUNKS = (32, 64, 128, 256, 512, 1024)
"""Tasks per chunk, in turn; the last size repeats. The first is small: the run starts once it is durable."""


@dataclass
class Materialised:
    tasks: list[Task]
    """The plan's tasks that exist, in plan order (a ``Creation`` adds the others)."""
    priority: dict[int, float]
    """Task id (of every plan task, created or not) -> its remaining path (the scheduler's priority)."""
    retry_delay: dict[int, float]
    """Task id -> its first backoff after a failure."""
    creation: Creation | None = None
    """The plan's tasks still to create; None when they all exist."""
    redo: list[int] = field(default_factory=list)
    """Completed tasks a change of ``needs`` flagged to run again (said already; ``reconcile`` does it)."""


def _spec(lp: LoadedPlan, t: PlanTask, root: Path) -> dict[str, Any]:
    """The store fields of plan task ``t``; its ``cwd`` relative to the state ``root`` (core/paths.py)."""
    d = lp.plan.defaults
    first = (t.description or t.run or t.prompt or "").strip().splitlines()
    subject = f"{t.id}: {first[0][:80].rstrip()}" if first else t.id
    return dict(
        subject=subject, description=t.description, name=lp.store_name(t), kind=t.kind,
        command=t.run, prompt=t.prompt, plan=lp.plan.name, plan_task=t.id, role=t.role,
        assignee=t.assignee, estimate=t.estimate,
        timeout=t.timeout if t.timeout is not None else d.timeout,
        retries=t.retries if t.retries is not None else d.retries,
        env={**d.env, **t.env}, cwd=stored(lp.task_cwd(t), root),
        isolation=t.isolation or (lp.plan.isolation if lp.plan.isolation != "none" else None),
        outputs=_pick(t.outputs, d.outputs), num_cpus=_pick(t.num_cpus, d.num_cpus),
        resources=_pick(t.resources, d.resources) or {}, lost_retries=_pick(t.lost_retries, d.lost_retries, 3),
    )


def _pick(*values: Any) -> Any:
    """The first value that is set (a task's own, then the plan's defaults, then the built-in)."""
    return next((v for v in values if v is not None), None)


_MUTABLE = ("subject", "description", "command", "prompt", "role", "assignee", "estimate", "timeout",
            "retries", "env", "cwd", "isolation", "outputs", "num_cpus", "resources", "lost_retries")


def tasks_of(store: TaskStore, plan: str) -> list[Task]:
    """The store's tasks of ``plan``."""
    return [t for t in store.all() if t.plan == plan] if store.exists() else []


# ---------------------------------------------------------------------------- the creation record


@dataclass
class Record:
    """The creation record (see the module docstring)."""

    plan: str
    fingerprint: str
    count: int  # tasks in the plan
    ids: dict[str, int] = field(default_factory=dict)  # plan task -> the id reserved for it

    @classmethod
    def read(cls, root: Path, plan: str) -> Record | None:
        path = creation_record(root, plan)
        try:
            data = json.loads(path.read_bytes())
            rec = cls(plan=str(data["plan"]), fingerprint=str(data["fingerprint"]), count=int(data["count"]),
                      ids={str(k): int(v) for k, v in dict(data["ids"]).items()})
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            raise CorruptFile(path, "not a creation record; `team run --fresh` starts the plan over") from None
        if rec.plan != plan:
            raise CorruptFile(path, f"names plan {rec.plan!r}, not {plan!r}; `team run --fresh` starts the plan over")
        return rec

    def write(self, root: Path) -> None:
        path = creation_record(root, self.plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"plan": self.plan, "fingerprint": self.fingerprint, "count": self.count,
                                       "ids": self.ids}, separators=(",", ":")))


def remove_record(root: Path, plan: str) -> None:
    path = creation_record(root, plan)
    if path.exists():
        path.unlink()
        fsync_dir(path.parent)


def fingerprint(lp: LoadedPlan, root: Path) -> str:
    """The plan file's text and where its tasks run (relative to the state ``root``, so the same in a
    moved repository): what the tasks are made of."""
    h = hashlib.sha256(lp.path.read_bytes())
    h.update(stored(lp.base, root).encode())
    return h.hexdigest()[:32]


# ---------------------------------------------------------------------------- prepare
def prepare(store: TaskStore, lp: LoadedPlan, *, owner: str = "lead",
            note: Callable[[str], None] = lambda s: None, quiet: Collection[int] = (),
            witness: rewire.Witness | None = None, rerun: str = "team run PLAN",
            refuse: Callable[[list[int]], None] = lambda ids: None) -> Materialised:
    """The tasks that exist brought in line with the plan; the rest as a ``Creation`` (module docstring).
    ``quiet``: tasks whose resumption the caller tells itself (kept work merged without a re-run).
    ``witness``: what completed work saw, for changed ``needs`` (rewire.py; default: by time).
    ``refuse(ids)``: raises ``UserError`` if the tasks a changed ``needs`` makes run again (with what
    needs them) cannot be: called before anything is written (reconcile's ``refuse_unsafe``)."""
    plan = lp.plan
    existing = tasks_of(store, plan.name)
    record = Record.read(store.root, plan.name)
    if record is not None and existing and record.fingerprint != fingerprint(lp, store.root) and _never_claimed(store, existing):
        # the plan changed since a creation was cut short, and nothing ran: start it again from this plan
        store.delete_many([t.id for t in existing], actor=owner, reason="incomplete materialisation")
        note(f"plan {plan.name}: the last run stopped while creating its tasks, and the plan changed since: "
             f"creating them again")
        existing, record = [], None
    by_key = {t.plan_task: t for t in existing}
    wanted = {t.id for t in plan.tasks}
    ids: dict[str, int] = {k: t.id for k, t in by_key.items() if k is not None}
    missing = 0
    if record is not None:
        for key, tid in record.ids.items():
            old = by_key.get(key)
            if old is not None and old.id != tid:
                raise PlanError(f"{creation_record(store.root, plan.name)}: reserved #{tid} for {key}, but the store "
                                f"has {key} as #{old.id}: run again with --fresh to start over")
            if old is None and store.path(tid).exists():
                raise PlanError(f"{creation_record(store.root, plan.name)}: reserved #{tid} for {key}, but #{tid} is "
                                f"another task: run again with --fresh to start over")
            if old is None and key in wanted:
                ids[key] = tid
        missing = sum(1 for k in record.ids if k not in by_key and k in wanted)

    # changed `needs` of tasks that exist: decided before anything is written (rewire.py)
    changes = _changes(plan.tasks, by_key, ids, {t.id for t in existing} | set(ids.values()))
    decision = rewire.decide(changes, {k: t for k, t in by_key.items() if k in wanted and k is not None},
                             witness or rewire.ByTime(), rerun) if changes else None
    if decision is not None and decision.redo:
        try:
            refuse(rewire.again(decision, plan.tasks, {k: t for k, t in by_key.items() if k in wanted and k}))
        except UserError as e:
            why = "; ".join(decision.redo[i] for i in sorted(decision.redo))
            raise UserError(f"{why}, so it runs again with what needs it; {e}") from None

    if record is not None and missing:
        made = sum(1 for k in by_key if k in wanted)
        note(f"plan {plan.name}: the last run stopped while creating its tasks ({made} of {record.count} "
             f"made): creating the other {missing}")
    new = [t for t in plan.tasks if t.id not in ids]
    to_create = [t for t in plan.tasks if t.id not in by_key]
    if to_create:  # refused before anything is written, as a creation in one batch would be
        store.check_names(lp.store_name(t) for t in to_create)
    if new:
        first = store.reserve(len(new))
        ids.update((t.id, first + i) for i, t in enumerate(new))
        if existing:
            note(f"plan {plan.name}: {plural(len(new), 'new task')} added")
    creation = None
    if to_create:
        Record(plan.name, fingerprint(lp, store.root), len(plan.tasks), {t.id: ids[t.id] for t in to_create}).write(store.root)
        creation = Creation(store, lp, to_create, ids, {t.id: t.blockedBy for t in existing}, owner=owner)
    elif record is not None:  # killed after the last chunk, before the record went
        remove_record(store.root, plan.name)
    redo: list[int] = []
    if decision is not None:
        redo, creation = _rewire(store, lp, decision, changes, ids, creation, owner, note)
        if redo:  # flagged to run again: their fields are brought in line with the plan below, as pending
            existing = [store.read(t.id) for t in existing]

    plan_tasks = {t.id: t for t in plan.tasks}
    for old in existing:
        if old.plan_task not in wanted:
            if old.status not in (Status.completed, Status.cancelled):
                store.cancel(old.id, REMOVED, actor=owner)
            continue
        t = plan_tasks[old.plan_task]
        fields: dict[str, Any] = {}
        if old.status != Status.completed:
            spec = _spec(lp, t, store.root)
            fields = {k: spec[k] for k in _MUTABLE if getattr(old, k) != spec[k]}
        if old.status == Status.in_progress:
            store.release(old.id, old.epoch, actor=owner, interrupted=True,
                          reason=f"the previous lead died during attempt {old.attempts}; re-running")
            if old.id not in quiet:
                note(f"#{old.id} ({old.plan_task}) was running when the last lead died: re-running it")
        if old.status in (Status.failed, Status.cancelled):
            store.update(old.id, status=Status.pending, owner="", actor=owner, failures=0, lost=0, error=None,
                         **fields)
            if old.id not in quiet:
                note(f"#{old.id} ({old.plan_task}) {'failed' if old.status == Status.failed else 'was cancelled'}: "
                     f"retrying it")
        elif fields:
            store.update(old.id, actor=owner, **fields)
    for tid, (epoch, attempt) in store.unfiled_claims(existing).items():
        store.release_unfiled(tid, epoch, attempt, reason=f"the previous lead died during attempt {attempt} (before "
                                                          "the claim reached the task file); re-running", actor=owner)
        if tid not in quiet:
            note(f"#{tid} was starting when the last lead died: re-running it")

    # a first run has nothing to re-read
    now = {t.plan_task: t for t in store.all() if t.plan == plan.name} if existing else {}
    remaining = analyse(plan).remaining
    d = plan.defaults
    return Materialised(
        tasks=[now[t.id] for t in plan.tasks if t.id in now],
        priority={ids[k]: v for k, v in remaining.items()},
        retry_delay={ids[t.id]: t.retry_delay if t.retry_delay is not None else d.retry_delay for t in plan.tasks},
        creation=creation,
        redo=redo,
    )


def _changes(tasks: list[PlanTask], by_key: dict[str | None, Task], ids: dict[str, int],
             plan_ids: set[int]) -> list[rewire.Change]:
    """The plan's tasks that exist whose ``needs`` differ from their ``blockedBy`` (edges to tasks of
    other plans, or made by hand, are left as they are)."""
    out = []
    names = {t.id: k for k, t in by_key.items() if k is not None} | {i: k for k, i in ids.items()}
    for t in tasks:
        old = by_key.get(t.id)
        if old is None:
            continue
        want = {ids[n] for n in t.needs if n in ids}
        add = [n for n in t.needs if ids.get(n) not in old.blockedBy]
        remove = {d: names.get(d, f"#{d}") for d in old.blockedBy if d in plan_ids and d not in want}
        if add or remove:
            out.append(rewire.Change(old, add, remove))
    return out


def _rewire(store: TaskStore, lp: LoadedPlan, decision: rewire.Decision, changes: list[rewire.Change],
            ids: dict[str, int], creation: Creation | None, owner: str,
            note: Callable[[str], None]) -> tuple[list[int], Creation | None]:
    """Changed ``needs`` applied in a crash-safe order (rewire.py): the tasks whose work they invalidate
    flagged to run again, then edges taken away, then the tasks new to the plan created when an edge
    goes to one (an existing task cannot wait on a file that is not there), then edges added. The
    flagged ids, and the creation still to do."""
    redo = sorted(decision.redo)
    if redo:
        needs = {ids[t.id]: [ids[n] for n in t.needs] for t in lp.plan.tasks}
        names = {i: k for k, i in ids.items()}
        store.reopen(redo, actor=owner, reason="its changed needs invalidate its work", redo=True)
        for tid in redo:
            extra = [i for i in rewire.downstream_in_plan([tid], needs) if i != tid and i not in decision.redo]
            note(decision.redo[tid] + ": running it again"
                 + (f", and what needs it: {', '.join(f'#{i} {names[i]}' for i in extra)}" if extra else ""))
    for text in decision.notes:
        note(text)
    for c in changes:
        if c.remove:
            store.update(c.task.id, remove_blocked_by=list(c.remove), actor=owner)
    if creation is not None and any(not store.path(ids[k]).exists() for c in changes for k in c.add):
        for _ in creation.chunks():  # created now, before an existing task is made to wait on them
            pass
        creation = None
    for c in changes:
        if c.add:
            store.update(c.task.id, add_blocked_by=[ids[k] for k in c.add], actor=owner)
    return redo, creation


def _never_claimed(store: TaskStore, tasks: list[Task]) -> bool:
    return all(t.attempts == 0 for t in tasks) and not store.unfiled_claims(tasks)


def materialise(store: TaskStore, lp: LoadedPlan, *, owner: str = "lead",
                note: Callable[[str], None] = lambda s: None, quiet: Collection[int] = (),
                witness: rewire.Witness | None = None, rerun: str = "team run PLAN",
                refuse: Callable[[list[int]], None] = lambda ids: None) -> Materialised:
    """``prepare``, then every task created before returning (a run with worktree isolation, the bench)."""
    prep = prepare(store, lp, owner=owner, note=note, quiet=quiet, witness=witness, rerun=rerun, refuse=refuse)
    if prep.creation is None:
        return prep
    made = {t.plan_task: t for t in prep.tasks}
    for chunk in prep.creation.chunks():
        made.update((t.plan_task, t) for t in chunk)
    return Materialised([made[t.id] for t in lp.plan.tasks], prep.priority, prep.retry_delay, redo=prep.redo)


# ---------------------------------------------------------------------------- creation
def dependency_order(tasks: list[PlanTask]) -> list[PlanTask]:
    """``tasks`` with each after the ones of them it needs (needs outside ``tasks`` exist already);
    among the ready ones, plan order first (so a plan written in order is created in order)."""
    index = {t.id: i for i, t in enumerate(tasks)}
    if all(index.get(n, -1) < i for i, t in enumerate(tasks) for n in t.needs):
        return list(tasks)  # written in order already (the usual plan)
    waiting = {t.id: len({n for n in t.needs if n in index}) for t in tasks}
    users: dict[str, list[int]] = {}
    for i, t in enumerate(tasks):
        for n in set(t.needs):
            if n in index:
                users.setdefault(n, []).append(i)
    ready = [i for i, t in enumerate(tasks) if waiting[t.id] == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(tasks[i])
        for j in users.get(tasks[i].id, ()):
            waiting[tasks[j].id] -= 1
            if waiting[tasks[j].id] == 0:
                heapq.heappush(ready, j)
    return out


class Creation:
    """The plan's tasks still to create, at their reserved ids, a chunk at a time (module docstring).

    The scheduler's ``Feed``: ``start`` creates the chunks on a thread and hands each over once it is
    durable; ``stop`` ends that after the chunk being written (the record stays: the next run
    creates the rest). ``chunks`` creates them on the calling thread."""

    def __init__(self, store: TaskStore, lp: LoadedPlan, tasks: list[PlanTask], ids: dict[str, int],
                 known: dict[int, list[int]], *, owner: str = "lead"):
        self.store, self.lp, self.owner = store, lp, owner
        self.todo = dependency_order(tasks)
        self.known = known  # id -> blockedBy of the plan's tasks that exist ([] once made by this creation)
        self.total = len(self.todo)
        self.id_of = ids  # plan task -> id, of every task of the plan
        self._ids = frozenset(ids[t.id] for t in self.todo)
        self.made = 0
        self._sizes = iter(CHUNKS)
        self._size = CHUNKS[0]
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def done(self) -> bool:
        return self.made >= self.total

    @property
    def count(self) -> int:
        """Tasks still to create (the scheduler's ``Feed.count``)."""
        return self.total - self.made

    @property
    def ids(self) -> frozenset[int]:
        """The ids it makes (the scheduler's ``Feed.ids``)."""
        return self._ids

    def next_chunk(self) -> list[Task]:
        """Create the next chunk, durably; after the last one the record is removed."""
        self._size = next(self._sizes, self._size)
        part = self.todo[self.made:self.made + self._size]
        at = {self.id_of[t.id]: i for i, t in enumerate(part)}
        specs = []
        for t in part:
            spec = _spec(self.lp, t, self.store.root)
            spec["blockedBy"] = [("new", at[self.id_of[n]]) if self.id_of[n] in at else self.id_of[n] for n in t.needs]
            specs.append(spec)
        made = self.store.create_reserved(specs, [self.id_of[t.id] for t in part], actor=self.owner, known=self.known)
        self.known.update((t.id, []) for t in made)
        self.made += len(part)
        if self.done:
            remove_record(self.store.root, self.lp.plan.name)
        return made

    def chunks(self) -> Iterator[list[Task]]:
        while not self.done:
            yield self.next_chunk()

    def start(self, deliver: Callable[[list[Task], bool], None], on_crash: Crash) -> None:
        """Create the rest on a thread; ``deliver(tasks, last)`` each durable chunk (from that thread)."""

        def work() -> None:
            while not self.done and not self._halt.is_set():
                tasks = self.next_chunk()
                deliver(tasks, self.done)

        self._thread = threads.start("team-materialise", work, on_crash=on_crash)

    def stop(self) -> None:
        """Stop after the chunk being written, and wait for it."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join()
