"""The ``subagent`` tool's backend, a fresh agent per call.

A subagent has an empty conversation, its own transcript (``sub<n>-<parent>``,
a name never used before in this state root), the tools of the role asked
for minus everything that reaches other agents: no inbox, no background
jobs, no teammates and no ``subagent`` tool (no nesting). It runs to its
final answer, which becomes the tool result.

``SubagentRunner`` is built with what it uses, nothing more: the state root,
the workspace (where roles are looked up), the tool registry, the model for
a role, and ``context``, which makes a subagent's ``ToolContext`` (the
runtime's: the same workspace, store and sandbox, no bus, jobs, spawner or
subagents). A subagent's shell commands may use the network only if both
its role and the agent that asked for it may: asking for a role never
widens what the caller could do.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from ..agent.loop import Agent, LoopResult
from ..agent.transcript import Transcript, transcript_path
from ..llm.types import ChatModel
from ..roles.roles import Permissions, Role, get_role
from ..tools import ToolContext, ToolRegistry
from ..tools.approval import ApprovalGate
from .budgets import Spend

NO_SUBAGENT_TOOLS = frozenset({"subagent", "spawn_teammate", "list_teammates", "idle", "send_message",
                               "broadcast", "read_inbox", "background_run", "check_background"})


class SubagentRunner:
    """``subagent`` tool backend (``tools.services.Subagents``): a fresh, non-nesting agent per call."""

    def __init__(self, *, root: Path, workspace: Path, registry: ToolRegistry,
                 model_for: Callable[[Role], ChatModel],
                 context: Callable[[str, bool, Permissions], ToolContext],
                 team_name: str = "team", max_steps: int = 20, spend: Spend | None = None,
                 guard: Callable[[Role, ToolContext], ApprovalGate | None] | None = None):
        """``spend``: a subagent's calls are charged to its caller's budget and stop at it (budgets.py);
        ``guard``: the ``ask`` gate of a subagent of a role (runtime/approvals.py): a subagent asks
        before the same calls a teammate of its role would."""
        self.spend = spend
        self.guard = guard
        self.root, self.workspace, self.registry = root, workspace, registry
        self.model_for, self.context, self.team_name, self.max_steps = model_for, context, team_name, max_steps
        self._n = itertools.count(1)

    def run(self, prompt: str, role: str, *, parent: str, network: bool = False,
            permissions: Permissions | None = None, task: int | None = None) -> LoopResult:
        """Run a fresh agent of ``role``; ``network``: whether the caller's commands may use it;
        ``permissions``: the caller's (the subagent gets what both its role and the caller have);
        ``task``: the caller's task, which the subagent's spend is counted to (budgets.py)."""
        r = get_role(role, self.workspace)
        while True:
            name = f"sub{next(self._n)}-{parent}"
            if not transcript_path(self.root, name).exists():
                break
        tools = self.registry.only([t for t in r.tools if t not in NO_SUBAGENT_TOOLS])
        spend = self.spend
        ctx = self.context(name, network and r.network, r.permissions.narrow(permissions or r.permissions))
        if self.guard is not None:
            ctx.approvals = self.guard(r, ctx)
        agent = Agent(name=name, role=r, model=self.model_for(r), tools=tools, ctx=ctx,
                      transcript=Transcript(transcript_path(self.root, name)), team_name=self.team_name,
                      max_steps=self.max_steps,
                      on_call=None if spend is None else
                      lambda usage, model: spend.add(name, usage, charge=parent, task=task, model=model),
                      limit=None if spend is None else lambda: spend.check(parent))
        return agent.run(prompt)
