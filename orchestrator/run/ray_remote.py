"""What runs on a Ray worker node for one attempt of a shell task (``--backend ray``).

``run_attempt(spec, workspace)`` is the body of the Ray task the lead submits
(ray_backend.py wraps it with ``ray.remote``; the node imports this module, so
every node needs the same ``team`` installed). It never touches ``.tasks/`` or
``.team/``: the lead stays their single writer. It:

1. makes a node-local scratch folder (``scratch_root``: ``$TEAM_SCRATCH`` of
   the node if set, else ``/dev/shm`` for a workspace under ``SHM_MAX`` bytes,
   since a folder made and removed per attempt costs ~5 ms on a disk and ~0.1
   ms in memory, else the node's temporary folder) and puts the task's
   workspace there, from what the lead shipped through the object store:

   * ``archive``: a tar of the task's folder (outputs mode); the command runs in
     the copy and the files matching the task's ``outputs`` globs come back as
     a tar;
   * ``bundle``: a git bundle whose ``HEAD`` is the task's base commit
     (``isolation: worktree``); it is cloned, the command runs in the clone,
     everything it changed is committed, and the new commits come back as a
     bundle (empty when nothing changed) for the lead's merge-back;

2. runs the command as the local backend does (plain words exec'd, the rest
   under ``/bin/sh -c``; ``jobs.manager.command_argv``) in its own session,
   with the one environment policy of core/environ.py applied on the node:
   the node's allow-listed variables, then what the plan declared (expanded
   on the lead), then the ``TEAM_*`` variables; ``timeout`` kills its process
   group (TERM, a grace, KILL), and so does a cancel from the lead;

3. returns an ``AttemptResult`` carrying the attempt's task id and epoch, the
   node it ran on, the exit, the log (its last ``LOG_CAP`` bytes), and the
   outputs or commits; the scratch folder is removed.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.environ import task_environment
from ..jobs.manager import command_argv
from . import ray_reaper
from .ray_reaper import ENV, ensure_watcher, reap, register, registry, start_time

LOG_CAP = 4 * 1024 * 1024
"""The last bytes of an attempt's output that come back to the lead (the log kept there)."""
SHM_MAX = 64 * 1024 * 1024
"""Workspaces shipped smaller than this (bytes) are unpacked in ``/dev/shm`` when it is writable."""
TEMPLATE_MAX = 1024 * 1024
"""Archives up to this size (bytes) are kept, per worker process, as the files they unpack to."""
TEMPLATES_KEPT = 16
"""How many such archives a worker process keeps (the oldest goes first)."""
GRACE = 5.0
"""Seconds between SIGTERM and SIGKILL when an attempt times out or is cancelled."""
SETTLE = 2.0
"""Seconds an attempt whose command was killed by SIGKILL or SIGTERM it was not sent by us waits before
it reports the failure. A node being killed takes its processes down in no fixed order: when the
command goes first, this worker would report "killed by signal 9" (a failure, a retry used, the plan
stopped) before it goes itself; waiting lets it go, so the lead sees the attempt lost with its node
and runs it again elsewhere (`make chaos`'s node kills met this 1 run in ~20 kills). A command killed
on a node that stays up (the OOM killer) is reported failed, that much later."""


@dataclass(frozen=True)
class Layer:
    """One piece of a shipped workspace, named by its content, kept by each node's cache (ray_cache.py)."""

    digest: str  # content address: a digest of an archive's bytes, or a git layer's tip and prerequisite
    data: bytes | None = None  # the bytes themselves (small), else ``ref``
    ref: Any = None  # ray.ObjectRef of the bytes in the lead's object store: fetched only by a node lacking it
    prefix: str = ""  # archive layers: the folder, under the workspace's top, its paths are relative to
    tip: str = ""  # git layers: the commit the bundle brings (its prerequisite: the layer before)


@dataclass(frozen=True)
class Workspace:
    """What the lead ships for a task's workspace (made once per base, shared by its attempts).

    ``archive``: a tar of a small folder, in ``data``; ``bundle``: a git bundle of a small repository
    (``HEAD`` = the base commit); ``layers``: a big folder as archive layers applied in order (the folder
    as first shipped, then each set of outputs that came back into it); ``git``: a repository as bundle
    layers (the first one full, each later one thin), the base commit the last layer's ``tip``."""

    kind: str
    data: bytes = b""
    layers: tuple[Layer, ...] = ()
    cache: str = ""  # the node cache the layers are kept in (the lead's run)
    size: int = 0  # bytes of the workspace (where its scratch goes: ``scratch_root``)

    @property
    def is_git(self) -> bool:
        """A repository (its new commits come back), not a folder (its outputs come back)."""
        return self.kind in ("bundle", "git")


@dataclass(frozen=True)
class AttemptSpec:
    """One attempt, as the worker needs it (no path of the lead's machine is used on the node)."""

    task_id: int
    epoch: int
    attempt: int
    command: str
    rel_cwd: str  # the folder to run in, relative to the workspace's top
    env: dict[str, str]  # the plan's env (expanded on the lead) and the TEAM_* variables
    timeout: float | None
    outputs: list[str] = field(default_factory=list)
    message: str = ""  # the commit message of a git workspace's work
    ident: tuple[str, str] = ("team", "team@localhost")  # author of that commit (the lead's identity)
    root: str = ""  # ray_reaper.root_key of the lead's state root ("": not registered)
    run: str = ""  # the lead's run (one per lead process): attempts of another run of the root are stale


@dataclass
class AttemptResult:
    task_id: int
    epoch: int
    node_id: str
    status: str  # completed | failed | timeout | killed
    exit_code: int | None
    duration: float
    log: bytes
    outputs: bytes | None = None  # a tar of the output files (archive workspaces)
    bundle: bytes | None = None  # the new commits, ref ``refs/heads/work`` (git workspaces; None: no change)
    error: str | None = None


def scratch_root(size: int) -> str | None:
    """Where an attempt's scratch folder goes on this node (None: the temporary folder)."""
    if os.environ.get("TEAM_SCRATCH"):
        return os.environ["TEAM_SCRATCH"]
    if size < SHM_MAX and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return None


_NODE: list[str] = []


def node_id() -> str:
    """This worker process's node (asked once: a process does not change nodes)."""
    if not _NODE:
        import ray  # on the worker: ray is imported already

        _NODE.append(str(ray.get_runtime_context().get_node_id()))
    return _NODE[0]


Entry = tuple[str, bool, int, int, bytes]  # path in the workspace, is a folder, mode, mtime (ns), content
_TEMPLATES: dict[bytes, list[Entry]] = {}
"""Small archives this worker process unpacked before, by digest, as the files they unpacked to."""


def unpack_archive(data: bytes, top: Path) -> None:
    """The archive's files into the folder ``top``. The first time, through ``tarfile`` (its "data"
    filter refuses what could escape ``top``); a small archive of plain files and folders is then kept
    as what it unpacked to (``TEMPLATE_MAX``), and unpacked again by writing those files: tarfile's
    checks cost ~0.3 ms an attempt, several times the writes, for the typical few-file workspace."""
    if not data:
        return
    key = hashlib.blake2b(data, digest_size=16).digest()
    entries = _TEMPLATES.get(key)
    if entries is not None:
        for rel, folder, mode, mtime, content in entries:
            path = os.path.join(top, rel)
            if folder:
                os.makedirs(path, mode, exist_ok=True)
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(fd, content)
                os.fchmod(fd, mode)  # as extracted (not under this process's umask)
            finally:
                os.close(fd)
            os.utime(path, ns=(mtime, mtime))
        for rel, folder, mode, mtime, _ in reversed(entries):
            if folder:  # made in order, written into after: modes and times set last
                os.chmod(os.path.join(top, rel), mode)
                os.utime(os.path.join(top, rel), ns=(mtime, mtime))
        return
    with open_tar(data) as tar:
        tar.extractall(top, filter="data")
    if len(data) <= TEMPLATE_MAX:
        found = _entries(top)
        if found is not None:
            if len(_TEMPLATES) >= TEMPLATES_KEPT:
                _TEMPLATES.pop(next(iter(_TEMPLATES)))
            _TEMPLATES[key] = found


def _entries(top: Path) -> list[Entry] | None:
    """What ``top`` holds, parents before children; None if anything is not a plain file or folder."""
    out: list[Entry] = []
    for dirpath, dirs, files in os.walk(top):
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, top)
            if stat.S_ISDIR(st.st_mode):
                out.append((rel, True, stat.S_IMODE(st.st_mode), st.st_mtime_ns, b""))
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    out.append((rel, False, stat.S_IMODE(st.st_mode), st.st_mtime_ns, f.read()))
            else:
                return None
        dirs.sort()
    return out


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view):]


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def unpack(ws: Workspace, scratch: Path) -> Path:
    top = scratch / "ws"
    if ws.kind in ("layers", "git"):
        from .ray_cache import materialise

        materialise(ws, top)
    elif ws.kind == "archive":
        top.mkdir()
        unpack_archive(ws.data, top)
    else:
        bundle = scratch / "base.bundle"
        bundle.write_bytes(ws.data)
        _git("clone", "-q", str(bundle), str(top), cwd=scratch)
        _git("checkout", "-q", "-B", "work", cwd=top)
    return top


def outputs_tar(cwd: Path, globs: list[str]) -> bytes:
    """An uncompressed tar of the files matching ``globs``; ``b""`` when none matches (an empty tar is
    10 KB of zeros to send back and to open for nothing)."""
    buf = io.BytesIO()
    seen: set[Path] = set()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for pattern in globs:
            for path in sorted(cwd.glob(pattern)):
                if path in seen or not (path.is_file() or path.is_dir()) or path.is_symlink():
                    continue
                seen.add(path)
                tar.add(path, arcname=str(path.relative_to(cwd)))
    return buf.getvalue() if seen else b""


def open_tar(data: bytes) -> tarfile.TarFile:
    """A shipped tar (plain, or gzipped: ray_backend ``COMPRESS_OVER``), opened as what it is: letting
    tarfile guess tries gzip, bz2 and xz in turn on whatever a plain tar does not open as."""
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:gz" if data[:2] == b"\x1f\x8b" else "r:")


def head_commit(top: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=top, check=True, capture_output=True,
                          text=True).stdout.strip()


def commits_bundle(top: Path, base: str, spec: AttemptSpec) -> bytes | None:
    name, email = spec.ident
    _git("add", "-A", cwd=top)
    if subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=top).returncode != 0:
        _git("-c", f"user.name={name}", "-c", f"user.email={email}", "commit", "-q", "--no-verify",
             "-m", spec.message, cwd=top)
    if head_commit(top) == base:
        return None
    out = top.parent / "out.bundle"
    _git("bundle", "create", "-q", str(out), "work", f"^{base}", cwd=top)
    return out.read_bytes()


def _run(argv: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float | None,
         started: Callable[[int | None], None] | None = None) -> tuple[str, int | None, str | None]:
    """Run the command in a session of its own; ``started`` makes ray_reaper's registry entries (which the
    caller removes once the attempt's scratch folder is gone too): ``started(None)`` before the command
    starts (found by its tag), ``started(pid)`` once it runs (its group). A worker killed at any instant
    in between leaves an entry that names the command's processes, and an exception there (Ray's
    SystemExit when the lead is gone) still kills its group."""
    if started is not None:
        started(None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if started is not None:
            started(proc.pid)
        return _wait(proc, timeout)
    finally:
        # What the command left in its group goes with it (as the local backend's job server does), and
        # so does the command itself when this worker is told to exit while it runs (Ray ends a dead
        # driver's workers with SystemExit: this finally and run_attempt's are all that runs).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _wait(proc: subprocess.Popen[bytes], timeout: float | None) -> tuple[str, int | None, str | None]:
    try:
        code = proc.wait(timeout=timeout)
        if code in (-signal.SIGKILL, -signal.SIGTERM):  # a signal we did not send: maybe this node going down
            time.sleep(SETTLE)
        return ("completed" if code == 0 else "failed"), code, None
    except subprocess.TimeoutExpired:
        _stop(proc)
        return "timeout", proc.returncode, None
    except KeyboardInterrupt:  # ray.cancel(): the lead cancelled the attempt
        _stop(proc)
        return "killed", proc.returncode, "cancelled by the lead"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


@dataclass(frozen=True)
class NodeReport:
    """What a node says when a lead starts (``start_check``)."""

    node_id: str
    version: str  # team's version on the node
    reaped: list[tuple[int, int, str, int]]  # attempts of a dead lead of this root killed: task, attempt, name, processes


def start_check(root: str, run: str) -> NodeReport:
    """Run on every node when a lead starts, before any attempt: team's version here, and the attempts
    a dead lead of the same state root left running here, killed (ray_reaper.py). A worker process that
    ran it has started and imported this module: the lead starts one per CPU of the cluster, so the
    first attempts find workers ready."""
    from .. import __version__

    folder = registry(scratch_root(0))
    reaped = reap(folder, root=root, run=run) if root else []
    return NodeReport(node_id(), __version__, [(r.task, r.attempt, r.name, r.processes) for r in reaped])


_WORKER: list[tuple[int, int]] = []


def _worker() -> tuple[int, int]:
    """This worker process: pid and start time (the registry's proof it still waits for its attempt)."""
    if not _WORKER:
        _WORKER.append((os.getpid(), start_time(os.getpid()) or 0))
    return _WORKER[0]


def _registering(spec: AttemptSpec, scratch: Path) -> Callable[[int | None], Callable[[], None]] | None:
    """What registers the attempt's command in the machine's registry once it runs (ray_reaper.py)."""
    if not spec.run:
        return None
    folder = registry(scratch_root(0))
    reap(folder, root=spec.root, run=spec.run, task=spec.task_id)  # the task's earlier attempts here: gone first
    ensure_watcher(folder)

    def started(pid: int | None) -> Callable[[], None]:
        """The entry of the command ``pid`` (None: of the command about to start, ``ray_reaper.BEFORE``)."""
        worker, since = _worker()
        pgid, leader = (ray_reaper.BEFORE, 0) if pid is None else (pid, start_time(pid) or 0)
        path = register(folder, ray_reaper.Entry(spec.root, spec.run, spec.task_id, spec.attempt, spec.env.get("TEAM_PLAN_TASK", ""),
                                      pgid, leader, worker, since, str(scratch), attempt_tag(spec)))
        return lambda: path.unlink(missing_ok=True)

    return started


def attempt_tag(spec: AttemptSpec) -> str:
    return f"{spec.run}.{spec.task_id}.{spec.epoch}"


def run_attempt(spec: AttemptSpec, ws: Workspace) -> AttemptResult:
    """One attempt on this node (see the module docstring)."""
    t0 = time.monotonic()
    node = node_id()
    scratch = Path(tempfile.mkdtemp(prefix=f"team-t{spec.task_id}e{spec.epoch}-", dir=scratch_root(ws.size or len(ws.data))))
    # The registry entry goes only after the scratch folder: a worker killed in between (Ray's SIGKILL after
    # a dead driver's SystemExit) leaves the entry, and with it the reaper's duty to remove the folder.
    register = _registering(spec, scratch)
    ends: list[Callable[[], None]] = []

    def started(pid: int | None) -> None:
        if register is not None:
            ends.append(register(pid))

    try:
        top = unpack(ws, scratch)
        base = head_commit(top) if ws.is_git else ""
        cwd = (top / spec.rel_cwd).resolve()
        cwd.mkdir(parents=True, exist_ok=True)
        env = task_environment(os.environ, spec.env, {"TEAM_ROOT": str(scratch / "root")})
        if spec.run:
            env[ENV] = attempt_tag(spec)
        (scratch / "root").mkdir()
        log = scratch / "log"
        try:
            argv = command_argv(spec.command, env.get("PATH", os.defpath))
            status, code, error = _run(argv, cwd, env, log, spec.timeout, started)
        except OSError as e:  # the program or the folder is missing on this node
            status, code, error = "failed", None, f"cannot start on this node: {e}"
        text = b""
        if log.exists():
            with open(log, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_CAP))
                text = f.read()
        result = AttemptResult(spec.task_id, spec.epoch, node, status, code, time.monotonic() - t0, text,
                               error=error)
        if status == "completed":
            if not ws.is_git:
                result.outputs = outputs_tar(cwd, spec.outputs)
            else:
                result.bundle = commits_bundle(top, base, spec)
        return result
    except (OSError, subprocess.CalledProcessError, tarfile.TarError) as e:
        detail = e.stderr.decode(errors="replace").strip() if isinstance(e, subprocess.CalledProcessError) \
            and e.stderr else str(e)
        return AttemptResult(spec.task_id, spec.epoch, node, "failed", None, time.monotonic() - t0, b"",
                             error=f"workspace on node failed: {detail}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for end in ends:
            end()
