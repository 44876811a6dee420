"""A real local multi-node Ray cluster inside a network namespace of its own (tests and bench/ray_bench.py).

``LocalCluster(base)`` makes a network namespace (``unshare -n``, then ``lo``
brought up: only 127.0.0.1 exists in it, so nothing the cluster, the lead or
a model server does can leave loopback), and starts in it, with ``ray start``,
a head and ``workers`` worker nodes, each with its own ``--temp-dir`` (so its
processes can be found, and killed, by that folder). ``run``/``popen`` run a
command inside the namespace (``nsenter``). ``kill_node`` SIGKILLs every
process of one node (its raylet, workers, agents and what they started);
``add_node`` starts another. ``inside`` runs a function on a thread in the
namespace (a scripted model server's socket is opened there). ``stop`` kills every process in the namespace
(the nodes, their helpers, leads still running) and the namespace; it never uses ``ray stop`` (which would stop every Ray on
the machine, other users' too).
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent.parent  # this repository (the package the machines run)
PORT = 6379  # the namespace is ours: the default port is free in it
CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def unshare_works() -> str | None:
    """None if a network namespace can be made here, else why not (tests skip with it)."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None or shutil.which("ip") is None:
        return "needs unshare, nsenter and ip (util-linux, iproute2)"
    r = subprocess.run(["unshare", "-n", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"cannot make a network namespace: {r.stderr.strip()}"


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _cmdline_has(pid: int, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


class LocalCluster:
    def __init__(self, base: Path, workers: int = 2, cpus: int = 1, env: dict[str, str] | None = None,
                 resources: dict[str, dict[str, float]] | None = None):
        """``resources``: custom resources of some nodes, e.g. ``{"w2": {"gpu": 1}}``."""
        self.resources = resources or {}
        self.base = base
        self.base.mkdir(parents=True, exist_ok=True)
        # RAY_AUTH_MODE explicit: a token left in ~/.ray by an embedded `ray.init()` must not turn token
        # authentication on for some of the nodes and not for others (Ray reads it when the mode is unset).
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled", **(env or {})}
        self.env.pop("RAY_ADDRESS", None)
        self.cpus = cpus
        self.address = f"127.0.0.1:{PORT}"
        self.nodes: dict[str, Path] = {}
        self.ns = subprocess.Popen(["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep 1000000"],
                                   stdin=subprocess.DEVNULL)
        deadline = time.time() + 10
        while not self._lo_up():
            if time.time() > deadline or self.ns.poll() is not None:
                raise RuntimeError("the network namespace did not come up")
            time.sleep(0.02)
        self.netns = os.readlink(f"/proc/{self.ns.pid}/ns/net")
        try:
            self._start("head", head=True)
            starts = [self._start(f"w{i + 1}", wait=False) for i in range(workers)]
            for p in starts:
                self._wait(p)
        except BaseException:
            self.stop()
            raise

    def _lo_up(self) -> bool:
        r = subprocess.run(["nsenter", "-t", str(self.ns.pid), "-n", "ip", "-br", "addr", "show", "lo"],
                           capture_output=True, text=True)
        return "127.0.0.1" in r.stdout

    def ns_argv(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.ns.pid), "-n", *argv]

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        kw["env"] = {**kw.get("env", self.env), "RAY_AUTH_MODE": "disabled"}
        return subprocess.run(self.ns_argv(argv), **kw)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        kw["env"] = {**kw.get("env", self.env), "RAY_AUTH_MODE": "disabled"}
        return subprocess.Popen(self.ns_argv(argv), **kw)

    def inside(self, make: Callable[[], T]) -> T:
        """``make()`` run on a thread that joined the cluster's network namespace (``setns``), so the sockets
        it opens live there (a model server the lead and the nodes reach on 127.0.0.1); its result."""
        libc = ctypes.CDLL(None, use_errno=True)
        box: dict[str, object] = {}

        def body() -> None:
            fd = os.open(f"/proc/{self.ns.pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns into the cluster's network namespace failed")
                box["value"] = make()
            except BaseException as e:  # handed to the caller's thread, raised there
                box["error"] = e
            finally:
                os.close(fd)

        t = threading.Thread(target=body, name="in-cluster-netns")
        t.start()
        t.join()
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]  # type: ignore[return-value]

    def _start(self, name: str, head: bool = False, wait: bool = True,
               env: dict[str, str] | None = None) -> subprocess.Popen:
        temp = self.base / name
        self.nodes[name] = temp
        argv = [str(BIN / "ray"), "start", "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp),
                "--num-cpus", str(self.cpus), "--object-store-memory", str(80 * 1024 * 1024),
                "--disable-usage-stats", "--node-name", name]
        if name in self.resources:
            argv += ["--resources", json.dumps(self.resources[name])]
        argv += ["--head", "--port", str(PORT), "--include-dashboard", "false"] if head else \
            ["--address", self.address]
        p = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                       env={**self.env, **(env or {})})
        if wait:
            self._wait(p)
        return p

    def _wait(self, p: subprocess.Popen) -> None:
        out, _ = p.communicate(timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"ray start failed:\n{out.decode(errors='replace')[-3000:]}")

    def add_node(self, name: str, env: dict[str, str] | None = None) -> None:
        """Start another node (``env``: what its processes get on top of the cluster's)."""
        self._start(name, env=env)

    def remove_node(self, name: str) -> None:
        """Stop node ``name`` as ``ray stop`` would, its processes only: SIGTERM (its raylet tells the head
        it leaves, so the cluster stops listing it at once), then SIGKILL what is left after 10 s."""
        pids = self.pids(name)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while any(os.path.exists(f"/proc/{pid}") and not _zombie(pid) for pid in pids) and time.time() < deadline:
            time.sleep(0.05)
        self.kill_node(name)

    def pids(self, name: str) -> list[int]:
        """Every process of node ``name``: those naming its temp dir, and their descendants."""
        marker = str(self.nodes[name]) + "/"
        kids = _children()
        roots = [pid for pid in (int(e) for e in os.listdir("/proc") if e.isdigit())
                 if pid != os.getpid() and _cmdline_has(pid, marker)]
        out, stack = set(), list(roots)
        while stack:
            pid = stack.pop()
            if pid not in out:
                out.add(pid)
                stack.extend(kids.get(pid, []))
        return sorted(out)

    def kill_node(self, name: str) -> int:
        """SIGKILL every process of node ``name`` (and, three times over, any that appeared meanwhile)."""
        killed: set[int] = set()
        for _ in range(3):
            for pid in self.pids(name):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        return len(killed)

    def in_namespace(self) -> list[int]:
        """Every process in the cluster's network namespace (its nodes, leads, what they started)."""
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != self.ns.pid:
                try:
                    if os.readlink(f"/proc/{entry}/ns/net") == self.netns:
                        out.append(int(entry))
                except OSError:
                    continue
        return out

    def stop(self) -> None:
        """Kill every process in the namespace (a node's helpers too, e.g. the head's client server), then
        the namespace's own process."""
        for name in list(self.nodes)[::-1]:
            self.kill_node(name)
        for _ in range(3):
            for pid in self.in_namespace():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)
        self.ns.kill()
        self.ns.wait()


SUBNET = "10.77.0"


def own_tmp() -> str:
    """The shell lines that give a machine a ``/tmp`` of its own (a tmpfs) in which this repository and
    its venv stay where they are when they live under ``/tmp`` (a clone made with ``mktemp -d``, as
    fresh-clone-check makes one): the host's ``/tmp`` is bound aside first, and what the machine must see
    of it is bound back at the same paths."""
    keep = sorted({str(p) for p in (HERE, BIN.parent) if Path("/tmp") in p.parents})
    if not keep:
        return "mount -t tmpfs tmpfs /tmp"
    tops = [p for p in keep if not any(p != q and Path(q) in Path(p).parents for q in keep)]
    back = " && ".join(f"mkdir -p {shlex.quote(p)} && mount --bind {shlex.quote('/mnt' + p[len('/tmp'):])} "
                       f"{shlex.quote(p)}" for p in tops)
    return f"mount --bind /tmp /mnt && mount -t tmpfs tmpfs /tmp && {back} && umount -l /mnt"


class Machines:
    """Several machines on this host, for a real multi-machine cluster (tests of docs/scale.md's walk-through).

    Each machine is a network, PID and mount namespace of its own (``unshare --net --pid --fork
    --mount-proc``), with its own ``/tmp`` and ``/dev/shm`` (tmpfs: gone with the machine),
    ``HOME=/tmp/home``, loopback, and one interface on
    a bridge in a namespace of its own (``SUBNET``.N/24: nothing leaves the bridge). A process on one
    machine sees only that machine's processes (Ray finds "the nodes of this machine" by listing them)
    and reaches the others by their address; the rest of the filesystem (this repository, its venv) is
    shared, as an installed package would be. ``kill`` SIGKILLs a machine's first process: every process
    of the machine dies with it, as with a power cut. ``path(name, p)`` is where the host sees a file of
    the machine's ``/tmp``."""

    def __init__(self, names: list[str]):
        self.init: dict[str, int] = {}
        self.ip: dict[str, str] = {}
        self._procs: list[subprocess.Popen] = []
        try:
            self.switch = self._namespace("ip link add br0 type bridge && ip link set br0 up && ip link set lo up")
            for i, name in enumerate(names):
                self.init[name] = self._namespace(f"ip link set lo up && {own_tmp()} && mount -t tmpfs tmpfs /dev/shm && "
                                                  "mkdir /tmp/home")
                ip = f"{SUBNET}.{i + 1}"
                self._ip_in(self.switch, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0",
                            "netns", str(self.init[name]))
                self._ip_in(self.switch, "link", "set", f"v{i}", "master", "br0", "up")
                self._ip_in(self.init[name], "addr", "add", f"{ip}/24", "dev", "eth0")
                self._ip_in(self.init[name], "link", "set", "eth0", "up")
                self.ip[name] = ip
        except BaseException:
            self.stop()
            raise

    def _namespace(self, setup: str) -> int:
        """A new machine's first process (after ``setup`` ran in it): its pid as the host sees it."""
        p = subprocess.Popen(["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c",
                              f"{setup} && touch /tmp/.up && exec sleep 1000000"], stdin=subprocess.DEVNULL)
        self._procs.append(p)
        deadline = time.time() + 10
        while True:
            kids = _children().get(p.pid, [])
            if kids and os.path.exists(f"/proc/{kids[0]}/root/tmp/.up"):
                return kids[0]
            if time.time() > deadline or p.poll() is not None:
                raise RuntimeError("a machine's namespaces did not come up")
            time.sleep(0.02)

    def _ip_in(self, pid: int, *args: str) -> None:
        subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", *args], check=True, capture_output=True)

    def env(self, **extra: str) -> dict[str, str]:
        """A user's environment on a machine: the venv's programs first, HOME on the machine."""
        keep = ("LANG", "LC_ALL", "TERM")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.update(PATH=f"{BIN}:/usr/local/bin:/usr/bin:/bin", HOME="/tmp/home", RAY_USAGE_STATS_ENABLED="0")
        env.update(extra)
        return env

    def argv(self, name: str, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.init[name]), "-n", "-p", "-m", *argv]

    def sh(self, name: str, script: str, *, timeout: float = 120, env: dict[str, str] | None = None,
           cwd: str = "/tmp/home") -> subprocess.CompletedProcess:
        """``script`` run by ``sh`` on machine ``name`` (in ``cwd`` there)."""
        return subprocess.run(self.argv(name, ["sh", "-c", f"cd {cwd} && {script}"]), env=env or self.env(),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def popen(self, name: str, script: str, *, env: dict[str, str] | None = None, cwd: str = "/tmp/home",
              **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(name, ["sh", "-c", f"cd {cwd} && exec {script}"]), env=env or self.env(),
                                stdin=subprocess.DEVNULL, **kw)

    def path(self, name: str, inside: str) -> Path:
        """The host's way to a path under machine ``name``'s own ``/tmp``."""
        return Path(f"/proc/{self.init[name]}/root") / inside.lstrip("/")

    def kill(self, name: str) -> None:
        """Every process of machine ``name`` SIGKILLed at once (its first one: the PID namespace goes)."""
        pid = self.init.pop(name, None)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        for name in list(self.init):
            self.kill(name)
        for p in self._procs:
            p.kill()
            p.wait()
