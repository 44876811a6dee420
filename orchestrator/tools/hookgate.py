"""``tool_call`` hooks: shell commands that see a teammate's tool call before it runs and may refuse it.

Like Claude Code's ``PreToolUse``: a plan's (or ``.team/hooks.yaml``'s) ``tool_call`` hooks,
each with an optional ``match:`` (core/hooks.py ``Matcher``: ``bash``, ``"bash(rm *)"``,
``write_file``, ``"mcp__git__*"``), run on the agent's thread, one after the other, with the
call on stdin (docs/hooks.md)::

    {"event": "tool_call", "teammate": "alice", "task": {...}, "run": {...},
     "tool": {"name": "bash", "server": null, "risk": "execute",
              "arguments": {"command": "rm -rf build"}, "call_id": "call_3"}}

The payload is scrubbed of the lead's secrets before a hook reads it (hooks/dispatch.py), so a
key the model quoted in its arguments never reaches a hook.

Where in the pipeline (registry.py): after every check that refuses a call by itself (lookup,
validate, permissions, paths, freshness, plan mode, the shell policy), so no hook is asked about
a call that would not run anyway, and before the ``ask`` approval, so no person is asked about a
call a hook refuses. Exit 0 lets the call go on; exit 2 refuses it, and the model reads the
hook's stderr as the tool's result (an error observation, stage ``hook``: the loop goes on). A
hook that crashes, times out or cannot start refuses the call too (fail closed: a guard that
could not decide must not let an unchecked call through); the model is told the guard failed,
and the run reports it like any failed hook.

The matcher's ``(PATTERN)`` is matched against the call's subjects, as the ``ask`` rules'
(approval.py ``subjects``): a command tool's command (whole, and each simple command in it), a
file tool's paths relative to the workspace; a tool with neither (an MCP tool, ``task_update``)
is matched on its arguments as compact JSON.
"""

from __future__ import annotations

from ..core.errors import TeamError
from ..core.hooks import ToolCall
from ..core.jsonutil import dumps
from ..core.models import Task
from .approval import subjects
from .base import Call, Refused, ToolContext


def tool_call(call: Call) -> ToolCall:
    """``call`` as the hooks see it and match it."""
    t = call.tool
    args = dict(call.args) if t.schema is not None else call.args.model_dump(mode="json", exclude_unset=True)
    found = subjects(call) if t.command is not None or t.paths else [dumps(args)]
    return ToolCall(name=t.name, arguments=args, risk=t.risk, call_id=call.call_id, server=t.server,
                    subjects=tuple(found))


def _task(ctx: ToolContext) -> Task | None:
    if ctx.task_id is None:
        return None
    try:
        return ctx.store.read(ctx.task_id)
    except (TeamError, OSError):  # deleted or unreadable meanwhile: the hook gets no record, the call its check
        return None


def check(call: Call) -> None:
    """Ask the ``tool_call`` hooks about ``call``; ``Refused`` (stage ``hook``) when one refuses it."""
    ctx = call.ctx
    if ctx.hooks is None or not ctx.hooks.wants("tool_call"):
        return
    verdict = ctx.hooks.tool_call(tool_call(call), teammate=ctx.agent, task=_task(ctx),
                                  limit=ctx.time_left() if ctx.deadline is not None else None)
    if not verdict.vetoed:
        return
    if verdict.failed:
        raise Refused(f"refused: the tool_call hook that guards this call failed, so it was not run: "
                      f"{verdict.feedback}. Do the task another way, or report that you could not.", "hook")
    raise Refused(f"refused by a tool_call hook (`{verdict.command}`): {verdict.feedback}\n"
                  "The call was not run. Do not repeat it; do the task another way, or report that you could not.",
                  "hook")
