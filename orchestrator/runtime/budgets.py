"""What the teammates of one runtime spend, against their budgets (core/budget.py).

``Spend`` is shared by the teammates of one runtime (thread-safe). Every model call is
``add``-ed to it once its answer is in (the agent loop's ``on_call``): it goes to the durable
ledger (llm/ledger.py, ``.team/spend.jsonl``, with the run's id, the agent, the member whose
spend it is, the task and the model), which every report reads, and to the sums this runtime
checks budgets against: each teammate's usage in this run (the model server's reported usage;
llm/pricing.py prices it), its budget (its ``team:`` entry's, else its role's), and the run's
budget over all of them.

A subagent's usage is charged to the teammate that asked for it (``add(..., charge=)``): its
calls count against that teammate's budget and the subagent stops at it too (subagents.py).

``check(name)`` is asked by the agent loop before each model call (the teammate's ``limit``):
None, or which cap was reached ("alice used 1,200 of 1,000 tokens", "the run used ..."), which
the teammate turns into the attempt's failure "budget reached: ..." — or, with ``ask`` (``team
run --ask``), into a request the lead or a person answers (teammate.py).

``grant(name)`` is that answer "yes". It covers the call that asked, whatever its size: each
cap that was reached (the teammate's, the run's) becomes what was spent so far plus the cap's
original size, so the spend is under it again and the call goes ahead; when a later call
reaches the raised cap, the teammate asks again. (A grant that only added one original cap to
the cap failed the task with no further ask once a single call was larger than the cap: "dave
used 2,842 of 2,700 tokens" after two approvals.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..core.budget import Budget, over
from ..llm.ledger import Ledger
from ..llm.pricing import Usage


class Spend:
    """Per-teammate usage and budgets of one runtime (see the module docstring)."""

    def __init__(self, run: Budget | None = None, *, ask: bool = False, ask_timeout: float = 600.0,
                 on_ask: Callable[[str], None] | None = None, ledger: Ledger | None = None, run_id: str = ""):
        """``ask``: a teammate that reaches a cap asks the lead (``team run --ask``), waiting up to
        ``ask_timeout`` seconds; ``on_ask`` tells the user (the run's note). ``ledger``: where every
        call is written, as run ``run_id`` (None: kept in memory only, a teammate on a Ray node)."""
        self.run, self.ask, self.ask_timeout, self.on_ask = run, ask, ask_timeout, on_ask
        self.ledger, self.run_id = ledger, run_id
        self._lock = threading.Lock()
        self._used: dict[str, Usage] = {}  # by agent (teammates and their subagents)
        self._charge: dict[str, str] = {}  # subagent -> the teammate whose budget it spends
        self._budgets: dict[str, Budget | None] = {}
        self._raised: dict[str, Budget] = {}  # a teammate's cap as grants raised it
        self._run_raised: Budget | None = None

    def set_budget(self, name: str, budget: Budget | None) -> None:
        with self._lock:
            self._budgets[name] = budget

    def dollar_capped(self, budget: Budget | None) -> bool:
        """Whether a teammate with ``budget`` is under a dollar cap (its own, or the run's)."""
        return any(b is not None and b.dollars is not None for b in (budget, self.run))

    def budget_of(self, name: str) -> Budget | None:
        """``name``'s cap now: its budget, as grants raised it."""
        with self._lock:
            return self._cap(name)

    def run_budget(self) -> Budget | None:
        """The run's cap now: the plan's ``budget:``, as grants raised it."""
        with self._lock:
            return self._run_raised or self.run

    def add(self, agent: str, usage: Usage, *, charge: str | None = None, task: int | None = None,
            model: str = "") -> None:
        """One model call of ``agent`` (or an attempt's calls): to the ledger, then to the sums.
        ``charge``: whose budget it counts against (a subagent's: the teammate that asked for it)."""
        if self.ledger is not None:
            self.ledger.add(run=self.run_id, agent=agent, member=charge or agent, task=task, model=model, usage=usage)
        with self._lock:
            self._used[agent] = self._used.get(agent, Usage()) + usage
            if charge is not None:
                self._charge[agent] = charge

    def names(self) -> list[str]:
        """Every teammate with a budget or a spend, in the order they appeared."""
        with self._lock:
            return list(dict.fromkeys([*self._budgets, *(self._charge.get(a, a) for a in self._used)]))

    def used(self, name: str) -> Usage:
        """What ``name`` spent in this runtime, its subagents included."""
        with self._lock:
            return self._mine(name)

    def _mine(self, name: str) -> Usage:
        return sum((u for agent, u in self._used.items() if self._charge.get(agent, agent) == name), Usage())

    def total(self) -> Usage:
        with self._lock:
            return sum(self._used.values(), Usage())

    def _cap(self, name: str) -> Budget | None:
        return self._raised.get(name) or self._budgets.get(name)

    def check(self, name: str) -> str | None:
        """Which cap ``name``'s spend (or the run's) has reached; None: it may go on."""
        with self._lock:
            mine = self._mine(name)
            reached = over(self._cap(name), mine.prompt_tokens + mine.completion_tokens, mine.cost)
            if reached is not None:
                return f"{name} used {reached}"
            total = sum(self._used.values(), Usage())
            reached = over(self._run_raised or self.run, total.prompt_tokens + total.completion_tokens, total.cost)
            return f"the run used {reached}" if reached is not None else None

    def grant(self, name: str) -> None:
        """The lead (or a person) approved more: every cap ``name`` has reached, its own and the
        run's, becomes what was spent plus its original size (module docstring)."""
        with self._lock:
            mine = self._mine(name)
            own = self._budgets.get(name)
            if own is not None and over(self._cap(name), mine.prompt_tokens + mine.completion_tokens,
                                        mine.cost) is not None:
                self._raised[name] = _headroom(own, mine)
            total = sum(self._used.values(), Usage())
            if self.run is not None and over(self._run_raised or self.run,
                                             total.prompt_tokens + total.completion_tokens, total.cost) is not None:
                self._run_raised = _headroom(self.run, total)


def _headroom(original: Budget, spent: Usage) -> Budget:
    """A cap ``original``'s size above ``spent``, in each unit ``original`` caps."""
    tokens = spent.prompt_tokens + spent.completion_tokens
    return Budget(tokens=tokens + original.tokens if original.tokens is not None else None,
                  dollars=(spent.cost or 0.0) + original.dollars if original.dollars is not None else None)
