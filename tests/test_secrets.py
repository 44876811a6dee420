"""The model key never reaches a task file, and shell tasks do not inherit it."""

from __future__ import annotations

import hashlib
import json

from conftest import run_team

KEY = "sk-shell-only-4c1f9a7e2d"


def task_files(root):
    return {json.loads(p.read_text())["plan_task"]: json.loads(p.read_text())
            for p in (root / ".tasks").glob("task_*.json")}


def test_a_shell_only_plan_does_not_hand_the_key_to_its_tasks(tmp_path):
    (tmp_path / "plan.yaml").write_text(
        "name: sec\ntasks:\n"
        "  - id: dump\n    run: env | sort\n"
        # a task may ask for the key by reference ($NAME is read when the job starts);
        # it still never lands in a task file
        "  - id: echo\n    run: echo \"key=$OPENAI_API_KEY\"; printf %s \"$OPENAI_API_KEY\" | sha256sum\n"
        "    env: {OPENAI_API_KEY: $OPENAI_API_KEY}\n"
    )
    r = run_team(tmp_path, "run", "plan.yaml", OPENAI_API_KEY=KEY)
    assert r.returncode == 0, r.stdout + r.stderr
    tasks = task_files(tmp_path)
    dump_log = (tmp_path / tasks["dump"]["log"]).read_text()
    assert "TEAM_PLAN=sec" in dump_log and "OPENAI_API_KEY" not in dump_log
    # asked for explicitly, the task got the key; its own log is scrubbed once the job ends
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    assert (tmp_path / tasks["echo"]["log"]).read_text() == f"key=[REDACTED]\n{digest}  -\n"
    assert tasks["echo"]["result"].strip() == f"key=[REDACTED]\n{digest}  -"
    for f in (tmp_path / ".tasks").rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


def test_an_error_quoting_the_key_is_redacted_in_the_task_file(tmp_path):
    r = run_team(tmp_path, "task", "create", f"rotate {KEY} today", "-d", f"old key {KEY}",
                 OPENAI_API_KEY=KEY)
    assert r.returncode == 0, r.stderr
    text = (tmp_path / ".tasks" / "task_1.json").read_text()
    assert KEY not in text and "rotate [REDACTED] today" in text


def test_env_values_expand_names_and_keep_a_doubled_dollar(tmp_path):
    from orchestrator.core.environ import expand_env

    environ = {"USER": "alice", "HOME": "/home/alice"}
    assert expand_env("price$USER", environ) == "pricealice"
    assert expand_env("${HOME}/bin:$NOPE", environ) == "/home/alice/bin:$NOPE"
    assert expand_env("p@$$w0rd", environ) == "p@$w0rd"
    assert expand_env("regex ^a$${HOME}$", environ) == "regex ^a${HOME}$"


def test_the_event_log_never_holds_the_key(tmp_path):
    from orchestrator.core.redact import Secrets
    from orchestrator.tasks.store import TaskStore

    store = TaskStore(tmp_path, secrets=Secrets([KEY]))
    task = store.create("call the model")
    t = store.claim(task.id, "alice")
    store.release(task.id, t.epoch, reason=f"agent error: bad key {KEY}")
    t = store.claim(task.id, "alice")
    store.finish(task.id, t.epoch, "failed", error=f"401 for key {KEY}")
    log = (tmp_path / ".tasks" / "events.jsonl").read_text()
    assert KEY not in log and "bad key [REDACTED]" in log and "401 for key [REDACTED]" in log


def test_the_secrets_of_an_environment_are_credentials_by_name_and_url_passwords():
    from orchestrator.core.redact import Secrets, secret_names

    env = {"OPENAI_API_KEY": KEY, "GITHUB_TOKEN": "ghp_abcdefgh12345678", "DB_PASSWORD": "hunter2-hunter2",
           "OPENAI_BASE_URL": "https://bob:s3cr3t-pass@proxy.local/v1", "HOME": "/home/bob",
           "TOKENIZERS_PARALLELISM": "false", "MAX_TOKENS": "4096", "SESSION_TOKEN": "short"}
    secrets = Secrets.from_environ(env)
    text = f"{KEY} ghp_abcdefgh12345678 hunter2-hunter2 https://bob:s3cr3t-pass@proxy.local/v1 false 4096 short"
    assert secrets.scrub(text) == ("[REDACTED] [REDACTED] [REDACTED] https://bob:[REDACTED]@proxy.local/v1 "
                                   "false 4096 short")
    assert sorted(secret_names(env)) == ["DB_PASSWORD", "GITHUB_TOKEN", "MAX_TOKENS", "OPENAI_API_KEY",
                                         "SESSION_TOKEN", "TOKENIZERS_PARALLELISM"]
    assert KEY not in repr(secrets) and len(secrets.add("another-secret-value")) == len(secrets) + 1
