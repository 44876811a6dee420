"""What the teammates of one runtime spend, against their budgets (core/budget.py).

``Spend`` is a ledger shared by the teammates of one runtime (thread-safe):
each teammate's ``Usage`` in this runtime (the model server's reported
usage, summed by its agent loop; llm/pricing.py prices it), its budget (its
``team:`` entry's, else its role's), and the run's budget over all of them.

A subagent's usage is charged to the teammate that asked for it
(``record(..., charge=)``): its calls count against that teammate's budget
and the subagent stops at it too (subagents.py).

``check(name)`` is asked by the agent loop before each model call (the
teammate's ``limit``): None, or which cap was reached ("alice used 1,200 of
1,000 tokens", "the run used ..."), which the teammate turns into the
attempt's failure "budget reached: ..." — or, with ``ask`` (``team run
--ask``), into a request in the lead's inbox (teammate.py). ``grant(name)``
is the lead's answer "yes": the teammate's caps (and the run's) are raised
by their size once more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.budget import Budget, over
from ..llm.pricing import Usage


class Spend:
    """Per-teammate usage and budgets of one runtime (see the module docstring)."""

    def __init__(self, run: Budget | None = None, *, ask: bool = False, ask_timeout: float = 600.0,
                 on_ask: Callable[[str], None] | None = None):
        """``ask``: a teammate that reaches a cap asks the lead (``team run --ask``), waiting up to
        ``ask_timeout`` seconds; ``on_ask`` tells the user (the run's note)."""
        self.run, self.ask, self.ask_timeout, self.on_ask = run, ask, ask_timeout, on_ask
        self._lock = threading.Lock()
        self._used: dict[str, Usage] = {}  # by agent (teammates and their subagents)
        self._charge: dict[str, str] = {}  # subagent -> the teammate whose budget it spends
        self._budgets: dict[str, Budget | None] = {}
        self._grants: dict[str, int] = {}
        self._run_grants = 0

    def set_budget(self, name: str, budget: Budget | None) -> None:
        with self._lock:
            self._budgets[name] = budget

    def budget_of(self, name: str) -> Budget | None:
        with self._lock:
            return self._scaled(self._budgets.get(name), 1 + self._grants.get(name, 0))

    def record(self, name: str, usage: Usage, *, charge: str | None = None) -> None:
        """``usage``: agent ``name``'s total so far in this runtime (replaces the last one);
        ``charge``: whose budget it counts against (a subagent's: the teammate that asked for it)."""
        with self._lock:
            self._used[name] = usage
            if charge is not None:
                self._charge[name] = charge

    def names(self) -> list[str]:
        """Every teammate with a budget or a spend, in the order they appeared."""
        with self._lock:
            return list(dict.fromkeys([*self._budgets, *(self._charge.get(a, a) for a in self._used)]))

    def used(self, name: str) -> Usage:
        """What ``name`` spent, its subagents included."""
        with self._lock:
            return self._mine(name)

    def _mine(self, name: str) -> Usage:
        return sum((u for agent, u in self._used.items() if self._charge.get(agent, agent) == name), Usage())

    def total(self) -> Usage:
        with self._lock:
            return sum(self._used.values(), Usage())

    def check(self, name: str) -> str | None:
        """Which cap ``name``'s spend (or the run's) has reached; None: it may go on."""
        with self._lock:
            mine = self._mine(name)
            budget = self._scaled(self._budgets.get(name), 1 + self._grants.get(name, 0))
            reached = over(budget, mine.prompt_tokens + mine.completion_tokens, mine.cost)
            if reached is not None:
                return f"{name} used {reached}"
            run = self._scaled(self.run, 1 + self._run_grants)
            total = sum(self._used.values(), Usage())
            reached = over(run, total.prompt_tokens + total.completion_tokens, total.cost)
            return f"the run used {reached}" if reached is not None else None

    def grant(self, name: str) -> None:
        """The lead approved more: the caps ``name`` reached grow by their size once more."""
        with self._lock:
            mine = self._mine(name)
            budget = self._scaled(self._budgets.get(name), 1 + self._grants.get(name, 0))
            if over(budget, mine.prompt_tokens + mine.completion_tokens, mine.cost) is not None:
                self._grants[name] = self._grants.get(name, 0) + 1
            else:
                self._run_grants += 1

    @staticmethod
    def _scaled(budget: Budget | None, times: int) -> Budget | None:
        if budget is None or times == 1:
            return budget
        return Budget(tokens=budget.tokens * times if budget.tokens is not None else None,
                      dollars=budget.dollars * times if budget.dollars is not None else None)
