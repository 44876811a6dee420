"""team: a multi-agent team orchestrator with a durable task graph.

The Python API (docs/api.md) is the names in ``__all__``; everything else in
the package is private, and may change without notice::

    import orchestrator as team

    root = team.open_root("work")                    # a state root: .tasks/ and .team/ under it
    setup = root.create_task("Set up", name="setup")
    root.create_task("Port a", blocked_by=["setup"])
    root.tasks(ready=True)                           # [Task #1 ...]
    result = root.run("plan.yaml", on_event=print)   # a plan, in this process: RunEvent callbacks
    root.spawn("alice", role="coder")                # a teammate (enrolled if no lead runs)
    root.send("alice", "please review #2")
    root.status().members                            # roster with liveness, unread counts

    open_root(path)   Root: tasks (create_task, task, tasks, update_task), run (a plan,
                      with on_event/on_note callbacks), spawn, send, broadcast, inbox, status
    records           Task, TaskStatus, Message, RunEvent, RunResult, TaskRun, Spawned,
                      TeamStatus, MemberStatus
    errors            TeamError and its subclasses UserError, UnknownRef, CycleError,
                      InvalidName, PlanError, LeadRunning, ConflictError, WorkFailed

The package is a set of subpackages, one concept each; imports point one way
(a package imports only those to its right)::

    {cli, api} → {run, chat, status, board} → runtime → agent → tools
        → {tasks, team, jobs, git, llm, plan, roles} → core

    core/     errors, records, paths, crash-safe files, processes, secrets, the environment
              policy and the sandbox of agent commands
    tasks/    the durable task store and graph queries (.tasks/)
    team/     roster, inboxes, the lead lock and control channel, protocols (.team/)
    jobs/     background shell jobs
    git/      git commands, worktrees and merge-back
    llm/      the model client (the only importer of openai), pricing, a scripted server
    plan/     plan.yaml: format, loading, analysis
    roles/    roles and skills
    tools/    tool contracts and the tools agents call
    agent/    the agent loop, context projection, compaction, prompt, transcripts
    runtime/  teammates, subagents, autonomous claiming
    run/      team run: runner, scheduler, executors, worktree isolation
    chat/     team chat: the interactive lead
    status/   overview, usage, doctor
    board/    team board: the live web board
    cli/      the typer commands: the only place that prints or exits
    api/      the Python API above (loaded on first use of one of its names)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = [
    "ConflictError", "CycleError", "InvalidName", "LeadRunning", "MemberStatus", "Message", "PlanError",
    "Root", "RunEvent", "RunResult", "Spawned", "Task", "TaskRun", "TaskStatus", "TeamError", "TeamStatus",
    "UnknownRef", "UserError", "WorkFailed", "__version__", "open_root",
]

if TYPE_CHECKING:
    from .api import (
        ConflictError,
        CycleError,
        InvalidName,
        LeadRunning,
        MemberStatus,
        Message,
        PlanError,
        Root,
        RunEvent,
        RunResult,
        Spawned,
        Task,
        TaskRun,
        TaskStatus,
        TeamError,
        TeamStatus,
        UnknownRef,
        UserError,
        WorkFailed,
        open_root,
    )


def __getattr__(name: str) -> object:
    """The public names, loaded from ``api/`` on first use: ``import orchestrator`` (and so every
    ``team`` command) does not pay for the API's imports."""
    if name not in __all__:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    from . import api

    value: object = getattr(api, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
