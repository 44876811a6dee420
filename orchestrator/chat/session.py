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
    .team/chat.json                   {"goal", "teammates"} -- goal and teammates of the last session;
                                      scrubbed of secrets (core/redact.py)
    .team/spend.jsonl                 every model call of the lead and its teammates, as run
                                      ``chat-<id>`` of the ledger of spend (llm/ledger.py), which
                                      ``/cost`` and ``team status`` read

Shell commands of the lead and its teammates run in the OS sandbox
(core/sandbox.py) unless ``TEAM_SANDBOX=off``; an opt-out, or a sandbox that
cannot be set up, is among the ``notes`` shown at the start and in
``team status`` (the lead's ``lead.json``).

Hooks (docs/hooks.md): ``.team/hooks.yaml`` applies to the session's
teammates and tasks as in ``team run`` (the task store and the bus tell the
dispatcher; teammates ask it before a completion or going idle); the lead's
own turns fire no hook, and ``run_finished`` is ``team run``'s alone.

``resume=True`` continues the last session: the lead's transcript, the goal,
and the teammates it had (respawned; each resumes from its own transcript).
``/compact`` folds older turns without a model call (extractive summary);
the model's own ``compact`` tool and auto-compaction near the budget ask the
model for the summary.
"""

from __future__ import annotations

import json
import os
import threading
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
from ..hooks.config import load_hooks_file
from ..hooks.dispatch import HookDispatcher
from ..llm.ledger import Ledger, new_run_id
from ..llm.pricing import Usage
from ..llm.types import ChatModel, Completion
from ..roles.roles import Role, check_tools, get_role
from ..roles.skills import discover_skills
from ..runtime.approvals import gate_for
from ..runtime.budgets import Spend
from ..runtime.runtime import TeamRuntime
from ..status import doctor, overview, usage
from ..tasks.store import TaskStore
from ..team.lead import LeadLock, lead_info
from ..team.requests import Request, answer
from ..team.roster import LEAD, Team, enrolled
from ..tools import ToolContext
from ..tools.approval import ApprovalRequest, Decision
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
    store: TaskStore | None = None
    """The session's task store (its tasks are read leniently: a corrupt file is skipped, not raised)."""

    def state(self) -> AgentState:
        st, goal = super().state(), self.goal or Goal()
        tasks = self.store.scan()[0] if self.store is not None else self.ctx.store.all()
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


CHAT_STATE = "chat.json"
"""The session's state file under .team/."""


def _load_saved(root: Path) -> _Saved:
    try:
        data = json.loads((team_dir(root) / CHAT_STATE).read_text())
    except (FileNotFoundError, ValueError):
        return _Saved()
    if not isinstance(data, dict):
        return _Saved()
    goal = data.get("goal") if isinstance(data.get("goal"), dict) else None
    mates = [str(n) for n in data.get("teammates") or [] if isinstance(n, str)]
    return _Saved(goal, mates)


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
                 sandbox: Sandbox | None = None, ask_user: Callable[[ApprovalRequest], Decision] | None = None,
                 on_notice: Callable[[str], None] | None = None, approval_timeout: float | None = None):
        """``sandbox``: where the lead's and teammates' shell commands run (default: on unless
        ``TEAM_SANDBOX=off``, core/sandbox.py). ``ask_user``: asks the person at the terminal about
        one of the lead's own ``ask`` calls (y/n/always); without it they wait in the request store
        like a teammate's. ``on_notice``: told, from a teammate's thread, that a teammate's ``ask``
        call waits for ``/approve``. ``approval_timeout``: seconds such a call waits (default
        ``TEAM_APPROVAL_TIMEOUT``)."""
        self.ask_user, self.on_notice, self.approval_timeout = ask_user, on_notice, approval_timeout
        self.root = Path(root).absolute()
        self.sandbox = sandbox if sandbox is not None else Sandbox.choose(None, os.environ)
        self.workspace = Path(workspace or root).absolute()
        self.model_for, self.resume, self.budget, self.max_steps = model_for, resume, budget, max_steps
        self.secrets = Secrets.from_environ()  # never in chat.json (a goal may quote one)
        self.on_text, self.on_tool, self.heartbeat_every = on_text, on_tool, heartbeat_every
        self.notes: list[str] = []
        """What opening the session wants the user to know (resumed turns, teammates back)."""
        self.model_calls = 0
        self.spend = Spend(ledger=Ledger(self.root), run_id=new_run_id("chat-"))
        """Every model call of the session, to the ledger of spend (llm/ledger.py)."""
        self._lock: LeadLock | None = None
        self.rt: TeamRuntime | None = None
        self.agent: LeadAgent | None = None
        self.goal = Goal()
        self._teammates: list[str] = []
        self.hooks: HookDispatcher | None = None
        """``.team/hooks.yaml``'s hooks for the session's teammates and tasks (docs/hooks.md)."""
        self.hook_reports: list[str] = []
        """Hooks that crashed, hung or could not start (also in ``.team/hooks.jsonl``)."""

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
                saved = _Saved()
            g = saved.goal or {}
            status = g.get("status")
            self.goal = Goal(str(g["text"]), status if isinstance(status, str) and status in GOAL_STATUSES
                             else "active") if g.get("text") else Goal()
            self._teammates = list(saved.teammates)
            team = Team(self.root)
            name = team.load().team_name if team.config.exists() else "team"
            hooks = load_hooks_file(self.root)  # a bad file: a clear error, the lock released
            if hooks:
                self.hooks = HookDispatcher(hooks, self.root, plan="", workspace=self.workspace,
                                            report=self.hook_reports.append)
            self.rt = TeamRuntime(self.root, model_for=self.model_for, workspace=self.workspace, team_name=name,
                                  max_steps=self.max_steps, heartbeat_every=self.heartbeat_every,
                                  sandbox=self.sandbox, hooks=self.hooks, approval_timeout=self.approval_timeout,
                                  on_approval=self._approval, spend=self.spend)
            if self.hooks is not None:
                self.rt.store.observer = self.hooks.task_observer
            self.rt.serve_control()
            if self.ask_user is not None:  # the lead's subagents ask here too (they run in its turn)
                rt = self.rt
                rt.subagents.guard = lambda role, ctx: gate_for(role, rt.registry, self._ask_here)
            check_tools(lead_role, self.rt.registry.names())
            self.lead_role = lead_role
            self.agent = self._new_lead(tpath)
            if self.resume:
                self.notes.append(f"resumed the lead's session: {plural(len(self.agent.messages) - 1, 'earlier message')}")
                self._respawn(saved.teammates, team)
            self._start_enrolled(team)
            self._save()
        except BaseException:
            self.close()
            raise
        return self

    def _new_lead(self, tpath: Path) -> LeadAgent:
        """The lead's agent over the transcript at ``tpath`` (resumed when it has lines)."""
        rt, role = self._runtime(), self.lead_role
        ctx = rt.tool_context(LEAD, network=role.network, permissions=role.permissions)
        ask = rt.asker if self.ask_user is None else self._ask_here
        ctx.approvals = gate_for(role, rt.registry, ask)
        agent = LeadAgent(
            name=LEAD, role=role, model=_Streamed(self.model_for(role), self), tools=rt.registry.only(role.tools),
            ctx=ctx, transcript=Transcript(tpath), team_name=rt.team_name, inbox=self._fetch, jobs=rt.jobs,
            roster=rt.team.members, max_steps=self.max_steps, budget=self.budget, on_usage=self._usage,
            on_call=lambda u, model: self.spend.add(LEAD, u, task=None, model=model))
        agent.goal = self.goal
        agent.store = rt.store
        return agent

    def _ask_here(self, req: ApprovalRequest, ctx: ToolContext) -> Decision:
        """The lead's own ``ask`` call (or its subagent's): the person at the terminal answers
        (``ask_user``). Only the lead's turn, on the main thread, may take the terminal; a call
        from any other thread (a teammate's subagent) waits in the request store instead."""
        if self.ask_user is None or threading.current_thread() is not threading.main_thread():
            return self._runtime().asker(req, ctx)
        return self.ask_user(req)

    def _approval(self, r: Request) -> None:
        """A teammate waits: say so at the terminal (an ``ask`` call never reaches the lead's
        model; a plan reaches it by the protocol too, and whoever answers first decides)."""
        if self.on_notice is None:
            return
        if r.kind == "plan":
            self.on_notice(f"{r.sender} submitted a {r.summary}: /approve {r.id} or /deny {r.id} REASON "
                           "(the lead may answer it too)")
        else:
            self.on_notice(f"{r.sender} asks to run {r.summary} (rule {r.rule}): /approve {r.id} "
                           f"(or /approve {r.id} always) or /deny {r.id} REASON")

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
        if self.hooks is not None:
            self.hooks.close()  # what was fired has run (teammate_stopped too)
            self.hooks = None
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
                "teammates": mates}
        atomic_write(team_dir(self.root) / CHAT_STATE, self.secrets.scrub(dumps(data)))

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

    def _cmd_tools(self, arg: str) -> Response:
        lead, rt = self._lead(), self._runtime()
        gate = lead.ctx.approvals
        lines = [f"the lead's tools ({len(lead.tools)}):"]
        width = max(len(n) for n in lead.tools.names())
        for name in lead.tools.names():
            t = lead.tools.get(name)
            rules = [r.text for r in gate.rules if r.tool == name] if gate is not None else []
            ask = f"  ask: {', '.join(rules)}" if rules else ""
            lines.append(f"  {name:<{width}}  {t.risk if t is not None else '?':<10}{ask}".rstrip())
        for mate in rt.mates.values():
            if not mate.alive:
                continue
            mine = mate.agent.tools.names()
            asks = [r.text for r in mate.ctx.approvals.rules] if mate.ctx.approvals is not None else []
            lines.append(f"{mate.name} ({mate.role.name}, {len(mine)}): {', '.join(mine)}"
                         + (f"; ask: {', '.join(asks)}" if asks else ""))
        return Response("\n".join(lines))

    def _cmd_skills(self, arg: str) -> Response:
        skills = discover_skills(self.workspace)
        if not skills:
            return Response("no skills in this workspace (add skills/NAME/SKILL.md; see docs/agents.md)")
        width = max(len(s.name) for s in skills)
        return Response("\n".join([f"skills ({len(skills)}; an agent loads one with load_skill):"]
                                  + [f"  {s.name:<{width}}  {s.description}  ({s.path})" for s in skills]))

    def _cmd_reset(self, arg: str) -> Response:
        lead = self._lead()
        tpath = lead.transcript.path
        self._archive(tpath)
        self.agent = self._new_lead(tpath)
        self._save()
        kept = f"; goal and {plural(len(self._runtime().mates), 'teammate')} kept" if self._runtime().mates else "; goal kept"
        return Response(f"the lead starts a fresh conversation (the last one is kept under "
                        f"{tpath.parent.name}/lead-sessions/){kept}")

    def _cmd_doctor(self, arg: str) -> Response:
        findings = doctor.diagnose(self.root)
        if not findings:
            return Response("doctor: OK, no problems found")
        lines = [f"doctor: {plural(len(findings), 'problem')}:"]
        for f in findings:
            lines.append(f"  [{f.kind}] {f.message}" + (" (fixable)" if f.fix is not None else ""))
            if f.hint:
                lines.append(f"    → {f.hint}")
        if any(f.fix is not None for f in findings):
            lines.append("repair what is safe with `team doctor --fix` once you have left the chat (/quit)")
        return Response("\n".join(lines))

    def _cmd_approve(self, arg: str) -> Response:
        ref, _, rest = arg.partition(" ")
        if not ref:
            pending = self._runtime().requests.pending()
            if not pending:
                return Response("no pending approval requests")
            return Response("\n".join([r.line() for r in pending]
                                      + ["answer with /approve ID [always] or /deny ID REASON"]))
        rest = rest.strip()
        always = rest.lower() == "always"
        r = answer(self._runtime().requests, self._runtime().bus, ref, True, by="user",
                   reason="" if always else rest, always=always)
        return Response(f"approved {r.id}" + (" (always, for this rule)" if r.always else "")
                        + f": {r.kind} request of {r.sender}: {r.summary}")

    def _cmd_deny(self, arg: str) -> Response:
        ref, _, reason = arg.partition(" ")
        if not ref:
            raise UserError("/deny needs a request id (/approve lists them) and a reason: /deny ID REASON")
        r = answer(self._runtime().requests, self._runtime().bus, ref, False, by="user", reason=reason.strip())
        return Response(f"rejected {r.id}: {r.kind} request of {r.sender}: {r.summary}")
