"""Tool contracts for agents.

Every model tool call goes through ``ToolRegistry.call``: parse → validate →
path policy → freshness → permission policy (plan mode, shell rules) →
``tool_call`` hooks → ``ask`` approval → execute → bound → record, and always comes back as an ``Observation``
(see registry.py). Modules:

    base.py          Tool, Args, Call, ToolOutput, Observation, ToolContext, ToolError, @tool
    services.py      the typed services a tool may reach (bus, jobs, spawner, loop, ...)
    registry.py      ToolRegistry: schemas() for the model, call() the pipeline
    policy.py        path confinement, plan mode
    shellpolicy.py   the shell policy: rules a bash command must pass
    approval.py      ``ask`` rules: calls a person approves first (ApprovalGate)
    hookgate.py      ``tool_call`` hooks: shell commands that see a call first and may refuse it
    filetruth.py     read baselines; stale/partial edits refused with the changed lines
    bound.py         head + tail results, full output saved and referenced
    files.py         read_file, write_file, edit_file
    search.py        glob, grep
    shell.py         bash
    tasks.py         task_create, task_update, task_list, task_get, claim_task
    coordination.py  messages, background jobs, teammates, subagents, idle, skills, protocols
    worktree.py      worktree_create/list/status/events/enter/leave/run/keep/remove/merge (git/agentwt.py)
    mcptools.py      an MCP server's tools as Tools (server__tool, its inputSchema as the schema)

Adding a tool from another module::

    from orchestrator.tools import Args, Call, tool

    class SendArgs(Args):
        to: str
        content: str

    @tool("send_message", args=SendArgs, risk="coordinate")
    def send_message(call: Call) -> str:
        "Send a message to a teammate."
        bus = call.ctx.need_bus()      # an error observation if there is none
        ...

    registry = default_registry().add(send_message)
"""

from __future__ import annotations

from .base import (
    Args,
    Call,
    JsonArgs,
    Observation,
    Refused,
    Risk,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    tool,
)
from .filetruth import Baseline, FileTruth, StaleFile
from .registry import ToolRegistry


def builtin_tools() -> list[Tool]:
    """bash, read_file, write_file, edit_file, glob, grep and the task tools."""
    from .files import FILE_TOOLS
    from .search import SEARCH_TOOLS
    from .shell import SHELL_TOOLS
    from .tasks import TASK_TOOLS

    return [*SHELL_TOOLS, *FILE_TOOLS, *SEARCH_TOOLS, *TASK_TOOLS]


def default_registry() -> ToolRegistry:
    """A fresh registry holding the built-in tools (add more with ``.add``)."""
    return ToolRegistry(builtin_tools())


__all__ = [
    "Args",
    "Baseline",
    "Call",
    "FileTruth",
    "JsonArgs",
    "Observation",
    "Refused",
    "Risk",
    "StaleFile",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "ToolRegistry",
    "builtin_tools",
    "default_registry",
    "tool",
]
