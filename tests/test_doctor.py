"""``team doctor``: finds each problem kind, changes nothing without --fix,
repairs the safe ones with --fix and says what needs a human."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from conftest import REPO
from util import wait_until

from orchestrator.core import procs
from orchestrator.jobs.manager import JobManager
from orchestrator.status import doctor
from orchestrator.tasks.store import TaskStore


def damage(root):
    """One of every problem kind, as hand edits and killed writers leave them."""
    store = TaskStore(root)
    store.create("Setup", name="setup")
    store.create("Build", blocked_by=[1])
    store.create("Lint")
    t = store.claim(3, "alice", lease=60)
    assert t.epoch == 1
    d = store.dir
    (d / "task_3.json").write_text(
        json.dumps({**json.loads((d / "task_3.json").read_text()), "lease_expires": 1_000_000.0})
    )
    (d / "task_4.json").write_text('{"id": 4, "subject": "Half"')  # unparsable
    (d / "task_5.json").write_text(json.dumps({"id": 5, "subject": "Orphan", "blockedBy": [42]}))
    (d / "task_6.json").write_text(json.dumps({"id": 6, "subject": "Ping", "blockedBy": [7], "name": "setup"}))
    (d / "task_7.json").write_text(json.dumps({"id": 7, "subject": "Pong", "blockedBy": [6]}))
    (d / ".tmp-abc.part").write_text("{")
    team_tmp = root / ".team" / "inbox" / ".tmp-old.part"
    team_tmp.parent.mkdir(parents=True)
    team_tmp.write_text("x")
    os.utime(team_tmp, (time.time() - 3600, time.time() - 3600))
    (root / ".team" / ".tmp-fresh.part").write_text("in flight")  # young: maybe a live writer
    store.files.names_path.unlink()
    store.files.counter_path.write_text("3")


PROBLEMS = [
    "  problem [corrupt-task] .tasks/task_4.json: file: Invalid JSON: EOF while parsing an object at line 1 column 27",
    "          → repair the JSON by hand, or move the file out of .tasks/ if the task is not needed",
    "  problem [missing-dependency] task #5 is blocked by #42, which does not exist",
    "          → `team task update 5 --remove-blocked-by 42` (or recreate #42)",
    "  problem [cycle] dependency cycle #6 → #7 → #6: none of these tasks can ever start",
    "          → break it with `team task update 6 --remove-blocked-by 7` (or another edge)",
]
HUMAN_DUPES = [
    "  problem [duplicate-name] tasks #1, #6 share the name 'setup'; the name resolves to #1",
    "          → edit the \"name\" of all but one in .tasks/task_6.json",
]


def test_doctor_reports_every_kind_and_changes_nothing(team):
    damage(team.root)
    before = {p: p.read_bytes() for p in team.root.rglob("*") if p.is_file()}
    r = team("doctor", TZ="UTC")
    assert r.returncode == 1, r.stderr
    fixable = " (fixable: run `team doctor --fix`)"
    assert r.stdout.splitlines() == [
        f"team doctor: {team.root}",
        *PROBLEMS,
        f"  problem [temp-file] leftover temp file .tasks/.tmp-abc.part (a writer was killed mid-write; the real file is intact){fixable}",
        "          → safe to delete",
        f"  problem [temp-file] leftover temp file .team/inbox/.tmp-old.part (a writer was killed mid-write; the real file is intact){fixable}",
        "          → safe to delete",
        f"  problem [expired-lease] task #3 is in_progress but the lease of alice expired at 1970-01-12 13:46:40{fixable}",
        "          → the owner is gone; return it to pending so it is re-run",
        *HUMAN_DUPES,
        f"  problem [name-index] the name index does not match the task files for setup{fixable}",
        "          → rebuild it from the task files",
        f"  problem [stale-counter] .tasks/.next_id says '3' but the highest task id is 7{fixable}",
        "          → reset it to 8",
        "9 problems remain; 4 need a human.",
    ]
    after = {p: p.read_bytes() for p in team.root.rglob("*") if p.is_file()}
    assert after == before


def test_doctor_fix_repairs_the_safe_problems_and_lists_the_rest(team):
    damage(team.root)
    r = team("doctor", "--fix", TZ="UTC")
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        f"team doctor: {team.root}",
        "  fixed   [temp-file] leftover temp file .tasks/.tmp-abc.part (a writer was killed mid-write; the real file is intact)",
        "          → removed .tasks/.tmp-abc.part",
        "  fixed   [temp-file] leftover temp file .team/inbox/.tmp-old.part (a writer was killed mid-write; the real file is intact)",
        "          → removed .team/inbox/.tmp-old.part",
        "  fixed   [expired-lease] task #3 is in_progress but the lease of alice expired at 1970-01-12 13:46:40",
        "          → returned #3 to pending (lease expired)",
        "  fixed   [name-index] the name index does not match the task files for setup",
        "          → rebuilt .tasks/names.jsonl (1 names)",
        "  fixed   [stale-counter] .tasks/.next_id says '3' but the highest task id is 7",
        "          → reset .tasks/.next_id to 8",
        *PROBLEMS,
        *HUMAN_DUPES,
        "4 problems remain; 4 need a human; fixed 5.",
    ]
    store = TaskStore(team.root)
    assert not (store.dir / ".tmp-abc.part").exists()
    assert (team.root / ".team" / ".tmp-fresh.part").exists()
    t3 = store.read(3)
    assert (t3.status.value, t3.owner, t3.error) == ("pending", "", "lease of alice expired (attempt 1)")
    assert store.files.counter_path.read_text() == "8"

    # A person repairs the rest; the doctor then reports a healthy root.
    store.path(4).unlink()
    assert team("task", "update", "5", "--remove-blocked-by", "42").returncode == 0
    assert team("task", "update", "7", "--remove-blocked-by", "6").returncode == 0
    raw = json.loads(store.path(6).read_text())
    store.path(6).write_text(json.dumps({**raw, "name": "ping"}))
    assert [f.kind for f in doctor.diagnose(team.root)] == ["name-index"]  # the new name is not indexed yet
    assert store.resolve("ping") == 6  # ... but resolving still finds it by scanning
    r = team("doctor", "--fix", "--json")
    assert r.returncode == 0
    report = json.loads(r.stdout)
    assert (report["healthy"], [(f["kind"], f["fixed"]) for f in report["findings"]]) == (
        True, [("name-index", "rebuilt .tasks/names.jsonl (2 names)")],
    )
    r = team("doctor")
    assert (r.returncode, r.stdout) == (0, f"team doctor: {team.root}\nOK: no problems found.\n")


def test_checks_are_a_registry_other_modules_can_extend(tmp_path):
    seen = []

    def check_custom(ctx):
        seen.append(len(ctx.tasks))
        return [doctor.Finding("custom", "a custom problem", hint="look at it")]

    doctor.CHECKS.append(check_custom)
    try:
        TaskStore(tmp_path).create("one")
        findings = doctor.diagnose(tmp_path)
    finally:
        doctor.CHECKS.remove(check_custom)
    assert seen == [1]
    assert [(f.kind, f.message, f.fix) for f in findings] == [("custom", "a custom problem", None)]


def test_doctor_lists_inbox_lines_that_are_not_messages_and_leaves_them(team):
    inbox = team.root / ".team" / "inbox"
    inbox.mkdir(parents=True)
    seed = json.dumps({"type": "message", "from": "alice", "content": "hi", "timestamp": 1700000000.5})
    (inbox / "lead.jsonl").write_text(f"{seed}\nnot json at all\n{seed}\n{{\"from\": \"bob\"\n"
                                      '{"id": "torn", "from": "bo')  # final fragment: a writer mid-append
    (inbox / "lead.consumed.jsonl").write_text("old garbage\n")  # consumed history is not checked
    before = (inbox / "lead.jsonl").read_bytes()
    r = team("doctor", "--fix")
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        f"team doctor: {team.root}",
        "  problem [bad-inbox-line] .team/inbox/lead.jsonl: 2 lines are not messages and are skipped by "
        "readers: line 2 'not json at all', line 4 '{\"from\": \"bob\"'",
        "          → a writer killed mid-line or a hand edit: check the line(s), then delete them by hand",
        "1 problem remains; 1 needs a human; fixed 0.",
    ]
    assert (inbox / "lead.jsonl").read_bytes() == before


ORPHANING_MANAGER = """
import os, signal, sys
from orchestrator.jobs.manager import JobManager
r = JobManager(sys.argv[1]).start("sleep 300 & echo $! > " + sys.argv[1] + "/child.pid; wait")
print(r.id, r.pid, os.getpid(), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_doctor_reports_orphaned_jobs_and_fix_reaps_them(team):
    proc = subprocess.Popen([sys.executable, "-c", ORPHANING_MANAGER, str(team.root)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    job_id, leader, manager = proc.stdout.readline().split()
    assert proc.wait() == -signal.SIGKILL
    child = int(wait_until(lambda: (team.root / "child.pid").exists() and (team.root / "child.pid").read_text(),
                           what="child pid"))
    problem = (f"[orphaned-job] job {job_id} is marked running but its manager pid {manager} is gone "
               f"(command: sleep 300 & echo $! > {team.root}/child.pid; wait)")
    r = team("doctor")
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == [
        f"team doctor: {team.root}",
        f"  problem {problem} (fixable: run `team doctor --fix`)",
        "          → `team doctor --fix` (or the next `team run`) kills what is left of it and marks it lost",
        "1 problem remains.",
    ]
    assert procs.alive(child) and procs.alive(int(leader))
    r = team("doctor", "--fix")
    assert r.stdout.splitlines() == [
        f"team doctor: {team.root}",
        f"  fixed   {problem}",
        f"          → marked {job_id} lost; killed pids {', '.join(map(str, sorted([int(leader), child])))}",
        "Fixed 1 problem; nothing else needs attention.",
    ]
    assert r.returncode == 0, r.stderr
    assert JobManager(team.root).get(job_id).status == "lost"
    wait_until(lambda: not procs.alive(child) and not procs.alive(int(leader)), what="orphan killed")
    assert team("doctor").stdout == f"team doctor: {team.root}\nOK: no problems found.\n"
