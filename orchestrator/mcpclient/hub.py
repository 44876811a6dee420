"""The MCP servers of one run: started on first need, shared by its teammates, closed with it.

``McpHub(specs, root=..., workspace=...)`` knows the servers a plan declares; a role file may add
its own (``connect(spec)`` with a spec the hub has not seen). A server is started once per run,
the first time a teammate that may use it is spawned, and every teammate shares that connection
(the SDK multiplexes their calls). A server that died is started again by the next ``connect``
(a retried attempt's first call: tools/mcptools.py). Two declarations of one name must agree, else ``UserError``.

Each stdio server starts in the workspace with ``team``'s environment allow-list
(core/environ.py) plus its declared ``env`` (``$NAME`` taken from the lead's environment), and
nothing else: no API key reaches it unless the plan hands it over by name. Its stderr goes to
``.team/mcp/<name>.log``. A URL server gets its ``headers`` with ``$NAME`` read from the lead's
environment when it is connected (``headers_of``; a variable not set is refused, naming it); the
values stay in the connection's memory. ``close`` ends every connection; the SDK stops each server's process
group.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..core.environ import expand_env, task_environment
from ..core.errors import UserError
from ..core.mcpspec import McpServerSpec
from ..core.paths import team_dir
from .connection import McpConnection, McpStartFailed


def missing_header_vars(spec: McpServerSpec, environ: Mapping[str, str] = os.environ) -> list[str]:
    """The variables ``spec``'s headers name that ``environ`` does not set (or sets empty)."""
    return [n for n in spec.header_vars() if not environ.get(n, "").strip()]


def headers_of(spec: McpServerSpec, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``spec``'s headers with ``$NAME`` read from ``environ``; ``McpStartFailed`` naming a variable not set."""
    missing = missing_header_vars(spec, environ)
    if missing:
        raise McpStartFailed(f"mcp server {spec.name!r}: its headers read {', '.join('$' + n for n in missing)}, "
                             "which is not set in the lead's environment: export it")
    return {k: expand_env(v, environ) for k, v in spec.headers.items()}


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UserError("mcp_servers need the MCP SDK: pip install 'team-orchestrator[mcp]'") from None


class McpHub:
    """Connections by server name (see the module docstring); safe from any thread."""

    def __init__(self, specs: Iterable[McpServerSpec] = (), *, root: Path, workspace: Path | None = None):
        self.root, self.workspace = Path(root), Path(workspace or root)
        self.specs: dict[str, McpServerSpec] = {}
        for spec in specs:
            self._declare(spec)
        self._conns: dict[str, McpConnection] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _declare(self, spec: McpServerSpec) -> McpServerSpec:
        known = self.specs.get(spec.name)
        if known is not None and not known.same_as(spec):
            raise UserError(f"mcp server {spec.name!r} is declared twice, differently (plan and role file?); "
                            "give one of them another name")
        self.specs.setdefault(spec.name, spec)
        return self.specs[spec.name]

    def connect(self, spec: McpServerSpec) -> McpConnection:
        """The running connection of ``spec`` (started now if it is not); ``McpStartFailed`` if it cannot."""
        _require_sdk()
        with self._lock:
            if self._closed:
                raise UserError("the run's MCP servers are shut down")
            spec = self._declare(spec)
            conn = self._conns.get(spec.name)
            if conn is not None and conn.alive:
                return conn
            if conn is not None:
                conn.close()  # it died: let the SDK finish with its process before a new one starts
            env = task_environment(os.environ, {k: expand_env(v) for k, v in spec.env.items()})
            conn = McpConnection(spec, env=env, cwd=self.workspace, log=team_dir(self.root) / "mcp" / f"{spec.name}.log",
                                 headers=headers_of(spec))
            self._conns[spec.name] = conn
            return conn.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns.values())
        for conn in conns:
            conn.close()
