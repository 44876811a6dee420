"""The lead's connection to a Ray cluster: which cluster, checked before Ray is asked, and watched while it runs.

``connect(address)`` (one connection per lead process, shared by the shell and
agent executors; the last to close disconnects):

* no ``--address``: the cluster ``$RAY_ADDRESS`` names, if set (as Ray's own
  tools do); else a new embedded Ray instance in the lead's process, bound to
  127.0.0.1 with no dashboard (never an existing cluster found on the machine);
* ``auto``: the cluster this machine is a node of;
* ``HOST:PORT``: first ``reach`` checks, in at most ``PROBE_TIMEOUT``
  seconds, that something answers there (a wrong address or a head that is
  down is said at once, ``ClusterUnreachable``, exit 1; Ray itself waits
  minutes) and that this machine is a node of a Ray cluster: the lead must be
  one (its Ray driver talks to the cluster through its own node's raylet and
  object store; Ray looks for a raylet among this machine's processes). A
  machine that is not is refused with the command that makes it one
  (``ray start --address HOST:PORT --num-cpus 0``: a node that runs no
  tasks), instead of Ray's minute of waiting. Ray Client addresses
  (``ray://``) are refused the same way: a driver through Ray Client has no
  node of its own, and the agent tasks' service (ray_service.py) must run on
  the lead's machine, next to the state root.

While connected:

* Ray's messages about the cluster (a node marked dead, a worker killed),
  which its driver prints to stdout, are not printed: the run reports lost
  attempts itself (``lost #12 ...: lost with node w1``), and ``--json`` stays
  JSON (``_worker_logs_enabled``, the switch Ray's own debugger uses);
* ``HeadWatch`` opens a TCP connection to the head's control store (GCS)
  every ``PROBE_EVERY`` seconds (waiting as long for it); when that has
  failed for ``HEAD_LOST_AFTER`` seconds the head is lost: every executor fails its attempts in flight with
  that (``on_lost``), the scheduler stops as after any failure, the summary
  is printed, exit 1. Every Ray call would hang meanwhile, so nothing more is
  asked of Ray (no cancel, no shutdown from us); Ray's own driver gives up on
  the head after ``RAY_gcs_rpc_server_reconnect_timeout_s`` (set to
  ``HEAD_GIVE_UP`` unless the user set it; Ray's default is 60 s), at exit.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core import threads
from ..core.errors import ClusterUnreachable, UserError

PROBE_TIMEOUT = 3.0
"""Seconds a TCP connection to the head may take before the head is taken as unreachable."""
PROBE_EVERY = 1.0
"""Seconds between two looks at the head while the run goes."""
HEAD_LOST_AFTER = 3.0
"""Seconds the head may fail to answer before the run stops."""
HEAD_GIVE_UP = 8
"""Seconds Ray's driver keeps trying a head that stopped answering before it gives up (the process's
last Ray calls, at exit, wait that long)."""


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address {address}: expected HOST:PORT of the cluster's head (e.g. 10.0.0.1:6379), "
                        f"or auto")
    return host.strip("[]"), int(port)


def reach(address: str) -> None:
    """Refuse at once a cluster that does not answer at ``address``, or a lead that is not a node of one
    (see the module docstring)."""
    from ray._private import services

    host, port = split_address(address)
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ClusterUnreachable(
            f"--backend ray: nothing answers at {address} ({why} within {PROBE_TIMEOUT:g}s): is the cluster's head "
            f"up, and is that its address? On the head, `ray start --head --port {port}` starts it and `ray status` "
            f"shows it (docs/scale.md)") from None
    if not services.find_node_ids():  # type: ignore[no-untyped-call]
        raise UserError(
            f"--backend ray: this machine is not a node of the Ray cluster at {address}, and the lead must be one "
            f"(its Ray driver works through a node on its own machine). Make it a node that runs no tasks: "
            f"`ray start --address {address} --num-cpus 0`, then run again with --address auto "
            f"(docs/scale.md, \"The lead's machine\")")


class HeadWatch:
    """Says when the cluster's head stops answering (module docstring); ``on_lost`` callbacks are called
    once, from the watch's thread, with what to tell the user."""

    def __init__(self, gcs: str, on_crash: Callable[[BaseException], None]):
        self.host, self.port = split_address(gcs)
        self.gcs = gcs
        self.lost: str | None = None
        self._callbacks: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threads.start("team-ray-head", self._watch, on_crash=on_crash)

    def on_lost(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
            lost = self.lost
        if lost is not None:
            callback(lost)

    def _answers(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=PROBE_EVERY).close()
            return True
        except OSError:
            return False

    def _watch(self) -> None:
        since: float | None = None  # when the head was first found not answering
        while not self._stop.wait(PROBE_EVERY):
            asked = time.monotonic()
            if self._answers():
                since = None
                continue
            since = asked if since is None else since
            if time.monotonic() - since >= HEAD_LOST_AFTER:
                text = (f"the Ray cluster's head at {self.gcs} stopped answering: the run stops; the tasks that "
                        f"completed stay done, run the plan again once the head is back")
                with self._lock:
                    self.lost = text
                    callbacks = list(self._callbacks)
                for cb in callbacks:
                    cb(text)
                return

    def stop(self) -> None:
        self._stop.set()


class Connection:
    """This process's connection to Ray (``connect``): who uses it, and the head's watch."""

    def __init__(self) -> None:
        self.users = 0
        self.watch: HeadWatch | None = None
        self.said = ""


_CONN = Connection()
"""The lead process's one connection (a Ray driver is per process): shell and agent executors share it."""


def connect(address: str | None, on_crash: Callable[[BaseException], None]) -> tuple[str, HeadWatch | None]:
    """Join the cluster (see the module docstring). Returns how the run is connected, for the user, and
    the head's watch (None for an embedded instance: its head is this process)."""
    import logging

    import ray

    conn = _CONN
    if ray.is_initialized():
        conn.users += 1
        return conn.said, conn.watch
    source = ""
    if address is None and os.environ.get("RAY_ADDRESS", "").strip():
        address, source = os.environ["RAY_ADDRESS"].strip(), " (from RAY_ADDRESS)"
    if address is not None and address.startswith("ray://"):
        raise UserError(f"--backend ray: {address} is a Ray Client address, and the lead cannot work through Ray "
                        f"Client (its driver must be a node of the cluster, next to the state root). On this "
                        f"machine run `ray start --address HEAD:6379 --num-cpus 0` (HEAD: the head's address, "
                        f"port of `ray start --head`), then run again with --address auto (docs/scale.md)")
    if address not in (None, "auto"):
        reach(address)
    # Ray's driver waits this long for a head that stopped answering before it gives up (default 60 s)
    os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(HEAD_GIVE_UP))
    quiet: dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=False, namespace="team",
                                 configure_logging=True)
    try:
        if address is None:
            ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, **quiet)
            said = "an embedded local Ray instance on 127.0.0.1"
        else:
            if address != "auto" and split_address(address)[0] in ("127.0.0.1", "localhost", "::1"):
                quiet["_node_ip_address"] = "127.0.0.1"
            ray.init(address=address, **quiet)
            said = (f"the Ray cluster at {address}{source}" if address != "auto" else
                    f"the Ray cluster this machine is a node of (head {ray.get_runtime_context().gcs_address})")
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = "start an embedded Ray instance" if address is None else f"connect to the Ray cluster at {address}"
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"--backend ray: cannot {where}{source}: {first} (start one with `ray start --head`, "
                        f"see docs/scale.md)") from None
    import ray._private.worker as driver

    driver._worker_logs_enabled = False  # Ray's cluster messages: not on our stdout (module docstring)
    conn.users, conn.said = 1, said
    conn.watch = HeadWatch(str(ray.get_runtime_context().gcs_address), on_crash) if address is not None else None
    return said, conn.watch


def disconnect() -> None:
    """One user of the connection is done; the last one shuts the driver down (not once the head is lost:
    that would wait on it; Ray's exit handler gives up on it after ``HEAD_GIVE_UP`` seconds)."""
    import ray

    conn = _CONN
    conn.users = max(0, conn.users - 1)
    if conn.users:
        return
    watch, conn.watch = conn.watch, None
    if watch is not None:
        watch.stop()
        if watch.lost is not None:
            return
    ray.shutdown()


def head_lost() -> str | None:
    """What to say if the connected cluster's head stopped answering (None while it answers)."""
    watch = _CONN.watch
    return watch.lost if watch is not None else None
