"""Many OS processes on one store: no lost update, no duplicate id, no double
claim, and a writer killed with SIGKILL leaves every file readable."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from util import wait_until

from orchestrator.core.models import Status
from orchestrator.status import doctor
from orchestrator.tasks.store import TaskStore

PROCS = 8
SHARED = 4  # tasks every process writes its own counter field into

CTX = multiprocessing.get_context("fork")


def _mutator(root: str, p: int, seed: int, ops: int, barrier) -> None:
    rng = random.Random(seed)
    store = TaskStore(root)
    counts = {s: 0 for s in range(1, SHARED + 1)}
    created: dict[int, dict] = {}
    own: list[int] = []
    barrier.wait()
    for i in range(ops):
        r = rng.random()
        if r < 0.35 or len(own) < 2:
            deps = sorted(rng.sample(own, min(len(own), rng.randint(0, 2))))
            t = store.create(f"p{p}-{i}", blocked_by=deps, proc=p)
            own.append(t.id)
            created[t.id] = {"subject": t.subject, "deps": deps, "status": "pending"}
        elif r < 0.7:
            s = rng.randint(1, SHARED)
            counts[s] += 1
            store.update(s, actor=f"p{p}", **{f"c{p}": counts[s]})
        elif r < 0.85:
            tid = rng.choice(own)
            won = store.try_claim(tid, f"p{p}")
            if won is not None:
                store.finish(tid, won.epoch, "completed")
                created[tid]["status"] = "completed"
        else:
            a, b = sorted(rng.sample(own, 2))  # an edge from a later task to an earlier one: no cycle
            store.update(b, add_blocked_by=[a], actor=f"p{p}")
            created[b]["deps"] = sorted(set(created[b]["deps"]) | {a})
    Path(root, f"log_{p}.json").write_text(json.dumps({"counts": counts, "created": created}))


def test_eight_processes_mutating_one_store_lose_nothing(tmp_path):
    store = TaskStore(tmp_path)
    for s in range(SHARED):
        store.create(f"shared {s + 1}")
    barrier = CTX.Barrier(PROCS)
    procs = [CTX.Process(target=_mutator, args=(str(tmp_path), p, 1000 + p, 200, barrier)) for p in range(PROCS)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(120)
    assert [pr.exitcode for pr in procs] == [0] * PROCS

    tasks, unreadable = store.scan()
    assert unreadable == []
    for path in store.dir.glob("task_*.json"):
        json.loads(path.read_text())  # every file parses as plain JSON too
    logs = [json.loads((tmp_path / f"log_{p}.json").read_text()) for p in range(PROCS)]
    created = [int(tid) for log in logs for tid in log["created"]]
    assert len(created) == len(set(created)), "an id was handed to two processes"
    assert [t.id for t in tasks] == list(range(1, SHARED + len(created) + 1))
    by_id = {t.id: t for t in tasks}
    for p, log in enumerate(logs):
        for s, count in log["counts"].items():
            assert getattr(by_id[int(s)], f"c{p}", 0) == count, f"lost update of c{p} on shared #{s}"
        for tid, want in log["created"].items():
            t = by_id[int(tid)]
            assert (t.subject, t.blockedBy, t.status.value, t.proc) == (want["subject"], want["deps"], want["status"], p)
    created_events = [e["task"] for e in store.events()[0] if e["event"] == "created"]
    assert sorted(created_events) == [t.id for t in tasks]


def _claimer(root: str, p: int, barrier) -> None:
    store = TaskStore(root)
    order = list(range(1, 101))
    random.Random(p).shuffle(order)
    barrier.wait()
    if p < 2:  # two racers claim as `team run` does: pipelined commits, files written by a writer thread
        with store.pipelined():
            wins = [t.id for tid in order for t in store.commit([], [tid], f"w{p}")[1]]
    else:
        wins = [tid for tid in order if store.try_claim(tid, f"w{p}") is not None]
    Path(root, f"wins_{p}.json").write_text(json.dumps(wins))


def test_eight_processes_racing_for_100_tasks_one_winner_each(tmp_path):
    store = TaskStore(tmp_path)
    store.create_many([{"subject": f"job {i}"} for i in range(100)])
    barrier = CTX.Barrier(PROCS)
    procs = [CTX.Process(target=_claimer, args=(str(tmp_path), p, barrier)) for p in range(PROCS)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(120)
    assert [pr.exitcode for pr in procs] == [0] * PROCS
    wins = {p: json.loads((tmp_path / f"wins_{p}.json").read_text()) for p in range(PROCS)}
    all_wins = sorted(tid for w in wins.values() for tid in w)
    assert all_wins == list(range(1, 101))
    for p, ids in wins.items():
        for tid in ids:
            t = store.read(tid)
            assert (t.owner, t.status, t.epoch, t.attempts) == (f"w{p}", Status.in_progress, 1, 1)
    claims = [e["task"] for e in store.events()[0] if e["event"] == "claimed"]
    assert sorted(claims) == list(range(1, 101))


CHURN = r"""
import random, sys
from orchestrator.tasks.store import TaskStore
store = TaskStore(sys.argv[1])
rng = random.Random(int(sys.argv[2]))
own = [t.id for t in store.all()]
i = 0
while True:
    i += 1
    r = rng.random()
    if r < 0.4 or len(own) < 2:
        deps = rng.sample(own, min(len(own), rng.randint(0, 2)))
        batch = rng.randint(1, 3)
        made = store.create_many([{"subject": f"churn {i}-{k}", "blockedBy": deps, "name": f"n{i}-{k}-{rng.random():.6f}"} for k in range(batch)])
        own.extend(t.id for t in made)
    elif r < 0.7:
        store.update(rng.choice(own), description="x" * rng.randint(0, 5000))
    elif r < 0.9:
        won = store.try_claim(rng.choice(own), "churn", lease=60)
        if won is not None:
            store.finish(won.id, won.epoch, rng.choice(["completed", "failed"]), result="y" * 2000)
    else:
        a, b = sorted(rng.sample(own, 2))
        store.update(b, add_blocked_by=[a])
"""


def _kill_rounds(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    store = TaskStore(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for rnd in range(rounds):
        start = len(store.events()[0])
        child = subprocess.Popen([sys.executable, "-c", CHURN, str(tmp_path), str(seed + rnd)], env=env)
        target = start + rng.randint(3, 80)
        wait_until(lambda t=target, c=child: len(store.events()[0]) >= t or c.poll() is not None, what="churn progress")
        assert child.poll() is None, "the churn process died on its own"
        child.send_signal(signal.SIGKILL)
        child.wait()
        tasks, unreadable = store.scan()
        assert unreadable == [], f"round {rnd}: unreadable files after SIGKILL"
        for path in store.dir.glob("task_*.json"):
            json.loads(path.read_text())
        # The store stays usable: a fresh id, a claim and a completion.
        t = store.create(f"after round {rnd}")
        assert t.id > max(x.id for x in tasks)  # a batch cut short may skip ids, never reuse one
        won = store.claim(t.id, "checker")
        store.finish(t.id, won.epoch, "completed")
    # Whatever the kills left behind is either healthy or safely fixable.
    findings = doctor.diagnose(tmp_path)
    assert all(f.fix is not None for f in findings), [f.message for f in findings]
    assert doctor.repair(findings) == []
    assert doctor.diagnose(tmp_path) == []


def test_sigkill_mid_write_leaves_every_file_readable(tmp_path):
    _kill_rounds(tmp_path, rounds=4, seed=7)


@pytest.mark.chaos
def test_sigkill_soak(tmp_path):
    _kill_rounds(tmp_path, rounds=60, seed=99)


def test_a_pipelined_lead_committing_back_to_back_lets_another_shell_in(tmp_path):
    """The group-commit writer keeps the store lock while batches are queued;
    under back-to-back commits it hands the lock to a waiting process.

    The other shell is started (and has paid for its imports, the store's and the
    task records' too: what `task create` loads lazily) before the chain begins
    and is released at step 50, so however loaded the machine, it asks for the
    lock with thousands of commits still to go."""
    store = TaskStore(tmp_path)
    ids = [t.id for t in store.create_many([{"subject": f"step {i}"} for i in range(3000)])]
    script = ("import sys; from orchestrator.cli import main; import orchestrator.cli.tasks, orchestrator.tasks.store, "
              "orchestrator.core.models; print('ready', flush=True); sys.stdin.readline(); "
              f"sys.exit(main(['task', 'create', 'from another shell', '--root', {str(tmp_path)!r}]))")
    other = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert other.stdout is not None and other.stdin is not None
    assert other.stdout.readline().strip() == "ready", other.stderr.read() if other.stderr else ""
    released = False
    finished_while_committing = False
    with store.pipelined():
        running = None
        for i, tid in enumerate(ids):  # a chain of instant tasks: finish one, claim the next
            finals = [(running.id, running.epoch, "completed", {})] if running else []
            running = store.commit(finals, [tid], "lead")[1][0]
            if i == 50:
                other.stdin.write("go\n")
                other.stdin.flush()
                released = True
            if released and other.poll() is not None:
                finished_while_committing = True
                break
    out, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    assert finished_while_committing, "the other shell waited for the whole run"
    created = int(out.split("#")[1].split(":")[0])
    assert created == ids[-1] + 1 and store.read(created).subject == "from another shell"
    done = [t for t in store.all() if t.status == Status.completed]
    assert [t.id for t in done] == ids[: len(done)] and store.read(ids[len(done)]).status == Status.in_progress
