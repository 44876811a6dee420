"""Where the board listens, and ``team run --board``'s board process.

``bind`` takes 127.0.0.1 (a port in use is a ``UserError`` naming the fix,
never a traceback); the URL carries a fresh session token (``new_token``).

``team run --board`` starts a ``BoardProcess``: the socket is bound in the
run's process (so the URL is known and printed at once, and a busy port
stops the run before it starts), then handed to a child
``python -m orchestrator board --fd N --parent PID`` with the token in its
environment (``TOKEN_ENV``: never on a command line other users can read).
The child is started before the run forks its job server and has its own
session, so Ctrl-C in the terminal reaches only the run; the run stops it
when it ends, and the child also stops by itself when its parent is gone
(``os.getppid`` changes: a ``kill -9`` of the run leaves no board behind).
The run itself is unchanged: no thread, no hook, no extra work in it, and
this module imports nothing of the web stack.
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

from ..core.errors import UserError

HOST = "127.0.0.1"
TOKEN_ENV = "TEAM_BOARD_TOKEN"
"""The child board's session token (named like a credential, so core.redact scrubs it from the page)."""

def new_token() -> str:
    return secrets.token_urlsafe(24)


def bind(port: int | None) -> socket.socket:
    """A listening socket on 127.0.0.1 (``port`` None or 0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, port or 0))
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} on {HOST} is in use (another board or server?): pick another with "
                            "--port N, or leave --port out to get a free one") from None
        if e.errno == errno.EACCES:
            raise UserError(f"port {port} on {HOST}: permission denied (ports below 1024 need root); "
                            "use --port 1024 or above, or leave --port out") from None
        raise UserError(f"cannot listen on {HOST}:{port}: {e.strerror}") from None
    return sock


def url_of(sock: socket.socket, token: str) -> str:
    return f"http://{HOST}:{sock.getsockname()[1]}/?token={token}"


class BoardProcess:
    """``team run --board``: the board in a child process for as long as the run lasts (see the module docstring)."""

    def __init__(self, root: Path, *, port: int | None = None, allow_actions: bool = False):
        self.root = Path(root)
        self.allow_actions = allow_actions
        self.sock = bind(port)
        self.token = new_token()
        self.url = url_of(self.sock, self.token)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> BoardProcess:
        fd = self.sock.fileno()
        argv = [sys.executable, "-m", "orchestrator", "board", "--root", str(self.root), "--fd", str(fd),
                "--parent", str(os.getpid())]
        if self.allow_actions:
            argv.append("--allow-actions")
        try:
            self.proc = subprocess.Popen(argv, pass_fds=(fd,), env={**os.environ, TOKEN_ENV: self.token},
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         start_new_session=True)
        finally:
            self.sock.close()  # the child has its own copy
        return self

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def __enter__(self) -> BoardProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
