"""Helpers of the hostile tests: a real state root to attack, and what an attack must not change.

The tests here play the hostile user of issue 16: an agent's shell command
that tries to destroy ``.tasks``, ``.team`` or ``.git`` or to escape its
call, and secrets that try to reach a file under the state root. They drive
the real code (the tool pipeline, ``team`` in a subprocess, the scripted
OpenAI-compatible server), run real bubblewrap and real processes, and
assert outcomes a user cares about: the state byte-identical, the workspace
still usable, no process left, no secret on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import threading
from pathlib import Path

from orchestrator.core.fsutil import read_jsonl
from orchestrator.jobs.manager import JobManager
from orchestrator.tasks.store import TaskStore
from orchestrator.team.inbox import Bus
from orchestrator.team.roster import Team
from orchestrator.tools import FileTruth, Observation, ToolContext
from orchestrator.tools.coordination import agent_registry

STATE = (".tasks", ".team", ".git")

SECRETS = {
    "OPENAI_API_KEY": "sk-hostile-openai-5f1e9c2a7b3d",
    "ANTHROPIC_API_KEY": "sk-ant-hostile-8d2c4e6f0a1b",
    "GITHUB_TOKEN": "ghp_hostileToken0123456789abcdef",
}
BASE_URL_PASSWORD = "pa55-hostile-url-93b1"
"""The password inside ``OPENAI_BASE_URL`` (``http://bob:PASSWORD@127.0.0.1:PORT/v1``)."""


def all_secrets() -> dict[str, str]:
    return {**SECRETS, "OPENAI_BASE_URL password": BASE_URL_PASSWORD}


def secrets_on_disk(root: Path) -> list[str]:
    """``path: name`` for every file under ``root`` holding any of the secrets (the final grep)."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path.relative_to(root)}: {name}" for name, value in all_secrets().items()
                      if value.encode() in data]
    return found


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "User", "GIT_AUTHOR_EMAIL": "user@example.com",
           "GIT_COMMITTER_NAME": "User", "GIT_COMMITTER_EMAIL": "user@example.com",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def make_root(root: Path) -> Path:
    """A project that is its own state root, as `team run` in a repository makes it: a git
    repository with a commit, tasks in ``.tasks``, a roster and a message in ``.team``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "src.py").write_text("print('hello')\n")
    (root / "README").write_text("a project\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "src.py", "README")
    git(root, "commit", "-q", "-m", "first")
    store = TaskStore(root)
    store.create("build the thing")
    store.create("test the thing", blocked_by=[1])
    team = Team(root)
    team.add("alice", "coder", status="idle")
    Bus(root, team=team).send("alice", "hello alice", sender="lead")
    return root


OURS = (".team/calls", ".team/outputs", ".team/jobs")
"""What the harness itself writes while it runs an attack: the call log, saved outputs, job records."""


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every entry under the state directories (but ``OURS``): its type and permission bits, and a
    hash of its bytes (a file) or its target (a symlink). Equal snapshots: byte-identical state."""
    out: dict[str, tuple[int, str]] = {}
    for name in STATE:
        top = root / name
        if not os.path.lexists(top):
            continue
        for path in [top, *sorted(top.rglob("*"))]:
            if str(path.relative_to(root)).startswith(OURS):
                continue
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                what = "link:" + os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                what = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                what = "dir"
            out[str(path.relative_to(root))] = (st.st_mode, what)
    return out


class Agent:
    """One agent's tools, through the real registry and call pipeline (as the agent loop calls them),
    with its workspace equal to the state root and a job manager for ``background_run``."""

    def __init__(self, root: Path, name: str = "mallory", **ctx: object):
        self.root = root
        self.jobs = JobManager(root, grace=0.5)
        self.ctx = ToolContext(
            workspace=root, root=root, agent=name, truth=FileTruth(), store=TaskStore(root),
            outputs_dir=root / ".team" / "outputs" / name, call_log=root / ".team" / "calls" / f"{name}.jsonl",
            jobs=self.jobs, **ctx)  # type: ignore[arg-type]
        self.registry = agent_registry()
        self._n = 0

    def call(self, tool: str, args: dict[str, object]) -> Observation:
        self._n += 1
        return self.registry.call(tool, json.dumps(args), self.ctx, f"call_{self._n}")

    def bash(self, command: str, **args: object) -> Observation:
        return self.call("bash", {"command": command, **args})

    def log(self) -> list[dict]:
        return read_jsonl(self.ctx.call_log)

    def close(self) -> None:
        self.jobs.shutdown()


class Listener:
    """A TCP server on 127.0.0.1 that counts the connections it accepts (the network test's target)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.sendall(b"hello from the host\n")
            conn.close()

    def close(self) -> None:
        self.sock.close()

    def connect_command(self) -> str:
        """A shell command that prints ``connected: <greeting>`` when it reaches the listener."""
        return (f"python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {self.port}), timeout=3); "
                f"print('connected:', s.recv(100).decode().strip())\"")


def bwrap_installed() -> str:
    """bwrap's path; the hostile sandbox tests fail (not skip) without it: `make test` installs it."""
    path = shutil.which("bwrap")
    assert path is not None, "bwrap (bubblewrap) is not installed: run `make sysdeps` (or apt-get install bubblewrap)"
    return path
