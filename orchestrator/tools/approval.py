"""``ask`` permissions: tool calls a person approves before they run.

A role marks risky tools or shell commands ``ask`` in its front matter
(``agents/ROLE.md``; roles/roles.py keeps the strings)::

    ask: [write_file, "bash(git push*)", "bash(rm *)", "edit_file(src/config/*)"]

Each entry is ``TOOL`` (every call of the tool asks) or ``TOOL(PATTERN)``: a
shell-style glob (``fnmatch``: ``*`` also spans ``/`` and spaces) matched
against

* a command tool's command (``bash``, ``background_run``): the whole command,
  whitespace collapsed, and each simple command in it (split on ``;``,
  ``&&``, ``||``, ``|``, ``&`` as the shell policy splits it), so
  ``bash(git push*)`` also catches ``cd repo && git push``;
* a file tool's path argument(s), relative to the workspace (``write_file``,
  ``edit_file``, ``read_file``…).

A pattern on a tool with neither is refused when the teammate starts, as is
an unknown tool name.

The pipeline (registry.py) consults the agent's ``ApprovalGate`` after every
other check -- validate before approval (seed 002): nobody is asked about a
call that would be refused anyway -- and before the handler runs. A matching
call becomes an ``ApprovalRequest`` with a bounded summary (``bash: git push
origin main``; ``write_file src/x.py (overwrite, 84 lines, 2410 chars)``),
handed to the gate's ``ask`` function, which its owner provides:

* ``team run`` and teammates in ``team chat``: a request in the request store
  (team/requests.py, via runtime/approvals.py) that ``team approve ID`` /
  ``team deny ID`` (or ``/approve`` in chat) answers from any shell; no answer
  within the approval timeout is a denial;
* the chat lead's own calls: the person at the terminal, ``y``/``n``/``always``.

A denial is the tool's result, an error observation naming the rule, who
denied it and why; the handler never runs. ``always`` approves the rule for
the rest of this agent's session (``ApprovalGate.granted``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..core.errors import UserError
from ..core.text import plural
from .base import Call, Refused, Tool, ToolContext
from .shellpolicy import _segments

RULE_RE = re.compile(r"^\s*(?P<tool>[A-Za-z_][\w.-]*)\s*(?:\((?P<pattern>.*)\))?\s*$", re.S)
SUMMARY_CHARS = 300


@dataclass(frozen=True)
class AskRule:
    """One ``ask`` entry: a tool, optionally narrowed to commands or paths matching ``pattern``."""

    tool: str
    pattern: str | None
    text: str

    @classmethod
    def parse(cls, entry: str) -> AskRule:
        m = RULE_RE.match(entry) if isinstance(entry, str) else None
        if m is None or (m.group("pattern") is not None and not m.group("pattern").strip()):
            raise UserError(f"ask entry {entry!r} must be TOOL or TOOL(PATTERN), e.g. write_file or "
                            "\"bash(git push*)\"")
        pattern = m.group("pattern")
        return cls(m.group("tool"), None if pattern is None else pattern.strip(), entry.strip())

    def matches(self, call: Call) -> bool:
        if call.tool.name != self.tool:
            return False
        if self.pattern is None:
            return True
        return any(fnmatch.fnmatchcase(s, self.pattern) for s in subjects(call))


def subjects(call: Call) -> list[str]:
    """What a ``TOOL(PATTERN)`` rule is matched against in ``call`` (module docstring); the
    ``tool_call`` hooks' matchers use the same (hookgate.py)."""
    t = call.tool
    if t.command is not None:
        command = str(getattr(call.args, t.command) or "")
        whole = " ".join(command.split())
        try:
            parts = [" ".join(seg) for seg in _segments(command)]
        except ValueError:  # unbalanced quotes: the whole text still counts
            parts = []
        return [whole, *parts]
    return [call.ctx.rel(p) for p in call.paths.values()]


def parse_rules(entries: Iterable[str], tools: dict[str, Tool], *, where: str = "ask") -> tuple[AskRule, ...]:
    """Parse a role's ``ask`` entries against the known ``tools``; ``UserError`` naming the entry."""
    rules = []
    for entry in entries:
        rule = AskRule.parse(entry)
        t = tools.get(rule.tool)
        if t is None:
            raise UserError(f"{where}: {entry!r} names {rule.tool!r}, which is not a tool; "
                            f"tools: {', '.join(sorted(tools))}")
        if rule.pattern is not None and t.command is None and not t.paths:
            raise UserError(f"{where}: {entry!r}: {rule.tool} has no command or path to match a pattern "
                            f"against; write just {rule.tool!r}")
        rules.append(rule)
    return tuple(rules)


@dataclass(frozen=True)
class ApprovalRequest:
    """What a person is asked: who, which call, under which rule (bounded text)."""

    agent: str
    tool: str
    rule: str
    summary: str
    detail: str
    task: int | None = None


@dataclass(frozen=True)
class Decision:
    """A person's answer; ``always``: approve this rule for the rest of the agent's session."""

    approve: bool
    reason: str = ""
    by: str = "user"
    always: bool = False
    request_id: str | None = None


Ask = Callable[[ApprovalRequest, ToolContext], Decision]
"""Asks a person and blocks for the answer (a timeout is a denial)."""


def _cut(text: str, limit: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(call: Call) -> tuple[str, str]:
    """(summary, detail) of a call for the person deciding: the command, or path + change shape."""
    t, args = call.tool, call.args
    if t.command is not None:
        command = str(getattr(args, t.command) or "")
        return _cut(f"{t.name}: {' '.join(command.split())}"), command
    bits = []
    for name, path in call.paths.items():
        rel = call.ctx.rel(path)
        if t.risk == "write":
            rel += " (overwrite" if path.exists() else " (new file"
            content = getattr(args, "content", None)
            if isinstance(content, str):
                rel += f", {plural(len(content.splitlines()), 'line')}, {plural(len(content), 'char')}"
            rel += ")"
        bits.append(rel if name == "path" else f"{name}={rel}")
    if not bits:
        bits.append(args.model_dump_json(exclude_none=True))
    detail = args.model_dump_json(exclude_none=True)
    return _cut(f"{t.name} {' '.join(bits)}"), detail


class ApprovalGate:
    """One agent's ``ask`` rules, the ``ask`` function that reaches a person, and its grants."""

    def __init__(self, rules: Iterable[AskRule], ask: Ask):
        self.rules = tuple(rules)
        self.ask = ask
        self.granted: set[str] = set()
        """Rules approved with ``always``: they no longer ask."""
        self.log: list[tuple[ApprovalRequest, Decision]] = []
        """Every request this gate asked, with its answer."""

    def rule_for(self, call: Call) -> AskRule | None:
        return next((r for r in self.rules if r.matches(call)), None)

    def check(self, call: Call) -> None:
        """Ask about ``call`` if a rule matches; ``Refused`` (stage ``approval``) when denied."""
        rule = self.rule_for(call)
        if rule is None or rule.text in self.granted:
            return
        summary, detail = describe(call)
        req = ApprovalRequest(call.ctx.agent, call.tool.name, rule.text, summary, detail, call.ctx.task_id)
        decision = self.ask(req, call.ctx)
        self.log.append((req, decision))
        if decision.approve:
            if decision.always:
                self.granted.add(rule.text)
            return
        rid = f" (request {decision.request_id})" if decision.request_id else ""
        why = f": {decision.reason}" if decision.reason else ""
        raise Refused(
            f"denied: this call needs approval (ask rule {rule.text!r}) and {decision.by} denied it{rid}{why}. "
            "It was not run. Do not repeat it; do the task another way, or report that you could not.",
            "approval",
        )
