"""Issue 16 item 5: secrets never on disk, on every path. Each test ends with a grep of every
file under the state root for every secret: ANTHROPIC_API_KEY, GITHUB_TOKEN, OPENAI_API_KEY
and the password inside OPENAI_BASE_URL. On main each of them found secrets: in the agent's
call log and saved outputs, in the lead's inbox, in a shell task's job log, record and task file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys

from conftest import REPO, run_team
from util import wait_until

from hostile.attacks import BASE_URL_PASSWORD, SECRETS, bwrap_installed, secrets_on_disk
from orchestrator.core.redact import Secrets
from orchestrator.jobs.manager import JobManager
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer


def secret_env(base_url: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    """The lead's environment: three credentials, and a base URL with a password in it."""
    url = base_url.replace("http://", f"http://bob:{BASE_URL_PASSWORD}@")
    return {**SECRETS, "OPENAI_BASE_URL": url, "TEAM_MODEL": "gpt-4o-mini", "TEAM_AUTOCLAIM": "0",
            "TEAM_LLM_BACKOFF_BASE": "0", "TEAM_LLM_BACKOFF_MAX": "0"}


DOTENV = "".join(f"{k}={v}\n" for k, v in SECRETS.items()) + f"DB_URL=postgres://app:{BASE_URL_PASSWORD}@db/app\n"

AGENT_PLAN = """\
name: leaky
tasks:
  - id: peek
    prompt: Find out which keys this project uses.
"""


def test_an_agent_reading_a_dotenv_leaves_no_secret_under_the_state_root(tmp_path):
    """`cat .env` (bash), read_file .env, a background job printing it, a long output saved in full,
    and the model quoting a key in a command, a message and its result."""
    bwrap_installed()
    proj, state = tmp_path / "proj", tmp_path / "state"
    proj.mkdir()
    state.mkdir()
    (proj / ".env").write_text(DOTENV)
    (proj / "plan.yaml").write_text(AGENT_PLAN)
    key = SECRETS["OPENAI_API_KEY"]
    seen: list[str] = []

    def wait_for_job(body: dict) -> Reply:
        seen.extend(m["content"] for m in body["messages"] if m.get("role") == "tool")
        text = json.dumps(body["messages"])
        if "[background job " in text:
            return Reply(tool_calls=[tool_call("check_background", {})])
        return Reply(tool_calls=[tool_call("bash", {"command": "sleep 0.5"})])

    def finish(body: dict) -> Reply:
        seen.extend(m["content"] for m in body["messages"] if m.get("role") == "tool")
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed",
                                                           "result": f"the project uses {key}"})])

    script = {"coder-1": [
        Reply(tool_calls=[
            tool_call("bash", {"command": "cat .env; env"}),
            tool_call("read_file", {"path": ".env"}),
            tool_call("bash", {"command": "for i in $(seq 3000); do cat .env; done"}),  # cut, saved in full
            tool_call("background_run", {"command": "cat .env"}),
            tool_call("bash", {"command": f"echo {key} | wc -c"}),
            tool_call("send_message", {"to": "lead", "content": f"found {key} in .env"}),
        ]),
        wait_for_job,
        wait_for_job,
        finish,
    ]}
    with ScriptedServer(script) as srv:
        r = run_team(state, "run", str(proj / "plan.yaml"), **secret_env(srv.base_url))
        assert r.returncode == 0, r.stdout + r.stderr
    # what the model was shown carried no secret either, but said what was there
    results = "\n".join(seen)
    assert "OPENAI_API_KEY=[REDACTED]" in results and "GITHUB_TOKEN=[REDACTED]" in results
    assert "postgres://app:[REDACTED]@db/app" in results
    assert not [v for v in [*SECRETS.values(), BASE_URL_PASSWORD] if v in results]
    outputs = list((state / ".team" / "outputs" / "coder-1").iterdir())
    assert len(outputs) == 1 and outputs[0].read_text().count("ANTHROPIC_API_KEY=[REDACTED]\n") == 3000
    assert secrets_on_disk(state) == []


def test_a_message_quoting_a_key_is_stored_scrubbed(tmp_path):
    """`team send lead "$OPENAI_API_KEY"` and friends."""
    env = secret_env()
    for text in (SECRETS["OPENAI_API_KEY"], f"token {SECRETS['GITHUB_TOKEN']}, see {env['OPENAI_BASE_URL']}",
                 f'{{"anthropic": "{SECRETS["ANTHROPIC_API_KEY"]}"}}'):
        r = run_team(tmp_path, "send", "lead", text, **env)
        assert r.returncode == 0, r.stderr
    r = run_team(tmp_path, "broadcast", f"all: {SECRETS['ANTHROPIC_API_KEY']}", **env)
    assert r.returncode == 0, r.stderr
    peek = run_team(tmp_path, "inbox", "lead", "--peek", "--json", **env)
    contents = [m["content"] for m in json.loads(peek.stdout)]
    assert contents == ["[REDACTED]", "token [REDACTED], see http://bob:[REDACTED]@127.0.0.1:9/v1",
                        '{"anthropic": "[REDACTED]"}']
    assert secrets_on_disk(tmp_path) == []


SHELL_PLAN = """\
name: envy
tasks:
  - id: dump
    run: env | sort
  - id: failing
    run: env; exit 3
  - id: declared
    run: printf '%s\\n' "token=$GITHUB_TOKEN"; printf %s "$GITHUB_TOKEN" | sha256sum
    env: {GITHUB_TOKEN: $GITHUB_TOKEN}
  - id: declared-failing
    run: echo "key=$ANTHROPIC_API_KEY"; exit 1
    env: {ANTHROPIC_API_KEY: $ANTHROPIC_API_KEY}
"""


def test_shell_tasks_get_the_allow_list_and_leave_no_secret_anywhere(tmp_path):
    (tmp_path / "plan.yaml").write_text(SHELL_PLAN)
    r = run_team(tmp_path, "run", "plan.yaml", "--keep-going", **secret_env(), LD_PRELOAD_HINT="x", PYTHONPATH="/p")
    assert r.returncode == 1, r.stdout + r.stderr  # two tasks fail on purpose
    tasks = {json.loads(p.read_text())["plan_task"]: json.loads(p.read_text())
             for p in (tmp_path / ".tasks").glob("task_*.json")}
    assert {k: t["status"] for k, t in tasks.items()} == {
        "dump": "completed", "failing": "failed", "declared": "completed", "declared-failing": "failed"}
    # the environment of a shell task: the allow-list, PWD/SHLVL/_ of the shell, and our TEAM_* variables
    from orchestrator.core.environ import ALLOWED

    names = {line.split("=", 1)[0] for line in (tmp_path / tasks["dump"]["log"]).read_text().splitlines()
             if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line)}
    extra = {n for n in names if n not in ALLOWED and not n.startswith(("LC_", "TEAM_"))}
    assert extra <= {"PWD", "SHLVL", "_", "OLDPWD"}, extra
    assert {"PATH", "TEAM_TASK_ID", "TEAM_PLAN", "TEAM_ROOT"} <= names
    # a credential the plan names reaches its task (its hash proves it), and is scrubbed from its log
    digest = hashlib.sha256(SECRETS["GITHUB_TOKEN"].encode()).hexdigest()
    assert (tmp_path / tasks["declared"]["log"]).read_text() == f"token=[REDACTED]\n{digest}  -\n"
    assert "key=[REDACTED]" in json.dumps(tasks["declared-failing"])
    assert secrets_on_disk(tmp_path) == []


KILLED_LEAD = """
import os, sys, time
from orchestrator.jobs.manager import JobManager
r = JobManager(sys.argv[1]).start('echo "token=$GITHUB_TOKEN"; exec sleep 300',
                                  env={"GITHUB_TOKEN": os.environ["GITHUB_TOKEN"]})
print(r.id, flush=True)
time.sleep(600)
"""


def test_the_log_of_a_job_whose_lead_was_killed_is_scrubbed_when_it_is_reaped(tmp_path):
    """A job writes its own log: a secret it printed is there while it runs. If its lead is
    SIGKILLed, the next lead that reaps the job (`lost`) scrubs the log."""
    env = {**os.environ, **secret_env(), "PYTHONPATH": str(REPO)}
    lead = subprocess.Popen([sys.executable, "-c", KILLED_LEAD, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                            text=True)
    try:
        job_id = lead.stdout.readline().strip()
        log = tmp_path / ".team" / "jobs" / f"{job_id}.log"
        wait_until(lambda: log.exists() and b"token=" in log.read_bytes(), timeout=10, what="the job's output")
    finally:
        lead.send_signal(signal.SIGKILL)
        lead.wait()
    assert SECRETS["GITHUB_TOKEN"].encode() in log.read_bytes()  # written by the job itself, as it ran
    reaper = JobManager(tmp_path, secrets=Secrets.from_environ(env))  # the next lead, same environment
    lost = reaper.reap_orphans()
    assert [(r.id, r.status) for r in lost] == [(job_id, "lost")]
    assert log.read_text() == "token=[REDACTED]\n" and lost[0].tail == "token=[REDACTED]\n"
    assert secrets_on_disk(tmp_path) == []
