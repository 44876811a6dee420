"""Any agent CLI as a teammate (`team:` member of kind `command`, run/command.py, docs/agents.md): the
real `team run`, and as the agent a small scripted program (agentcli_fixture.py) that speaks MCP to
`team mcp --as NAME` through the official SDK client: it reads its prompt from stdin, lists tools,
reads its inbox, messages the lead, creates and claims a task, writes a file and ends its task."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import gitutil  # noqa: F401  (its fixture: no git identity but the test's own)
from conftest import run_team, team_env
from test_worktree import git, make_repo, show
from util import tasks_by_name, wait_until

from orchestrator.team.inbox import Bus
from orchestrator.team.roster import Team

AGENT = Path(__file__).parent / "agentcli_fixture.py"
KEY = "sk-agentcli-secret-2f7d9a1c5e"
TOKEN = "cli-token-8e3b6f"
TOOLS = ["inbox_read", "message_broadcast", "message_send", "task_blocked", "task_claim", "task_create",
         "task_critical", "task_get", "task_list", "task_update", "team_status"]


def member(name: str, reports: Path, mode: str = "mcp") -> str:
    """A command member running the fixture; its reports folder on its command line tells its processes apart."""
    return (f"  - name: {name}\n    kind: command\n    command: {sys.executable} {AGENT} {reports}\n"
            f"    env: {{REPORT_DIR: '{reports}', MODE: {mode}, CLI_TOKEN: $CLI_TOKEN}}\n")


def events(root: Path, task: int) -> list[dict]:
    lines = (root / ".tasks" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["task"] == task]


def completions(root: Path, task: int) -> int:
    return sum(1 for e in events(root, task) if e["event"] == "status" and e.get("to") == "completed")


def running(needle: str) -> list[int]:
    """Live processes whose command line holds ``needle`` (the agent's, and the `team mcp` it started)."""
    found: list[int] = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[-1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if needle.encode() in cmd and state != b"Z":
            found.append(int(pid))
    return found


def report(reports: Path, task: int, attempt: int = 1) -> dict:
    return json.loads((reports / f"{task}-{attempt}.json").read_text())


def folders(tmp_path: Path) -> tuple[Path, Path]:
    """The state root (``proj``) and, outside it, where the agent writes what it saw (``reports``)."""
    for name in ("proj", "reports"):
        (tmp_path / name).mkdir()
    return tmp_path / "proj", tmp_path / "reports"


def test_an_agent_cli_claims_messages_writes_and_completes_over_mcp_through_team_run(tmp_path):
    root, reports = folders(tmp_path)
    (root / "plan.yaml").write_text(f"""\
name: cli
team:
{member("codex", reports)}tasks:
  - id: hint
    run: {sys.executable} -m orchestrator send codex "the word is banana"
  - id: write
    needs: [hint]
    assignee: codex
    prompt: Write hello.txt with the word from your inbox.
  - id: check
    needs: [write]
    run: grep banana hello.txt
""")
    r = run_team(root, "run", "plan.yaml", OPENAI_API_KEY=KEY, CLI_TOKEN=TOKEN)
    assert r.returncode == 0, r.stdout + r.stderr
    tasks = tasks_by_name(root)
    write = tasks["write"]
    assert (write["status"], write["owner"], write["kind"], write["attempts"]) == ("completed", "codex", "command", 1)
    assert write["result"] == "wrote hello.txt (attempt 1)"  # what it gave task_update
    assert "cli_member" not in write and "reported" not in write
    assert tasks["check"]["status"] == "completed"  # the dependent saw its work
    assert (root / "hello.txt").read_text().endswith("lead: the word is banana\n— 1 message read; none left unread\n")
    seen = report(reports, write["id"])
    # its prompt on stdin; the team's tools over MCP; what it was told about them
    assert "Write hello.txt with the word from your inbox." in seen["prompt"]
    assert f"task_update(task={write['id']}, status=\"completed\"" in seen["prompt"]
    assert seen["tools"] == TOOLS and "the word is banana" in seen["inbox"]
    assert seen["cwd"] == str(root)
    # its completion over MCP was reported, not recorded: the run recorded it, once, when it exited
    assert json.loads(seen["update"])["status"] == "in_progress"
    assert json.loads(seen["update"])["reported"]["status"] == "completed"
    kinds = [(e["event"], e["actor"]) for e in events(root, write["id"])]
    assert ("handed_over", "lead") in kinds and ("reported", "codex") in kinds
    assert completions(root, write["id"]) == 1
    # the task it made and claimed through the same graph
    notes = next(t for t in tasks.values() if t["subject"] == f"notes for #{write['id']}")
    assert (notes["status"], notes["owner"], seen["claimed"]) == ("completed", "codex", "codex")
    assert [m.content for m in Bus(root).peek("lead")] == [f"working on #{write['id']}"]
    # the environment: the allow-list, what its `env:` names, the MCP config; no key of the lead's
    assert "OPENAI_API_KEY" not in seen["env"] and seen["token_len"] == len(TOKEN)
    assert {"TEAM_AGENT", "TEAM_MCP_CONFIG", "TEAM_MCP_COMMAND", "TEAM_TASK_ID"} <= set(seen["env"])
    config = json.loads((root / ".team" / "agentcli" / "codex" / "mcp.json").read_text())
    server = config["mcpServers"]["team"]
    assert server["args"][-4:] == ["--root", str(root), "--as", "codex"] and "mcp" in server["args"]
    # the roster: a command member, shut down with the run; nothing it started is left
    codex = next(m for m in Team(root).members() if m.name == "codex")
    assert (codex.kind, codex.status) == ("command", "shutdown")
    assert running(f"{AGENT}\0{reports}") == [] and running(f"{root}\0--as\0codex") == []
    for path in [*root.rglob("*"), *reports.rglob("*")]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes() and TOKEN.encode() not in path.read_bytes(), path


def test_exit_0_without_mcp_completes_with_the_output_tail_exit_3_fails_and_a_timeout_kills_it(tmp_path):
    root, reports = folders(tmp_path)
    (root / "plan.yaml").write_text(f"""\
name: ends
team:
{member("quiet", reports, "exit")}{member("broken", reports, "fail")}  - {{name: slow, kind: command, command: "sleep 300 # {reports}"}}
hooks:
  task_completed: 'if [ -f {reports}/vetoed ]; then exit 0; fi; touch {reports}/vetoed; echo "lint fails" >&2; exit 2'
tasks:
  - {{id: a, assignee: quiet, prompt: Do a., retries: 1, retry_delay: 0}}
  - {{id: b, assignee: broken, prompt: Do b.}}
  - {{id: after-b, needs: [b], run: echo never}}
  - {{id: c, assignee: slow, prompt: Wait., timeout: 1}}
""")
    r = run_team(root, "run", "plan.yaml", "--keep-going", CLI_TOKEN=TOKEN)
    assert r.returncode == 1, r.stdout + r.stderr
    tasks = tasks_by_name(root)
    a, b, c = tasks["a"], tasks["b"], tasks["c"]
    # exit 0 without telling MCP: completed with its output's tail, once the task_completed hook let it
    assert a["status"] == "completed" and a["result"].endswith(f"wrote hello.txt for task {a['id']}\n")
    assert (a["attempts"], a["failures"]) == (2, 1)  # the first completion was vetoed by the hook
    assert any("vetoed by a task_completed hook: lint fails" in json.dumps(e) for e in events(root, a["id"]))
    assert not any(e["event"] == "reported" for e in events(root, a["id"]))
    assert (b["status"], b["error"]) == ("failed", "failed: exit code 3")
    assert "cannot do it: the spec is missing" in b["result"]
    assert tasks["after-b"]["status"] == "cancelled"
    # past its timeout: its process group killed, the task failed saying so
    assert (c["status"], c["error"]) == ("failed", "timed out after 1s; SIGTERM ended it")


def test_a_worktree_plan_commits_and_merges_the_agent_clis_work(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    plan = f"""\
name: clw
isolation: worktree
team:
{member("codex", reports)}tasks:
  - {{id: hint, run: '{sys.executable} -m orchestrator send codex "the word is kiwi"'}}
  - {{id: write, needs: [hint], assignee: codex, prompt: Write hello.txt.}}
  - {{id: check, needs: [write], run: grep kiwi hello.txt > seen.txt}}
"""
    repo = make_repo(tmp_path / "repo", {"README": "hi\n", "plan.yaml": plan, ".gitignore": ".team/\n.tasks/\n"})
    r = run_team(repo, "run", "plan.yaml", CLI_TOKEN=TOKEN)
    assert r.returncode == 0, r.stdout + r.stderr
    write = tasks_by_name(repo)["write"]
    assert write["status"] == "completed" and write["merge_commit"]
    seen = report(reports, write["id"])
    assert seen["cwd"] == str(repo / ".team" / "worktrees" / "clw" / "write")
    assert "a git worktree on branch team/clw/write" in seen["prompt"]
    assert show(repo, "team/clw/integration", "hello.txt").endswith("lead: the word is kiwi\n— 1 message read; none left unread\n")
    assert "kiwi" in show(repo, "team/clw/integration", "seen.txt")  # the dependent ran on the merged work
    assert not (repo / "hello.txt").exists()  # the user's checkout is untouched until `team land`
    assert git(repo, "status", "--porcelain") == ""
    assert completions(repo, write["id"]) == 1


@contextlib.contextmanager
def hanging(tmp_path: Path, mode: str) -> Iterator[tuple[subprocess.Popen, Path, Path]]:
    """`team run` of one task for codex, whose agent (``mode`` hang or stall) hangs: yields the lead
    process once it does, with the state root and the reports folder; the lead is killed at the end."""
    root, reports = folders(tmp_path)
    (root / "plan.yaml").write_text(f"""\
name: hang
team:
{member("codex", reports, mode)}tasks:
  - {{id: write, assignee: codex, prompt: Write hello.txt.}}
""")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root,
                            env=team_env(root, CLI_TOKEN=TOKEN), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_until(lambda: (reports / "hanging").exists() or lead.poll() is not None, timeout=60,
                   what="the agent to hang")
        assert lead.poll() is None, lead.communicate()
        yield lead, root, reports
    finally:
        if lead.poll() is None:
            lead.kill()
        lead.communicate()


def test_a_lead_killed_after_the_agent_reported_reruns_it_and_completes_it_exactly_once(tmp_path):
    with hanging(tmp_path, "hang") as (lead, root, reports):
        task = tasks_by_name(root)["write"]
        assert (task["status"], task["reported"]["status"]) == ("in_progress", "completed")  # reported, not recorded
        assert running(f"{AGENT}\0{reports}") and running(f"{root}\0--as\0codex")  # what must go with the lead
        lead.send_signal(signal.SIGKILL)
        lead.wait()
    hung = int((reports / "hanging").read_text())
    # its job server takes the agent down with the lead, and the `team mcp` it started goes with it
    wait_until(lambda: not running(f"{AGENT}\0{reports}") and not running(f"{root}\0--as\0codex"), timeout=60,
               what=f"the agent (pid {hung}) and its MCP server to be gone")
    r = run_team(root, "run", "plan.yaml", CLI_TOKEN=TOKEN, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "was running when the last lead died: re-running it" in r.stdout + r.stderr
    task = tasks_by_name(root)["write"]
    assert (task["status"], task["attempts"], task["result"]) == ("completed", 2, "wrote hello.txt (attempt 2)")
    assert completions(root, task["id"]) == 1
    assert running(f"{AGENT}\0{reports}") == [] and running(f"{root}\0--as\0codex") == []


def test_team_shutdown_stops_an_agent_clis_process_and_its_attempt_fails(tmp_path):
    with hanging(tmp_path, "stall") as (lead, root, reports):
        s = run_team(root, "shutdown", "codex")
        assert s.returncode == 0, s.stdout + s.stderr
        assert s.stdout.startswith("codex (an agent CLI, kind command) was shut down: its process for task #1 "
                                   "was stopped")
        out, err = lead.communicate(timeout=60)
    assert lead.returncode == 1, out + err
    task = tasks_by_name(root)["write"]
    assert task["status"] == "failed" and "killed" in task["error"], task
    assert running(f"{AGENT}\0{reports}") == []
    assert next(m for m in Team(root).members() if m.name == "codex").status == "shutdown"


def test_bad_command_members_are_refused_with_the_plans_line(tmp_path):
    cases = {
        "  - {name: codex, kind: command}\n": "give the `command:` it runs",
        "  - {name: codex, kind: command, command: codex, model: gpt-4o}\n": "model belong to LLM teammates",
        "  - {name: codex, command: codex}\n": "add `kind: command` to codex",
        "  - {name: codex, kind: robot, command: codex}\n": "team[0].kind: Input should be 'llm' or 'command'",
    }
    for entry, said in cases.items():
        (tmp_path / "plan.yaml").write_text(f"name: bad\nteam:\n{entry}tasks:\n  - {{id: a, assignee: codex, "
                                            "prompt: x}\n")
        r = run_team(tmp_path, "run", "plan.yaml")
        assert r.returncode == 2 and "plan.yaml:3: team[0]" in r.stderr and said in r.stderr, (entry, r.stderr)
    (tmp_path / "plan.yaml").write_text("name: bad\nteam:\n  - {name: codex, kind: command, command: codex}\n"
                                        "tasks:\n  - {id: a, assignee: codex, run: make}\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 2 and "plan.yaml:5: tasks[0].run: codex is a kind: command member" in r.stderr
    assert not (tmp_path / ".tasks").exists() and not (tmp_path / ".team").exists()


def test_an_llm_teammate_and_agent_clis_share_one_graph_and_shutdown_reaches_a_cli_through_the_runtime(tmp_path):
    from orchestrator.llm.script import Reply, tool_call
    from orchestrator.llm.scripted import ScriptedServer

    root, reports = folders(tmp_path)
    (root / "plan.yaml").write_text(f"""\
name: mixed
team:
  - {{name: alice, role: coder}}
{member("codex", reports)}  - name: stuck
    kind: command
    command: {sys.executable} {AGENT} {reports}
    env: {{REPORT_DIR: '{reports}/stuck', MODE: stall}}
tasks:
  - {{id: tell, assignee: alice, prompt: Tell codex the word.}}
  - {{id: write, needs: [tell], assignee: codex, prompt: Write hello.txt with the word alice sent you.}}
  - {{id: wait, assignee: stuck, prompt: Wait.}}
""")
    (reports / "stuck").mkdir()
    script = {"alice": [Reply(tool_calls=[tool_call("send_message", {"to": "codex", "content": "the word is mango"}),
                                          tool_call("task_update", {"task": 1, "status": "completed",
                                                                    "result": "told codex"})])]}
    with ScriptedServer(script) as srv:
        env = team_env(root, OPENAI_BASE_URL=srv.base_url, OPENAI_API_KEY=KEY, TEAM_MODEL="gpt-4o-mini")
        lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=root, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: ((reports / "stuck" / "hanging").exists() and (reports / "2-1.json").exists())
                       or lead.poll() is not None, timeout=60, what="codex to finish and stuck to hang")
            assert lead.poll() is None, lead.communicate()
            s = run_team(root, "shutdown", "stuck")  # the LLM teammates' runtime serves the control channel
            assert s.returncode == 0, s.stdout + s.stderr
            assert s.stdout.startswith("stuck (an agent CLI, kind command) was shut down")
            out, err = lead.communicate(timeout=60)
        finally:
            if lead.poll() is None:
                lead.kill()
                lead.communicate()
        srv.assert_complete()
    assert lead.returncode == 1, out + err  # stuck's task failed: it was shut down
    tasks = tasks_by_name(root)
    assert [tasks[t]["status"] for t in ("tell", "write", "wait")] == ["completed", "completed", "failed"]
    assert "alice: the word is mango" in (root / "hello.txt").read_text()
    kinds = {m.name: m.kind for m in Team(root).members()}
    assert kinds == {"alice": "llm", "codex": "command", "stuck": "command"}
    assert running(f"{AGENT}\0{reports}") == []


def test_an_agent_clis_completion_asks_the_task_completed_hooks_once(tmp_path):
    """The agent's own completion over MCP is a report the run decides when its process ends, hooks
    included; `team mcp` does not ask `.team/hooks.yaml` too (the same hook ran twice for one completion).
    A completion over MCP of a task that is not its attempt (the notes task it made) asks them there."""
    root, reports = folders(tmp_path)
    (root / ".team").mkdir()
    (root / ".team" / "hooks.yaml").write_text(f"task_completed: '(cat; echo) >> {reports}/decided.jsonl'\n")
    (root / "plan.yaml").write_text(f"""\
name: once
team:
{member("codex", reports)}tasks:
  - id: write
    assignee: codex
    prompt: Write hello.txt.
""")
    r = run_team(root, "run", "plan.yaml", CLI_TOKEN=TOKEN)
    assert r.returncode == 0, r.stdout + r.stderr
    tasks = tasks_by_name(root)
    write = tasks["write"]
    notes = next(t for t in tasks.values() if t["subject"] == f"notes for #{write['id']}")
    asked = [json.loads(line)["task"]["id"] for line in (reports / "decided.jsonl").read_text().split("\n") if line]
    assert sorted(asked) == sorted([write["id"], notes["id"]])
    assert completions(root, write["id"]) == 1
