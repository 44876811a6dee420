"""Secrets that must never reach disk: a value of the secrets a process knows, and scrubbing.

``Secrets`` is a plain value: the secret strings, longest first. Every
component that writes files takes one (``secrets=``) and, when none is
given, builds it from its environment (``Secrets.from_environ``), which is
where ``team`` gets every credential it has:

* the value of each variable whose *name* says it is a credential
  (``SECRET_NAME``: ``*API_KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``,
  ``*CREDENTIAL*``, ``*PRIVATE_KEY*``, ``*ACCESS_KEY*``), so the model key,
  ``GITHUB_TOKEN``, ``ANTHROPIC_API_KEY`` and the like;
* the password part of any URL in any variable (``scheme://user:PASS@host``),
  e.g. a proxy or ``OPENAI_BASE_URL`` with credentials in it.

Values shorter than ``MIN_LENGTH`` characters, or that are plain words like
``true`` or a number, are not secrets (scrubbing them would mangle
ordinary text). ``scrub`` replaces every occurrence with ``[REDACTED]``;
``add`` returns a value with more secrets (a key handed over in code).

Output that arrives as a stream (a command's stdout on a pipe) is scrubbed
on its way to the file by a ``Scrubber`` (``Secrets.stream()``): it holds
back the last ``longest - 1`` bytes of what it has seen, so a secret split
across two reads is still caught, and never holds more than that. A file
some other process wrote (a job's own log) is scrubbed in place once that
process is done with it (``scrub_file``: one read when it holds no secret,
else a scrubbed copy renamed over it).

Writers that scrub: task files and event lines (tasks/files.py),
transcripts (agent/transcript.py), inbox messages (team/inbox.py), control
requests (team/control.py), the chat state (chat/session.py), job records,
output tails and logs (jobs/files.py, jobs/records.py), and every tool
result, the call log and the saved outputs (tools/registry.py, tools/shell.py).
Which variables a process we start may see at all is not decided here but
by an allow-list (core/environ.py); ``secret_names`` only names credentials.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

SECRET_NAME = re.compile(r"API_?KEY|TOKEN|SECRET|PASSW(?:OR)?D|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY", re.I)
"""A variable whose name matches holds a credential."""
URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:([^/\s@]+)@")
MIN_LENGTH = 8
_PLAIN = frozenset({"true", "false", "yes", "no", "none", "null", "disabled", "enabled"})
MASK = "[REDACTED]"


def secret_names(env: Mapping[str, str]) -> list[str]:
    """Names in ``env`` that look like credentials (a job or a sandbox must not inherit them)."""
    return [name for name in env if SECRET_NAME.search(name)]


def _usable(value: str) -> bool:
    return len(value) >= MIN_LENGTH and value.lower() not in _PLAIN and not value.strip().isdigit()


class Secrets:
    """The secret values one process knows (see the module docstring). Immutable."""

    __slots__ = ("_values",)

    def __init__(self, values: Iterable[str] = ()):
        usable = {v for v in values if v and _usable(v)}
        # Writers scrub the JSON they write: a secret with a quote or a backslash is there escaped.
        usable |= {json.dumps(v, ensure_ascii=False)[1:-1] for v in usable}
        self._values: tuple[str, ...] = tuple(sorted(usable, key=len, reverse=True))

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> Secrets:
        """The credentials in ``env`` (default: this process's environment)."""
        env = os.environ if env is None else env
        values = [env[name] for name in secret_names(env)]
        for value in env.values():
            values += URL_PASSWORD.findall(value)
        return cls(values)

    def add(self, *values: str | None) -> Secrets:
        """This value plus ``values`` (e.g. a key that did not come from the environment)."""
        return Secrets([*self._values, *(v for v in values if v)])

    def scrub(self, text: str) -> str:
        """``text`` with every secret replaced by ``[REDACTED]`` (longest first)."""
        for secret in self._values:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def scrub_bytes(self, data: bytes) -> bytes:
        for secret in self._values:
            raw = secret.encode()
            if raw in data:
                data = data.replace(raw, MASK.encode())
        return data

    def stream(self) -> Scrubber:
        """A scrubber for one stream of bytes (see ``Scrubber``)."""
        return Scrubber(self)

    def scrub_file(self, path: Path, chunk: int = 1 << 20) -> bool:
        """Replace ``path`` by a scrubbed copy if it holds a secret; True when it did.

        Read in chunks that overlap by the longest secret, so a large file costs
        no memory; a file without secrets is only read. The copy is renamed over
        the original (atomic, not fsync'd: a crash leaves one or the other)."""
        if not self._values:
            return False
        overlap = self.longest - 1
        raws = [v.encode() for v in self._values]
        try:
            with open(path, "rb") as f:
                tail = b""
                while True:
                    block = f.read(chunk)
                    if not block:
                        return False
                    data = tail + block
                    if any(raw in data for raw in raws):
                        break
                    tail = data[-overlap:] if overlap else b""
                f.seek(0)
                tmp = path.with_name(f".{path.name}.scrub")
                scrubber = self.stream()
                with open(tmp, "wb") as out:
                    while block := f.read(chunk):
                        out.write(scrubber.feed(block))
                    out.write(scrubber.close())
        except FileNotFoundError:
            return False
        os.replace(tmp, path)
        return True

    @property
    def longest(self) -> int:
        """Length in bytes of the longest secret (0 when there is none)."""
        return max((len(v.encode()) for v in self._values), default=0)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __len__(self) -> int:
        """How many strings are scrubbed (a secret with JSON-escaped characters counts twice)."""
        return len(self._values)

    def __repr__(self) -> str:
        return f"Secrets({len(self._values)} values)"  # never the values themselves


class Scrubber:
    """Scrubs one stream of bytes as it passes: ``feed`` each chunk, write what it returns, then
    write ``close()``. It keeps back the last ``longest - 1`` bytes seen (a secret may continue in
    the next chunk), so the output lags the input by at most that much."""

    __slots__ = ("_secrets", "_keep", "_held")

    def __init__(self, secrets: Secrets):
        self._secrets = secrets
        self._keep = max(0, secrets.longest - 1)
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        """The scrubbed bytes that are safe to write now."""
        if not self._keep:
            return data
        data = self._secrets.scrub_bytes(self._held + data)
        # A secret that begins in the last ``keep`` bytes may be incomplete: hold them back.
        # One that begins earlier ends inside ``data`` and was replaced just now.
        cut = max(0, len(data) - self._keep)
        self._held = data[cut:]
        return data[:cut]

    def close(self) -> bytes:
        """The held-back end of the stream (nothing more can complete a secret)."""
        rest, self._held = self._held, b""
        return self._secrets.scrub_bytes(rest)
