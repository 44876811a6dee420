"""The interactive lead behind ``team chat``: input router, goal state, the lead's loop.

Input routing happens *before* any model call (seed 002: control-plane
intent is never sent to the model as chat)::

    line ──► route() ──► empty            nothing
                     ├─► "/name arg"      a slash command, answered locally (no model call)
                     │                     unknown: help + the nearest command
                     ├─► "//text"         the prompt "/text" (escape for a leading slash)
                     └─► anything else    a user turn of the lead's agent loop (streamed)

``ChatSession`` is one lead session. Opening it takes the lead lock (one
lead per state root: a running ``team run`` or another chat is refused,
naming it), starts a ``TeamRuntime`` for the teammates the lead spawns (and
serves ``team spawn`` from other processes), and builds the lead: an
``Agent`` with the ``lead`` role and its tools, named ``lead``, reading the
``lead`` inbox. Closing it shuts the teammates down, saves the session
state and releases the lock.

Goal: ``/goal set TEXT | pause | resume | complete | clear`` is *control
state*. The lead reads it in the ``[team state]`` block of every request
(with the lead's current task: an in-progress task it owns), but no tool
writes it: only the user changes it, through the router.

State on disk:

    .team/transcripts/lead.jsonl      the lead's conversation (agent.py / transcript.py)
    .team/transcripts/lead-sessions/  earlier sessions' transcripts (a new session moves the last one here)
    .team/chat.json                   {"goal", "teammates", "usage"} -- goal and teammates of the
                                      last session; usage: the lead's token totals (usage.py reads it)

``resume=True`` continues the last session: the lead's transcript, the goal,
and the teammates it had (respawned; each resumes from its own transcript).
``/compact`` folds older turns without a model call (extractive summary);
the model's own ``compact`` tool and auto-compaction near the budget ask the
model for the summary.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from . import overview, usage
from .agent import DEFAULT_BUDGET, DEFAULT_MAX_STEPS, Agent, RunResult
from .errors import LeadRunning, UserError
from .fsutil import atomic_write, dumps
from .instructions import AgentState
from .lead import LeadLock, lead_info
from .llm import ChatModel, Completion
from .models import Status
from .paths import team_dir
from .pricing import Usage
from .roles import Role, check_tools, get_role
from .team import LEAD, Team
from .transcript import Transcript, transcript_path

COMMANDS: dict[str, tuple[str, str]] = {
    "help": ("/help", "this list"),
    "status": ("/status", "lead, teammates, tasks, jobs, goal and tokens"),
    "tasks": ("/tasks", "the task board"),
    "team": ("/team", "teammates: role, working/idle/dead, current task"),
    "inbox": ("/inbox", "unread messages for the lead (left unread: the lead reads them with your next line)"),
    "jobs": ("/jobs", "background jobs"),
    "cost": ("/cost", "tokens and cost per agent and per task"),
    "compact": ("/compact", "fold older turns of the lead's conversation into a summary now"),
    "goal": ("/goal [ACTION]", "set TEXT | pause | resume | complete | clear: the lead sees the goal, only you change it"),
    "quit": ("/quit", "leave: teammates shut down, the session is kept for `team chat --resume`"),
}
GOAL_STATUSES = ("active", "paused", "completed")


# ---------------------------------------------------------------- the router
@dataclass(frozen=True)
class Input:
    """One routed input line."""

    kind: Literal["empty", "command", "prompt"]
    text: str = ""
    """The prompt, or the command's argument."""
    name: str = ""
    """The command name, without the slash."""


def route(line: str) -> Input:
    s = line.strip()
    if not s:
        return Input("empty")
    if s.startswith("//"):
        return Input("prompt", s[1:])
    if s.startswith("/"):
        name, _, arg = s[1:].partition(" ")
        return Input("command", arg.strip(), name.strip().lower())
    return Input("prompt", s)


def nearest(name: str) -> str | None:
    """The command ``name`` most likely meant: a unique prefix, else the closest spelling."""
    starts = [c for c in COMMANDS if name and c.startswith(name)]
    if len(starts) == 1:
        return starts[0]
    close = difflib.get_close_matches(name, list(COMMANDS), n=1, cutoff=0.5)
    return close[0] if close else None


def help_text() -> str:
    width = max(len(u) for u, _ in COMMANDS.values())
    lines = ["commands (answered here, never sent to the model):"]
    lines += [f"  {u:<{width}}  {h}" for u, h in COMMANDS.values()]
    lines.append("anything else goes to the lead; start a line with // to send a leading slash")
    return "\n".join(lines)


def unknown_command(name: str) -> str:
    guess = nearest(name)
    head = f"unknown command /{name}" + (f" — did you mean /{guess}?" if guess else "")
    return head + "\n" + help_text()


# ---------------------------------------------------------------- the goal
@dataclass
class Goal:
    """Control state: set and changed only by the user, shown to the lead every turn."""

    text: str | None = None
    status: str = "active"

    def describe(self) -> str:
        return f"goal ({self.status}): {self.text}" if self.text else "no goal set (/goal set TEXT)"

    def apply(self, arg: str) -> str:
        """Run ``/goal ARG``; the answer to show. ``UserError`` on misuse."""
        verb, _, rest = arg.partition(" ")
        verb, rest = verb.lower(), rest.strip()
        if not verb:
            return self.describe()
        if verb == "set":
            if not rest:
                raise UserError("/goal set needs the goal's text, e.g. /goal set every module on httpx, tests green")
            self.text, self.status = rest, "active"
        elif verb == "clear":
            self.text, self.status = None, "active"
            return "goal cleared"
        elif verb in ("pause", "resume", "complete"):
            if not self.text:
                raise UserError(f"no goal to {verb}: set one with /goal set TEXT")
            self.status = {"pause": "paused", "resume": "active", "complete": "completed"}[verb]
        else:
            raise UserError(f"unknown /goal action {verb!r}: use /goal set TEXT, pause, resume, complete or clear")
        return self.describe()


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
                 on_text: Callable[[str], None] | None = None) -> Completion:
        sink = on_text or (self.session.on_text if stream else None)
        done = self.inner.complete(messages, tools, stream=stream, on_text=sink)
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
    result: RunResult | None = None
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
                 on_tool: Callable[[str, str], None] | None = None, heartbeat_every: float = 2.0):
        self.root = Path(root).absolute()
        self.workspace = Path(workspace or root).absolute()
        self.model_for, self.resume, self.budget, self.max_steps = model_for, resume, budget, max_steps
        self.on_text, self.on_tool, self.heartbeat_every = on_text, on_tool, heartbeat_every
        self.notes: list[str] = []
        """What opening the session wants the user to know (resumed turns, teammates back)."""
        self.model_calls = 0
        self._lock: LeadLock | None = None
        self.rt: Any = None
        self.agent: LeadAgent | None = None
        self.goal = Goal()
        self._teammates: list[str] = []

    # -- lifecycle ---------------------------------------------------------------
    def open(self) -> ChatSession:
        from .teammates import TeamRuntime

        tpath = transcript_path(self.root, LEAD)
        if self.resume and not Transcript(tpath).exists():
            raise UserError(f"nothing to resume: no earlier `team chat` session in {self.root}; "
                            "start one with `team chat`")
        info = lead_info(self.root)
        if info is not None:
            raise LeadRunning(lead_holder(info, self.root))
        lead_role = get_role(LEAD, self.workspace)
        self._lock = LeadLock(self.root, mode="chat").acquire()
        try:
            saved = _load_saved(self.root)
            if not self.resume:
                self._archive(tpath)
                saved = _Saved(usage=saved.usage)
            g = saved.goal or {}
            self.goal = Goal(str(g["text"]), g.get("status") if g.get("status") in GOAL_STATUSES else "active") \
                if g.get("text") else Goal()
            self._teammates = list(saved.teammates)
            self.base_usage = usage.as_usage(saved.usage) or Usage()
            team = Team(self.root)
            name = team.load().team_name if team.config.exists() else "team"
            self.rt = TeamRuntime(self.root, model_for=self.model_for, workspace=self.workspace, team_name=name,
                                  max_steps=self.max_steps, heartbeat_every=self.heartbeat_every)
            self.rt.serve_control()
            check_tools(lead_role, self.rt.registry.names())
            self.agent = LeadAgent(
                name=LEAD, role=lead_role, model=_Streamed(self.model_for(lead_role), self),
                tools=self.rt.registry.only(lead_role.tools), ctx=self.rt.tool_context(LEAD),
                transcript=Transcript(tpath), team_name=name, inbox=self._fetch, jobs=self.rt.jobs,
                roster=self.rt.team.members, max_steps=self.max_steps, budget=self.budget, on_usage=self._usage)
            self.agent.goal = self.goal
            if self.resume:
                self.notes.append(f"resumed the lead's session: {len(self.agent.messages) - 1} earlier messages")
                self._respawn(saved.teammates, team)
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
                self.rt.spawn(name, roles.get(name, "coder"))
                self.notes.append(f"{name} ({roles.get(name, 'coder')}) is back, resuming its transcript")
            except UserError as e:
                self.notes.append(f"{name} could not be restarted: {e}")

    def close(self) -> None:
        if self.rt is not None:
            self._save()
            self.rt.close()
            self.rt = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> ChatSession:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state ----------------------------------------------------------------------
    def _fetch(self, seen: set[str]) -> tuple[list[Any], Callable[[], None]]:
        batch = self.rt.bus.fetch(LEAD, seen=seen)
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
        atomic_write(team_dir(self.root) / usage.CHAT_STATE, dumps(data))

    def pending(self) -> str | None:
        """A notice about unread messages for the lead, or None."""
        msgs = self.rt.bus.peek(LEAD)
        if not msgs:
            return None
        senders = ", ".join(dict.fromkeys(m.sender for m in msgs))
        return (f"{len(msgs)} unread message(s) for the lead from {senders}: /inbox shows them; "
                "the lead reads them with your next message")

    # -- input ---------------------------------------------------------------------
    def handle(self, line: str) -> Response:
        """Route one input line: a command answered here, or a turn of the lead."""
        inp = route(line)
        if inp.kind == "empty":
            return Response()
        if inp.kind == "prompt":
            before = self.model_calls
            result = self.agent.run(inp.text)
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
        msgs = self.rt.bus.peek(LEAD)
        if not msgs:
            return Response("no unread messages for the lead")
        return Response("\n".join(overview.message_line(m) for m in msgs))

    def _cmd_jobs(self, arg: str) -> Response:
        return Response("\n".join(overview.job_lines(self.root)))

    def _cmd_cost(self, arg: str) -> Response:
        lines = usage.render(usage.root_report(self.root))
        return Response("\n".join(lines) if lines else "no model calls yet")

    def _cmd_compact(self, arg: str) -> Response:
        window = self.agent.window
        summarize, window.summarize = window.summarize, None  # a slash command never calls the model
        try:
            return Response(self.agent.compact("requested with /compact").replace(f"{self.root}/", ""))
        finally:
            window.summarize = summarize

    def _cmd_goal(self, arg: str) -> Response:
        text = self.goal.apply(arg)
        self._save()
        return Response(text)
