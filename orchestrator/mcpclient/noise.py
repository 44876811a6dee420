"""A stdio MCP server that prints something other than JSON-RPC on stdout: one line naming it.

A server's stdout is the protocol; a server that prints a banner or a log line there (a common
mistake: ``print`` instead of logging to stderr) makes the SDK's stdio client log
"Failed to parse JSONRPC message from server" with the full pydantic traceback, and hand the
error to the session, which may log it again: raw tracebacks on the run's stderr that name
neither the server nor the fix. The SDK skips the line and goes on, so nothing is wrong with
the connection itself.

``JunkLines`` is a ``logging.Filter`` on the SDK's client loggers. A record logged on one of our
connection threads (named ``mcp-<server>``, connection.py) that carries a JSON parse error
becomes one line::

    mcp server 'time' printed a line on stdout that is not MCP (JSON-RPC); ignored: 'hello there'
    (an MCP server's stdout is the protocol: it should log to stderr)

and a second record about the same error is dropped. Records on other threads, and every other
record, pass untouched. ``install`` adds the filter once per process, when the first connection
starts (never at import); the SDK's loggers are process-wide, so the filter is too.
"""

from __future__ import annotations

import logging
import threading

LOGGERS = ("mcp.client.stdio", "mcp.client.session")
THREAD_PREFIX = "mcp-"
REPORTED = "_team_reported"
"""Set on an exception once its line was reported."""
SHOWN = 200
"""Characters of the offending line quoted."""


def _line_of(exc: BaseException) -> str | None:
    """The text a JSON parse error was given, if ``exc`` is one (pydantic's ``json_invalid``)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return None
    try:
        first = errors()[0]
    except (IndexError, TypeError, ValueError):
        return None
    if not isinstance(first, dict) or first.get("type") != "json_invalid":
        return None
    return str(first.get("input", ""))


class JunkLines(logging.Filter):
    """See the module docstring."""

    def filter(self, record: logging.LogRecord) -> bool:
        thread = record.threadName or ""
        if not thread.startswith(THREAD_PREFIX) or not record.exc_info or record.exc_info[1] is None:
            return True
        exc = record.exc_info[1]
        line = _line_of(exc)
        if line is None:
            return True
        if getattr(exc, REPORTED, False):  # the session's second record about the same line
            return False
        setattr(exc, REPORTED, True)
        quoted = line if len(line) <= SHOWN else line[:SHOWN] + "…"
        record.msg = (f"mcp server {thread[len(THREAD_PREFIX):]!r} printed a line on stdout that is not MCP "
                      f"(JSON-RPC); ignored: {quoted!r} (an MCP server's stdout is the protocol: it should log "
                      f"to stderr)")
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_installed = threading.Lock()


def install() -> None:
    """Add one ``JunkLines`` to the SDK's client loggers (idempotent)."""
    with _installed:
        loggers = [logging.getLogger(name) for name in LOGGERS]
        if any(isinstance(f, JunkLines) for f in loggers[0].filters):
            return
        junk = JunkLines()
        for logger in loggers:
            logger.addFilter(junk)
