"""``team spawn`` from outside the lead: ask the running lead, else enrol the member.

A teammate is a thread of the lead process (runtime.py), so while a lead runs,
``spawn`` asks it through the control channel (team/control.py) and returns
its answer: the teammate is started, in the lead's process.

With no lead running, ``spawn`` *enrols* the member instead: the role is
checked (an unknown role is refused, naming the known ones), the member is
put on the roster (``.team/config.json``: idle, ``"enrolled": true``)
and a ``prompt`` waits in its inbox as a message from ``lead``. From then on
the member is a recipient (``team send alice …`` works) and the next lead
starts it: ``team chat`` when it opens (chat/session.py), ``team run`` when a
task names it as ``assignee`` (runtime.py takes the role from the roster).
``team status`` shows it as not started yet.

Both ways return a ``Spawned``: ``pid`` is the hosting lead's, ``None`` when
the member was enrolled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.errors import InvalidName
from ..roles.roles import get_role
from ..team.control import request
from ..team.inbox import Bus
from ..team.lead import lead_info
from ..team.roster import LEAD, Team, check_name


@dataclass(frozen=True)
class Spawned:
    """What ``spawn`` did."""

    name: str
    role: str
    pid: int | None
    """The lead process the teammate runs in; ``None``: enrolled, started by the next lead."""
    prompt: bool = False
    """A first instruction was given (sent to it, or waiting in its inbox)."""

    @property
    def started(self) -> bool:
        return self.pid is not None


def spawn(root: Path, name: str, role: str = "coder", prompt: str | None = None, *, plan_mode: bool = False,
          timeout: float = 15.0, workspace: Path | None = None) -> Spawned:
    """Start teammate ``name`` in the running lead, or enrol it when no lead runs (see above).

    Raises ``InvalidName`` for a bad name, ``UserError`` for an unknown role or a lead that
    refuses, ``WorkFailed`` when the lead does not answer within ``timeout`` seconds."""
    check_name(name)
    if name == LEAD:
        raise InvalidName("'lead' is the lead's own name; pick another teammate name")
    Team(root).check_startable(name)  # an MCP client (kind external) is a member no lead starts
    if lead_info(root) is not None:
        reply = request(root, "spawn", {"name": name, "role": role, "prompt": prompt, "plan_mode": plan_mode},
                        timeout=timeout)
        return Spawned(str(reply["name"]), str(reply["role"]), int(reply["pid"]), prompt=bool(prompt))
    get_role(role, workspace if workspace is not None else root)
    team = Team(root)
    team.add(name, role, status="idle", exist_ok=True, task=None, enrolled=True, plan_mode=True if plan_mode else None)
    if prompt:
        Bus(root, team=team).send(name, prompt, sender=LEAD)
    return Spawned(name, role, None, prompt=bool(prompt))
