"""Inbox throughput and latency: real processes, real files.

    python bench/inbox_bench.py [--per-writer N] [--samples N]

1. Aggregate messages/s with 1, 4 and 8 writer processes sending to one
   inbox while a drainer process reads concurrently (clock: from "go" until
   the drainer holds every message). Default: fsync per send. The
   ``no-fsync`` rows show the same without fsync (still safe against a
   killed process, not against power loss).
2. send->receive latency, p50/p99: a reader thread in the same process
   (woken by a Condition) and a reader in another process (polls 5 ms),
   from the start of ``send`` (so including its fsync) and from its return
   (the wake-up alone) to the moment the reader holds the message.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.team.inbox import Bus  # noqa: E402
from orchestrator.team.roster import Team  # noqa: E402

WRITER = """
import sys
from orchestrator.team.inbox import Bus
root, name, n, durable = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
bus = Bus(root, durable=durable)
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    bus.send("sink", str(i), sender=name)
"""

DRAINER = """
import sys, time
from orchestrator.team.inbox import Bus
root, total, durable = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
bus = Bus(root, durable=durable)
print("ready", flush=True)
got = 0
while got < total:
    got += len(bus.wait("sink", timeout=30))
print(time.time(), flush=True)
"""

XREADER = """
import sys, time
from orchestrator.team.inbox import Bus
root, n = sys.argv[1], int(sys.argv[2])
bus = Bus(root)
print("ready", flush=True)
got = []
while len(got) < n:
    for m in bus.wait("sink", timeout=30):
        got.append(f"{m.content}:{time.time()!r}")
print(" ".join(got), flush=True)
"""


def py(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], cwd=REPO, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def fresh_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="inbox-bench-"))
    Team(root).add("sink")
    return root


def throughput(writers: int, per_writer: int, durable: bool) -> float:
    root = fresh_root()
    total = writers * per_writer
    drainer = py(DRAINER, root, total, int(durable))
    procs = [py(WRITER, root, f"w{i}", per_writer, int(durable)) for i in range(writers)]
    for p in [drainer, *procs]:
        assert p.stdout.readline() == "ready\n"
    go = time.time()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        p.wait()
    done = float(drainer.stdout.readline())
    drainer.wait()
    return total / (done - go)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def latency_in_process(samples: int) -> tuple[list[float], list[float]]:
    """(send start -> received, send returned -> received) in seconds, reader thread in this process."""
    root = fresh_root()
    bus = Bus(root)
    received: dict[int, float] = {}
    started = threading.Event()

    def reader() -> None:
        started.set()
        while len(received) < samples:
            for m in bus.wait("sink", timeout=30):
                received[int(m.content)] = time.time()

    t = threading.Thread(target=reader)
    t.start()
    started.wait()
    sent = []
    for i in range(samples):
        time.sleep(0.002)  # pace the sends: measure wake-ups, not a backlog
        t0 = time.time()
        bus.send("sink", str(i), sender="bench")
        sent.append((t0, time.time()))
    t.join()
    return split(sent, received)


def split(sent: list[tuple[float, float]], received: dict[int, float]) -> tuple[list[float], list[float]]:
    full = [received[i] - t0 for i, (t0, _) in enumerate(sent)]
    wake = [max(0.0, received[i] - t1) for i, (_, t1) in enumerate(sent)]
    return full, wake


def latency_cross_process(samples: int) -> tuple[list[float], list[float]]:
    """The same with the reader in another process (it polls the inbox every 5 ms)."""
    root = fresh_root()
    bus = Bus(root)
    reader = py(XREADER, root, samples)
    assert reader.stdout.readline() == "ready\n"
    sent = []
    for i in range(samples):
        time.sleep(0.003)
        t0 = time.time()
        bus.send("sink", str(i), sender="bench")
        sent.append((t0, time.time()))
    pairs = (x.split(":") for x in reader.stdout.readline().split())
    return split(sent, {int(i): float(t) for i, t in pairs})


def raw_fsync_ms(n: int = 100) -> float:
    """p50 of one 200-byte append + fsync on the bench's filesystem: the floor of a durable send."""
    import os

    fd, path = tempfile.mkstemp(prefix="inbox-bench-fsync-")
    times = []
    for _ in range(n):
        t = time.perf_counter()
        os.write(fd, b"x" * 200 + b"\n")
        os.fsync(fd)
        times.append(time.perf_counter() - t)
    os.close(fd)
    os.unlink(path)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-writer", type=int, default=600)
    ap.add_argument("--samples", type=int, default=300)
    args = ap.parse_args()
    t0 = time.time()
    print(f"raw append+fsync on {tempfile.gettempdir()}: p50 {raw_fsync_ms():.2f} ms "
          "(one writer's fsync-bound ceiling is 1/that)\n")
    print("Inbox throughput (messages/s, one inbox, concurrent drainer process)")
    print(f"{'writers':>8} {'mode':>9} {'messages':>9} {'msg/s':>9}   target")
    for durable in (True, False):
        for n in (1, 4, 8):
            rate = throughput(n, args.per_writer, durable)
            target = ">= 5,000" if n == 8 else ""
            mode = "fsync" if durable else "no-fsync"
            print(f"{n:>8} {mode:>9} {n * args.per_writer:>9} {rate:>9,.0f}   {target}")
    print()
    print("send -> receive latency (ms): 'send' = from calling send (fsync included),")
    print("'wake' = from send returning (the acknowledgement) to the reader holding the message")
    print(f"{'reader':>14} {'samples':>8} {'send p50':>9} {'send p99':>9} {'wake p50':>9} {'wake p99':>9}"
          "   target p99")
    for label, fn, target in (("same process", latency_in_process, "<= 10 ms"),
                              ("other process", latency_cross_process, "<= 100 ms")):
        full, wake = ([x * 1000 for x in xs] for xs in fn(args.samples))
        print(f"{label:>14} {len(full):>8} {statistics.median(full):>9.2f} {pct(full, 0.99):>9.2f} "
              f"{statistics.median(wake):>9.2f} {pct(wake, 0.99):>9.2f}   {target}")
    print(f"\n(total bench time {time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
