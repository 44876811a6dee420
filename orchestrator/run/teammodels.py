"""Which model each teammate of a plan talks to, checked before a run writes anything.

``model_problems(lp, env)`` walks every teammate a plan can start: its ``team:`` members, each
agent task's ``assignee`` that is not one of them (with the task's role, else ``coder``) and, for a
task without an assignee, a teammate of the task's role (default ``coder``). A teammate's model is
its ``team:`` entry's, else its role's, else the run's (``--model``, the plan's ``model:``,
``$TEAM_MODEL``); its endpoint, key variable and price come from the plan's ``models:``, else its
role's (llm/endpoints.py); its budget is its ``team:`` entry's, else its role's, and the plan's
``budget:`` caps all of them together. The problems, as ``file:line: field: problem``:

* a dollar cap (the teammate's own, its role's, or the run's) over a model with no known price:
  the cap could not hold, since the cost of its calls is unknown; without this check such a run
  went on past the cap and its summary showed ``$?``. The fix is named: a ``price`` for the model
  under ``models:`` (the plan's or the role file's), or a token budget;
* a ``models:`` entry whose ``api_key_env`` names a variable that is not set;
* a URL MCP server of the plan whose ``headers`` read a variable that is not set
  (``mcp_problems``; a role's server is checked when it is connected: mcpclient/hub.py).

``team plan check`` and ``team run`` (``runner.preflight``) both ask, so a refused run leaves
nothing behind (exit 2). ``spend_warnings`` is what they say, without refusing: the plan's
``budget:`` does not see what its agent CLIs (``kind: command``) spend. A role that cannot be read is left to the run, which fails the task that
needs it naming the known roles, as before. A teammate started later (``team spawn`` during the
run) is checked by the runtime when it spawns it (runtime.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..core.budget import Budget
from ..core.errors import UserError
from ..llm.endpoints import Endpoints, price_of, unpriced
from ..plan.load import where
from ..plan.model import LoadedPlan, Loc
from ..roles.roles import Role, get_role


@dataclass(frozen=True)
class Candidate:
    """A teammate the plan may start, with where in the plan it comes from."""

    name: str
    role: str
    loc: Loc
    model: str | None = None
    budget: Budget | None = None


def candidates(lp: LoadedPlan) -> Iterator[Candidate]:
    plan = lp.plan
    members = {m.name for m in plan.team}
    for i, m in enumerate(plan.team):
        if m.kind != "llm":
            continue  # an agent CLI (kind: command) brings its own model and pays for it itself
        yield Candidate(m.name, m.role, ("team", i), m.model, m.budget)
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(plan.tasks):
        if t.kind != "agent" or t.assignee in members:
            continue
        who = t.assignee or f"a {t.role or 'coder'} teammate"
        if (who, t.role or "coder") not in seen:
            seen.add((who, t.role or "coder"))
            yield Candidate(who, t.role or "coder", ("tasks", i))


def model_problems(lp: LoadedPlan, env: Mapping[str, str] | None = None) -> list[str]:
    """See the module docstring; [] when every teammate's model can be reached and its caps hold."""
    env = os.environ if env is None else env
    if not any(t.kind == "agent" for t in lp.plan.tasks):
        return []
    cwd = lp.plan.defaults.cwd
    workspace = (lp.base / cwd).resolve() if cwd else lp.base
    endpoints = Endpoints(lp.plan.models, env=env)
    run_cap = lp.plan.budget is not None and lp.plan.budget.dollars is not None
    out: list[str] = []
    roles: dict[str, Role | None] = {}

    for c in candidates(lp):
        if c.role not in roles:
            try:
                roles[c.role] = get_role(c.role, workspace)
            except UserError:
                roles[c.role] = None  # left to the run (see the module docstring)
        role = roles[c.role]
        model = c.model or (role.model if role is not None else None) or lp.model
        if not model:
            continue  # load_plan said so already (agent tasks need a model)
        spec = endpoints.spec(model, role.model_spec(model) if role is not None else None)
        if spec is not None and spec.api_key_env and not env.get(spec.api_key_env, "").strip():
            line = f"{where(lp, c.loc)}: {c.name} talks to model {model!r}, whose key is read from ${spec.api_key_env} " \
                   f"(models.{model}.api_key_env), which is not set: export it"
            if line not in out:
                out.append(line)
        if price_of(model, spec) is not None:
            continue
        own = c.budget if c.budget is not None else (role.budget if role is not None else None)
        if own is not None and own.dollars is not None:
            at = where(lp, c.loc + ("budget",)) if c.budget is not None else \
                f"{role.path if role is not None else c.role}: budget"
            out.append(f"{at}: {unpriced(c.name, model)}")
        elif run_cap:
            out.append(f"{where(lp, ('budget',))}: the plan's dollar budget covers every teammate, and "
                       f"{unpriced(c.name, model)} (line {where(lp, c.loc).removeprefix(f'{lp.path}:')})")
    return out


def spend_warnings(lp: LoadedPlan) -> list[str]:
    """A plan ``budget:`` with ``kind: command`` members: an agent CLI calls its own model with its own key,
    which reaches no ledger of ours (llm/ledger.py), so the budget counts only the LLM teammates' calls.
    A warning, not a refusal (the CLI may cap itself); ``team plan check``, ``--dry-run`` and ``team run``
    say it once."""
    clis = [m.name for m in lp.plan.command_members()]
    if lp.plan.budget is None or not clis:
        return []
    who = f"{clis[0]} is an agent CLI" if len(clis) == 1 else f"{', '.join(clis)} are agent CLIs"
    return [f"warning: {where(lp, ('budget',))}: {who} (kind: command), calling {'its' if len(clis) == 1 else 'their'} "
            f"own model with {'its' if len(clis) == 1 else 'their'} own key: team does not see that spend, so the "
            f"plan's budget counts only the LLM teammates' calls; cap {'it' if len(clis) == 1 else 'them'} in the "
            f"CLI's own settings"]


def mcp_problems(lp: LoadedPlan, env: Mapping[str, str] | None = None) -> list[str]:
    """The plan's URL MCP servers whose ``headers`` read a variable ``env`` does not set."""
    env = os.environ if env is None else env
    out = []
    for i, spec in enumerate(lp.plan.mcp_servers):
        missing = [n for n in spec.header_vars() if not env.get(n, "").strip()]
        if missing:
            out.append(f"{where(lp, ('mcp_servers', i, 'headers'))}: mcp server {spec.name!r} sends "
                       f"{', '.join('$' + n for n in missing)} in its headers, which is not set: export it")
    return out
