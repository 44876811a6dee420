"""Teammates at run time: agent threads inside the lead process.

    runtime.py    TeamRuntime: owns the teammates and their shared services
    teammate.py   Teammate: one named agent thread and its work queue
    handshakes.py a teammate's side of the shutdown and plan-approval protocols
    subagents.py  the ``subagent`` tool's backend: a fresh agent per call
    autoclaim.py  idle teammates claiming ready work from the task graph
"""
