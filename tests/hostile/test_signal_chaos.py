"""SIGINT, SIGTERM and SIGKILL of the lead at random moments, then resume (issues 16, items 2 and 4).

A plan of 48 shell tasks (6 layers of 8, each needing two of the layer
before) appends each task's id to a ledger, and every fourth task leaves a
``setsid`` escapee behind. The lead gets a random signal each time the event
log has grown by a random number of lines; a SIGINT or SIGTERM must end it
with 130 / 143 and no traceback, a SIGKILL just kills it. In the end: every
task is completed exactly once, an id is twice in the ledger only if its
task was in flight at a stop (released as interrupted, or by the next lead
after a kill), every state file parses, and no process of the plan is left
(counted in /proc by the ``TEAM_ROOT`` they carry). ``make chaos`` runs the
long soak; set CHAOS_SEED to replay a run.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import run_team, team_env
from util import wait_until

from orchestrator.core import procs
from orchestrator.core.fsutil import read_jsonl
from orchestrator.core.models import Task
from orchestrator.jobs.records import JobRecord

LAYERS, WIDTH = 6, 8
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


def write_plan(root: Path) -> list[str]:
    ids, lines = [], ["name: chaos", "workers: 6", "tasks:"]
    for layer in range(LAYERS):
        for j in range(WIDTH):
            tid = f"t{layer}-{j}"
            ids.append(tid)
            escape = "setsid sleep 1200 & " if j % 4 == 0 else ""
            lines.append(f"  - id: {tid}")
            lines.append(f"    run: '{escape}sleep 0.02; echo {tid} >> \"$TEAM_ROOT/ledger\"; sleep 0.03'")
            if layer:
                lines.append(f"    needs: [t{layer - 1}-{j}, t{layer - 1}-{(j + 1) % WIDTH}]")
    (root / "plan.yaml").write_text("\n".join(lines) + "\n")
    return ids


def event_lines(root: Path) -> int:
    try:
        return (root / ".tasks" / "events.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def of_this_root(root: Path) -> list[int]:
    """Live processes carrying this root in their environment (the jobs and what they left)."""
    return [pid for pid in procs.pids() if procs.alive(pid) and procs.environ(pid).get("TEAM_ROOT") == str(root)]


def signal_and_resume(root: Path, stops: int, max_step: int) -> tuple[list[str], int, Counter[str]]:
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns() % 1_000_000))
    rnd = random.Random(seed)
    ids = write_plan(root)
    sent: Counter[str] = Counter()
    while sum(sent.values()) < stops:
        target = event_lines(root) + rnd.randint(1, max_step)
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root,
                                env=team_env(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_until(lambda t=target, p=lead: event_lines(root) >= t or p.poll() is not None, timeout=60,
                   interval=0.002, what=f"event log to grow (seed {seed})")
        if lead.poll() is not None:
            assert lead.returncode == 0, f"seed {seed}: {lead.stderr.read() if lead.stderr else ''}"
            break  # the plan finished before this stop
        sig = rnd.choice(SIGNALS)
        lead.send_signal(sig)
        try:
            _, err = lead.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            lead.kill()
            lead.wait()
            raise AssertionError(f"seed {seed}: the lead did not end within 60 s of {sig.name}") from None
        sent[sig.name] += 1
        if sig == signal.SIGKILL:
            assert lead.returncode == -signal.SIGKILL
        else:
            word = {signal.SIGINT: "Interrupted.", signal.SIGTERM: "Terminated."}[sig]
            assert (lead.returncode, err.strip().splitlines()[-1:]) == (128 + sig, [word]), f"seed {seed}: {err}"
            assert "Traceback" not in err, f"seed {seed}: {err}"
    final = run_team(root, "run", "plan.yaml", timeout=120)
    assert final.returncode == 0, f"seed {seed}: {final.stdout}\n{final.stderr}"
    return ids, seed, sent


def check_invariants(root: Path, ids: list[str], seed: int) -> None:
    why = f"(seed {seed})"
    tasks = [Task.model_validate_json(p.read_bytes()) for p in (root / ".tasks").glob("task_*.json")]
    for p in (root / ".team" / "jobs").glob("*.json"):
        JobRecord.model_validate_json(p.read_bytes())
    events = read_jsonl(root / ".tasks" / "events.jsonl")
    by_name = Counter(t.plan_task for t in tasks)
    assert sorted(by_name) == sorted(ids) and set(by_name.values()) == {1}, why
    assert {t.status.value for t in tasks} == {"completed"}, why
    assert {t.failures for t in tasks} == {0}, why  # stops are no failures
    completed = Counter(e["task"] for e in events if e.get("to") == "completed")
    assert max(completed.values()) == 1, why
    ledger = Counter((root / "ledger").read_text().split())
    assert set(ledger) == set(ids), why
    by_id = {t.plan_task: t for t in tasks}
    claims = Counter(e["task"] for e in events if e["event"] == "claimed")
    stopped = {e["task"] for e in events if e["event"] == "released"
               and ("previous lead died" in e.get("reason", "") or "interrupted" in e.get("reason", ""))}
    for name, n in ledger.items():
        if n > 1:
            tid = by_id[name].id
            assert tid in stopped and claims[tid] >= n, f"{name} ran {n}× without being in flight at a stop {why}"
    wait_until(lambda: not of_this_root(root), timeout=10, what=f"no process of the plan left {why}")
    for line in (root / ".tasks" / "events.jsonl").read_bytes().splitlines():
        json.loads(line)


def test_signals_of_every_kind_then_resume(tmp_path):
    ids, seed, _ = signal_and_resume(tmp_path, stops=4, max_step=25)
    check_invariants(tmp_path, ids, seed)


@pytest.mark.chaos
def test_thirty_signals_of_every_kind_then_resume(tmp_path):
    ids, seed, sent = signal_and_resume(tmp_path, stops=30, max_step=5)
    check_invariants(tmp_path, ids, seed)
    assert set(sent) == {"SIGINT", "SIGTERM", "SIGKILL"}, sent
