"""Creating and editing tasks: ids, names and checked dependency edges.

``TaskEdits`` works on the store's files (``files.TaskFiles``: the lock,
reads, refs, the name index, the id counter and batch writes);
``store.TaskStore`` holds one and exposes its operations.

Rules:

* ``create_many`` takes the next free ids under one lock and writes the
  whole batch with one durable ``TaskFiles.write``.
* ``reserve`` + ``create_reserved``: ids taken up front (the counter moved
  past them durably), the tasks created later, a batch at a time, at those
  ids, never over a file that exists (``fsutil.create_new``): a plan's chunks
  (run/materialise.py), whose ``blockedBy`` are known before they are written.
* A dependency that does not exist, or that would close a cycle, is refused
  with the unknown ref or the cycle (``#4 → #7 → #4``) in the message. The
  cycle search walks ``blockedBy`` edges, reading only reachable task files.
* Names are unique: checked against ``names.jsonl`` (rebuilt first if it
  was lost) and within the batch.
* Ids are max+1, never reused: the next id is past the highest file and past
  the counter ``.next_id`` (which remembers ids whose files are gone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..core.errors import ConflictError, CycleError, InvalidName, UnknownRef, UserError
from ..core.models import NAME_RE, Status, Task
from ..core.text import control_chars, shown
from .attempts import apply_status, parse_status
from .files import TaskFiles

INDEX_BATCH = 100
"""A batch of at least this many new tasks (a plan's) is added to the task index as it is written."""


def format_cycle(ids: list[int]) -> str:
    return " → ".join(f"#{i}" for i in ids)


def _check_subject(subject: object) -> None:
    """A subject is text without control characters (newline and tab allowed): it is shown
    on one line, and a control character could forge the lines around it (core/text.py)."""
    if not isinstance(subject, str) or not subject.strip():
        raise UserError("a task needs a subject: a one-line title")
    bad = control_chars(subject, allow_lines=True)
    if bad:
        raise UserError(f'the subject "{shown(subject)}" holds control characters ({", ".join(bad)}); '
                        "remove them")


MAX_ESTIMATE = 30 * 86_400.0
"""The largest ``estimate`` (seconds) a task may have: 30 days, the bound a plan's ``estimate`` has."""


def check_estimate(value: object) -> None:
    """An estimate is a number of seconds above 0 and at most ``MAX_ESTIMATE`` (None: none);
    anything else (negative, zero, NaN, infinite, 1e300) would weigh the critical path with
    nonsense, so it is refused naming the bound."""
    if value is None:
        return
    if (not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value)
            or not 0 < value <= MAX_ESTIMATE):
        raise UserError(f"invalid estimate {value!r}: give the expected seconds, a number above 0 and at most "
                        f"{MAX_ESTIMATE:,.0f} (30 days)")


def _latest_names(entries: list[dict[str, Any]]) -> dict[str, int]:
    """name -> id of the last index entry naming it (what ``name_lookup`` finds first)."""
    out: dict[str, int] = {}
    for entry in entries:
        name, tid = entry.get("name"), entry.get("id")
        if isinstance(name, str) and isinstance(tid, int):
            out[name] = tid
    return out


class TaskEdits:
    """``create``, ``create_many`` and ``update`` (see the module docstring)."""

    def __init__(self, files: TaskFiles):
        self.files = files

    # ------------------------------------------------------------------ create
    @staticmethod
    def check_owner(owner: str | None) -> None:
        if owner and not NAME_RE.match(owner):
            raise InvalidName(
                f"invalid owner {owner!r}: use a member name (letters, digits, '.', '_' or '-'), or '' for none"
            )

    def _check_name(self, name: str | None, entries: list[dict[str, Any]] | None = None,
                    taken: Mapping[str, int] | None = None) -> None:
        """``taken``: the index's names (``_latest_names`` of ``entries``): a name it lacks is free
        without scanning ``entries`` (a plan's chunks would scan a growing index per name)."""
        if name is None:
            return
        if not NAME_RE.match(name) or name.isdigit():
            raise InvalidName(
                f"invalid task name {name!r}: use letters, digits, '.', '_' or '-' (not all digits, ≤ 64 chars)"
            )
        if taken is not None and name not in taken:
            return
        if self.files.name_lookup(name, entries) is not None:
            raise UserError(f"a task named {name!r} already exists; pick another name")

    def create(
        self,
        subject: str,
        description: str = "",
        blocked_by: Iterable[int | str] = (),
        owner: str = "",
        *,
        actor: str = "cli",
        **fields: Any,
    ) -> Task:
        """Create one task with the next id. Dependencies must exist."""
        return self.create_many(
            [dict(subject=subject, description=description, blockedBy=list(blocked_by), owner=owner, **fields)],
            actor=actor,
        )[0]

    def create_many(self, specs: list[dict[str, Any]], *, actor: str = "cli") -> list[Task]:
        """Create several tasks under one lock.

        ``blockedBy`` entries may be ids, names of existing tasks, or
        ``("new", i)`` — the i-th task of this batch — so a whole plan can be
        materialised in one call. Batch-internal edges are acyclic by
        construction only if the caller checked; we check again here.
        """
        if not specs:
            return []
        for spec in specs:  # before the lock: a refused create leaves nothing behind, not even .tasks/
            _check_subject(spec.get("subject"))
            check_estimate(spec.get("estimate"))
        with self.files.locked():
            first = self.files.next_id()
            tasks = self._create_locked(specs, [first + i for i in range(len(specs))], actor, {})
            return tasks

    def check_names(self, names: Iterable[str]) -> None:
        """Refuse a name that is invalid or that a task has (``UserError``), before a creation in
        chunks writes anything; each chunk checks its names again under the lock."""
        with self.files.locked():
            if not self.files.names_path.exists() and self.files.ids():
                self.files.rebuild_names_locked()  # the index was lost: names must stay unique
            index = self.files.name_entries()
        taken = _latest_names(index)
        for name in names:
            self._check_name(name, index, taken)

    def reserve(self, n: int) -> int:
        """Reserve ``n`` ids for ``create_reserved``: the first of them. The counter is moved past them
        durably, so no other create takes one, even after a crash (``next_id``)."""
        with self.files.locked():
            first = self.files.next_id()
            self.files.set_counter(first + n, durable=True)
            return first

    def create_reserved(self, specs: list[dict[str, Any]], ids: list[int], *, actor: str = "cli",
                        known: Mapping[int, list[int]] | None = None) -> list[Task]:
        """Create tasks at ids reserved earlier (``reserve``) as one durable batch, the store held.

        A plan's tasks are created this way a chunk at a time (run/materialise.py). ``blockedBy``
        entries are ids or ``("new", i)`` of this batch. ``known``: the dependencies of tasks
        outside the batch this caller knows (the plan's, in memory), so the cycle check reads no
        file for them; a task of an earlier chunk is passed with ``[]`` (it was checked when it was
        created, and it can only need tasks made before it). A file already at one of the ids is
        never replaced: ``ConflictError`` (the counter was moved back by hand?).

        Other processes wait for the store the whole time, as for ``create_many``; in a run, the
        files are written outside this process's sections (``TaskFiles.holding``), so the
        scheduler's commits go on meanwhile. Steps: names checked and indexed, the files written
        and the folder fsynced, then the ``created`` lines appended and fsynced.
        """
        if not specs:
            return []
        for spec in specs:
            _check_subject(spec.get("subject"))
        with self.files.holding() as section:
            with section():
                top = max(ids)
                if self.files.next_id() <= top:  # the counter lost the reservation (a repair by hand): keep it past
                    self.files.set_counter(top + 1, durable=True)
                tasks = self._build(specs, ids, known or {})
                self.files.add_names(tasks)
            self.files.create_files(tasks, index=len(tasks) >= INDEX_BATCH)
            with section():
                self.files.log([self.files.event_record(t, "created", actor, None) for t in tasks])
            return tasks

    def _create_locked(self, specs: list[dict[str, Any]], ids: list[int], actor: str,
                       known: Mapping[int, list[int]]) -> list[Task]:
        tasks = self._build(specs, ids, known)
        self.files.set_counter(ids[-1] + 1)
        self.files.add_names(tasks)
        self.files.write(tasks, [self.files.event_record(t, "created", actor, None) for t in tasks],
                         index=len(tasks) >= INDEX_BATCH)
        return tasks

    def _build(self, specs: list[dict[str, Any]], ids: list[int], known: Mapping[int, list[int]]) -> list[Task]:
        """The tasks of a batch at ``ids``: names, owners, dependencies and cycles checked (under the lock)."""
        named = any(spec.get("name") for spec in specs)
        if named and not self.files.names_path.exists() and self.files.ids():
            self.files.rebuild_names_locked()  # the index was lost: names must stay unique
        index = self.files.name_entries() if named else []
        taken = _latest_names(index)
        now = self.files.clock()
        tasks = []
        seen_names: set[str] = set()
        for i, spec in enumerate(specs):
            spec = dict(spec)
            deps: list[int] = []
            for dep in spec.pop("blockedBy", []) or []:
                if isinstance(dep, tuple) and dep[0] == "new":
                    deps.append(ids[dep[1]])
                elif isinstance(dep, int) and dep in known:
                    deps.append(dep)  # made by this caller earlier: it exists
                else:
                    deps.append(self.files.resolve(dep))
            name = spec.get("name")
            self._check_name(name, index, taken)
            self.check_owner(spec.get("owner"))
            if name is not None:
                if name in seen_names:
                    raise UserError(f"a task named {name!r} appears twice; names must be unique")
                seen_names.add(name)
            status = parse_status(spec.pop("status", Status.pending))
            tasks.append(
                Task(id=ids[i], blockedBy=sorted(set(deps)), status=status, created_at=now, **spec)
            )
        for t in tasks:  # dependencies exist: resolve() checked old ones, new ones are in the batch
            if t.id in t.blockedBy:
                raise CycleError(f"task #{t.id} cannot depend on itself: {format_cycle([t.id, t.id])}", [t.id, t.id])
        batch = {t.id: t for t in tasks}
        for t in self._maybe_cyclic(tasks, batch, known):
            cycle = self._find_path(t.blockedBy, t.id, batch, known)
            if cycle:
                raise CycleError(f"dependency cycle: {format_cycle([t.id, *cycle])}", [t.id, *cycle])
        return tasks

    # ------------------------------------------------------------------ graph checks
    def _deps_of(self, tid: int, overlay: dict[int, Task], known: Mapping[int, list[int]]) -> list[int]:
        if tid in overlay:
            return overlay[tid].blockedBy
        if tid in known:
            return known[tid]
        try:
            return self.files.read(tid).blockedBy
        except UnknownRef:
            return []

    def _maybe_cyclic(self, tasks: list[Task], batch: dict[int, Task],
                      known: Mapping[int, list[int]]) -> list[Task]:
        """The new tasks that may sit on a dependency cycle, in batch order; usually none.

        One pass over the batch and the existing tasks it reaches (each read once):
        tasks that can only reach tasks without dependencies are peeled off
        (Kahn's algorithm along ``blockedBy``). What is left can reach a cycle;
        ``_find_path`` then says whether the task itself is on one (and which),
        as it would have for every task, at O(tasks + edges) instead of
        O(tasks × ancestors) for a plan's batch.
        """
        deps: dict[int, list[int]] = {}
        stack = [t.id for t in tasks]
        while stack:
            node = stack.pop()
            if node in deps:
                continue
            deps[node] = [d for d in dict.fromkeys(self._deps_of(node, batch, known))]
            stack.extend(d for d in deps[node] if d not in deps)
        waiting = {node: len(ds) for node, ds in deps.items()}
        needed_by: dict[int, list[int]] = {}
        for node, ds in deps.items():
            for d in ds:
                needed_by.setdefault(d, []).append(node)
        free = [node for node, n in waiting.items() if n == 0]
        while free:
            node = free.pop()
            del waiting[node]
            for user in needed_by.get(node, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    free.append(user)
        return [t for t in tasks if t.id in waiting]

    def _find_path(self, starts: Iterable[int], target: int, overlay: dict[int, Task],
                   known: Mapping[int, list[int]] | None = None) -> list[int] | None:
        """A dependency path from one of ``starts`` to ``target`` (inclusive), or None.

        Walks ``blockedBy`` edges reading only reachable task files.
        """
        parent: dict[int, int | None] = {}
        stack = []
        for s in starts:
            if s not in parent:
                parent[s] = None
                stack.append(s)
        while stack:
            node = stack.pop()
            if node == target:
                path = [node]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])  # type: ignore[arg-type]
                return list(reversed(path))
            for dep in self._deps_of(node, overlay, known or {}):
                if dep not in parent:
                    parent[dep] = node
                    stack.append(dep)
        return None

    # ------------------------------------------------------------------ update
    def update(
        self,
        ref: int | str,
        *,
        status: str | Status | None = None,
        owner: str | None = None,
        add_blocked_by: Iterable[int | str] = (),
        remove_blocked_by: Iterable[int | str] = (),
        actor: str = "cli",
        guard: Callable[[Task], None] | None = None,
        **fields: Any,
    ) -> Task:
        """Change a task by hand (or by a tool). Dependency edits are checked.

        ``guard``: called with the task as it is under the lock, before anything changes; what it
        raises refuses the update (``team mcp``'s permissions: nothing is written)."""
        if "subject" in fields:
            _check_subject(fields["subject"])
        check_estimate(fields.get("estimate"))
        new_status = parse_status(status) if status is not None else None
        self.check_owner(owner)
        with self.files.locked_on(ref):
            task = self.files.get(ref)
            if guard is not None:
                guard(task)
            before = task.status
            add = [self.files.resolve(r) for r in add_blocked_by]
            remove = {self._resolve_dep_to_remove(task, r) for r in remove_blocked_by}
            for dep in add:
                if dep == task.id:
                    raise CycleError(
                        f"task #{task.id} cannot depend on itself: {format_cycle([task.id, task.id])}",
                        [task.id, task.id],
                    )
                cycle = self._find_path([dep], task.id, {})
                if cycle:
                    raise CycleError(f"dependency cycle: {format_cycle([task.id, *cycle])}", [task.id, *cycle])
            deps = [d for d in task.blockedBy if d not in remove]
            deps = sorted(set(deps) | set(add))
            task.blockedBy = deps
            if owner is not None:
                task.owner = owner
            for key, value in fields.items():
                setattr(task, key, value)
            reported = self._reported(task, new_status, actor)
            if reported is not None:
                new_status = None  # the run records it when the agent CLI's process ends
            if new_status is not None and new_status != before:
                apply_status(task, new_status, self.files.clock())
                if new_status == Status.pending and owner is None and task.owner:
                    task.owner = ""  # re-opened: unassigned unless --owner says otherwise
                    owner = ""
            changed = []
            if add or remove:
                changed.append("blockedBy")
            if owner is not None:
                changed.append("owner")
            changed.extend(fields)
            records = []
            if reported is not None:
                records.append(self.files.event_record(task, "reported", actor, None, status=reported["status"],
                                                       epoch=task.epoch))
            if new_status is not None and new_status != before:
                records.append(self.files.event_record(task, "status", actor, before))
            if changed:
                records.append(self.files.event_record(task, "updated", actor, None, fields=changed))
            self.files.write([task], records)
            return task

    @staticmethod
    def is_report(task: Task, status: Status | None, actor: str) -> bool:
        """Whether ``actor`` setting ``status`` on ``task`` is an agent CLI reporting the end of its own
        running attempt (kept in ``reported``, decided by the run when its process ends)."""
        return (status in (Status.completed, Status.failed) and task.status == Status.in_progress
                and bool(task.cli_member) and actor == task.cli_member and task.owner == actor)

    def _reported(self, task: Task, status: Status | None, actor: str) -> dict[str, Any] | None:
        """An agent CLI (``cli_member``) ending its own running attempt: the end is kept in ``reported``
        (returned) instead of set, so the run records it when the agent's process ends, after its work is
        merged (run/command.py); a lead killed meanwhile leaves the attempt to be re-run, never a
        completion without its work. Anyone else's update is applied as usual."""
        if status is None or not self.is_report(task, status, actor):
            return None
        task.reported = {"status": status.value, "result": task.result, "epoch": task.epoch, "by": actor,
                         "at": round(self.files.clock(), 3)}
        return task.reported

    def reopen(self, ids: Iterable[int], *, actor: str, reason: str, **fields: Any) -> list[Task]:
        """Make finished tasks pending again, unowned, with a fresh retry budget (``team task
        retry``, ``team run --redo``); ``fields`` are set on each. Refused (nothing written)
        while one of them is running."""
        with self.files.locked():
            tasks = [self.files.get(i) for i in ids]
            running = [t for t in tasks if t.status == Status.in_progress]
            if running:
                who = ", ".join(f"#{t.id}" + (f" ({t.owner})" if t.owner else "") for t in running)
                raise ConflictError(f"{who} is running: wait for the attempt to end (or stop the run), then retry")
            records = []
            now = self.files.clock()
            for task in tasks:
                before = task.status
                if before != Status.pending:
                    apply_status(task, Status.pending, now)
                    records.append(self.files.event_record(task, "status", actor, before, reason=reason))
                task.owner = ""
                task.error = None
                for key, value in {"failures": 0, **fields}.items():  # failures: the scheduler's retry count
                    setattr(task, key, value)
                records.append(self.files.event_record(task, "updated", actor, None,
                                                        fields=["owner", "error", "failures", *fields]))
            self.files.write(tasks, records)
            return tasks

    def _resolve_dep_to_remove(self, task: Task, ref: int | str) -> int:
        """Like ``resolve``, but a declared id whose file is gone may be removed."""
        try:
            return self.files.resolve(ref)
        except UnknownRef:
            text = str(ref).strip().lstrip("#")
            if text.isdigit() and int(text) in task.blockedBy:
                return int(text)
            raise
