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

Teammates work on their own threads while the prompt waits: a line of theirs
(a model call being retried, named by the agent it is for) clears the prompt
line, is printed, and the prompt is drawn again with what was typed so far
(``Console.notice``), rather than landing in the middle of the input.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
    """Streams text and keeps track of whether the cursor is at a line start. Safe across threads."""

    def __init__(self, stream: IO[str]):
        self.stream, self.at_start = stream, True
        self._lock = threading.RLock()
        self._prompt = ""  # shown by input() right now (a terminal only)

    def text(self, chunk: str) -> None:
        """Model text and lines of ours; control characters a model (or a teammate's message)
        sent are shown as escapes, never passed to the terminal (core/text.py)."""
        chunk = shown(chunk, lines=True)
        if chunk:
            with self._lock:
                self.stream.write(chunk)
                self.stream.flush()
                self.at_start = chunk.endswith("\n")

    @contextmanager
    def prompting(self, prompt: str) -> Iterator[None]:
        """``input(prompt)`` runs inside: a ``notice`` meanwhile redraws the prompt after it."""
        with self._lock:
            self._prompt = prompt
        try:
            yield
        finally:
            with self._lock:
                self._prompt, self.at_start = "", True

    def notice(self, text: str) -> None:
        """A line from another thread: above the prompt if one waits (the prompt and the input typed
        so far are drawn again below it), else like ``line``."""
        with self._lock:
            if not self._prompt:
                self.line(text)
                return
            import readline  # loaded by the loop whenever there is a prompt

            self.stream.write("\r\x1b[K" + shown(text, lines=True) + "\n" + self._prompt
                              + shown(readline.get_line_buffer()))
            self.stream.flush()

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


def _agent() -> str:
    """Whose model call this thread makes: a teammate's thread is named ``teammate-NAME``
    (runtime/teammate.py); the lead's turns run on the main thread."""
    name = threading.current_thread().name
    return name.removeprefix("teammate-") if name.startswith("teammate-") else "lead"


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
    from ..llm.endpoints import Endpoints
    from ..llm.types import LLMConfig
    from ..run.agents import max_steps_from_env

    config = LLMConfig.resolve(None, model, plan=False)
    max_steps = max_steps_from_env()
    console = Console(sys.stdout)
    # one client per model and endpoint: a role's `models:` entry gives its model's (llm/endpoints.py)
    endpoints = Endpoints(on_retry=lambda e: console.notice(f"({_agent()}: model call failed, {e})"))

    def model_for(role: Role) -> LLMClient:
        name = role.model or config.model
        return endpoints.client(name, endpoints.spec(name, role.model_spec(name)))

    def ask_user(req: ApprovalRequest) -> Decision:
        return ask_at_terminal(console, req)

    def notice(text: str) -> None:  # from a teammate's thread, maybe while the prompt waits
        console.notice(f"({text})")

    session = ChatSession(root_of(root, ctx, creates=True), model_for=model_for, resume=resume, max_steps=max_steps,
                          on_text=console.text, on_tool=console.tool, ask_user=ask_user, on_notice=notice)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        session.open()
        _loop(session, console, config.model)
    finally:
        for task in session.close():
            console.line(f"(#{task.id} {task.subject}: claimed by a teammate and not finished; released to pending)")
        endpoints.close()


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
            with console.prompting(PROMPT if tty else ""):
                line = input(PROMPT if tty else "")
        except EOFError:
            console.end_line()
            return
        except KeyboardInterrupt:
            console.line("^C (Ctrl-D or /quit to leave)")
            continue
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
