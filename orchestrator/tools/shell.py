"""The bash tool: one shell command in the workspace, inside the OS sandbox, with a timeout.

By the time the handler runs, the shell policy (shellpolicy.py) has accepted the
command and plan mode has been checked. The policy only explains refusals;
the guarantee is the sandbox (core/sandbox.py): the command runs as
``bwrap … -- bash -c COMMAND`` with the workspace writable, ``.tasks``,
``.team``, ``.git`` and the rest of the filesystem read-only, a private
``/tmp``, no network unless the agent's role allows it (``ctx.network``),
and its own PID namespace, so nothing it starts — ``setsid cmd &``
included — outlives the call. When the sandbox cannot be set up the call is
refused (stage ``sandbox``) with the fix; a session that opted out
(``sandbox: off``, ``TEAM_SANDBOX=off``) runs ``bash -c`` directly.

The working directory is kept between calls, like a terminal: a ``cd`` in one
command holds for the next (``ctx.cwd``, one per agent). It is reported back
through a pipe the harness hands the command (an ``EXIT`` trap writes
``pwd -P`` to it), so it is the directory the shell really ended in, symlinks
resolved. It is confined to the workspace: a command that ends outside it
(``cd /etc``, ``cd ..`` at the top) ran where it went — the sandbox still
applies — but the next command starts where the last one inside the
workspace left off, and the result says so. A directory that vanished
(deleted, or the agent moved to another workspace: ``ToolContext.move_to``)
puts the next command at the workspace's top, saying so. The result names
the new directory whenever it changed (``[cwd: sub/dir]``).

The command runs in its own process group (a timeout
kills it and everything it started), with stdin closed and stdout+stderr
interleaved into a pipe that this call drains through the secrets scrubber
(core/redact.py ``Scrubber``) into a file under ``ctx.outputs_dir``: the
bytes of a secret the command prints never reach the disk, and a 10 MB
output costs no memory. The observation is ``exit code: N`` (or the timeout)
followed by the output, cut to the budget with head + tail; when cut, the
file stays and the marker names it, otherwise it is removed. Processes the
command left in the background die with it (the sandbox), or are killed
with its group (no sandbox); long-running work belongs in ``background_run``.

The environment is the one every task and agent process gets
(core/environ.py): the allow-listed variables of ours, plus ``TEAM_AGENT``
and, while the agent works on a task, ``TEAM_TASK_ID``. No credential is
inherited, so ``env`` cannot show one.
A non-zero exit is a normal result (``is_error`` stays false: the command
ran); a timeout or a failure to start is an error observation.
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

from pydantic import Field

from ..core.environ import task_environment
from ..core.errors import SandboxUnavailable
from ..core.redact import Scrubber
from ..core.sandbox import await_empty, namespace_init, watched
from .base import MAX_SECONDS, Args, Call, Refused, ToolContext, ToolError, ToolOutput, tool
from .bound import bound_file, output_path

BASH_BUDGET = 16_000
READ_CHUNK = 1 << 16
TICK = 0.05
"""Seconds between checks on the command while its output is quiet."""
DRAIN = 1.0
"""Seconds to keep reading after the command ended, while something it left outside its
group (``setsid cmd &`` without a sandbox) still holds its output open."""
READ_ONLY_HINT = ("\n[sandbox: only the workspace and /tmp are writable; .tasks, .team and .git are read-only. "
                  "Change tasks with the task tools; the lead owns git state.]")
NETWORK_HINT = "\n[sandbox: this role has no network access (a role needs `network: true` in its front matter).]"
_NETWORK_ERRORS = (b"Network is unreachable", b"Temporary failure in name resolution",
                   b"Could not resolve host", b"Name or service not known")


def agent_environment(ctx: ToolContext) -> dict[str, str]:
    """The ``TEAM_*`` variables an agent's shell commands get on top of the allow-list."""
    env = {"TEAM_AGENT": ctx.agent}
    if ctx.task_id is not None:
        env["TEAM_TASK_ID"] = str(ctx.task_id)
    return env


def sandbox_prefix(ctx: ToolContext) -> list[str]:
    """The argv that confines one of ``ctx``'s commands; a refusal naming the fix when impossible."""
    try:
        return ctx.sandbox.prefix(workspace=ctx.workspace, root=ctx.root, network=ctx.network)
    except SandboxUnavailable as e:
        raise Refused(f"{e} The command was not run.", "sandbox") from None


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def start_dir(ctx: ToolContext) -> tuple[Path, str]:
    """Where the agent's next command starts (its kept ``cwd``, else the workspace), and a note
    when the kept one is no longer usable (then it is dropped)."""
    cwd = ctx.cwd
    if cwd is None:
        return ctx.workspace, ""
    if _inside(cwd, ctx.workspace) and cwd.is_dir():
        return cwd, ""
    ctx.cwd = None
    return ctx.workspace, f"[cwd: {ctx.rel(cwd)} is gone; this command ran at the workspace top]\n"


def _cwd_script(command: str, start: Path, fd: int) -> str:
    """``command`` run from ``start``, reporting the directory it ended in on ``fd``."""
    return (f"trap 'pwd -P >&{fd} 2>/dev/null' EXIT\n"
            f"cd -- {shlex.quote(str(start))} || exit 1\n{command}")


def _keep_cwd(ctx: ToolContext, start: Path, fd: int) -> str:
    """Take the directory the command reported on ``fd`` as the next start; the note to show."""
    os.set_blocking(fd, False)
    try:
        raw = os.read(fd, 8192)
    except BlockingIOError:
        raw = b""  # killed (a timeout) or its trap was replaced: the directory stays
    lines = raw.decode("utf-8", "replace").splitlines()
    if not lines:
        return ""
    end = Path(lines[-1])
    if not end.is_absolute():
        return ""
    if not _inside(end, ctx.workspace):
        where = ctx.rel(start)
        return (f"\n[cwd: the command ended in {end}, outside the workspace; the working directory stays "
                f"{where} (commands work inside the workspace {ctx.workspace} only)]")
    new = None if end == ctx.workspace else end
    if new == ctx.cwd:
        return ""
    ctx.cwd = new
    return f"\n[cwd: {ctx.rel(end)}]"


class BashArgs(Args):
    command: str = Field(description="The shell command (bash) to run in the workspace.")
    timeout: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="Seconds before the command is killed (default 120)."
    )


def _exit_fd(proc: subprocess.Popen) -> int | None:
    """A pidfd of the command's main process (readable once it exits, without reaping it)."""
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        return None  # no pidfds here: the pump checks every TICK instead


def _exited(proc: subprocess.Popen) -> bool:
    """The command's main process has exited (not reaped: its pid, the group id, stays ours)."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return  # the group is already empty


def _pump(proc: subprocess.Popen, fd: int, sink: BinaryIO, scrubber: Scrubber, timeout: float) -> bool:
    """Copy the command's output from ``fd`` to ``sink`` through ``scrubber`` until the command
    has exited and its output is closed; True when it ran past ``timeout`` (then it was killed).

    The group is killed only once the main process has exited (a zombie until ``wait``: its
    exit status is final and its pid, the group id, not reused), or at the timeout: a kill
    racing with a normal exit would turn exit code 0 into "killed by signal 9"."""
    deadline = time.monotonic() + timeout
    exit_fd = _exit_fd(proc)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if exit_fd is not None:
        poller.register(exit_fd, select.POLLIN)
    reading, exited, timed_out = True, False, False
    drain_until = float("inf")
    try:
        while reading or not exited:
            now = time.monotonic()
            if not exited and (exit_fd is None or not reading) and _exited(proc):
                exited, drain_until = True, now + DRAIN
                _kill_group(proc)  # what it left in the background (outside a sandbox)
                continue
            if not exited and now >= deadline:
                timed_out = True
                _kill_group(proc)
                deadline = float("inf")
            if now >= drain_until:
                break  # something outside its group holds the output open: stop reading
            wait = min(deadline, drain_until) - now
            if exit_fd is None or not reading:
                wait = min(wait, TICK)
            for ready, _ in poller.poll(None if wait == float("inf") else max(0.0, wait) * 1000):
                if ready == exit_fd:
                    poller.unregister(exit_fd)
                    exited, drain_until = True, time.monotonic() + DRAIN
                    _kill_group(proc)
                    continue
                chunk = os.read(fd, READ_CHUNK)
                if chunk:
                    sink.write(scrubber.feed(chunk))
                else:
                    reading = False
                    poller.unregister(fd)
    finally:
        if exit_fd is not None:
            os.close(exit_fd)
    return timed_out


@tool("bash", args=BashArgs, risk="execute", budget=BASH_BUDGET, command="command")
def bash(call: Call) -> ToolOutput:
    """Run a bash command in the workspace and return its exit code and output
    (stdout and stderr together; long output is cut to head and tail and saved in full).
    The working directory is kept between calls (a cd holds for the next command) and stays
    inside the workspace. Destructive commands are refused by policy; the command runs in a
    sandbox where only the workspace and /tmp are writable."""
    ctx, a = call.ctx, call.args
    limit = ctx.shell_timeout * 5
    timeout = max(0.001, min(a.timeout or ctx.shell_timeout, limit, ctx.time_left()))  # not past the task's time
    prefix = sandbox_prefix(ctx)
    start, gone_note = start_dir(ctx)
    cwd_note = ""
    out_path = output_path(ctx.outputs_dir, "bash", call.call_id, ".log")
    scrubber = ctx.secrets.stream()
    read_fd, write_fd = os.pipe()
    cwd_read, cwd_write = os.pipe()
    info_read, info_write = os.pipe() if prefix else (-1, -1)  # bwrap names the sandbox's first process
    init_fd: int | None = None
    try:
        with open(out_path, "wb") as sink:
            try:
                proc = subprocess.Popen(
                    [*(watched(prefix, info_write) if prefix else ()), "bash", "-c",
                     _cwd_script(a.command, start, cwd_write)],
                    cwd=start,
                    stdin=subprocess.DEVNULL,
                    stdout=write_fd,
                    stderr=subprocess.STDOUT,
                    env=task_environment(os.environ, agent_environment(ctx)),
                    start_new_session=True,
                    pass_fds=(cwd_write, *((info_write,) if prefix else ())),
                )
            except OSError as e:
                out_path.unlink(missing_ok=True)
                raise ToolError(f"could not start bash: {e.strerror}") from None
            finally:
                os.close(write_fd)
                os.close(cwd_write)
                if prefix:
                    os.close(info_write)
            try:
                if prefix:
                    init_fd = namespace_init(info_read)
                timed_out = _pump(proc, read_fd, sink, scrubber, timeout)
            finally:
                if not _exited(proc):
                    _kill_group(proc)  # the pump did not finish (our bug, or an interrupt)
                code = proc.wait()
                if init_fd is not None:
                    await_empty(init_fd)  # nothing the command started is alive when the call returns
            sink.write(scrubber.close())
        cwd_note = _keep_cwd(ctx, start, cwd_read) if not timed_out else ""
    finally:
        os.close(read_fd)
        os.close(cwd_read)
        if prefix:
            os.close(info_read)
    text, was_cut = bound_file(out_path, call.tool.budget - 300)
    if not was_cut:
        out_path.unlink()
    if timed_out:
        head = f"timed out after {timeout:g}s; the command and its children were killed. Output so far:\n"
    elif code < 0:
        head = f"killed by signal {-code}\n"
    else:
        head = f"exit code: {code}\n"
    body = text if text else "(no output)"
    if prefix and code != 0:
        raw = body.encode()
        if b"Read-only file system" in raw:
            body += READ_ONLY_HINT
        if not ctx.network and any(e in raw for e in _NETWORK_ERRORS):
            body += NETWORK_HINT
    return ToolOutput(
        gone_note + head + body + cwd_note,
        is_error=timed_out,
        bounded=True,
        full_output=out_path if was_cut else None,
        meta={"exit_code": code, "timed_out": timed_out, "sandboxed": bool(prefix)},
    )


SHELL_TOOLS = [bash]
