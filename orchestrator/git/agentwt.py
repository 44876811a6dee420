"""Agent worktrees (seed s12): named git worktrees that agents create, bind to tasks, keep,
remove and merge back -- the same worktrees and the same ordered merge-back as plans.

Tasks are the control plane, worktrees the execution plane. An agent (the chat lead
splitting a refactor, a coder isolating its own work) makes a worktree by name; it is
one *task* of the worktree group ``agents`` of ``Worktrees`` (worktrees.py), so every
git step is the plans' own: the branch forks from the group's integration branch *now*
(so a worktree made after a merge starts from it), ``merge`` is ``Worktrees.commit`` +
``Worktrees.merge`` (serialised under the group's lock, one ``--no-ff`` merge commit per
worktree with a ``Team-Task: <name>`` trailer), ``remove`` is ``Worktrees.discard``::

    <root>/.team/worktrees/index.json        the index: every agent worktree and its state
    <root>/.team/worktrees/events.jsonl      the lifecycle log, one event a line
    <root>/.team/worktrees/agents/<name>     the worktree (branch team/agents/<name>)
    team/agents/integration                  where merges land; `team worktree land` takes it
                                             into the user's branch (git/land.py, as `team land`)

The index (``{"worktrees": [...]}``, one entry per name: ``name``, ``path`` (relative
to the state root, so a moved repository keeps it; older absolute ones are read as they are),
``branch``, ``task_id``, ``owner``, ``status``, ``created_at``, ``updated_at``,
``merge_commit``) is rewritten atomically under its lock. ``status``: ``creating``
(the name is taken, git is making it; left so if its maker died: remove it) -> ``active``
(made, in use) -> ``kept`` (left for later, never cleaned up) -> ``merged`` (its
work is on the integration branch; worktree and branch gone) -> ``landed`` (in the
user's branch: ``landed`` names the commit), or ``removed`` (discarded). A name can be used again once its worktree is merged or removed.

Events (``{"event", "ts", "actor", "worktree": {...}, "task": {...}, "error"}``):
``worktree.create.before|after|failed``, ``worktree.remove.before|after|failed``,
``worktree.merge.before|after|failed``, ``worktree.keep``, ``worktree.land`` and
``task.completed`` when a remove or merge also completed the bound task. A step
that fails writes its ``failed`` event with the error and changes nothing else
in the index.

Binding to tasks (the task's ``worktree`` field) is the callers' (tools/worktree.py,
cli/worktreecmd.py): this module knows git and its two files, not the task store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import TeamError, UserError
from ..core.fsutil import append_line, atomic_write, file_lock, read_jsonl
from ..core.paths import at_root, stored
from ..core.text import plural
from .land import MODES, Land, Landing
from .worktrees import MergeConflict, MergeResult, Worktrees, check_slug

GROUP = "agents"
"""The worktree group (the ``plan`` of ``Worktrees``) agent worktrees belong to."""
STATUSES = ("creating", "active", "kept", "merged", "removed", "landed")
LIVE = ("creating", "active", "kept")
"""A worktree with one of these holds its name (``creating``: being made, or its maker died)."""


@dataclass
class Entry:
    """One agent worktree in the index."""

    name: str
    path: str  # the directory agents work in (the worktree, plus the root's offset in the repository)
    branch: str
    owner: str  # who works in it (its creator, or whom the lead made it for)
    status: str = "active"
    task_id: int | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    merge_commit: str | None = None
    created_by: str = ""
    landed: str | None = None  # the commit `team worktree land` brought its work in with

    @property
    def live(self) -> bool:
        return self.status in LIVE

    def brief(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "branch": self.branch, "path": self.path}

    def line(self) -> str:
        task = f" task #{self.task_id}" if self.task_id is not None else ""
        merged = f" merge {self.merge_commit[:10]}" if self.merge_commit else ""
        return f"{self.name} [{self.status}] {self.branch} owner {self.owner}{task}{merged}"


@dataclass
class MergeReport:
    """What ``merge`` did, in order; ``conflict``: the merge that stopped it (nothing after it ran)."""

    merged: list[tuple[Entry, MergeResult]] = field(default_factory=list)
    conflict: MergeConflict | None = None


class AgentWorktrees:
    """The agent worktrees of the state root ``root`` (see the module docstring)."""

    def __init__(self, root: Path, *, clock: Callable[[], float] = time.time):
        self.root = Path(root).absolute()
        self.dir = self.root / ".team" / "worktrees"
        self.index_path = self.dir / "index.json"
        self.events_path = self.dir / "events.jsonl"
        self.clock = clock
        self._wt: Worktrees | None = None

    @property
    def wt(self) -> Worktrees:
        """The group's ``Worktrees`` (a git repository is needed from here on)."""
        if self._wt is None:
            try:
                self._wt = Worktrees(self.root, GROUP)
            except UserError:
                raise UserError(f"agent worktrees need a git repository at {self.root} with a commit "
                                f"(git init && git add -A && git commit -m init)") from None
        return self._wt

    # -- the index ---------------------------------------------------------------
    def entries(self) -> list[Entry]:
        try:
            data = json.loads(self.index_path.read_text())
        except FileNotFoundError:
            return []
        except ValueError as e:
            raise UserError(f"{self.index_path} is not valid JSON ({e}); `team doctor` checks it") from None
        # a path is stored relative to the root (core/paths.py): entries carry it as it is now
        return [Entry(**{**w, "path": str(at_root(w["path"], self.root))}) for w in data.get("worktrees", [])]

    def get(self, name: str) -> Entry:
        entry = next((e for e in self.entries() if e.name == name), None)
        if entry is None:
            known = ", ".join(e.name for e in self.entries() if e.live) or "none"
            raise UserError(f"no agent worktree named {name!r} (live ones: {known}); worktree_list "
                            f"(`team worktree list`) shows them all")
        return entry

    def live(self, name: str) -> Entry:
        """``name``'s entry, refused unless it is active or kept."""
        entry = self.get(name)
        if not entry.live:
            raise UserError(f"worktree {name!r} is {entry.status}: its directory is gone; make a new one "
                            f"with worktree_create")
        return entry

    @contextmanager
    def _editing(self) -> Iterator[dict[str, Entry]]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / ".index.lock"):
            entries = {e.name: e for e in self.entries()}
            yield entries
            data = {"worktrees": [{**asdict(e), "path": stored(e.path, self.root)} for e in entries.values()]}
            atomic_write(self.index_path, json.dumps(data, indent=2) + "\n")

    def _set(self, name: str, **fields: Any) -> Entry:
        with self._editing() as entries:
            entry = entries[name]
            for key, value in fields.items():
                setattr(entry, key, value)
            entry.updated_at = self.clock()
            return entry

    # -- the event log --------------------------------------------------------------
    def emit(self, event: str, *, actor: str, entry: Entry | None = None, task: dict[str, Any] | None = None,
             error: str | None = None, **extra: Any) -> None:
        record: dict[str, Any] = {"event": event, "ts": self.clock(), "actor": actor}
        if entry is not None:
            record["worktree"] = entry.brief()
        if task is not None:
            record["task"] = task
        if error is not None:
            record["error"] = error
        record.update(extra)
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / ".events.lock"):
            append_line(self.events_path, record)

    def events(self, limit: int | None = None) -> list[dict[str, Any]]:
        records = read_jsonl(self.events_path)
        return records[-limit:] if limit else records

    # -- lifecycle ----------------------------------------------------------------------
    def create(self, name: str, *, owner: str, actor: str, task_id: int | None = None) -> Entry:
        """Make worktree ``name`` for ``owner`` (forked from the integration tip now); the entry."""
        check_slug(name, "worktree name")
        self.wt.branch(name)  # refuses the reserved name
        with self._editing() as entries:  # claim the name first: two creators, one wins
            old = entries.get(name)
            if old is not None and old.live:
                raise UserError(f"worktree {name!r} already exists ({old.status}, owner {old.owner}); "
                                f"pick another name, or merge or remove it first")
            now = self.clock()
            entry = Entry(name, str(self.wt.workdir(name)), self.wt.branch(name), owner, "creating", task_id,
                          now, now, created_by=actor)
            entries[name] = entry
        task = {"id": task_id} if task_id is not None else None
        self.emit("worktree.create.before", actor=actor, entry=entry, task=task)
        try:
            self.wt.prepare(name, fresh=True, discard=True)  # a leftover of a removed name is not this one's
        except TeamError as e:
            with self._editing() as entries:
                if old is not None:
                    entries[name] = old
                else:
                    entries.pop(name, None)
            self.emit("worktree.create.failed", actor=actor, entry=entry, task=task, error=str(e))
            raise
        entry = self._set(name, status="active")
        self.emit("worktree.create.after", actor=actor, entry=entry, task=task)
        return entry

    def keep(self, name: str, *, actor: str) -> Entry:
        """Mark ``name`` kept: left in place for later, not cleaned up."""
        self.live(name)
        entry = self._set(name, status="kept")
        self.emit("worktree.keep", actor=actor, entry=entry)
        return entry

    def unmerged(self, name: str) -> str | None:
        """What removing ``name`` would lose, in words; None when nothing."""
        kept = self.wt.kept(name)
        if kept is None:
            return None
        parts = [plural(kept.commits, "commit")] if kept.commits else []
        if kept.dirty:
            parts.append("uncommitted changes")
        return " and ".join(parts) or None

    def remove(self, name: str, *, actor: str, force: bool = False) -> Entry:
        """Delete ``name``'s worktree and branch; work not merged needs ``force``."""
        entry = self.live(name)
        lost = self.unmerged(name)
        if lost and not force:
            raise UserError(f"worktree {name!r} has {lost} not merged: merge it (worktree_merge) or remove it "
                            f"with force (that discards them)")
        task = {"id": entry.task_id} if entry.task_id is not None else None
        self.emit("worktree.remove.before", actor=actor, entry=entry, task=task, discards=lost)
        try:
            self.wt.discard(name)
        except TeamError as e:
            self.emit("worktree.remove.failed", actor=actor, entry=entry, task=task, error=str(e))
            raise
        entry = self._set(name, status="removed")
        self.emit("worktree.remove.after", actor=actor, entry=entry, task=task)
        return entry

    def merge(self, names: list[str], *, actor: str, messages: dict[str, str] | None = None) -> MergeReport:
        """Merge the worktrees in the order given, as plans merge their tasks (worktrees.py): each
        one's changes committed, then merged into the integration branch; its worktree and branch
        go. Stops at the first conflict (that worktree is kept as it was, with its commit)."""
        entries = [self.live(n) for n in dict.fromkeys(names)]
        report = MergeReport()
        for entry in entries:
            task = {"id": entry.task_id} if entry.task_id is not None else None
            self.emit("worktree.merge.before", actor=actor, entry=entry, task=task)
            try:
                self.wt.commit(entry.name, (messages or {}).get(entry.name) or f"{entry.name}: work of {entry.owner}")
                result = self.wt.merge(entry.name)
            except MergeConflict as e:
                self.emit("worktree.merge.failed", actor=actor, entry=entry, task=task, error=str(e), files=e.files)
                report.conflict = e
                return report
            except TeamError as e:
                self.emit("worktree.merge.failed", actor=actor, entry=entry, task=task, error=str(e))
                raise
            entry = self._set(entry.name, status="merged", merge_commit=result.commit)
            self.emit("worktree.merge.after", actor=actor, entry=entry, task=task, result=result.status,
                      commit=result.commit)
            report.merged.append((entry, result))
        return report

    def land(self, *, actor: str, per_task: bool = False) -> tuple[Landing, list[Entry]]:
        """Bring the merged worktrees' work into the user's current branch, as ``team land`` does
        for a plan (land.py: refused rather than overwrite work); the landing and the entries."""
        live = [e.name for e in self.entries() if e.live]
        if live:
            raise UserError(f"worktrees still in use: {', '.join(live)}; merge them (the lead's worktree_merge) "
                            f"or `team worktree remove` them first, then land")
        merged = [e for e in self.entries() if e.status == "merged"]
        land = Land(self.wt)
        if not merged and land.pending() is None:
            raise UserError("nothing to land: no worktree was merged since the last land")
        subjects = {e.name: f"worktree {e.name} of {e.owner}" for e in merged}
        landing = land.land(MODES[1] if per_task else MODES[0], subjects,
                            f"{GROUP}: land {plural(len(merged), 'worktree')} of the team")
        land.finish()
        done = [self._set(e.name, status="landed", landed=landing.intent.tasks.get(e.name, landing.intent.new))
                for e in merged]
        self.emit("worktree.land", actor=actor, commit=landing.intent.new, worktrees=[e.name for e in done])
        return landing, done
