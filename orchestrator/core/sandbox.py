"""The OS sandbox every agent shell command runs in: bubblewrap.

The shell policy (tools/shellpolicy.py) reads a command's text and explains
refusals to the model; it cannot confine a shell (``sh -xc 'rm -rf .tasks'``,
``find . -delete`` ... walk around any text rule). This module is the
guarantee. An agent's ``bash`` command and its ``background_run`` job run as
``bwrap FLAGS -- COMMAND`` (``Sandbox.prefix``), where for the agent's
workspace ``W`` and state root ``R``::

    --ro-bind / /              the whole filesystem read-only ...
    --dev /dev --proc /proc    a minimal /dev, the /proc of its own PID namespace
    --tmpfs /tmp               a private, writable /tmp (TMPDIR=/tmp), gone afterwards
    --ro-bind T T              ... in which what the agent's commands run from stays visible,
                               read-only: the directories on PATH, the interpreter's prefix
                               and team's own code, when they lie under /tmp (``kept``: a
                               checkout or a virtualenv in /tmp, as on many CI machines)
    --bind W W                 ... but the workspace, writable
    --ro-bind P P              ... except, read-only again, each of R/.tasks, R/.team,
                               W/.tasks, W/.team, the git directory of W and of R (a
                               linked worktree's own git dir and the common dir too) that
                               lies inside W or under /tmp (``protected``); R/.tasks or
                               R/.team that does not exist yet inside W is covered by an
                               empty read-only tmpfs (bwrap leaves the empty directory
                               behind), so nothing can be planted there either
    --unshare-pid --new-session --die-with-parent
                               its own PID namespace: when the command's first process
                               exits, or bwrap is killed (timeout, kill, the thread that
                               started it ending), the kernel kills everything in it,
                               ``setsid cmd &`` and double forks included
    --unshare-net              no network but its own loopback, unless the agent's role
                               says ``network: true``
    --unshare-user --disable-userns --cap-drop ALL
                               no capabilities, also as root, and no new user namespace
                               to get some back: ``mount -o remount,rw`` and ``umount``
                               fail, so the read-only mounts stay read-only
    --unshare-ipc --unshare-uts --unshare-cgroup-try

Hard links out of a read-only mount fail (``EXDEV``: a link never crosses
mounts); a symlink created inside the workspace that points into ``.tasks``
leads to the same read-only mount. Output goes to the file descriptors the
caller passes (the bash tool's pipe, a job's log), opened outside.

Whether there is a sandbox is decided once per session (``Sandbox.choose``):
on, unless the user opted out explicitly, with ``sandbox: off`` in the plan or
``TEAM_SANDBOX=off`` in the environment (``team chat``; it applies to
``team run`` too). On, it needs a working ``bwrap``: the first command probes
it once (``problem``: a trial run of the same flags, ~5 ms). Where it cannot be
set up, every agent shell command is refused with ``SandboxUnavailable``, whose
message names the fix (install ``bubblewrap``, or opt out). ``state`` says
which of the three it is, for ``team status`` and the start of a run.
Plan shell tasks do not go through here: they are the user's own commands,
run by the thousand (jobs/ contains them).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from .environ import allowed
from .errors import SandboxUnavailable, UserError

SandboxSetting = Literal["on", "off"]
ENV_SWITCH = "TEAM_SANDBOX"
STATE_DIRS = (".tasks", ".team")
PRIVATE_TMP = Path("/tmp")
PROBE_TIMEOUT = 10.0

FIX = ("Install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; as a non-root user it also needs "
       "unprivileged user namespaces), or run agents without a sandbox on purpose: `sandbox: off` in the plan, "
       f"or {ENV_SWITCH}=off for `team chat`.")

_NAMESPACES = ("--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--unshare-user", "--disable-userns", "--cap-drop", "ALL")
_BASE_MOUNTS = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", str(PRIVATE_TMP),
                "--setenv", "TMPDIR", str(PRIVATE_TMP))


def _inside(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def git_dirs(worktree: Path) -> list[Path]:
    """The git directories of ``worktree``: ``.git``, or for a linked worktree (``.git`` a file
    saying ``gitdir: X``) its own git dir ``X`` and the common dir ``X/commondir`` names."""
    dot = worktree / ".git"
    if dot.is_dir():
        return [dot]
    try:
        first = dot.read_text(encoding="utf-8", errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return []
    if not first.startswith("gitdir:"):
        return []
    own = (worktree / first.removeprefix("gitdir:").strip()).resolve()
    dirs = [own]
    try:
        common = (own / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return dirs
    return [*dirs, (own / common).resolve()] if common else dirs


def kept(path_var: str | None = None) -> list[Path]:
    """What the private /tmp would hide that an agent's commands run from: the directories on
    ``PATH`` (default: ours), the interpreter's prefix and the folder holding the ``orchestrator``
    package, where they lie under /tmp; outermost only, shortest first."""
    here = Path(__file__).resolve().parents[2]  # the folder that holds orchestrator/
    entries = (os.environ.get("PATH", "") if path_var is None else path_var).split(os.pathsep)
    found: list[Path] = []
    for raw in [*entries, sys.prefix, str(here)]:
        if not raw or not os.path.isabs(raw):
            continue
        real = Path(raw).resolve()
        if real != PRIVATE_TMP and _inside(real, PRIVATE_TMP) and real.is_dir():
            found.append(real)
    outer = sorted(set(found), key=lambda p: len(p.parts))
    return [p for i, p in enumerate(outer) if not any(_inside(p, q) for q in outer[:i])]


def protected(workspace: Path, root: Path) -> list[tuple[Path, bool]]:
    """The state and git directories to make read-only inside the sandbox, as ``(path, exists)``,
    parents first.

    Only those the sandbox would otherwise leave writable (inside the workspace) or hide (under
    the private /tmp) need a mount; the workspace itself and its ancestors cannot be covered
    (that would cover the workspace). A state directory of ``root`` inside the workspace that
    does not exist yet comes with ``exists`` False (covered empty, so nothing can be planted
    there for the lead to read later)."""
    workspace, root = workspace.resolve(), root.resolve()
    state = [root / name for name in STATE_DIRS]
    others = [workspace / name for name in STATE_DIRS]  # a workspace's own state from other roots
    found: dict[Path, bool] = {}
    for path in [*state, *others, *git_dirs(workspace), *git_dirs(root)]:
        real = path.resolve()
        if _inside(workspace, real):
            continue  # the workspace is this directory or lies inside it
        writable = _inside(real, workspace)
        if not (writable or _inside(real, PRIVATE_TMP)):
            continue  # read-only and visible already, through --ro-bind / /
        if real.is_dir():
            found[real] = True
        elif writable and path in state and not os.path.lexists(real):
            found.setdefault(real, False)
    return sorted(found.items(), key=lambda item: len(item[0].parts))


class Sandbox:
    """Whether and how agent shell commands are confined (see the module docstring).

    One per session (a ``team run`` or ``team chat``), shared by its agents'
    tool contexts; thread-safe. ``program``: the ``bwrap`` to use (default:
    found on ``PATH`` at the first probe)."""

    def __init__(self, enabled: bool = True, *, opted_out_by: str = "", program: str | None = None):
        self.enabled = enabled
        self.opted_out_by = opted_out_by
        self._program = program
        self._lock = threading.Lock()
        self._probed = False
        self._problem: str | None = None

    @classmethod
    def off(cls, opted_out_by: str) -> Sandbox:
        """No sandbox, because the user said so (``opted_out_by`` names where)."""
        return cls(False, opted_out_by=opted_out_by)

    @classmethod
    def choose(cls, plan: SandboxSetting | None = None, environ: Mapping[str, str] = os.environ,
               *, plan_file: str = "the plan") -> Sandbox:
        """The session's sandbox: off when the plan says ``sandbox: off`` or ``TEAM_SANDBOX=off``."""
        raw = environ.get(ENV_SWITCH, "").strip().lower()
        if raw not in ("", "on", "off"):
            raise UserError(f"{ENV_SWITCH}={environ[ENV_SWITCH]!r}: use on or off")
        if raw == "off":
            return cls.off(f"{ENV_SWITCH}=off")
        if plan == "off":
            return cls.off(f"sandbox: off in {plan_file}")
        return cls()

    # -- the probe ------------------------------------------------------------------
    def problem(self) -> str | None:
        """Why the sandbox cannot be set up here (None: it can, or it is off). Probed once."""
        if not self.enabled:
            return None
        with self._lock:
            if not self._probed:
                self._problem = self._probe()
                self._probed = True
            return self._problem

    def _probe(self) -> str | None:
        program = self._program or shutil.which("bwrap")
        if program is None:
            return "bwrap (bubblewrap) is not installed (not found on PATH)"
        self._program = program
        argv = [program, *_NAMESPACES, "--unshare-net", *_BASE_MOUNTS, "--", "true"]
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT,
                                  env=allowed(os.environ))
        except OSError as e:
            return f"{program} cannot be run: {e.strerror}"
        except subprocess.TimeoutExpired:
            return f"a trial run of {program} did not finish in {PROBE_TIMEOUT:g}s"
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            return f"a trial run of {program} failed (exit {done.returncode}: {said[-1] if said else 'no message'})"
        return None

    def state(self) -> str:
        """``on``, ``off (where the user said so)`` or ``unavailable: why`` (probes)."""
        if not self.enabled:
            return f"off ({self.opted_out_by})"
        problem = self.problem()
        return f"unavailable: {problem}" if problem else "on"

    def note(self) -> str | None:
        """What the user must know at the start of a session (None when the sandbox is on)."""
        if not self.enabled:
            return (f"sandbox off ({self.opted_out_by}): agents' shell commands run without an OS sandbox, "
                    "with your permissions")
        problem = self.problem()
        if problem is None:
            return None
        return f"sandbox unavailable: {problem}; agents' shell commands will be refused. {FIX}"

    # -- commands -------------------------------------------------------------------
    def prefix(self, *, workspace: Path, root: Path, network: bool = False) -> list[str]:
        """The argv to put before a command so it runs confined to ``workspace`` (``[]`` when off).

        Raises ``SandboxUnavailable`` (naming the fix) when it is on and cannot be set up."""
        if not self.enabled:
            return []
        problem = self.problem()
        if problem is not None:
            raise SandboxUnavailable(
                f"agent shell commands run in an OS sandbox, and it cannot be set up here: {problem}. {FIX}")
        assert self._program is not None  # set by a successful probe
        ws = str(workspace.resolve())
        argv = [self._program, *_NAMESPACES, *(() if network else ("--unshare-net",)), *_BASE_MOUNTS]
        for path in kept():  # before the workspace: a workspace inside one of them stays writable
            argv += ["--ro-bind", str(path), str(path)]
        argv += ["--bind", ws, ws]
        for path, exists in protected(workspace, root):
            p = str(path)
            argv += ["--ro-bind", p, p] if exists else ["--tmpfs", p, "--remount-ro", p]
        return [*argv, "--chdir", ws, "--"]

    def __repr__(self) -> str:
        return f"Sandbox({self.state() if self._probed or not self.enabled else 'on, not probed yet'})"


INFO_WAIT = 5.0
"""Seconds a caller waits for bwrap to say which process is the sandbox's first (it does within ms)."""
TEARDOWN_WAIT = 5.0
"""Seconds a caller waits, at most, for the kernel to empty a finished sandbox's PID namespace."""


def watched(prefix: list[str], info_fd: int) -> list[str]:
    """``prefix`` (from ``Sandbox.prefix``) with bwrap writing the pid of the sandbox's first process,
    the init of its PID namespace, to ``info_fd`` (``--info-fd``; the caller passes the fd on)."""
    return [prefix[0], "--info-fd", str(info_fd), *prefix[1:]]


def namespace_init(info_fd: int) -> int | None:
    """A pidfd of the sandbox's first process, read from bwrap's ``--info-fd`` output (JSON with
    ``child-pid``); None if bwrap said nothing (it failed to start) or the process is gone already.

    When the command's first process exits, bwrap's side of the sandbox exits at once, while the
    kernel is still killing what the command left in the namespace (``setsid cmd &``, many of
    them take a while); the namespace's init becomes readable through its pidfd only once they
    are all gone, so a caller that waits on it (``await_empty``) returns with nothing left."""
    import json

    data = b""
    deadline = time.monotonic() + INFO_WAIT
    while b"}" not in data:
        ready, _, _ = select.select([info_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        pid = int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # gone already (or no pidfds here)
    try:  # the pid could have been reused in between: it must be the init of another PID namespace
        ours = os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    except OSError:
        ours = False
    if not ours:
        os.close(fd)
        return None
    return fd


def await_empty(init_fd: int, timeout: float = TEARDOWN_WAIT) -> None:
    """Wait until the sandbox's first process (``namespace_init``) has exited, which the kernel lets
    it do only after every other process of its PID namespace is gone; closes the pidfd."""
    try:
        select.select([init_fd], [], [], timeout)
    finally:
        os.close(init_fd)
