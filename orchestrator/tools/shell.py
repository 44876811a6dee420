"""The bash tool: one shell command in the workspace, with a timeout.

By the time the handler runs, the shell policy (shellpolicy.py) has accepted the
command and plan mode has been checked. The command runs as ``bash -c`` in
``ctx.workspace``, in its own process group (so a timeout kills the command
and everything it started), with stdin closed and stdout+stderr interleaved
into a file under ``ctx.outputs_dir`` — never a pipe, so a 10 MB output costs
no memory and a backgrounded child cannot hang the call. The observation is
``exit code: N`` (or the timeout) followed by the output, cut to the budget
with head + tail; when cut, the file stays and the marker names it,
otherwise it is removed. Processes the command left running in the
background are killed when it exits (long-running work belongs in
``background_run``).

The environment is the agent's minus credentials: variables whose names look
like them (``*API_KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``... the
one rule of core/redact.py) are dropped, so ``env`` cannot leak a key.
A non-zero exit is a normal result (``is_error`` stays false: the command
ran); a timeout or a failure to start is an error observation.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping

from pydantic import Field

from ..core.redact import secret_names
from .base import MAX_SECONDS, Args, Call, ToolError, ToolOutput, tool
from .bound import bound_file, output_path

BASH_BUDGET = 16_000


def clean_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours) without the credentials (core/redact.py's name rule)."""
    src = os.environ if env is None else env
    secret = set(secret_names(src))
    return {k: v for k, v in src.items() if k not in secret}


class BashArgs(Args):
    command: str = Field(description="The shell command (bash) to run in the workspace.")
    timeout: float | None = Field(
        None, gt=0, le=MAX_SECONDS, description="Seconds before the command is killed (default 120)."
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return  # the group is already empty
    finally:
        proc.wait()


@tool("bash", args=BashArgs, risk="execute", budget=BASH_BUDGET, command="command")
def bash(call: Call) -> ToolOutput:
    """Run a bash command in the workspace and return its exit code and output
    (stdout and stderr together; long output is cut to head and tail and saved in full).
    Destructive commands are refused by policy."""
    ctx, a = call.ctx, call.args
    limit = ctx.shell_timeout * 5
    timeout = max(0.001, min(a.timeout or ctx.shell_timeout, limit, ctx.time_left()))  # not past the task's time
    out_path = output_path(ctx.outputs_dir, "bash", call.call_id, ".log")
    with open(out_path, "wb") as sink:
        try:
            proc = subprocess.Popen(
                ["bash", "-c", a.command],
                cwd=ctx.workspace,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=clean_env(),
                start_new_session=True,
            )
        except OSError as e:
            out_path.unlink(missing_ok=True)
            raise ToolError(f"could not start bash: {e.strerror}") from None
        timed_out = False
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        _kill_group(proc)  # on timeout the command; otherwise leftovers it put in the background
        code = proc.returncode
    text, was_cut = bound_file(out_path, call.tool.budget - 100)
    if not was_cut:
        out_path.unlink()
    if timed_out:
        head = f"timed out after {timeout:g}s; the command and its children were killed. Output so far:\n"
    elif code < 0:
        head = f"killed by signal {-code}\n"
    else:
        head = f"exit code: {code}\n"
    body = text if text else "(no output)"
    return ToolOutput(
        head + body,
        is_error=timed_out,
        bounded=True,
        full_output=out_path if was_cut else None,
        meta={"exit_code": code, "timed_out": timed_out},
    )


SHELL_TOOLS = [bash]
