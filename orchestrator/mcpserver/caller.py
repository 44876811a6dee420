"""Who a ``team mcp`` client is, what it may change, and its presence on the roster.

``team mcp --as NAME`` names the client. ``Caller`` carries that name with what it acts through
(the root's ``TaskStore``, ``Bus`` and roster) and what it may do:

* **A member.** ``join`` puts ``NAME`` on the roster as an ``external`` member (team/roster.py
  ``join_external``), so it has an inbox (``team send NAME``, ``message_send(to=NAME)``, and its
  own ``inbox_read`` by default), shows in ``team status`` with kind ``external`` and is never
  started by a lead as an LLM teammate. While the server runs, a heartbeat thread beats for it
  (``team status``: idle; once the process is gone: offline). ``--as lead`` is the lead itself:
  its inbox is ``lead``, it is never a roster member.
* **Permissions.** The same rules the roles have (roles/roles.py ``Permissions``): an external
  member acts with its roster role's ``permissions`` (``--role``, default ``coder``: create tasks
  and update its own), ``--as lead`` with all of them. A refusal is ``NotAllowed`` naming whose
  the task is; nothing is written.
* **Hooks.** ``.team/hooks.yaml`` of the root (docs/hooks.md), read once when the server starts:
  a completion through ``task_update`` asks the ``task_completed`` hooks first, and a veto
  (exit 2) refuses it with the hook's feedback; created, claimed and failed tasks and sent
  messages fire their notification hooks as in a run. A hook that fails is a line of
  ``.team/hooks.jsonl`` (stdout is the protocol: nothing is printed).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import NotAllowed
from ..core.hooks import Hooks, NoHooks
from ..hooks.config import load_hooks_file
from ..hooks.dispatch import HookDispatcher
from ..roles.roles import TASK_RIGHTS, Permissions, get_role
from ..tasks.store import TaskStore
from ..team.inbox import Bus
from ..team.roster import LEAD, Team, check_name

HEARTBEAT_EVERY = 5.0
"""Seconds between the heartbeats of a serving ``team mcp`` (``Team.stale_after`` is 30)."""
ASK_THE_LEAD = "ask the lead with message_send if it should change"


@dataclass
class Caller:
    """The state root served, who the client is and what it may change."""

    root: Path
    name: str
    role: str | None = None
    """``--role``: the role whose permissions an external member acts with (else its roster role)."""
    store: TaskStore = field(init=False)
    bus: Bus = field(init=False)
    team: Team = field(init=False)
    permissions: Permissions = field(init=False)
    hooks: Hooks = field(init=False)
    _dispatcher: HookDispatcher | None = field(init=False, default=None)
    _stop: threading.Event = field(init=False, default_factory=threading.Event)
    _beat: threading.Thread | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        check_name(self.name, "caller name (--as)")
        self.team = Team(self.root)
        self.store = TaskStore(self.root)
        self.bus = Bus(self.root, team=self.team)
        if self.is_lead:
            self.permissions = Permissions.full()
        else:
            known = next((m for m in self.team.members() if m.name == self.name), None)
            role = self.role or (known.role if known is not None else "coder")
            self.permissions = get_role(role, self.root).permissions  # an unknown role: UserError, at start
            self.role = role
        self.hooks = NoHooks()

    @property
    def is_lead(self) -> bool:
        return self.name == LEAD

    # -- serving ------------------------------------------------------------------
    def join(self) -> None:
        """Start serving: on the roster as an external member (not ``lead``), its heartbeat beating,
        the root's hooks loaded (a bad ``.team/hooks.yaml`` is a ``UserError`` here)."""
        config = load_hooks_file(self.root)
        if not self.is_lead:
            member = self.team.join_external(self.name, self.role or "coder")
            if self.role is not None and member.role != self.role:
                self.team.update(self.name, role=self.role)
            self.team.heartbeat(self.name)
            self._beat = threading.Thread(target=self._beats, name="team-mcp-heartbeat", daemon=True)
            self._beat.start()
        if config:
            self._dispatcher = HookDispatcher(config, self.root)
            self.hooks = self._dispatcher
            self.store.observer = self._dispatcher.task_observer
            self.bus.observer = self._dispatcher.message_observer

    def _beats(self) -> None:
        while not self._stop.wait(HEARTBEAT_EVERY):
            try:
                self.team.heartbeat(self.name)
            except OSError:  # the root went away or filled up: team status shows it offline, serving goes on
                continue

    def close(self) -> None:
        """Stop beating; run the hooks fired so far."""
        self._stop.set()
        if self._dispatcher is not None:
            self._dispatcher.close()

    # -- permissions --------------------------------------------------------------
    def refuse(self, why: str, *, ask: bool = True) -> NotAllowed:
        """A ``NotAllowed`` saying why, who the caller is and what it may do (``ask``: and that the
        lead may make the change)."""
        rights = ", ".join(r for r in TASK_RIGHTS if self.permissions.may(r)) or "none"
        who = "the lead" if self.is_lead else f"{self.name}, a {self.role} (task rights: {rights})"
        return NotAllowed(f"{why} (you are {who})" + (f"; {ASK_THE_LEAD}" if ask else ""))

    def need_lead(self, what: str) -> None:
        if not self.is_lead:
            raise NotAllowed(f"{what} is the lead's: serve `team mcp --as lead` for it (you are {self.name})")
