"""``team worktree list|events|keep|remove|land``: the agents' worktrees, for people.

Agents make, enter, merge and remove worktrees with their tools (tools/worktree.py); these
commands show the same index and event log (git/agentwt.py) and let a person keep or remove
one, and take what the lead merged into the user's branch: ``land`` is ``team land``'s
procedure (git/land.py: built off to the side, refused rather than overwrite work) for the
``agents`` worktree group, refused while a worktree is still live (it would remove it).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from ..core.text import plural
from .common import JsonOpt, RootOpt, out, print_json, root_of

if TYPE_CHECKING:
    from pathlib import Path

    from ..git.agentwt import AgentWorktrees

worktree_app = typer.Typer(help="The agents' git worktrees (.team/worktrees/index.json): list, events, keep, "
                                "remove, land.", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(help="The worktree's name (see `team worktree list`).", show_default=False)]


def _registry(root: Path) -> AgentWorktrees:
    """The agents' worktree registry (imported here: other commands do not pay for git/ and tools/)."""
    from ..git.agentwt import AgentWorktrees

    return AgentWorktrees(root)


@worktree_app.command("list")
def list_cmd(ctx: typer.Context, as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Every agent worktree: name, status, branch, owner, bound task."""
    entries = _registry(root_of(root, ctx)).entries()
    if as_json:
        print_json([asdict(e) for e in entries])
        return
    if not entries:
        out("no agent worktrees yet (agents make them with worktree_create)")
        return
    for e in entries:
        out(e.line() + (f"\n    {e.path}" if e.live else ""))


@worktree_app.command("events")
def events_cmd(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show the latest N events.")] = 50,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """The worktree lifecycle log (.team/worktrees/events.jsonl), oldest first."""
    events = _registry(root_of(root, ctx)).events(limit)
    if as_json:
        print_json(events)
        return
    if not events:
        out("no worktree events yet")
    for ev in events:
        name = ev.get("worktree", {}).get("name", "")
        task = ev.get("task")
        tail = f" task #{task['id']}" if task else ""
        error = f": {str(ev['error']).splitlines()[0]}" if ev.get("error") else ""
        out(f"{ev['event']:<24} {name:<16} by {ev.get('actor', '?')}{tail}{error}")


@worktree_app.command("keep")
def keep_cmd(ctx: typer.Context, name: NameArg, root: RootOpt = None) -> None:
    """Keep worktree NAME: it stays, with its branch, until merged or removed."""
    entry = _registry(root_of(root, ctx)).keep(name, actor="cli")
    out(f"kept worktree {entry.name} at {entry.path}")


@worktree_app.command("remove")
def remove_cmd(
    ctx: typer.Context,
    name: NameArg,
    force: Annotated[bool, typer.Option("--force", help="Discard commits and changes not merged.")] = False,
    complete_task: Annotated[bool, typer.Option("--complete-task", help="Also mark its bound task completed.")]
    = False,
    root: RootOpt = None,
) -> None:
    """Remove worktree NAME and its branch (work not merged needs --force)."""
    r = root_of(root, ctx)
    reg = _registry(r)
    entry = reg.remove(name, actor="cli", force=force)
    from ..tasks.store import TaskStore
    from ..tools.worktree import unbind

    out(f"removed worktree {entry.name}" + unbind(TaskStore(r), reg, entry, complete=complete_task, actor="cli"))


@worktree_app.command("land")
def land_cmd(
    ctx: typer.Context,
    per_task: Annotated[bool, typer.Option("--per-task", help="One commit per merged worktree (default: one "
                                                               "commit for all).")] = False,
    root: RootOpt = None,
) -> None:
    """Bring what the lead merged (branch team/agents/integration) into your current branch."""
    landing, done = _registry(root_of(root, ctx)).land(actor="cli", per_task=per_task)
    out(f"landed {plural(len(done), 'worktree')} ({', '.join(e.name for e in done)}) into "
        f"{landing.intent.branch.removeprefix('refs/heads/')}: {landing.intent.old[:10]}..{landing.intent.new[:10]}")


def register(app: typer.Typer) -> None:
    """Add ``team worktree`` to ``app``."""
    app.add_typer(worktree_app, name="worktree")
