"""``team chat [--resume] [--model M] [--root DIR]``: the interactive lead.

The session itself (the lead's loop) is chat/session.py, the router and goal chat/commands.py;
this module owns the terminal: read a line, hand it to the session, print
what comes back. On a terminal there is a prompt and line editing
(readline), and the lead's answer is printed as it streams in, with one
``· tool {args}`` line per tool call. Piped stdin works the same without
the prompt, for scripts. Ctrl-D or ``/quit`` leaves cleanly (teammates shut
down, the lock is released); Ctrl-C interrupts the lead's turn, or at the
prompt just clears the line.

The model and key are resolved before anything starts (exit 2 when one is
missing), and so is the lead lock (exit 2 naming the lead that holds it).

Approvals (tools/approval.py): a call of the lead's own that its role marks
``ask`` is asked here, before it runs: ``allow? [y]es / [n]o [reason] /
[a]lways`` (``always``: that rule stops asking for the rest of the session;
end of input is a no). A teammate's ``ask`` call cannot take the prompt from
under you: a line says it waits, and ``/approve ID`` or ``/deny ID REASON``
(or ``team approve`` from another shell) answers it.
"""

from __future__ import annotations

import signal
import sys
from typing import IO, TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from ..chat.session import ChatSession
    from ..llm.client import LLMClient
    from ..roles.roles import Role
    from ..tools.approval import ApprovalRequest, Decision

from ..core.text import shown
from .common import RootOpt, root_of

PROMPT = "you> "
TOOL_ARGS_SHOWN = 100


class Console:
    """Streams text and keeps track of whether the cursor is at a line start."""

    def __init__(self, stream: IO[str]):
        self.stream, self.at_start = stream, True
        self.at_prompt = False
        """The prompt waits for a line: a notice from another thread prints the prompt again after it."""

    def text(self, chunk: str) -> None:
        """Model text and lines of ours; control characters a model (or a teammate's message)
        sent are shown as escapes, never passed to the terminal (core/text.py)."""
        chunk = shown(chunk, lines=True)
        if chunk:
            self.stream.write(chunk)
            self.stream.flush()
            self.at_start = chunk.endswith("\n")

    def end_line(self) -> None:
        if not self.at_start:
            self.text("\n")

    def line(self, text: str = "") -> None:
        self.end_line()
        self.text(text + "\n")

    def tool(self, name: str, arguments: str) -> None:
        args = " ".join(arguments.split())
        if len(args) > TOOL_ARGS_SHOWN:
            args = args[:TOOL_ARGS_SHOWN] + "…"
        self.line(f"  · {name} {args}")


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def chat_cmd(
    ctx: typer.Context,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the last lead session (and its teammates).")] = False,
    model: Annotated[str | None, typer.Option("--model", help="Model for the lead and its teammates (else $TEAM_MODEL).")] = None,
    root: RootOpt = None,
) -> None:
    """Talk to the lead: it plans, spawns teammates and delegates; /help lists the local commands."""
    from ..chat.session import ChatSession
    from ..llm.client import LLMClient
    from ..llm.types import LLMConfig
    from ..run.agents import max_steps_from_env

    config = LLMConfig.resolve(None, model)
    max_steps = max_steps_from_env()
    console = Console(sys.stdout)
    clients: dict[str, LLMClient] = {}

    def model_for(role: Role) -> LLMClient:
        name = role.model or config.model
        if name not in clients:
            clients[name] = LLMClient(config.model_copy(update={"model": name}),
                                      on_retry=lambda e: console.line(f"({e})"))
        return clients[name]

    def ask_user(req: ApprovalRequest) -> Decision:
        return ask_at_terminal(console, req)

    def notice(text: str) -> None:  # from a teammate's thread, maybe while the prompt waits
        prompting = console.at_prompt and sys.stdin.isatty()
        if prompting:
            console.text("\n")  # the cursor stands after the prompt
        console.line(f"({text})")
        if prompting:
            console.text(PROMPT)

    session = ChatSession(root_of(root, ctx), model_for=model_for, resume=resume, max_steps=max_steps,
                          on_text=console.text, on_tool=console.tool, ask_user=ask_user, on_notice=notice)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        session.open()
        _loop(session, console, config.model)
    finally:
        for task in session.close():
            console.line(f"(#{task.id} {task.subject}: claimed by a teammate and not finished; released to pending)")
        for client in clients.values():
            client.close()


ANSWERS = "allow? [y]es / [n]o [reason] / [a]lways: "


def ask_at_terminal(console: Console, req: ApprovalRequest) -> Decision:
    """Ask the person about one of the lead's ``ask`` calls; end of input (or Ctrl-C) is a no."""
    from ..tools.approval import Decision

    console.line(f"approval needed: {req.summary} (rule {req.rule})")
    while True:
        try:
            raw = input(ANSWERS if sys.stdin.isatty() else "")
        except (EOFError, KeyboardInterrupt):
            console.line("(no answer: denied)")
            return Decision(False, "no answer at the terminal")
        word, _, reason = raw.strip().partition(" ")
        word = word.lower()
        if word in ("y", "yes"):
            return Decision(True)
        if word in ("a", "always"):
            return Decision(True, always=True)
        if word in ("n", "no"):
            return Decision(False, reason.strip())
        console.line("answer y, n (optionally with a reason) or always")


def _loop(session: ChatSession, console: Console, model: str) -> None:
    tty = sys.stdin.isatty()
    if tty:
        import readline  # noqa: F401  (line editing and history for input())
    console.line(f"team chat · lead of team {session.team_name} · model {model} · "
                 "/help for commands, /quit or Ctrl-D to leave")
    for note in session.notes:
        console.line(f"({note})")
    if session.goal.text:
        console.line(f"({session.goal.describe()})")
    shown = None
    while True:
        notice = session.pending()
        if notice and notice != shown:
            console.line(f"({notice})")
        shown = notice
        try:
            console.at_prompt = True
            line = input(PROMPT if tty else "")
        except EOFError:
            console.end_line()
            return
        except KeyboardInterrupt:
            console.line("^C (Ctrl-D or /quit to leave)")
            continue
        finally:
            console.at_prompt = False
        try:
            resp = session.handle(line)
        except KeyboardInterrupt:
            console.line("(interrupted: the lead stopped this turn)")
            continue
        if resp.text:
            console.line(resp.text)
        if line.strip().lower() == "/inbox":
            shown = session.pending()  # just shown in full: no notice about the same messages
        r = resp.result
        if r is not None:
            console.end_line()
            if r.status == "failed":
                console.line(f"error: {r.error}")
            elif r.status == "interrupted":
                console.line(f"(interrupted: {r.error})")
        if resp.quit:
            return


def register(app: typer.Typer) -> None:
    """Add ``team chat`` to ``app``."""
    app.command("chat")(chat_cmd)
