"""Teammates at run time: agent threads inside the lead process.

    runtime.py    TeamRuntime: owns the teammates and the services they share
    teammate.py   Teammate: one named agent thread and its work queue (own lock);
                  TeamServices and the Protocols it needs from outside
    handshakes.py a teammate's side of the shutdown and plan-approval protocols
    claims.py     ClaimLedger: claims teammates make themselves, leased, renewed, never stranded
    subagents.py  the ``subagent`` tool's backend: a fresh agent per call
    autoclaim.py  idle teammates claiming ready work from the task graph
    budgets.py    Spend: each teammate's usage against its budget and the run's
    approvals.py  ``ask`` tool calls of teammates wait in the request store for a person
    enrol.py      `team spawn` from outside: ask the running lead, else put the member on the roster

Imports point one way: runtime.py builds the others and passes them what
they use (``TeamServices`` for teammates, constructor arguments for the
subagent runner, the store for the autoclaimer); teammate.py, subagents.py
and autoclaim.py never import runtime.py.
"""
