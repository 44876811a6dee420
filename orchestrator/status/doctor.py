"""Local consistency checks of a state root (``team doctor``); no model call.

Design: ``CHECKS`` is a registry, a plain list of functions. Each takes a
``DoctorContext`` (the root, the store, the task files parsed once) and returns a
list of ``Finding`` records. A finding explains one problem in a sentence,
says what a human should do (``hint``) and, when the problem is safe to
repair without judgement, carries a ``fix`` callable that repairs it and
returns what it did. ``diagnose(root)`` runs every check and changes
nothing; ``repair(findings)`` runs the fixes (``team doctor --fix``).

Safe to fix: leftover temp files (removed; in ``.tasks/`` under the store
lock, so no write is in flight; elsewhere only when older than
``TMP_MIN_AGE``), expired leases (``TaskStore.reclaim_expired`` returns the
tasks to pending), tasks left ``in_progress`` by a dead owner before their
lease ran out (``dead-owner``: owned by ``lead``, or by a teammate that ran in
a lead and that the roster says is not alive, while no lead holds the root: the run or chat that held
them is gone, killed, or stopped by a full disk; the fix gives each back,
counted as interrupted, unless a lead started meanwhile), a lost or wrong name index and a stale id counter (both
caches, rebuilt from the task files). Never fixed automatically, because a
person must choose: unparsable task files, dependencies on missing tasks,
cycles and duplicate names.

Also reported: inbox lines that are no message (never fixed: a person
decides), keys of a task file that ``team`` does not know (a ``blocked_by``
typo would leave the task not waiting; never fixed: a person renames or
removes it), and jobs still ``running`` whose manager died (fixed by
``JobManager.reap_orphans``: their leftovers killed, the records ``lost``).

Adding a check (worktree orphans, stale inbox cursors, ...)::

    from orchestrator.doctor import CHECKS, Finding

    def check_orphan_worktrees(ctx):
        return [Finding("orphan-worktree", f"{p} belongs to no task", path=str(p),
                        hint="remove it with `git worktree remove`")
                for p in ...]

    CHECKS.append(check_orphan_worktrees)

Keep checks read-only; put any change in the finding's ``fix``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import UnknownRef
from ..core.fsutil import TMP_PREFIX, read_jsonl
from ..core.models import Status, Task
from ..core.paths import team_dir
from ..core.text import plural
from ..tasks import graph, render
from ..tasks.store import TaskStore

TMP_MIN_AGE = 60.0
"""Seconds before a temp file outside ``.tasks/`` counts as left over."""


@dataclass
class Finding:
    """One problem found by a check."""

    kind: str  # short slug: corrupt-task, missing-dependency, cycle, ...
    message: str  # what is wrong, one sentence
    hint: str = ""  # what a person should do about it
    path: str | None = None
    fix: Callable[[], str] | None = field(default=None, repr=False)  # returns what it did
    fixed: str | None = None  # set by ``repair``: what the fix did

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "message": self.message,
            "hint": self.hint,
            "path": self.path,
            "fixable": self.fix is not None,
            "fixed": self.fixed,
        }


@dataclass
class DoctorContext:
    """What every check may look at. Task files are parsed once, here."""

    root: Path
    store: TaskStore
    tasks: list[Task]
    unreadable: list[tuple[Path, str]]
    now: float

    @classmethod
    def load(cls, root: Path, clock: Callable[[], float] = time.time) -> DoctorContext:
        store = TaskStore(root, clock=clock)
        tasks, bad = store.scan()
        return cls(root, store, tasks, bad, clock())

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


Check = Callable[[DoctorContext], list[Finding]]


def check_unreadable(ctx: DoctorContext) -> list[Finding]:
    return [
        Finding(
            "corrupt-task",
            detail.replace(str(path), ctx.rel(path)).split(" (run `team doctor`")[0],
            hint="repair the JSON by hand, or move the file out of .tasks/ if the task is not needed",
            path=ctx.rel(path),
        )
        for path, detail in ctx.unreadable
    ]


def check_unknown_keys(ctx: DoctorContext) -> list[Finding]:
    """Keys of a task file that no ``Task`` field has: kept on rewrite, but ignored by team."""
    import difflib

    known = list(Task.model_fields)
    out = []
    for t in ctx.tasks:
        for key in sorted(t.model_extra or {}):
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            rel = ctx.rel(ctx.store.path(t.id))
            out.append(Finding(
                "unknown-key", f"{rel}: unknown key {key!r}{hint}; team ignores it",
                hint=f"rename it to {near[0]!r} or remove it by hand" if near else "remove it by hand",
                path=rel))
    return out


def check_missing_deps(ctx: DoctorContext) -> list[Finding]:
    known = {t.id for t in ctx.tasks} | {_id_of(p) for p, _ in ctx.unreadable}
    out = []
    for t in ctx.tasks:
        for d in t.blockedBy:
            if d not in known:
                out.append(
                    Finding(
                        "missing-dependency",
                        f"task #{t.id} is blocked by #{d}, which does not exist",
                        hint=f"`team task update {t.id} --remove-blocked-by {d}` (or recreate #{d})",
                        path=ctx.rel(ctx.store.path(t.id)),
                    )
                )
    return out


def _id_of(path: Path) -> int:
    return int(path.stem.split("_", 1)[1])


def check_cycles(ctx: DoctorContext) -> list[Finding]:
    return [
        Finding(
            "cycle",
            f"dependency cycle {render.format_ids(cyc)}: none of these tasks can ever start",
            hint=f"break it with `team task update {cyc[0]} --remove-blocked-by {cyc[1]}` (or another edge)",
        )
        for cyc in graph.find_cycles(ctx.tasks)
    ]


def check_temp_files(ctx: DoctorContext) -> list[Finding]:
    out = []
    tasks_dir = ctx.store.dir
    for base, guarded in ((tasks_dir, True), (team_dir(ctx.root), False)):
        if not base.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(base):
            for fname in files:
                if not fname.startswith(TMP_PREFIX):
                    continue
                path = Path(dirpath) / fname
                if not guarded:
                    try:
                        if ctx.now - path.stat().st_mtime < TMP_MIN_AGE:
                            continue  # may be a write in flight
                    except FileNotFoundError:
                        continue
                out.append(
                    Finding(
                        "temp-file",
                        f"leftover temp file {ctx.rel(path)} (a writer was killed mid-write; the real file is intact)",
                        hint="safe to delete",
                        path=ctx.rel(path),
                        fix=_remover(ctx, path, guarded),
                    )
                )
    return out


def _remover(ctx: DoctorContext, path: Path, guarded: bool) -> Callable[[], str]:
    def fix() -> str:
        if guarded:
            with ctx.store.locked():
                path.unlink(missing_ok=True)
        else:
            path.unlink(missing_ok=True)
        return f"removed {ctx.rel(path)}"

    return fix


def check_expired_leases(ctx: DoctorContext) -> list[Finding]:
    out = []
    for t in ctx.tasks:
        if t.status == Status.in_progress and t.lease_expires is not None and t.lease_expires <= ctx.now:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t.lease_expires))
            out.append(
                Finding(
                    "expired-lease",
                    f"task #{t.id} is in_progress but the lease of {t.owner or 'its owner'} expired at {when}",
                    hint="the owner is gone; return it to pending so it is re-run",
                    path=ctx.rel(ctx.store.path(t.id)),
                    fix=_reclaimer(ctx, t.id),
                )
            )
    return out


def check_dead_owners(ctx: DoctorContext) -> list[Finding]:
    """In-progress tasks whose owner is gone while no lead runs (the expired ones: ``expired-lease``)."""
    from ..team.lead import lead_info
    from ..team.roster import LEAD, Team

    held = [t for t in ctx.tasks if t.status == Status.in_progress and t.owner
            and not (t.lease_expires is not None and t.lease_expires <= ctx.now)]
    if not held or lead_info(ctx.root) is not None:
        return []  # a lead runs: its tasks are its own business
    roster = Team(ctx.root)
    # teammates that ran as threads of a lead (the runtime records their pid), and whether they live;
    # an MCP client's claim (kind external) is a person's: it stays while the client is offline
    alive = {s.name: s.liveness in ("working", "idle") for s in roster.states()
             if s.pid is not None and s.kind == "llm"} if roster.config.exists() else {}
    out = []
    for t in held:
        if t.owner != LEAD and alive.get(t.owner, True):
            continue  # a person's claim (a name, or a member that never ran in a lead), or a live teammate
        label = f"#{t.id} ({t.name})" if t.name else f"#{t.id}"
        who = "lead" if t.owner == LEAD else f"teammate {t.owner} (not alive)"
        plan = f"the next `team run` of plan {t.plan} re-runs it; " if t.plan else ""
        out.append(Finding(
            "dead-owner",
            f"task {label} is in_progress, owned by {who}, but no lead runs on this root "
            "(the run that held it is gone)",
            hint=f"{plan}`team doctor --fix` returns it to pending now",
            path=ctx.rel(ctx.store.path(t.id)), fix=_giver_back(ctx, t.id, t.epoch, t.owner)))
    return out


def _giver_back(ctx: DoctorContext, tid: int, epoch: int, owner: str) -> Callable[[], str]:
    def fix() -> str:
        from ..core.errors import ConflictError
        from ..team.lead import lead_info

        if lead_info(ctx.root) is not None:
            return f"#{tid} left as it is: a lead started on this root meanwhile"
        try:
            ctx.store.release(tid, epoch, reason=f"its owner {owner} is gone (no lead runs on this root); "
                                                 "returned to pending by team doctor", actor="doctor",
                              interrupted=True)
        except ConflictError:
            return f"#{tid} changed meanwhile; left as it is"
        return f"returned #{tid} to pending"

    return fix


def _reclaimer(ctx: DoctorContext, tid: int) -> Callable[[], str]:
    def fix() -> str:
        back = ctx.store.reclaim_expired(actor="doctor", owner_filter=None)
        ids = [t.id for t in back]
        if tid in ids:
            return f"returned #{tid} to pending (lease expired)"
        return f"#{tid} was already reclaimed or renewed"

    return fix


def check_duplicate_names(ctx: DoctorContext) -> list[Finding]:
    seen: dict[str, list[int]] = {}
    for t in ctx.tasks:
        if t.name:
            seen.setdefault(t.name, []).append(t.id)
    return [
        Finding(
            "duplicate-name",
            f"tasks {', '.join(f'#{i}' for i in ids)} share the name {name!r}; the name resolves to #{ids[0]}",
            hint=f"edit the \"name\" of all but one in {', '.join(ctx.rel(ctx.store.path(i)) for i in ids[1:])}",
        )
        for name, ids in sorted(seen.items())
        if len(ids) > 1
    ]


def check_name_index(ctx: DoctorContext) -> list[Finding]:
    want: dict[str, int] = {}
    for t in ctx.tasks:
        if t.name and t.name not in want:
            want[t.name] = t.id
    have: dict[str, int] = {}
    for entry in read_jsonl(ctx.store.files.names_path):
        if isinstance(entry.get("name"), str) and isinstance(entry.get("id"), int):
            have[entry["name"]] = entry["id"]
    wrong = sorted(n for n, i in want.items() if have.get(n) != i)
    if not wrong:
        return []
    return [
        Finding(
            "name-index",
            f"the name index does not match the task files for {', '.join(wrong[:5])}"
            + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""),
            hint="rebuild it from the task files",
            path=ctx.rel(ctx.store.files.names_path),
            fix=lambda: f"rebuilt {ctx.rel(ctx.store.files.names_path)} ({len(ctx.store.rebuild_name_index())} names)",
        )
    ]


def check_counter(ctx: DoctorContext) -> list[Finding]:
    path = ctx.store.files.counter_path
    if not path.exists():
        return []
    ids = ctx.store.ids()
    highest = ids[-1] if ids else 0
    text = path.read_text().strip()
    if text.isdigit() and int(text) > highest:
        return []
    return [
        Finding(
            "stale-counter",
            f"{ctx.rel(path)} says {text!r} but the highest task id is {highest}",
            hint=f"reset it to {highest + 1}",
            path=ctx.rel(path),
            fix=lambda: f"reset {ctx.rel(path)} to {ctx.store.repair_counter()}",
        )
    ]


def check_orphan_worktrees(ctx: DoctorContext) -> list[Finding]:
    """Worktrees/branches of ``isolation: worktree`` plans that no unfinished task needs (git/worktrees.py)."""
    base = team_dir(ctx.root) / "worktrees"
    if not base.is_dir():
        return []  # isolation never ran here: no git call
    from ..core.errors import UserError
    from ..git.agentwt import GROUP, AgentWorktrees
    from ..git.orphans import find_orphans
    from ..git.worktrees import Worktrees
    from ..run.keptwork import comes_back

    out = []
    for plan_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        live = {t.plan_task for t in ctx.tasks if t.plan == plan_dir.name and t.plan_task and comes_back(t)}
        if plan_dir.name == GROUP:  # the agents' worktrees: the live ones of their index
            try:
                live = {e.name for e in AgentWorktrees(ctx.root).entries() if e.live}
            except UserError as e:
                out.append(Finding("orphan-worktree", str(e), path=ctx.rel(base / "index.json")))
                continue
        try:
            orphans = find_orphans(Worktrees(ctx.root, plan_dir.name), live)
        except UserError as e:
            out.append(Finding("orphan-worktree", f"cannot check {ctx.rel(plan_dir)}: {e}", path=ctx.rel(plan_dir)))
            continue
        for o in orphans:
            hint = {"merge-in-progress": "the next `team run` of the plan repairs it",
                    "stale-lock": "the next `team run` of the plan repairs it",
                    "stray-dir": "git does not know it: remove the directory",
                    "stale-entry": "run `git worktree prune`"}.get(
                o.kind, "inspect it (`git log` of the branch), then `git worktree remove --force PATH` and "
                        "`git branch -D BRANCH`")
            out.append(Finding("orphan-worktree", f"plan {plan_dir.name}: {o.kind} {o.name}: {o.detail}",
                               hint=hint, path=ctx.rel(plan_dir / o.name)))
    return out


def check_interrupted_plans(ctx: DoctorContext) -> list[Finding]:
    """A ``team run --fresh`` or a ``team land`` killed halfway (their markers), when no lead runs."""
    fresh_dir = team_dir(ctx.root) / "fresh"
    lands = sorted((team_dir(ctx.root) / "worktrees").glob("*/land.json"))
    if not (fresh_dir.is_dir() and any(fresh_dir.iterdir())) and not lands:
        return []
    from ..team.lead import lead_info

    if lead_info(ctx.root) is not None:
        return []  # a lead is at work: its markers are live
    out = []
    for marker in sorted(fresh_dir.iterdir()) if fresh_dir.is_dir() else []:
        out.append(Finding("fresh-interrupted", f"a `team run --fresh` of plan {marker.name} was interrupted: its "
                           f"tasks and branches may be half deleted", path=ctx.rel(marker),
                           hint="run the plan again (`team run PLAN.yaml`): it finishes the fresh start first"))
    for intent in lands:
        plan = intent.parent.name
        out.append(Finding("land-interrupted", f"a `team land` of plan {plan} was interrupted: your branch may "
                           f"hold part of its result", path=ctx.rel(intent),
                           hint=f"run `team land {plan}` to finish it (team run refuses until then)"))
    return out


def check_inbox_lines(ctx: DoctorContext) -> list[Finding]:
    """Complete inbox lines that are no message (readers skip them); reported, never rewritten."""
    from ..team.inbox import bad_lines

    base = team_dir(ctx.root) / "inbox"
    out = []
    for path in sorted(base.glob("*.jsonl")) if base.is_dir() else []:
        if path.name.endswith(".consumed.jsonl"):
            continue  # history: already delivered
        bad = bad_lines(path)
        if bad:
            where = ", ".join(f"line {n} {raw[:40].decode(errors='replace')!r}" for n, raw in bad[:3])
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            out.append(Finding(
                "bad-inbox-line",
                f"{ctx.rel(path)}: {plural(len(bad), 'line')} {'is not a message and is' if len(bad) == 1 else 'are not messages and are'} skipped by readers: {where}{more}",
                hint="a writer killed mid-line or a hand edit: check the line(s), then delete them by hand",
                path=ctx.rel(path)))
    return out


def check_orphaned_jobs(ctx: DoctorContext) -> list[Finding]:
    """Jobs still ``running`` whose manager died (kill -9); the fix is ``reap_orphans``."""
    if not (team_dir(ctx.root) / "jobs").is_dir():
        return []
    from ..jobs.manager import JobManager
    from ..jobs.records import job_orphaned

    mgr = JobManager(ctx.root)
    hint = "`team doctor --fix` (or the next `team run`) kills what is left of it and marks it lost"
    found = [Finding(
        "orphaned-job",
        f"job {r.id} is marked running but its manager pid {r.manager_pid} is gone (command: {r.command})",
        hint=hint, path=r.log, fix=_job_reaper(mgr, r.id))
        for r in mgr.list() if job_orphaned(r)]
    for o in mgr.unrecorded_orphans():
        pids = ", ".join(str(pid) for pid, _, _ in sorted(o.pids))
        found.append(Finding(
            "orphaned-job",
            f"job {o.job_id} runs (pids {pids}) without a record, and its manager pid {o.manager_pid} is gone",
            hint=hint, path=ctx.rel(mgr.dir / f"{o.job_id}.log"), fix=_job_reaper(mgr, o.job_id)))
    return found


def _job_reaper(mgr, job_id: str) -> Callable[[], str]:
    def fix() -> str:
        from ..core import procs
        from ..jobs.records import JOB_ENV

        try:
            rec = mgr.get(job_id)
            doomed = procs.group_members(rec.pgid, JOB_ENV, rec.id) if rec.pgid else []
        except UnknownRef:  # no record yet: its processes are what reap_orphans finds
            doomed = [pid for o in mgr.unrecorded_orphans() if o.job_id == job_id for pid, _, _ in o.pids]
        if job_id not in {r.id for r in mgr.reap_orphans()}:
            return f"{job_id} was already {mgr.get(job_id).status}"
        killed = f"killed pids {', '.join(map(str, sorted(doomed)))}" if doomed else "nothing of it was left running"
        return f"marked {job_id} lost; {killed}"

    return fix


CHECKS: list[Check] = [
    check_unreadable,
    check_unknown_keys,
    check_missing_deps,
    check_cycles,
    check_temp_files,
    check_expired_leases,
    check_dead_owners,
    check_duplicate_names,
    check_name_index,
    check_counter,
    check_orphan_worktrees,
    check_interrupted_plans,
    check_inbox_lines,
    check_orphaned_jobs,
]
"""The registry: append a function ``(DoctorContext) -> list[Finding]`` to add a check."""


def diagnose(root: Path, clock: Callable[[], float] = time.time) -> list[Finding]:
    """Run every check; changes nothing."""
    ctx = DoctorContext.load(root, clock)
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(ctx))
    return findings


def repair(findings: list[Finding]) -> list[Finding]:
    """Run the fix of every fixable finding; returns those still needing a human."""
    left = []
    for f in findings:
        if f.fix is None:
            left.append(f)
        else:
            f.fixed = f.fix()
    return left
