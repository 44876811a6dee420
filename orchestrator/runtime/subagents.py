"""Subagents: the ``subagent`` tool's backend, a fresh agent per call.

A subagent has an empty conversation, its own transcript (``sub<n>-<parent>``,
a name never used before in this state root), the tools of the role asked
for minus everything that reaches other agents: no inbox, no background
jobs, no teammates and no ``subagent`` tool (no nesting). It runs to its
final answer, which becomes the tool result; its tools share the runtime's
workspace and store.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from ..agent.loop import Agent, LoopResult
from ..agent.transcript import Transcript, transcript_path
from ..roles.roles import get_role

if TYPE_CHECKING:
    from .runtime import TeamRuntime

NO_SUBAGENT_TOOLS = frozenset({"subagent", "spawn_teammate", "list_teammates", "idle", "send_message",
                               "broadcast", "read_inbox", "background_run", "check_background"})


class SubagentRunner:
    """``subagent`` tool backend: a fresh, non-nesting agent per call."""

    def __init__(self, rt: TeamRuntime):
        self.rt = rt
        self._n = itertools.count(1)

    def run(self, prompt: str, role: str, *, parent: str) -> LoopResult:
        r = get_role(role, self.rt.workspace)
        while True:
            name = f"sub{next(self._n)}-{parent}"
            if not transcript_path(self.rt.root, name).exists():
                break
        ctx = self.rt.tool_context(name, subagent=True)
        tools = self.rt.registry.only([t for t in r.tools if t not in NO_SUBAGENT_TOOLS])
        agent = Agent(name=name, role=r, model=self.rt.model_for(r), tools=tools, ctx=ctx,
                      transcript=Transcript(transcript_path(self.rt.root, name)), team_name=self.rt.team_name,
                      max_steps=self.rt.subagent_steps)
        return agent.run(prompt)
