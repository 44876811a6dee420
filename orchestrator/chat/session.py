"""The interactive lead behind ``team chat``: the session and the lead's loop.

Every input line goes through the router first (commands.py: ``route``,
``COMMANDS``, ``Goal``): a slash command is answered
here by ``_cmd_<name>`` without a model call, anything else is a user turn
of the lead's agent loop, streamed to ``on_text``/``on_tool``.

``ChatSession`` is one lead session. Opening it takes the lead lock (one
lead per state root: a running ``team run`` or another chat is refused,
naming it), starts a ``TeamRuntime`` for the teammates the lead spawns (and
serves ``team spawn`` from other processes), and builds the lead: an
``Agent`` with the ``lead`` role and its tools, named ``lead``, reading the
``lead`` inbox. Closing it shuts the teammates down, saves the session
state and releases the lock.

Goal: control state (chat_commands.Goal). The lead reads it in the
``[team state]`` block of every request (with the lead's current task: an
in-progress task it owns), but no tool writes it: only the user changes it,
through the router.

State on disk:

    .team/transcripts/lead.jsonl      the lead's conversation (agent/loop.py / agent/transcript.py)
    .team/transcripts/lead-sessions/  earlier sessions' transcripts (a new session moves the last one here)
    .team/chat.json                   {"goal", "teammates", "usage"} -- goal and teammates of the
                                      last session; usage: the lead's token totals (status/usage.py reads it);
                                      scrubbed of secrets (core/redact.py)

Shell commands of the lead and its teammates run in the OS sandbox
(core/sandbox.py) unless ``TEAM_SANDBOX=off``; an opt-out, or a sandbox that
cannot be set up, is among the ``notes`` shown at the start and in
``team status`` (the lead's ``lead.json``).

``resume=True`` continues the last session: the lead's transcript, the goal,
and the teammates it had (respawned; each resumes from its own transcript).
``/compact`` folds older turns without a model call (extractive summary);
the model's own ``compact`` tool and auto-compaction near the budget ask the
model for the summary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..agent.loop import DEFAULT_BUDGET, DEFAULT_MAX_STEPS, Agent, LoopResult
from ..agent.prompt import AgentState
from ..agent.transcript import Transcript, transcript_path
from ..core.errors import LeadRunning, UserError
from ..core.fsutil import atomic_write
from ..core.jsonutil import dumps
from ..core.models import Message, Status, Task
from ..core.paths import team_dir
from ..core.redact import Secrets
from ..core.sandbox import Sandbox
from ..core.text import plural
from ..llm.pricing import Usage
from ..llm.types import ChatModel, Completion
from ..roles.roles import Role, check_tools, get_role
from ..runtime.runtime import TeamRuntime
from ..status import overview, usage
from ..team.lead import LeadLock, lead_info
from ..team.roster import LEAD, Team, enrolled
from .commands import (
    COMMANDS,
    GOAL_STATUSES,
    Goal,
    help_text,
    route,
    unknown_command,
)


# ---------------------------------------------------------------- the lead
class LeadAgent(Agent):
    """The chat lead: the goal and the task it owns join the state block of every request."""

    goal: Goal | None = None

    def state(self) -> AgentState:
        st, goal = super().state(), self.goal or Goal()
        tasks, _bad = self.ctx.store.scan()
        mine = next((t for t in tasks if t.owner == self.name and t.status == Status.in_progress), None)
        label = f"{mine.label()}: {mine.subject}" if mine is not None else None
        return replace(st, task=st.task or label, goal=goal.text, goal_status=goal.status)


class _Streamed:
    """The lead's model: streamed text and tool calls go to the session's callbacks."""

    def __init__(self, inner: ChatModel, session: ChatSession):
        self.inner, self.session = inner, session

    def complete(self, messages: list[dict], tools: list[dict] | None = None, *, stream: bool = True,
                 on_text: Callable[[str], None] | None = None, deadline: float | None = None) -> Completion:
        sink = on_text or (self.session.on_text if stream else None)
        done = self.inner.complete(messages, tools, stream=stream, on_text=sink, deadline=deadline)
        if stream and self.session.on_tool is not None:
            for tc in done.tool_calls:
                self.session.on_tool(tc.name, tc.arguments)
        return done


@dataclass
class Response:
    """What the session did with one input line."""

    text: str = ""
    """Text to show (a command's answer); a prompt's answer was streamed already."""
    quit: bool = False
    result: LoopResult | None = None
    """The lead's run, for a prompt."""
    model_calls: int = 0


@dataclass
class _Saved:
    goal: dict[str, Any] | None = None
    teammates: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)


def _load_saved(root: Path) -> _Saved:
    try:
        data = json.loads((team_dir(root) / usage.CHAT_STATE).read_text())
    except (FileNotFoundError, ValueError):
        return _Saved()
    if not isinstance(data, dict):
        return _Saved()
    goal = data.get("goal") if isinstance(data.get("goal"), dict) else None
    mates = [str(n) for n in data.get("teammates") or [] if isinstance(n, str)]
    return _Saved(goal, mates, data.get("usage") or {})


def lead_holder(info: dict[str, Any], root: Path) -> str:
    """Who holds the lead lock, in words."""
    pid = info.get("pid", "?")
    if info.get("mode") == "chat":
        return f"another `team chat` (pid {pid}) is the lead of {root}; leave it first (/quit)"
    plan = f", plan {info['plan']}" if info.get("plan") else ""
    return (f"a `team run` lead (pid {pid}{plan}) holds {root}: one lead per state root; "
            f"wait for the run to finish or stop it with `kill {pid}`")


class ChatSession:
    """One interactive lead session (see the module docstring). Use as a context manager."""

    def __init__(self, root: Path, *, model_for: Callable[[Role], ChatModel], workspace: Path | None = None,
                 resume: bool = False, budget: int = DEFAULT_BUDGET, max_steps: int = DEFAULT_MAX_STEPS,
                 on_text: Callable[[str], None] | None = None,
                 on_tool: Callable[[str, str], None] | None = None, heartbeat_every: float = 2.0,
                 sandbox: Sandbox | None = None):
        """``sandbox``: where the lead's and teammates' shell commands run (default: on unless
        ``TEAM_SANDBOX=off``, core/sandbox.py)."""
        self.root = Path(root).absolute()
        self.sandbox = sandbox if sandbox is not None else Sandbox.choose(None, os.environ)
        self.workspace = Path(workspace or root).absolute()
        self.model_for, self.resume, self.budget, self.max_steps = model_for, resume, budget, max_steps
        self.secrets = Secrets.from_environ()  # never in chat.json (a goal may quote one)
        self.on_text, self.on_tool, self.heartbeat_every = on_text, on_tool, heartbeat_every
        self.notes: list[str] = []
        """What opening the session wants the user to know (resumed turns, teammates back)."""
        self.model_calls = 0
        self._lock: LeadLock | None = None
        self.rt: TeamRuntime | None = None
        self.agent: LeadAgent | None = None
        self.goal = Goal()
        self._teammates: list[str] = []

    # -- lifecycle ---------------------------------------------------------------
    def open(self) -> ChatSession:
        tpath = transcript_path(self.root, LEAD)
        if self.resume and not Transcript(tpath).exists():
            raise UserError(f"nothing to resume: no earlier `team chat` session in {self.root}; "
                            "start one with `team chat`")
        info = lead_info(self.root)
        if info is not None:
            raise LeadRunning(lead_holder(info, self.root))
        lead_role = get_role(LEAD, self.workspace)
        self._lock = LeadLock(self.root, mode="chat", sandbox=self.sandbox.state()).acquire()
        try:
            note = self.sandbox.note()
            if note is not None:
                self.notes.append(note)
            saved = _load_saved(self.root)
            if not self.resume:
                self._archive(tpath)
                saved = _Saved(usage=saved.usage)
            g = saved.goal or {}
            status = g.get("status")
            self.goal = Goal(str(g["text"]), status if isinstance(status, str) and status in GOAL_STATUSES
                             else "active") if g.get("text") else Goal()
            self._teammates = list(saved.teammates)
            self.base_usage = usage.as_usage(saved.usage) or Usage()
            team = Team(self.root)
            name = team.load().team_name if team.config.exists() else "team"
            self.rt = TeamRuntime(self.root, model_for=self.model_for, workspace=self.workspace, team_name=name,
                                  max_steps=self.max_steps, heartbeat_every=self.heartbeat_every,
                                  sandbox=self.sandbox)
            self.rt.serve_control()
            check_tools(lead_role, self.rt.registry.names())
            self.agent = LeadAgent(
                name=LEAD, role=lead_role, model=_Streamed(self.model_for(lead_role), self),
                tools=self.rt.registry.only(lead_role.tools),
                ctx=self.rt.tool_context(LEAD, network=lead_role.network),
                transcript=Transcript(tpath), team_name=name, inbox=self._fetch, jobs=self.rt.jobs,
                roster=self.rt.team.members, max_steps=self.max_steps, budget=self.budget, on_usage=self._usage)
            self.agent.goal = self.goal
            if self.resume:
                self.notes.append(f"resumed the lead's session: {plural(len(self.agent.messages) - 1, 'earlier message')}")
                self._respawn(saved.teammates, team)
            self._start_enrolled(team)
            self._save()
        except BaseException:
            self.close()
            raise
        return self

    def _archive(self, tpath: Path) -> None:
        if not tpath.exists():
            return
        d = tpath.parent / "lead-sessions"
        d.mkdir(parents=True, exist_ok=True)
        n = 1 + max((int(p.stem) for p in d.glob("*.jsonl") if p.stem.isdigit()), default=0)
        os.replace(tpath, d / f"{n:03d}.jsonl")

    def _respawn(self, names: list[str], team: Team) -> None:
        roles = {m.name: m.role for m in team.members()}
        for name in names:
            try:
                self._runtime().spawn(name, roles.get(name, "coder"))
                self.notes.append(f"{name} ({roles.get(name, 'coder')}) is back, resuming its transcript")
            except UserError as e:
                self.notes.append(f"{name} could not be restarted: {e}")

    def _start_enrolled(self, team: Team) -> None:
        """Start the members `team spawn` enrolled while no lead ran (runtime/enrol.py)."""
        for m in team.members():
            if not enrolled(m) or m.status == "shutdown" or m.name in self._runtime().mates:
                continue
            try:
                self._runtime().spawn(m.name, m.role, plan_mode=bool((m.model_extra or {}).get("plan_mode")))
                self.notes.append(f"{m.name} ({m.role}) joined: `team spawn` had enrolled it")
            except UserError as e:
                self.notes.append(f"{m.name} could not be started: {e}")

    def close(self) -> list[Task]:
        """End the session; the tasks teammates had claimed and not finished, released to pending."""
        released: list[Task] = []
        if self.rt is not None:
            self._save()
            released = self.rt.close()
            self.rt = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        return released

    def __enter__(self) -> ChatSession:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state ----------------------------------------------------------------------
    def _fetch(self, seen: set[str]) -> tuple[list[Message], Callable[[], None]]:
        batch = self._runtime().bus.fetch(LEAD, seen=seen)
        return batch.messages, batch.ack

    def _usage(self, total: Usage) -> None:
        self.model_calls = total.calls
        self._save()

    def _save(self) -> None:
        if self.agent is None or self.rt is None:
            return
        mates = list(dict.fromkeys([*self._teammates, *self.rt.mates]))
        data = {"goal": {"text": self.goal.text, "status": self.goal.status} if self.goal.text else None,
                "teammates": mates, "usage": (self.base_usage + self.agent.usage).model_dump()}
        atomic_write(team_dir(self.root) / usage.CHAT_STATE, self.secrets.scrub(dumps(data)))

    def pending(self) -> str | None:
        """A notice about unread messages for the lead, or None."""
        msgs = self._runtime().bus.peek(LEAD)
        if not msgs:
            return None
        senders = ", ".join(dict.fromkeys(m.sender for m in msgs))
        return (f"{plural(len(msgs), 'unread message')} for the lead from {senders}: /inbox shows them; "
                "the lead reads them with your next message")

    # -- input ---------------------------------------------------------------------
    @property
    def team_name(self) -> str:
        return self._runtime().team_name

    def _runtime(self) -> TeamRuntime:
        if self.rt is None:
            raise UserError("the chat session is not open yet (ChatSession.open)")
        return self.rt

    def _lead(self) -> LeadAgent:
        if self.agent is None:
            raise UserError("the chat session is not open yet (ChatSession.open)")
        return self.agent

    def handle(self, line: str) -> Response:
        """Route one input line: a command answered here, or a turn of the lead."""
        inp = route(line)
        if inp.kind == "empty":
            return Response()
        if inp.kind == "prompt":
            before = self.model_calls
            result = self._lead().run(inp.text)
            self._save()
            return Response(result=result, model_calls=self.model_calls - before)
        handler = getattr(self, f"_cmd_{inp.name}", None) if inp.name in COMMANDS else None
        if handler is None:
            return Response(unknown_command(inp.name))
        try:
            return handler(inp.text)
        except UserError as e:
            return Response(f"{e}")

    def _cmd_help(self, arg: str) -> Response:
        return Response(help_text())

    def _cmd_quit(self, arg: str) -> Response:
        return Response("bye: teammates are shutting down; `team chat --resume` continues", quit=True)

    def _cmd_status(self, arg: str) -> Response:
        lines = overview.status_lines(overview.status_data(self.root))
        return Response("\n".join([lines[0], self.goal.describe(), *lines[1:]]))

    def _cmd_tasks(self, arg: str) -> Response:
        return Response("\n".join(overview.task_lines(self.root)))

    def _cmd_team(self, arg: str) -> Response:
        return Response("\n".join(overview.member_lines(overview.status_data(self.root))))

    def _cmd_inbox(self, arg: str) -> Response:
        msgs = self._runtime().bus.peek(LEAD)
        if not msgs:
            return Response("no unread messages for the lead")
        return Response("\n".join(overview.message_line(m) for m in msgs))

    def _cmd_jobs(self, arg: str) -> Response:
        return Response("\n".join(overview.job_lines(self.root)))

    def _cmd_cost(self, arg: str) -> Response:
        lines = usage.render(usage.root_report(self.root))
        return Response("\n".join(lines) if lines else "no model calls yet")

    def _cmd_compact(self, arg: str) -> Response:
        lead = self._lead()
        window = lead.window
        summarize, window.summarize = window.summarize, None  # a slash command never calls the model
        try:
            return Response(lead.compact("requested with /compact").replace(f"{self.root}/", ""))
        finally:
            window.summarize = summarize

    def _cmd_goal(self, arg: str) -> Response:
        text = self.goal.apply(arg)
        self._save()
        return Response(text)
