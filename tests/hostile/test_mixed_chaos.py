"""The whole product under fire: shell and agent tasks, the lead and the teammates' processes killed.

A plan of shell tasks and agent tasks (teammates talking to the scripted
OpenAI-compatible server, each agent task running a sandboxed bash command
and a background job) runs with credentials in its environment. At random
moments the lead gets SIGINT, SIGTERM or SIGKILL, or a process a teammate
started (its bash command, its background job) gets SIGKILL; then the plan
runs again, until it completes. In the end:

* every task is completed exactly once in the store, and its ledger line is
  there (twice only if it was in flight at a stop);
* every state file parses;
* no process of the run is left (counted in /proc by the root they carry or
  the workspace they run in);
* no credential is in any file under the root (every file grepped).

``make chaos`` runs the long soak; CHAOS_SEED replays a run.
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
from orchestrator.core.models import Task
from orchestrator.jobs.records import JobRecord
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer

SECRETS = {"OPENAI_API_KEY": "sk-chaos-0123456789abcdef", "ANTHROPIC_API_KEY": "sk-ant-chaos-98765432",
           "GITHUB_TOKEN": "ghp_chaosToken0123456789"}


def write_plan(root: Path, layers: int, width: int) -> list[str]:
    ids, lines = [], ["name: mixed", "workers: 4", "model: m", "tasks:"]
    for layer in range(layers):
        for j in range(width):
            tid = f"t{layer}-{j}"
            ids.append(tid)
            lines.append(f"  - id: {tid}")
            if j % 2:  # an agent task: the teammate appends its id with bash
                lines.append(f"    prompt: 'append {tid} to the ledger'")
                lines.append("    role: coder")
            else:
                lines.append(f"    run: 'sleep 0.05; echo {tid} >> \"$TEAM_ROOT/ledger\"; echo \"$OPENAI_API_KEY\"'")
            if layer:
                lines.append(f"    needs: [t{layer - 1}-{j}, t{layer - 1}-{(j + 1) % width}]")
    (root / "plan.yaml").write_text("\n".join(lines) + "\n")
    return ids


def agent_step(root: Path):
    """The model: start a background job, run the ledger line with bash, then complete the task."""
    def decide(body: dict) -> Reply:
        messages = body["messages"]
        prompts = [str(m["content"]) for m in messages if m["role"] == "user" and str(m["content"]).startswith("Task #")]
        task = prompts[-1].split("append ", 1)[1].split(" ", 1)[0] if prompts else "?"
        number = prompts[-1].split("Task #", 1)[1].split()[0].rstrip(",:") if prompts else "0"
        since = max((i for i, m in enumerate(messages) if str(m.get("content", "")).startswith("Task #")), default=0)
        tools = [m for m in messages[since:] if m["role"] == "tool"]
        if not tools:  # the attempt begins (a resumed one too): a background job first
            return Reply(tool_calls=[tool_call("background_run", {"command": "sleep 30", "timeout": 60})])
        if len(tools) == 1:
            return Reply(tool_calls=[tool_call("bash", {"command": f"sleep 0.2; echo {task} >> {root}/ledger; "
                                                                    "cat secret.env"})])
        return Reply(tool_calls=[tool_call("task_update", {"task": int(number), "status": "completed",
                                                          "result": f"appended {task}"})])
    return decide


def cwd_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def of_this_run(root: Path) -> list[int]:
    """Live processes working in the root or carrying it (jobs, sandboxed commands, what they left)."""
    return [pid for pid in procs.pids() if pid != os.getpid() and procs.alive(pid)
            and (procs.environ(pid).get("TEAM_ROOT") == str(root) or cwd_of(pid).startswith(str(root)))]


def teammate_processes(root: Path, lead: int) -> list[int]:
    """Processes the lead's teammates started (their bash commands and background jobs)."""
    found = []
    for pid in procs.pids():
        if pid == lead or not procs.alive(pid):
            continue
        line = procs.cmdline(pid)
        if ("bwrap" in line or "sleep 30" in line or "sleep 0.2" in line) and cwd_of(pid).startswith(str(root)):
            found.append(pid)
    return found


def event_lines(root: Path) -> int:
    try:
        return (root / ".tasks" / "events.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def soak(root: Path, stops: int, layers: int, width: int, step: int = 20) -> tuple[list[str], int, Counter[str]]:
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns() % 1_000_000))
    rnd = random.Random(seed)
    ids = write_plan(root, layers, width)
    (root / "secret.env").write_text("".join(f"{k}={v}\n" for k, v in SECRETS.items()))
    env = dict(SECRETS, TEAM_MODEL="m", TEAM_LLM_BACKOFF_BASE="0", TEAM_LLM_BACKOFF_MAX="0")
    sent: Counter[str] = Counter()
    with ScriptedServer({"*": [agent_step(root)] * 2000}) as srv:
        env["OPENAI_BASE_URL"] = srv.base_url
        while sum(n for what, n in sent.items() if what != "teammate") < stops:
            target = event_lines(root) + rnd.randint(2, step)
            lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root,
                                    env=team_env(root, **env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
            wait_until(lambda t=target, p=lead: event_lines(root) >= t or p.poll() is not None, timeout=90,
                       interval=0.005, what=f"event log to grow (seed {seed})")
            if lead.poll() is not None:
                assert lead.returncode == 0, f"seed {seed}: {lead.stderr.read() if lead.stderr else ''}"
                break
            what = rnd.choice(["SIGINT", "SIGTERM", "SIGKILL", "teammate"])
            if what == "teammate":  # wait for one of the teammates' processes, kill it, then stop the lead
                deadline = time.monotonic() + 10
                victims = teammate_processes(root, lead.pid)
                while not victims and lead.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.01)
                    victims = teammate_processes(root, lead.pid)
                if victims:
                    procs.kill(rnd.choice(victims), signal.SIGKILL)
                    sent["teammate"] += 1
                    time.sleep(rnd.uniform(0, 0.3))  # let the run notice, then stop the lead too
                what = "SIGTERM"
            sig = getattr(signal, what)
            lead.send_signal(sig)
            try:
                _, err = lead.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                lead.kill()
                lead.wait()
                raise AssertionError(f"seed {seed}: the lead did not end within 90 s of {what}") from None
            sent[what] += 1
            assert "Traceback" not in err, f"seed {seed}: {err}"
        final = run_team(root, "run", "plan.yaml", timeout=180, **env)
        assert final.returncode == 0, f"seed {seed}: {final.stdout}\n{final.stderr}"
    return ids, seed, sent


def check(root: Path, ids: list[str], seed: int) -> None:
    why = f"(seed {seed})"
    tasks = [Task.model_validate_json(p.read_bytes()) for p in (root / ".tasks").glob("task_*.json")]
    by_name = Counter(t.plan_task for t in tasks)
    assert sorted(by_name) == sorted(ids) and set(by_name.values()) == {1}, why
    assert {t.status.value for t in tasks} == {"completed"}, why
    events = [json.loads(line) for line in (root / ".tasks" / "events.jsonl").read_bytes().splitlines()]
    completed = Counter(e["task"] for e in events if e.get("to") == "completed")
    assert max(completed.values()) == 1, why
    assert set(Counter((root / "ledger").read_text().split())) == set(ids), why
    for p in (root / ".team" / "jobs").glob("*.json"):
        JobRecord.model_validate_json(p.read_bytes())
    for p in root.rglob("*.jsonl"):
        for line in p.read_bytes().splitlines():
            if line.strip():
                json.loads(line)  # a torn line would fail here; killed writers leave none behind a newline
    wait_until(lambda: not of_this_run(root), timeout=15, what=f"no process of the run left {why}")
    for path in root.rglob("*"):
        if path.is_file() and path.name != "secret.env" and path.name != "plan.yaml":
            data = path.read_bytes()
            for name, value in SECRETS.items():
                assert value.encode() not in data, f"{name} on disk in {path.relative_to(root)} {why}"


def test_lead_and_teammate_processes_killed_then_resume(tmp_path):
    ids, seed, _ = soak(tmp_path, stops=3, layers=2, width=4)
    check(tmp_path, ids, seed)


@pytest.mark.chaos
def test_twenty_stops_of_every_kind_then_resume(tmp_path):
    ids, seed, sent = soak(tmp_path, stops=20, layers=6, width=6, step=6)
    check(tmp_path, ids, seed)
    assert {"SIGINT", "SIGTERM", "SIGKILL", "teammate"} <= set(sent), sent
    assert sum(n for what, n in sent.items() if what != "teammate") >= 20, sent
