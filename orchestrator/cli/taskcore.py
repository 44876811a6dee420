"""What ``team task list|create|update`` do, without typer.

The typer commands in tasks.py and the fast path (fast.py) both call these,
with the state root already resolved; each returns the command's exit code.
Module level imports stay light (issue 13): no typer, pydantic, networkx,
rich or yaml; the store is imported by the functions that write.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.jsonutil import dumps, listing_of
from ..core.paths import tasks_dir
from ..core.text import plural
from ..tasks import graph, render
from ..tasks.index import Row, read_rows
from .output import err, out, print_json

if TYPE_CHECKING:
    from ..tasks.store import TaskStore

EMPTY = "No tasks yet. Create one with `team task create SUBJECT` or run a plan with `team run PLAN.yaml`."


def store_at(root: Path) -> TaskStore:
    from ..tasks.store import TaskStore

    return TaskStore(root)


def warn(bad: list[tuple[Path, str]]) -> None:
    """One ``warning:`` line on stderr per task file that could not be read."""
    for path, why in bad:
        detail = why.replace(f"{path}: ", "", 1).split(" (run `team doctor`")[0]
        err(f"warning: {shown_path(path)} cannot be read ({detail}); it is left out "
            "(`team doctor` says more)")


def shown_path(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_status(value: str) -> None:
    """Refuse a status that is not one (the one error message for it), without importing the store."""
    from ..core.states import Status

    if value not in Status.__members__:
        from ..tasks.attempts import parse_status

        parse_status(value)


def list_tasks(root: Path, *, status: str | None = None, owner: str | None = None, ready: bool = False,
               blocked: bool = False, as_json: bool = False) -> int:
    """``team task list``: exit 1 if a task file could not be read (the listing is incomplete)."""
    from ..core.states import Status

    if status is not None:
        check_status(status)
    want = Status(status) if status is not None else None
    tasks, bad = read_rows(tasks_dir(root))
    warn(bad)
    by_id = {t.id: t for t in tasks}
    selected = graph.TaskFilter(status=want, owner=owner, ready=ready, blocked=blocked).select(tasks)
    if as_json:
        print_rows(selected, by_id)
    elif not tasks and not bad:
        out(EMPTY)
    elif not selected:
        out(f"No tasks match these filters ({plural(len(tasks), 'task')} in total).")
    else:
        out("\n".join(render.list_line(t, by_id) for t in selected))
    return 1 if bad else 0


def print_rows(rows: list[Row], by_id: dict[int, Row]) -> None:
    """``task list --json``: ``jsonutil.listing`` of each task's JSON with ``ready`` and
    ``waiting_on`` added. A task file in canonical form (any file ``team`` wrote) is printed
    from its bytes, the two keys spliced in before its closing brace: the same text
    ``dumps`` would give, without encoding 10,000 tasks again."""
    encoded = []
    for t in rows:
        ready, waiting = graph.is_ready(t, by_id), graph.open_blockers(t, by_id)
        if t.canonical is not None:
            encoded.append(t.canonical[:-1].decode() + f',"ready":{dumps(ready)},"waiting_on":{dumps(waiting)}}}')
        else:
            encoded.append(dumps({**t.data, "ready": ready, "waiting_on": waiting}))
    sys.stdout.write(listing_of(encoded))


def create_task(root: Path, subject: str, *, description: str = "", blocked_by: list[str] | None = None,
                owner: str = "", name: str | None = None, estimate: float | None = None,
                as_json: bool = False) -> int:
    """``team task create``."""
    fields: dict[str, Any] = {}
    if name is not None:
        fields["name"] = name
    if estimate is not None:
        fields["estimate"] = estimate
    task = store_at(root).create(subject, description, blocked_by or [], owner, actor="cli", **fields)
    if as_json:
        print_json(task.to_json())
    else:
        deps = f" (blocked by: {task.blockedBy})" if task.blockedBy else ""
        out(f"Created task #{task.id}: {task.subject}{deps}")
    return 0


def update_task(root: Path, ref: str, *, status: str | None = None, owner: str | None = None,
                add_blocked_by: list[str] | None = None, remove_blocked_by: list[str] | None = None,
                subject: str | None = None, description: str | None = None, estimate: float | None = None,
                as_json: bool = False) -> int:
    """``team task update``: checked, all or nothing."""
    if status is not None:
        check_status(status)  # fail before touching anything
    fields: dict[str, Any] = {}
    for key, value in (("subject", subject), ("description", description), ("estimate", estimate)):
        if value is not None:
            fields[key] = value
    task = store_at(root).update(ref, status=status, owner=owner, add_blocked_by=add_blocked_by or [],
                                 remove_blocked_by=remove_blocked_by or [], actor="cli", **fields)
    if task.plan and task.isolation == "worktree" and status is not None and task.status == "pending" \
            and task.merge_commit:
        err(f"note: #{task.id} was merged ({task.merge_commit[:10]}); the next `team run` of plan {task.plan} takes "
            f"that merge out and runs it again, with every task that needs it (`team task retry` says so up front)")
    if as_json:
        print_json(task.to_json())
    else:
        owner_txt = f", owner {task.owner}" if task.owner else ""
        deps = f", blocked by {task.blockedBy}" if task.blockedBy else ""
        out(f"Updated task #{task.id}: {task.subject} [{task.status.value}{owner_txt}{deps}]")
    return 0
