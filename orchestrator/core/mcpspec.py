"""An MCP server a teammate may use: what a plan's or a role file's ``mcp_servers:`` lists.

One record, shared by the plan format (plan/model.py), role files (roles/roles.py) and the
client that starts the servers (mcpclient/). Either a command to start (stdio) or the URL of a
running server (streamable HTTP)::

    mcp_servers:
      - name: time                                  # its tools appear as time__<tool>
        command: mcp-server-time
        args: [--local-timezone, UTC]
        env: {TOKEN: $GITHUB_TOKEN}                  # extra environment, $NAME from the lead's
      - name: docs
        url: http://127.0.0.1:9000/mcp
        headers: {Authorization: "Bearer $DOCS_TOKEN"}   # sent with every request, $NAME from the lead's

A URL server's ``headers`` are sent with each of its HTTP requests; a value names the variables
that hold its secret part (``$NAME`` / ``${NAME}``), read from the lead's environment when the
server is connected, so neither the plan nor anything under the state root holds the secret. Each
variable named must look like a credential's (core/redact.py ``SECRET_NAME``: ``*_TOKEN``,
``*API_KEY*``, ...): every process of ``team`` then scrubs its value from what it writes. A
variable that is not set is refused before a run starts (run/teammodels.py ``mcp_problems``), or
when a role's server is connected.

A server's tools reach the model as ``<server>__<tool>``: OpenAI tool names allow only letters,
digits, ``_`` and ``-`` (64 at most), so the ``git.status`` of the docs is sent as
``git__status``; allow-lists (``mcp_tools:`` in a role) may use either spelling.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .environ import env_names
from .redact import SECRET_NAME

SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,23}$")
"""A server name: letters, digits and '-' (no '_' nor '.': ``__`` separates it from the tool)."""
SEP = "__"
"""Between a server's name and its tool's in the name the model sees."""
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What an OpenAI-compatible API accepts as a tool (function) name."""


class McpServerSpec(BaseModel):
    """One MCP server: a ``command`` started over stdio, or a ``url`` (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=SERVER_NAME.pattern,
                      description="Server name (letters, digits, '-'); its tools are shown as NAME__TOOL.")
    command: str | None = Field(None, min_length=1, description="Program to start (stdio transport).")
    args: list[str] = Field(default_factory=list, description="Arguments of the command.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the command "
                                "($NAME: from the lead's environment); the rest is team's allow-list.")
    url: str | None = Field(None, pattern=r"^https?://", description="URL of a running server (streamable HTTP).")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP headers sent to a url server, e.g. "
                                    "{Authorization: 'Bearer $DOCS_TOKEN'}: $NAME is read from the lead's "
                                    "environment (a credential's name, *_TOKEN, *API_KEY*), never stored.")
    timeout: float = Field(60.0, gt=0, le=3600, description="Seconds one tool call may take.")
    startup_timeout: float = Field(30.0, gt=0, le=600, description="Seconds to start and list the tools.")

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v)) if isinstance(v, int | float | bool) else v
                    for k, v in value.items()}
        return value

    @field_validator("headers")
    @classmethod
    def _header_vars(cls, value: dict[str, str]) -> dict[str, str]:
        for header, text in value.items():
            if not header or any(c in header for c in ":\r\n ") or any(c in text for c in "\r\n"):
                raise ValueError(f"header {header!r}: a header name is one word and its value one line")
            for name in env_names(text):
                if not SECRET_NAME.search(name):
                    raise ValueError(f"header {header!r}: ${name} does not look like the name of a credential, "
                                     "so team would not know to keep its value out of files: name the variable "
                                     "like *_TOKEN or *_API_KEY (e.g. DOCS_TOKEN)")
        return value

    def header_vars(self) -> list[str]:
        """The environment variables the headers' values name."""
        return list(dict.fromkeys(n for text in self.headers.values() for n in env_names(text)))

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"mcp server {self.name!r}: give either `command` (stdio) or `url` (HTTP), not "
                             f"{'both' if self.command else 'neither'}")
        if self.url is not None and (self.args or self.env):
            raise ValueError(f"mcp server {self.name!r}: `args` and `env` go with `command`, not `url`")
        if self.command is not None and self.headers:
            raise ValueError(f"mcp server {self.name!r}: `headers` go with `url` (HTTP), not `command`; give a "
                             "stdio server what it needs in `env`")
        return self

    def same_as(self, other: McpServerSpec) -> bool:
        return self.model_dump() == other.model_dump()


def tool_name(server: str, tool: str) -> str:
    """The name the model sees for ``tool`` of ``server``: ``server__tool``, any character an
    OpenAI tool name cannot hold replaced by ``_``, cut to 64 characters."""
    return (server + SEP + re.sub(r"[^A-Za-z0-9_-]", "_", tool))[:64]


def allowed(server: str, tool: str, patterns: tuple[str, ...] | None) -> bool:
    """Whether ``patterns`` (``server.tool``, ``server__tool``, ``server.*``, ``*``) allow the
    tool; None: no allow-list, everything is allowed."""
    if patterns is None:
        return True
    for p in patterns:
        p = p.replace(SEP, ".", 1) if SEP in p and "." not in p else p
        if p in ("*", f"{server}.*", f"{server}.{tool}"):
            return True
    return False
