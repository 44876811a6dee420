"""The message bus: one append-only JSONL inbox per member, ``.team/inbox/<name>.jsonl``.

Files per recipient (``lead`` or a roster member; names checked by roster.py)::

    <name>.jsonl           messages, one JSON object per line, append-only
    <name>.lock            flock: appenders and rotation
    <name>.consumer.lock   flock: held by the one reader from fetch to ack
    <name>.cursor          {"ino", "offset", "check"}: what the reader consumed
    <name>.consumed.jsonl  the previous, fully consumed generation

Send (the acknowledgement): under ``<name>.lock``, terminate a torn fragment
left by a killed writer (so it becomes its own unparsable line and can never
swallow ours), ``write`` the whole line, release the lock, ``fsync``, return.
``send`` returning means the message is on disk; unacknowledged messages of a
writer killed mid-append are either whole (and delivered) or a fragment
(skipped). The lock serialises appends, so a sender's messages are in file
order; ``seq`` numbers them per sender within a ``Bus`` instance.

Receive (two phases):

* ``fetch(name)`` takes the consumer lock, reads from the cursor to the last
  complete line and returns a ``InboxBatch``. Nothing changes on disk.
* The consumer persists what it got (its transcript, its state), then
  ``batch.ack()`` replaces the cursor (atomic rename) and releases the lock.
  ``batch.release()`` (or leaving ``with batch:`` without acking) gives the
  messages back.

A reader killed before ``ack`` gets the same messages again from its next
fetch: delivery on disk is at-least-once, and a consumer that persisted a
message before the crash dedupes it by ``id`` (``fetch(name, seen=ids)``
filters them), which makes delivery to the agent exactly once. ``read`` is
``fetch`` + immediate ``ack`` for callers that need no crash window.
Killing the reader during ack leaves the old cursor or the new one, never
a torn one. A cursor names its inbox generation by inode; a root that was
copied or restored (new inodes) keeps its place when the file still holds
the cursor's last message where the cursor saw it. The cursor is not fsync'd: it can only be *behind* after a power
loss (re-delivery, deduped by id), and ``check`` — offset and id of the last
message it consumed — is verified on every fetch; a file that no longer
holds that message there (e.g. a power loss dropped an unsynced tail that
the reader had consumed) is re-read from the start rather than skipped.

Rotation: when an ack consumes the whole file and it holds at least
``rotate_bytes``, ``<name>.jsonl`` is renamed over ``<name>.consumed.jsonl``
under the append lock. The cursor still names the old inode; the next
append creates a new file whose inode differs (the old one still exists as
``.consumed``), so the reader starts it at offset 0. A crash before or after
the rename loses and duplicates nothing: the cursor is written first, and
the rename is atomic.

Waiting: ``wait(name, timeout)`` wakes at once on a send through the same
``Bus`` object (a per-inbox ``threading.Condition``: the lead shares one Bus
among its teammates and their tools) and polls the inbox size every
``poll_interval`` seconds (default 5 ms) for other senders.

A message is scrubbed of the secrets the sender knows (``Bus(secrets=)``,
core/redact.py) before it is written: an inbox never holds a credential.

Sending to an unknown recipient or an invalid name raises before any file
is created (no phantom inboxes). Reading an inbox that nothing was ever sent
to creates nothing either (``team inbox lead`` on a fresh root leaves no
``.team/``).

Seed compatibility: lines the seed's ``MessageBus.send`` appended carry no
``id``; ``Message.from_line`` gives each a ``seed-<hash of bytes+offset>``
id, stable across reads, so they are delivered once like any other.
Complete lines that are no message at all are skipped by readers and listed
by ``bad_lines`` (``team doctor``); they are never rewritten.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Container
from functools import partial
from pathlib import Path
from secrets import token_hex
from typing import Any, BinaryIO, NamedTuple

from ..core.errors import ConflictError, UserError
from ..core.fsutil import LockTimeout, atomic_write, file_lock, flock_fd, fsync_dir
from ..core.hooks import MessageObserver
from ..core.jsonutil import dumps
from ..core.models import MESSAGE_TYPES, PROTOCOL_TYPES, Message
from ..core.paths import team_dir
from ..core.redact import Secrets
from .roster import Team, check_name

CHUNK = 1 << 20


def _changed(sig: _Signal, version: int) -> bool:
    return sig.version != version


class _Signal:
    """Per-inbox in-process wake-up: a condition plus a send counter."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.version = 0


class Cursor(NamedTuple):
    """What the reader consumed: inode of the inbox generation, byte offset,
    and (start, end, id) of the last whole message before the offset."""

    ino: int
    offset: int
    check: tuple[int, int, str] | None


def _line_has_id(f: BinaryIO, start: int, end: int, msg_id: str) -> bool:
    """The bytes [start, end) of ``f`` are still the message ``msg_id``."""
    raw = os.pread(f.fileno(), end - start, start)
    if not raw.endswith(b"\n"):
        return False
    msg = Message.from_line(raw, start, os.fstat(f.fileno()).st_ino)
    return msg is not None and msg.id == msg_id


class InboxBatch:
    """Messages fetched but not yet acknowledged; holds the inbox's consumer lock
    (``lock_fd`` None: an inbox that does not exist yet, so nothing to hold or to acknowledge)."""

    def __init__(self, bus: Bus, name: str, messages: list[Message], cursor: Cursor, lock_fd: int | None):
        self.bus, self.name, self.messages, self.cursor = bus, name, messages, cursor
        self._fd: int | None = lock_fd
        self._settled = False

    def ack(self) -> None:
        """Mark everything up to this batch consumed, then release the lock."""
        if self._settled:
            raise UserError(f"batch of inbox {self.name!r} was already acknowledged or released")
        try:
            if self._fd is not None:
                self.bus._advance(self.name, self.cursor)
        finally:
            self.release()

    def release(self) -> None:
        """Give the lock back without acking (the messages will be fetched again)."""
        self._settled = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> InboxBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()


class Bus:
    """Send, fetch/ack, read, peek and wait on the inboxes under ``root/.team/inbox``."""

    def __init__(self, root: Path | str, *, team: Team | None = None, clock: Callable[[], float] = time.time,
                 durable: bool = True, rotate_bytes: int = 1 << 20, poll_interval: float = 0.005,
                 lock_timeout: float = 30.0, secrets: Secrets | None = None):
        """``secrets``: never written into an inbox (default: the credentials of this process's
        environment, core/redact.py), so ``team send lead "$OPENAI_API_KEY"`` stores ``[REDACTED]``."""
        self.root = Path(root)
        self.dir = team_dir(self.root) / "inbox"
        self.secrets = Secrets.from_environ() if secrets is None else secrets
        self.team = team or Team(self.root, clock=clock)
        self.clock = clock
        self.durable = durable
        self.rotate_bytes = rotate_bytes
        self.poll_interval = poll_interval
        self.lock_timeout = lock_timeout
        self._session = token_hex(6)
        self._ids = itertools.count(1)
        self._seq: dict[str, int] = {}
        self._seq_lock = threading.Lock()
        self._stale: dict[str, tuple[int, int] | None] = {}
        self._signals: dict[str, _Signal] = {}  # inbox name -> wake-up for waiters on this Bus
        self._signals_lock = threading.Lock()
        self.observer: MessageObserver | None = None
        """Told about every message this bus sent, after it is on disk (core/hooks.py: the run's
        ``message_sent`` hooks); it must not block (the hook dispatcher queues)."""

    def _signal_for(self, name: str) -> _Signal:
        with self._signals_lock:
            sig = self._signals.get(name)
            if sig is None:
                sig = self._signals[name] = _Signal()
            return sig

    def path(self, name: str) -> Path:
        return self.dir / f"{check_name(name)}.jsonl"

    # -- sending ------------------------------------------------------------
    def send(self, to: str, content: str, *, sender: str, type: str = "message",
             request_id: str | None = None, **extra: Any) -> Message:
        """Append a message to ``to``'s inbox; returns once it is on disk."""
        check_name(sender, "sender name")
        if type not in MESSAGE_TYPES:
            raise UserError(f"invalid message type {type!r}: use one of {', '.join(MESSAGE_TYPES)}")
        if type in PROTOCOL_TYPES and not request_id:
            raise UserError(f"a {type} message needs a request_id")
        self.team.check_recipient(to)
        path = self.path(to)
        self.dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.dir / f"{to}.lock"):
            with self._seq_lock:
                seq = self._seq[sender] = self._seq.get(sender, 0) + 1
            msg = Message(id=f"{self._session}-{next(self._ids)}", type=type, sender=sender, to=to,
                          content=content, timestamp=self.clock(), request_id=request_id, seq=seq, **extra)
            line = (self.secrets.scrub(dumps(msg.to_json())) + "\n").encode()
            created = False
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                fd, created = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644), True
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # terminate a killed writer's torn fragment
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view):]
            except BaseException:
                os.close(fd)
                raise
        try:
            if self.durable:
                os.fsync(fd)  # outside the lock: concurrent senders' fsyncs overlap
                if created:
                    fsync_dir(self.dir)
        finally:
            os.close(fd)
        sig = self._signal_for(to)
        with sig.cond:
            sig.version += 1
            sig.cond.notify_all()
        if self.observer is not None:
            self.observer(msg)
        return msg

    def broadcast(self, content: str, *, sender: str, **extra: Any) -> list[Message]:
        """Send ``content`` (type ``broadcast``) to every roster member but the sender."""
        check_name(sender, "sender name")
        return [self.send(name, content, sender=sender, type="broadcast", **extra)
                for name in self.team.names() if name != sender]

    # -- receiving ----------------------------------------------------------
    def _cursor(self, name: str) -> Cursor:
        try:
            data = json.loads((self.dir / f"{name}.cursor").read_bytes())
            check = data.get("check")
            return Cursor(int(data["ino"]), int(data["offset"]),
                          (int(check[0]), int(check[1]), str(check[2])) if check else None)
        except FileNotFoundError:
            return Cursor(0, 0, None)
        except (ValueError, KeyError, TypeError, IndexError):
            # Only ever replaced atomically; garbage means a hand edit or a
            # power loss. Re-deliver from the start: consumers dedupe by id.
            return Cursor(0, 0, None)

    def _read_from_cursor(self, name: str, seen: Container[str] = (),
                          limit: int | None = None) -> tuple[list[Message], Cursor]:
        """The messages after the cursor, and the cursor that consumes them.

        Remembers an unread tail that held no complete message (a torn
        fragment) so ``wait_unread`` does not spin on it.
        """
        cur = self._cursor(name)
        try:
            f = open(self.path(name), "rb")
        except FileNotFoundError:
            return [], cur
        with f:
            ino = os.fstat(f.fileno()).st_ino
            # The same generation: the same inode, or (the root was copied or restored from a
            # backup) a file that still holds the cursor's last message where the cursor saw it.
            same = ino == cur.ino or (cur.check is not None and _line_has_id(f, *cur.check))
            offset, check = (cur.offset, cur.check) if same else (0, None)
            if check and not _line_has_id(f, *check):
                offset, check = 0, None  # the file is not what the cursor saw: re-deliver, dedupe by id
            f.seek(offset)
            data = f.read(CHUNK)
            while len(data) >= CHUNK and b"\n" not in data[-CHUNK:]:
                more = f.read(CHUNK)  # one line longer than a chunk
                if not more:
                    break
                data += more
        cut = data.rfind(b"\n") + 1  # a fragment without "\n" is not ours to consume yet
        messages = []
        pos = offset
        for raw in data[:cut].split(b"\n")[:-1]:
            start, pos = pos, pos + len(raw) + 1
            if not raw.strip():
                continue
            msg = Message.from_line(raw, start, ino)
            if msg is None:
                continue  # a torn fragment from a killed writer (`team doctor` lists them)
            check = (start, pos, msg.id)
            if msg.id not in seen:
                messages.append(msg)
                if limit is not None and len(messages) >= limit:
                    return messages, Cursor(ino, pos, check)
        self._stale[name] = (ino, offset + len(data)) if cut < len(data) and not messages else None
        return messages, Cursor(ino, offset + cut, check)

    def fetch(self, name: str, *, seen: Container[str] = (), limit: int | None = None) -> InboxBatch:
        """Take the consumer lock and return what is unconsumed; ``ack`` or ``release`` it.

        Messages whose id is in ``seen`` (already persisted by the consumer
        before a crash) are left out but still acknowledged with the batch.
        ``limit`` caps the number of messages returned (the rest stay unread).
        """
        self.team.check_recipient(name, reading=True)
        if not self.path(name).exists():  # nothing was ever sent: nothing to lock, create or consume
            return InboxBatch(self, name, [], self._cursor(name), None)
        lock = self.dir / f"{name}.consumer.lock"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock(fd, lock, self.lock_timeout)
            messages, cursor = self._read_from_cursor(name, seen, limit)
        except BaseException:
            os.close(fd)
            raise
        return InboxBatch(self, name, messages, cursor, fd)

    def _advance(self, name: str, cur: Cursor) -> None:
        if cur == self._cursor(name):
            return
        data = {"ino": cur.ino, "offset": cur.offset, "check": list(cur.check) if cur.check else None}
        atomic_write(self.dir / f"{name}.cursor", dumps(data), durable=False)
        if cur.offset < self.rotate_bytes:
            return
        path = self.path(name)
        with file_lock(self.dir / f"{name}.lock"):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return
            if st.st_ino == cur.ino and st.st_size == cur.offset:  # fully consumed, no send since
                os.replace(path, self.dir / f"{name}.consumed.jsonl")

    def read(self, name: str) -> list[Message]:
        """Drain: fetch and acknowledge at once."""
        with self.fetch(name) as batch:
            batch.ack()
        return batch.messages

    def peek(self, name: str) -> list[Message]:
        """Unconsumed messages, leaving them in place (no lock, no file created)."""
        self.team.check_recipient(name, reading=True)
        return self._read_from_cursor(name)[0]

    def _unread_mark(self, name: str) -> tuple[int, int] | None:
        """(inode, size) of the inbox when it holds bytes past the cursor, else None."""
        cur = self._cursor(name)
        try:
            st = os.stat(self.path(name))
        except FileNotFoundError:
            return None
        unread = st.st_size > (cur.offset if st.st_ino == cur.ino else 0)
        return (st.st_ino, st.st_size) if unread else None

    def wait_unread(self, name: str, timeout: float | None = None) -> bool:
        """Block until ``name``'s inbox holds unread bytes; False on timeout. Consumes nothing."""
        self.team.check_recipient(name, reading=True)
        sig = self._signal_for(name)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            version = sig.version
            mark = self._unread_mark(name)
            if mark is not None and mark != self._stale.get(name):
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            step = self.poll_interval if left is None else min(self.poll_interval, left)
            with sig.cond:
                sig.cond.wait_for(partial(_changed, sig, version), step)

    def wait(self, name: str, timeout: float | None = None, *, seen: Container[str] = ()) -> list[Message]:
        """Block until ``name`` has messages (or ``timeout``), then drain them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.wait_unread(name, left):
                return []
            with self.fetch(name, seen=seen) as batch:
                batch.ack()
            if batch.messages:
                return batch.messages


def bad_lines(path: Path) -> list[tuple[int, bytes]]:
    """(line number, bytes) of each complete, non-blank line of ``path`` that is no message.

    A final fragment without a newline is not listed: a writer may still be
    appending it, and the next send terminates it.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    bad, pos = [], 0
    for n, raw in enumerate(data[: data.rfind(b"\n") + 1].split(b"\n")[:-1], 1):
        if raw.strip() and Message.from_line(raw, pos) is None:  # (the id is not needed here)
            bad.append((n, raw))
        pos += len(raw) + 1
    return bad


def _flock(fd: int, path: Path, timeout: float) -> None:
    try:
        flock_fd(fd, path, timeout)
    except LockTimeout as e:
        raise ConflictError(
            f"{path.name}: another reader holds this inbox; wait for it or use `team inbox --peek`"
        ) from e
