"""Coordination tools: messages, background jobs, teammates, subagents, idle,
skills, compaction, the shutdown / plan-approval protocols, and the
loop-aware ``task_update``.

They reach services through the typed slots of ``ToolContext`` (the
Protocols and who provides them: ``services.py``); a missing service is an
error observation naming it (``ctx.need_*``).

``task_update`` wraps the store tool: setting the agent's *current* task
(``ctx.task_id``) to ``completed`` or ``failed`` does not write the store.
It raises the loop's finish signal; the loop ends the attempt and the
executor reports the outcome to the scheduler with the claim's epoch, so
the scheduler stays the only writer of its running tasks. Every other
update goes to the store as before.

Background jobs run like ``bash`` commands (shell.py): inside the agent's
sandbox (core/sandbox.py), which the job manager puts before the command,
so nothing the job starts outlives it, and with the one environment of
core/environ.py (the allow-list plus ``TEAM_AGENT``/``TEAM_TASK_ID``), so a
job log cannot carry the API key; the log is scrubbed of secrets when the
job ends (jobs/records.py).
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import TYPE_CHECKING

from pydantic import Field

from ..core.text import plural
from ..roles.skills import SKILL_ALWAYS, find_skill
from .base import MAX_SECONDS, ActiveSkill, Args, Call, ToolError, tool
from .shell import agent_environment, sandbox_prefix, start_dir
from .tasks import task_update as _store_task_update

if TYPE_CHECKING:
    from .registry import ToolRegistry

SUBAGENT_RESULT_CHARS = 4000


# ---------------------------------------------------------------- messages
class SendArgs(Args):
    to: str = Field(description="Recipient: a teammate's name, or 'lead'.")
    content: str = Field(min_length=1, description="The message text.")


@tool("send_message", args=SendArgs, risk="coordinate", budget=1000)
def send_message(call: Call) -> str:
    """Send a message to a teammate (or 'lead'). It reaches them before their next step."""
    a, ctx = call.args, call.ctx
    if a.to == ctx.agent:
        raise ToolError("you cannot message yourself; name a teammate or 'lead'")
    msg = ctx.need_bus().send(a.to, a.content, sender=ctx.agent)
    return f"sent to {a.to} (message {msg.id})"


class BroadcastArgs(Args):
    content: str = Field(min_length=1, description="The message text.")


@tool("broadcast", args=BroadcastArgs, risk="coordinate", budget=1000)
def broadcast(call: Call) -> str:
    """Send a message to every teammate."""
    sent = call.ctx.need_bus().broadcast(call.args.content, sender=call.ctx.agent)
    if not sent:
        return "nobody else is on the team yet; nothing sent"
    return f"broadcast to {len(sent)}: {', '.join(m.to or '?' for m in sent)}"


class NoArgs(Args):
    pass


@tool("read_inbox", args=NoArgs, risk="read", budget=12_000)
def read_inbox(call: Call) -> str:
    """Read your unread messages now (they are also delivered automatically before each step)."""
    # fetch only: the agent loop acks them once this result (with their ids) is in the transcript
    return call.ctx.need_loop().inbox_text()


# ---------------------------------------------------------------- background jobs
class BackgroundArgs(Args):
    command: str = Field(description="Shell command to run in the background, in the workspace.")
    timeout: float | None = Field(None, gt=0, le=MAX_SECONDS, description="Seconds before the job is killed.")


@tool("background_run", args=BackgroundArgs, risk="execute", budget=1000, command="command")
def background_run(call: Call) -> str:
    """Start a long-running shell command in the background and go on working. When it ends,
    a notification with its exit code and output tail arrives before your next step."""
    a, ctx = call.args, call.ctx
    jobs, prefix = ctx.need_jobs(), sandbox_prefix(ctx)
    start, _ = start_dir(ctx)  # bash's kept working directory (shell.py)
    command = a.command if start == ctx.workspace else f"cd -- {shlex.quote(str(start))} && {a.command}"
    rec = jobs.start(command, owner=ctx.agent, cwd=start, env=agent_environment(ctx),
                     timeout=a.timeout, task=ctx.task_id, prefix=prefix)
    return f"started background job {rec.id}: {a.command}\nfull log: {rec.log}; check it with check_background"


class CheckArgs(Args):
    job_id: str | None = Field(None, description="A job id; omit to list your jobs.")


@tool("check_background", args=CheckArgs, risk="read", budget=6000)
def check_background(call: Call) -> str:
    """Show one background job (status, exit code, output tail) or list yours."""
    a, ctx = call.args, call.ctx
    jobs = ctx.need_jobs()
    if a.job_id:
        r = jobs.get(a.job_id)
        code = "" if r.exit_code is None else f", exit code {r.exit_code}"
        return f"job {r.id} {r.status}{code}: {r.command}\nlog: {r.log}\n{r.tail or ''}".rstrip()
    mine = [r for r in jobs.list() if r.owner == ctx.agent]
    if not mine:
        return "you have no background jobs"
    return "\n".join(f"{r.id} {r.status}" + ("" if r.exit_code is None else f" (exit {r.exit_code})")
                     + f": {r.command}" for r in mine)


# ---------------------------------------------------------------- teammates
class SpawnArgs(Args):
    name: str = Field(description="New teammate's name (letters, digits, . _ -).")
    role: str = Field("coder", description="Role: coder, tester, reviewer, or a workspace role.")
    prompt: str | None = Field(None, description="First instruction; omit to start idle.")


@tool("spawn_teammate", args=SpawnArgs, risk="coordinate", budget=1000)
def spawn_teammate(call: Call) -> str:
    """Add a named teammate with a role; it runs its own agent loop and waits for messages and tasks."""
    a = call.args
    return call.ctx.need_spawner().add_teammate(a.name, a.role, a.prompt)


@tool("list_teammates", args=NoArgs, risk="read", budget=4000)
def list_teammates(call: Call) -> str:
    """List the team: name, role, status (working/idle/shutdown) and current task."""
    return call.ctx.need_spawner().describe()


class SubagentArgs(Args):
    prompt: str = Field(min_length=1, description="A self-contained job: the subagent sees nothing else.")
    role: str = Field("coder", description="Role of the subagent.")


@tool("subagent", args=SubagentArgs, risk="execute", budget=SUBAGENT_RESULT_CHARS + 200)
def subagent(call: Call) -> str:
    """Run a fresh agent with an empty context on a self-contained job and get its final answer
    (bounded). Use it to keep long explorations out of your own context. Subagents cannot nest."""
    a = call.args
    result = call.ctx.need_subagents().run(a.prompt, a.role, parent=call.ctx.agent, network=call.ctx.network,
                                           permissions=call.ctx.permissions, task=call.ctx.task_id)
    if len(result.result) > SUBAGENT_RESULT_CHARS:
        text = result.result[:SUBAGENT_RESULT_CHARS] + f"\n[... cut at {SUBAGENT_RESULT_CHARS} chars]"
    else:
        text = result.result or "(no answer)"
    head = f"subagent {result.status} after {plural(result.steps, 'step')}"
    return head + (f": {result.error}\n" if result.error else ":\n") + text


# ---------------------------------------------------------------- loop control
@tool("idle", args=NoArgs, risk="coordinate", budget=500)
def idle(call: Call) -> str:
    """End your turn and wait: you are woken by the next message, job notification or task."""
    call.ctx.need_loop().go_idle()
    return "going idle after this step"


@tool("compact", args=NoArgs, risk="coordinate", budget=500)
def compact(call: Call) -> str:
    """Summarize older turns of your conversation to free context (the full transcript is kept on disk)."""
    call.ctx.need_loop().request_compaction()
    return "the conversation will be compacted before your next step"


class SkillArgs(Args):
    name: str = Field(description="Skill name from the Skills list.")


@tool("load_skill", args=SkillArgs, risk="read", budget=16_000)
def load_skill(call: Call) -> str:
    """Load a skill's full procedure into the conversation before you follow it. A skill with
    allowed-tools limits your tools to those until this turn ends."""
    ctx = call.ctx
    skill, body = find_skill(ctx.workspace, call.args.name)
    head = f"# Skill: {skill.name} ({skill.path})"
    if skill.allowed_tools is None:
        ctx.skill = None
    else:
        ctx.skill = ActiveSkill(skill.name, frozenset(skill.allowed_tools) | frozenset(SKILL_ALWAYS))
        head += (f"\n[allowed-tools: {', '.join(skill.allowed_tools)}. Until this turn ends your other tools "
                 f"are refused, except {', '.join(t for t in SKILL_ALWAYS if t != 'load_skill')} and load_skill.]")
    return f"{head}\n\n{body}"


# ---------------------------------------------------------------- protocols (team/protocols.py)
class RequestShutdownArgs(Args):
    teammate: str = Field(description="The teammate to shut down.")
    reason: str = Field("", description="Why (the teammate sees it).")
    timeout: float = Field(30.0, gt=0, le=600, description="Seconds to wait for the answer.")


@tool("request_shutdown", args=RequestShutdownArgs, risk="coordinate", budget=1000)
def request_shutdown(call: Call) -> str:
    """Ask a teammate to shut down and wait for its answer: an idle teammate approves, a busy
    one may refuse with a reason. Approved means its thread has ended."""
    a, ctx = call.args, call.ctx
    if ctx.spawner is not None:
        r = ctx.spawner.request_shutdown(a.teammate, reason=a.reason, timeout=a.timeout)
    else:
        from ..team.protocols import request_shutdown as ask

        r = ask(ctx.need_bus(), a.teammate, reason=a.reason, timeout=a.timeout, sender=ctx.agent)
    verdict = "approved: it has shut down" if r.approve else "refused"
    return f"{a.teammate} {verdict} (request {r.request_id})" + (f": {r.text}" if r.text else "")


class RespondShutdownArgs(Args):
    request_id: str = Field(description="The request_id of the shutdown_request message.")
    approve: bool = Field(description="true: stop now (the current attempt ends); false: refuse.")
    reason: str = Field("", description="Why (required when refusing).")


@tool("respond_shutdown", args=RespondShutdownArgs, risk="coordinate", budget=500)
def respond_shutdown(call: Call) -> str:
    """Answer a shutdown_request from the lead: approve to stop now, or refuse with a reason
    (for example, you are in the middle of a task)."""
    a = call.args
    if not a.approve and not a.reason.strip():
        raise ToolError("give a reason when you refuse a shutdown request")
    return call.ctx.need_handshakes().respond_shutdown(a.request_id, a.approve, a.reason)


class SubmitPlanArgs(Args):
    plan: str = Field(min_length=1, description="Your plan: the files you will change and how.")


@tool("submit_plan", args=SubmitPlanArgs, risk="coordinate", budget=500)
def submit_plan(call: Call) -> str:
    """Plan mode: send your plan to the lead for approval. Write and execute tools stay refused
    until it is approved; call idle to wait for the answer."""
    return call.ctx.need_handshakes().submit_plan(call.args.plan)


class ReviewPlanArgs(Args):
    teammate: str = Field(description="Who submitted the plan.")
    request_id: str = Field(description="The request_id of its plan_approval_request message.")
    approve: bool = Field(description="true lets it write; false keeps it in plan mode.")
    feedback: str = Field("", description="What to change (sent to the teammate).")


@tool("review_plan", args=ReviewPlanArgs, risk="coordinate", budget=500)
def review_plan(call: Call) -> str:
    """Approve or reject a teammate's plan (a plan_approval_request in your inbox)."""
    from ..team.protocols import review_plan as answer
    from ..team.requests import Requests

    a, ctx = call.args, call.ctx
    bus, requests = ctx.need_bus(), Requests(ctx.root)
    on_record = next((r for r in requests.all() if r.id == a.request_id), None)
    if on_record is not None:  # in the request store (team/requests.py): answered once, by whoever is first
        if on_record.sender != a.teammate:
            raise ToolError(f"plan {a.request_id} is {on_record.sender}'s, not {a.teammate}'s")
        requests.decide(a.request_id, a.approve, by=ctx.agent, reason=a.feedback, kind="plan")
    answer(bus, a.teammate, a.request_id, a.approve, a.feedback, sender=ctx.agent)
    return f"plan {a.request_id} of {a.teammate} {'approved' if a.approve else 'rejected'}"


# ---------------------------------------------------------------- task_update
def _loop_task_update(call: Call):
    a, ctx = call.args, call.ctx
    if ctx.task_id is None or ctx.loop is None or ctx.store.resolve(a.task) != ctx.task_id:
        return _store_task_update.handler(call)
    if a.status in ("completed", "failed"):
        if a.owner is not None or a.add_blocked_by or a.remove_blocked_by:
            raise ToolError("finish your task with status and result only; change owner or "
                            "dependencies in a separate call first")
        ctx.loop.finish(a.status, a.result or "")
        return f"task #{ctx.task_id} marked {a.status}; this attempt ends after this step"
    if a.status is not None:
        raise ToolError(f"task #{ctx.task_id} is your current task: set it to completed (with a result) or "
                        f"failed (with the reason), not {a.status}")
    return _store_task_update.handler(call)


task_update = dataclasses.replace(_store_task_update, handler=_loop_task_update)

COORDINATION_TOOLS = [send_message, broadcast, read_inbox, background_run, check_background, spawn_teammate,
                      list_teammates, subagent, idle, compact, load_skill, request_shutdown, respond_shutdown,
                      submit_plan, review_plan]
HARNESS_TOOLS = ("respond_shutdown",)
"""Every teammate gets these whatever its role lists (plan-mode teammates also get submit_plan)."""


def agent_registry() -> ToolRegistry:
    """Every tool an agent may have (built-ins, with the loop-aware task_update, plus coordination)."""
    from . import ToolRegistry, builtin_tools
    from .worktree import WORKTREE_TOOLS

    tools = [t for t in builtin_tools() if t.name != "task_update"]
    return ToolRegistry([*tools, task_update, *COORDINATION_TOOLS, *WORKTREE_TOOLS])
