"""A run starts before its plan's tasks all exist (run/materialise.py), and a lead killed while it
creates them leaves a store the next run completes: each plan task exactly once, at the id the
creation record reserved for it, with the right ``blockedBy``; nothing completed twice; a task
that ran more than once was in flight at a kill. Set CRASH_SEED to replay a run."""

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

from conftest import run_team, team_env
from util import wait_until

from orchestrator.core.fsutil import read_jsonl
from orchestrator.core.models import Task
from orchestrator.core.paths import creation_record
from orchestrator.plan.load import load_plan
from orchestrator.run.materialise import prepare
from orchestrator.tasks.store import TaskStore


def write_plan(root: Path, n: int, rnd: random.Random, name: str = "big") -> dict[str, list[str]]:
    """n shell tasks appending their id to the ledger, each needing up to 2 of the 30 before it."""
    needs: dict[str, list[str]] = {}
    lines = [f"name: {name}", "workers: 4", "tasks:"]
    for i in range(n):
        tid = f"t{i}"
        needs[tid] = [f"t{j}" for j in sorted(rnd.sample(range(max(0, i - 30), i), min(i, 2)))]
        lines += [f"  - id: {tid}", f"    run: 'echo {tid} >> \"$TEAM_ROOT/ledger\"'"]
        if needs[tid]:
            lines.append(f"    needs: [{', '.join(needs[tid])}]")
    (root / "plan.yaml").write_text("\n".join(lines) + "\n")
    return needs


def tasks(root: Path) -> list[Task]:
    return [Task.model_validate_json(p.read_bytes()) for p in (root / ".tasks").glob("task_*.json")]


def ledger(root: Path) -> Counter[str]:
    try:
        return Counter((root / "ledger").read_text().split())
    except FileNotFoundError:
        return Counter()


def check_invariants(root: Path, needs: dict[str, list[str]], why: str, plan: str = "big") -> None:
    made = tasks(root)
    for line in (root / ".tasks" / "events.jsonl").read_bytes().splitlines():
        json.loads(line)
    assert Counter(t.plan_task for t in made) == Counter(list(needs)), f"each plan task exactly once {why}"
    id_of = {t.plan_task: t.id for t in made}
    for t in made:
        assert t.blockedBy == sorted(id_of[n] for n in needs[t.plan_task or ""]), f"{t.plan_task} {why}"
    assert {t.status.value for t in made} == {"completed"}, why
    events = read_jsonl(root / ".tasks" / "events.jsonl")
    completed = Counter(e["task"] for e in events if e.get("to") == "completed")
    assert max(completed.values()) == 1, f"a task completed twice {why}"
    ran = ledger(root)
    assert set(ran) == set(needs), why
    by_key = {t.plan_task: t for t in made}
    for key, n in ran.items():  # a repeat only for a task in flight at a kill (test_crash.py)
        t = by_key[key]
        assert n == 1 or (t.attempts >= n and t.interrupted >= n - 1), (
            f"{key} ran {n}× with {t.attempts} attempts, {t.interrupted} interrupted {why}")
    assert not creation_record(root, plan).exists(), why
    listed = run_team(root, "task", "list", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == len(needs), why


def test_a_lead_killed_while_it_creates_its_plan_is_resumed_with_exactly_the_missing_tasks(tmp_path):
    n = 2500
    seed = int(os.environ.get("CRASH_SEED", time.time_ns() % 1_000_000))
    rnd = random.Random(seed)
    why = f"(seed {seed})"
    needs = write_plan(tmp_path, n, rnd)
    during = 0  # kills that landed while the tasks were being created, after work had started
    for _ in range(3):
        target = sum(ledger(tmp_path).values()) + rnd.randint(1, 120)
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                                env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_until(lambda t=target, p=lead: sum(ledger(tmp_path).values()) >= t or p.poll() is not None,
                   timeout=120, interval=0.002, what=f"tasks to run {why}")
        lead.send_signal(signal.SIGKILL)
        lead.wait()
        err = lead.stderr.read().decode() if lead.stderr else ""
        assert lead.returncode == -signal.SIGKILL, f"{why}: the lead ended before the kill: {err[-2000:]}"
        if creation_record(tmp_path, "big").exists():
            during += 1
            made = tasks(tmp_path)  # what exists is whole, each plan task at most once
            assert max(Counter(t.plan_task for t in made).values()) == 1, why
            assert 0 < len(made) < n, why
            listed = run_team(tmp_path, "task", "list", "--json")
            assert listed.returncode == 0 and not listed.stderr, f"{why}: {listed.stderr}"
    assert during, f"{why}: every kill came after the tasks were all created"
    final = run_team(tmp_path, "run", "plan.yaml", timeout=600)
    assert final.returncode == 0, f"{why}: {final.stdout[-2000:]}\n{final.stderr[-2000:]}"
    check_invariants(tmp_path, needs, why)


def cut_short(root: Path, n: int) -> tuple[dict[str, list[str]], list[int]]:
    """The state a lead killed during its third chunk leaves, made with the real code: two chunks
    durable, the first ten tasks run to completion (as the lead had run them), the third chunk
    written but for a few of its files (renamed in parallel, some never were). Returns the plan's
    needs and the ids of the files left out."""
    needs = write_plan(root, n, random.Random(7))
    store = TaskStore(root)
    prep = prepare(store, load_plan(root / "plan.yaml"))
    assert prep.creation is not None and not prep.tasks
    first = prep.creation.next_chunk()
    prep.creation.next_chunk()
    for t in first[:10]:  # in plan order: each one's dependencies completed before it
        claimed = store.claim(t.id, "lead")
        with open(root / "ledger", "a") as f:
            f.write(f"{t.plan_task}\n")
        store.finish(t.id, claimed.epoch, "completed")
    third = prep.creation.next_chunk()
    gone = [t.id for t in third[::7]]
    for tid in gone:
        store.path(tid).unlink()
    return needs, gone


def test_a_chunk_cut_short_after_work_ran_is_finished_at_its_reserved_ids(tmp_path):
    needs, gone = cut_short(tmp_path, 400)
    dry = run_team(tmp_path, "run", "plan.yaml", "--dry-run")
    assert dry.returncode == 0
    assert f"resume: the last run stopped while creating the plan's tasks ({224 - len(gone)} of 400 made): " \
           "`team run` creates the others\n" in dry.stdout
    r = run_team(tmp_path, "run", "plan.yaml", timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (f"plan big: the last run stopped while creating its tasks ({224 - len(gone)} of 400 made): "
            f"creating the other {176 + len(gone)}\n") in r.stderr
    check_invariants(tmp_path, needs, "")
    id_of = {t.plan_task: t.id for t in tasks(tmp_path)}
    assert sorted(id_of.values()) == list(range(1, 401))  # every task at its reserved id: no gap, no extra
    assert ledger(tmp_path)["t0"] == 1  # completed before the kill: not run again


def test_fresh_after_a_creation_cut_short_starts_over_and_drops_the_record(tmp_path):
    needs, _ = cut_short(tmp_path, 300)
    r = run_team(tmp_path, "run", "plan.yaml", "--fresh", timeout=300)
    assert r.returncode == 0, r.stderr
    made = tasks(tmp_path)
    assert Counter(t.plan_task for t in made) == Counter(list(needs))
    assert min(t.id for t in made) > 300  # all made again, at new ids
    assert ledger(tmp_path)["t0"] == 2  # --fresh runs everything again
    assert not creation_record(tmp_path, "big").exists()


def test_a_plan_changed_after_a_creation_cut_short(tmp_path):
    needs, _ = cut_short(tmp_path, 300)
    plan = tmp_path / "plan.yaml"
    text = plan.read_text()
    # t5 ran (completed) with its needs; now it needs t3 instead, which had finished before it started:
    # its work stays valid (rewire.py), its edges change, and the missing tasks are made as usual
    assert "t3" not in needs["t5"]
    changed = text.replace("  - id: t5\n", "  - id: t5\n    needs: [t3]\n", 1)
    assert changed != text
    plan.write_text(changed.replace(f"    needs: [{', '.join(needs['t5'])}]\n  - id: t6", "  - id: t6")
                    if needs["t5"] else changed)
    plan.write_text(plan.read_text() + "  - id: extra\n    run: 'echo extra >> \"$TEAM_ROOT/ledger\"'\n"
                    "    needs: [t299]\n")
    r = run_team(tmp_path, "run", "plan.yaml", timeout=300)
    assert r.returncode == 0, r.stderr
    diff = ", ".join(["+t3"] + [f"-{n}" for n in needs["t5"]])
    assert (f"#6 t5: its needs changed ({diff}); its completed work stays valid (t3 had finished before it "
            "started): not running it again\n") in r.stderr
    check_invariants(tmp_path, {**needs, "t5": ["t3"], "extra": ["t299"]}, "")  # t5 ran once


def test_a_plan_changed_before_anything_ran_is_created_again(tmp_path):
    needs = write_plan(tmp_path, 200, random.Random(3))
    store = TaskStore(tmp_path)
    prep = prepare(store, load_plan(tmp_path / "plan.yaml"))
    assert prep.creation is not None
    prep.creation.next_chunk()  # a lead killed after its first chunk, before any claim
    needs = write_plan(tmp_path, 150, random.Random(4))  # another plan of the same name
    r = run_team(tmp_path, "run", "plan.yaml", timeout=300)
    assert r.returncode == 0, r.stderr
    assert ("plan big: the last run stopped while creating its tasks, and the plan changed since: creating "
            "them again\n") in r.stderr
    check_invariants(tmp_path, needs, "")


def test_a_name_taken_by_hand_refuses_the_run_before_anything_is_written(tmp_path):
    write_plan(tmp_path, 300, random.Random(5))
    made = run_team(tmp_path, "task", "create", "mine", "--name", "big.t250")
    assert made.returncode == 0, made.stderr
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2
    assert "a task named 'big.t250' already exists" in r.stderr
    assert [t.subject for t in tasks(tmp_path)] == ["mine"] and not creation_record(tmp_path, "big").exists()
