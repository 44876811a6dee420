"""Issue 13's correctness parts: the task index never masks the files, a plan's creation
survives a SIGKILL mid-way (more in test_materialise.py), and a lean start-up (what `team task list` imports).

No timing here: bench/scale_bench.py measures."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_team, team_env
from util import wait_until

from orchestrator.core.errors import CycleError
from orchestrator.tasks.index import INDEX_NAME, load
from orchestrator.tasks.store import TaskStore


def make_store(root: Path, n: int = 150) -> TaskStore:
    """n tasks, each blocked by up to two earlier ones; one batch (so it is indexed as written)."""
    rnd = random.Random(n)
    store = TaskStore(root)
    store.create_many([{"subject": f"task {i}", "name": f"t{i}",
                        "blockedBy": [("new", j) for j in sorted(rnd.sample(range(max(0, i - 10), i), min(i, 2)))]}
                       for i in range(n)])
    return store


def listing(root: Path, *args: str) -> tuple[int, list[dict], str]:
    r = run_team(root, "task", "list", "--json", *args)
    return r.returncode, json.loads(r.stdout or "[]"), r.stderr


def validated(store: TaskStore) -> list[dict]:
    """What `task list --json` printed before the index: every file through pydantic."""
    tasks = store.all()
    by_id = {t.id: t for t in tasks}
    done = {t.id for t in tasks if t.status.value == "completed"}
    return [{**t.to_json(), "ready": t.status.value == "pending" and all(d in done for d in t.blockedBy),
             "waiting_on": [d for d in t.blockedBy if d not in done or d not in by_id]} for t in tasks]


def test_a_plan_sized_batch_is_indexed_as_written_and_the_listing_is_the_validated_one(tmp_path):
    store = make_store(tmp_path)
    assert len(load(store.dir)) == 150  # the batch vouched for its own files
    store.update(3, status="completed")
    code, rows, _ = listing(tmp_path)
    assert code == 0 and rows == validated(store)
    (store.dir / INDEX_NAME).unlink()  # lost: rebuilt, same answer
    assert listing(tmp_path)[1] == rows and len(load(store.dir)) == 150
    (store.dir / INDEX_NAME).write_text('{"v": 1, "valid": ')  # torn: ignored, rebuilt
    assert listing(tmp_path)[1] == rows and len(load(store.dir)) == 150


def test_a_hand_edit_of_the_same_size_in_the_same_second_is_never_masked(tmp_path):
    store = make_store(tmp_path)
    assert listing(tmp_path)[0] == 0
    path = store.path(1)
    before = path.stat()
    raw = path.read_bytes()
    edited = raw.replace(b'"status":"pending"', b'"status":"failed" ')  # same length, edited in place
    assert len(edited) == len(raw) and edited != raw
    with open(path, "r+b") as f:
        f.write(edited)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the old mtime put back
    code, rows, _ = listing(tmp_path)
    assert code == 0 and rows[0]["status"] == "failed"
    assert rows == validated(store)
    code, ready, _ = listing(tmp_path, "--ready")
    assert 1 not in [r["id"] for r in ready]


def test_a_removed_or_broken_task_file_is_not_masked_by_the_index(tmp_path):
    store = make_store(tmp_path)
    assert listing(tmp_path)[0] == 0
    store.path(5).unlink()
    code, rows, _ = listing(tmp_path)
    assert code == 0 and 5 not in [r["id"] for r in rows] and len(rows) == 149
    assert [r["waiting_on"] for r in rows if r["id"] in (6, 7)] == \
        [d["waiting_on"] for d in validated(store) if d["id"] in (6, 7)]
    store.path(9).write_text('{"id": 9, "subject": "x", "status": "done"}')  # valid JSON, not a task
    code, rows, err = listing(tmp_path)
    assert code == 1 and 9 not in [r["id"] for r in rows]
    assert "task_9.json cannot be read (status: Input should be" in err
    assert "9" not in load(store.dir)


def test_a_seed_file_and_a_foreign_key_order_list_exactly_as_validated(tmp_path):
    tasks = tmp_path / ".tasks"
    tasks.mkdir()
    (tasks / "task_1.json").write_text(json.dumps({"id": 1, "subject": "seed", "description": "",
                                                   "status": "completed", "blockedBy": [], "owner": ""}))
    (tasks / "task_2.json").write_text(json.dumps({"owner": "bob", "blockedBy": [1], "status": "pending",
                                                   "subject": "keys in another order", "id": 2, "retries": 0}))
    first = listing(tmp_path)
    again = listing(tmp_path)  # with the index the first listing wrote
    assert first == again and first[0] == 0
    assert first[1] == validated(TaskStore(tmp_path))


def test_seed_format_files_list_as_validated_without_pydantic_and_odd_ones_go_the_validated_way(tmp_path):
    """Files the seed's TaskManager wrote (its six keys, indent=2) were never in the index, so every
    listing imported pydantic and validated each one (130 ms against 50 ms for 1,000 files). Now they
    are checked without it, with the same answer; a file with anything else goes through pydantic."""
    tasks = tmp_path / ".tasks"
    tasks.mkdir()
    seed = [{"id": 1, "subject": "done", "description": "", "status": "completed", "blockedBy": [], "owner": ""},
            {"id": 2, "subject": "b\u00e9", "description": "long", "status": "in_progress", "blockedBy": [1],
             "owner": "alice"},
            {"id": 3, "subject": "waits", "description": "", "status": "pending", "blockedBy": [2, 9], "owner": ""},
            {"id": 4, "subject": "no description"}]
    for t in seed:
        (tasks / f"task_{t['id']}.json").write_text(json.dumps(t, indent=2, ensure_ascii=False))
    code = ("import sys, json; from orchestrator.cli import main; main(['task', 'list', '--json']); "
            "print(json.dumps('pydantic' in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=team_env(tmp_path))
    assert r.returncode == 0, r.stderr
    *printed, pydantic = r.stdout.splitlines()
    assert json.loads(pydantic) is False
    assert json.loads("\n".join(printed)) == validated(TaskStore(tmp_path))
    assert run_team(tmp_path, "task", "list").stdout == (
        "[x] #1: done\n[>] #2: b\u00e9 (alice)\n[ ] #3: waits (blocked by: [2, 9])\n[ ] #4: no description\n")
    assert not (tasks / INDEX_NAME).exists()  # nothing the index needs to vouch for: nothing written
    odd = {5: {"id": "5", "subject": "a string id", "status": "pending", "blockedBy": [], "owner": ""},
           6: {"id": 6, "subject": "a foreign key", "blockedBy": [], "priority": 2},
           7: {"id": 7, "subject": "a float dependency", "blockedBy": [1.0]}}
    for tid, t in odd.items():
        (tasks / f"task_{tid}.json").write_text(json.dumps(t, indent=2))
    code_, rows, _ = listing(tmp_path)
    assert code_ == 0 and rows == validated(TaskStore(tmp_path))
    (tasks / "task_8.json").write_text(json.dumps({"id": 8, "subject": "x", "status": "done"}, indent=2))
    code_, rows, err = listing(tmp_path)
    assert code_ == 1 and 8 not in [r["id"] for r in rows]
    assert "task_8.json cannot be read (status: Input should be" in err


def test_task_list_imports_no_pydantic_record_or_heavy_library(tmp_path):
    make_store(tmp_path)
    code = ("import sys; from orchestrator.cli import main; main(['task', 'list', '--ready']); "
            "print(sorted(m for m in ('orchestrator.core.models', 'orchestrator.tasks.store', 'networkx', 'yaml', "
            "'rich', 'openai', 'starlette') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=team_env(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith("[ ] #1: task 0")
    assert r.stdout.splitlines()[-1] == "[]"


def test_every_command_module_imports_light(tmp_path):
    code = ("import sys, orchestrator.cli; "
            "print(sorted(m for m in ('orchestrator.core.models', 'pydantic', 'networkx', 'yaml', 'rich', 'openai') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=team_env(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def write_plan(root: Path, n: int) -> None:
    lines = ["name: bulk", "workers: 4", "tasks:"]
    for i in range(n):
        lines += [f"  - id: t{i}", "    run: 'true'"]
        if i:
            lines.append(f"    needs: [t{i - 1 - (i * 7) % min(i, 20)}]")
    (root / "plan.yaml").write_text("\n".join(lines) + "\n")


def task_files(root: Path) -> int:
    try:
        return sum(1 for e in os.scandir(root / ".tasks") if e.name.startswith("task_"))
    except FileNotFoundError:
        return 0


def test_a_lead_killed_in_the_middle_of_creating_a_plan_leaves_a_store_the_next_run_completes(tmp_path):
    n = 1500
    write_plan(tmp_path, n)
    seed = int(os.environ.get("CRASH_SEED", time.time_ns() % 1_000_000))
    target = random.Random(seed).randint(n // 10, n * 9 // 10)
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: task_files(tmp_path) >= target or lead.poll() is not None, timeout=120, interval=0.001,
               what=f"the batch to be under way (seed {seed})")
    lead.send_signal(signal.SIGKILL)
    lead.wait()
    left = task_files(tmp_path)
    if 0 < left < n:  # killed mid-creation (the usual case): what is there is readable, each task once
        code, rows, err = listing(tmp_path)  # (its first tasks may have run: tests/test_materialise.py)
        assert code == 0 and not err, f"seed {seed}: {err}"
        assert len({r["plan_task"] for r in rows}) == len(rows), f"seed {seed}"
    final = run_team(tmp_path, "run", "plan.yaml", timeout=600)
    assert final.returncode == 0, f"seed {seed}: {final.stdout[-2000:]}\n{final.stderr[-2000:]}"
    code, rows, err = listing(tmp_path)
    assert code == 0, err
    assert sorted(r["plan_task"] for r in rows) == sorted(f"t{i}" for i in range(n)), f"seed {seed}"
    assert all(r["status"] == "completed" for r in rows), f"seed {seed}"


def test_the_summary_of_a_long_chain_keeps_its_ends_and_json_keeps_it_all(tmp_path):
    n = 30
    lines = ["name: chain", "workers: 2", "tasks:"]
    for i in range(n):
        lines += [f"  - id: c{i}", "    run: 'true'"] + ([f"    needs: [c{i - 1}]"] if i else [])
    (tmp_path / "plan.yaml").write_text("\n".join(lines) + "\n")
    r = run_team(tmp_path, "run", "plan.yaml", timeout=300)
    assert r.returncode == 0, r.stderr
    (path_line,) = [line for line in r.stdout.splitlines() if line.startswith("critical path as run:")]
    steps = path_line.removeprefix("critical path as run: ").split(" → ")
    assert [s.split(" (")[0] for s in steps[:4]] == ["c0", "c1", "c2", "c3"]
    assert steps[4].startswith("… 22 more (") and steps[4].endswith("s) …")
    assert [s.split(" (")[0] for s in steps[5:]] == ["c26", "c27", "c28", "c29"]
    assert "durations (slowest 15 of 30):" in r.stdout
    r = run_team(tmp_path, "run", "plan.yaml", "--fresh", "--json", timeout=300)
    summary = json.loads(r.stdout.splitlines()[-1])
    assert [c["name"] for c in summary["critical_path"]] == [f"c{i}" for i in range(n)]
    assert len(summary["durations"]) == n


def test_the_batch_cycle_check_still_sees_a_cycle_through_a_hand_edited_task(tmp_path):
    store = TaskStore(tmp_path)
    store.create("existing")
    store.path(1).write_text(json.dumps({"id": 1, "subject": "existing", "blockedBy": [3]}))  # #3: not yet made
    specs = [{"subject": f"new {i}", "blockedBy": [1] if i == 1 else []} for i in range(150)]
    with pytest.raises(CycleError) as e:
        store.create_many(specs)
    assert str(e.value) == "dependency cycle: #3 → #1 → #3"
    assert store.ids() == [1]  # nothing written


def test_the_fast_pretty_printer_writes_what_json_dumps_writes():
    from orchestrator.core.jsonutil import pretty

    rnd = random.Random(13)
    leaves = [None, True, False, 0, -5, 10**20, 1.5, 1e-7, 1e22, float("nan"), float("inf"), -float("inf"),
              "x", "", 'é"\\\n\t\x01😀', "\u2028"]

    def gen(depth: int = 0) -> object:
        r = rnd.random()
        if depth > 3 or r < 0.5:
            return rnd.choice(leaves)
        if r < 0.75:
            return [gen(depth + 1) for _ in range(rnd.randint(0, 4))]
        return {rnd.choice(["a", "é", '"q', ""]) + str(i): gen(depth + 1) for i in range(rnd.randint(0, 4))}

    for obj in [gen() for _ in range(3000)] + [(1, 2), {"a": (1,)}, {1: "int key"}, {"a": {2: 3}}, [{True: 1}]]:
        assert pretty(obj) == json.dumps(obj, ensure_ascii=False, indent=2), obj
