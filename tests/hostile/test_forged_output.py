"""Control characters from users, plans, models and jobs never reach the terminal raw.

A subject like ``x\\x1b[2J\\r[x] #99: fake completed`` once cleared the screen and
forged a completed line in ``team task list``; an inbox message did the same
in ``team inbox --peek``. Stored one-line fields refuse control characters
(newline and tab allowed); every printer shows what is left as escapes.
"""

from __future__ import annotations

import json

from conftest import run_team

FORGED = "x\x1b[2J\r[x] #99: fake completed"
RAW = (b"\x1b", b"\r", b"\x07", "\u202e".encode())


def clean(out: str | bytes) -> bool:
    data = out.encode() if isinstance(out, str) else out
    return not any(c in data for c in RAW)


def test_a_subject_with_control_characters_is_refused_naming_them(tmp_path):
    r = run_team(tmp_path, "task", "create", FORGED)
    assert r.returncode == 2
    assert r.stderr == ('UserError: the subject "x\\x1b[2J\\r[x] #99: fake completed" holds control '
                        "characters (\\r, \\x1b); remove them\n")
    assert clean(r.stderr)
    assert not (tmp_path / ".tasks").exists() or not list((tmp_path / ".tasks").glob("task_*.json"))
    r = run_team(tmp_path, "task", "create", "ok")
    assert run_team(tmp_path, "task", "update", "1", "--status", "pending").returncode == 0


def test_a_newline_in_a_subject_cannot_start_a_forged_line(tmp_path):
    assert run_team(tmp_path, "task", "create", "real\n[x] #99: fake completed").returncode == 0
    assert run_team(tmp_path, "task", "create", "second").returncode == 0
    listing = run_team(tmp_path, "task", "list").stdout
    assert listing == "[ ] #1: real\\n[x] #99: fake completed\n[ ] #2: second\n"


def test_a_hand_written_task_file_is_shown_escaped_everywhere(tmp_path):
    tasks = tmp_path / ".tasks"
    tasks.mkdir()
    (tasks / "task_1.json").write_text(json.dumps(
        {"id": 1, "subject": FORGED, "status": "failed", "blockedBy": [], "owner": "",
         "description": "line one\n\x1b]0;title\x07line two", "error": "boom\r[x] #2: fake"}))
    (tasks / "task_2.json").write_text(json.dumps(
        {"id": 2, "subject": "waits \u202eevil", "status": "pending", "blockedBy": [1], "owner": ""}))
    for args in (["task", "list"], ["task", "show", "1"], ["task", "show", "2"], ["task", "blocked"],
                 ["task", "graph"], ["task", "graph", "--format", "mermaid"], ["task", "critical"]):
        r = run_team(tmp_path, *args)
        assert r.returncode == 0, (args, r.stderr)
        assert clean(r.stdout) and clean(r.stderr), (args, r.stdout)
    listing = run_team(tmp_path, "task", "list").stdout.splitlines()
    assert listing == ["[!] #1: x\\x1b[2J\\r[x] #99: fake completed",
                       "[ ] #2: waits \\u202eevil (blocked by: [1])"]
    shown = run_team(tmp_path, "task", "show", "1").stdout
    assert "    line one\n    \\x1b]0;title\\x07line two\n" in shown  # the description keeps its lines
    assert "  error:       boom\\r[x] #2: fake\n" in shown


def test_inbox_messages_and_status_are_shown_escaped(tmp_path):
    r = run_team(tmp_path, "send", "lead", "hi\x1b[2J\r[x] #9: fake", "--from", "bob")
    assert r.returncode == 0, r.stderr
    peek = run_team(tmp_path, "inbox", "lead", "--peek")
    assert clean(peek.stdout) and peek.stdout.endswith(" bob: hi\\x1b[2J\\r[x] #9: fake\n")
    raw = json.loads(run_team(tmp_path, "inbox", "lead", "--peek", "--json").stdout)
    assert raw[0]["content"] == "hi\x1b[2J\r[x] #9: fake"  # --json keeps the data (JSON-escaped)
    assert clean(run_team(tmp_path, "status").stdout)


def test_a_job_that_prints_escapes_is_shown_escaped(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: esc\ntasks:\n  - id: loud\n    run: printf 'a\\033[2J\\rb'; exit 3\n")
    r = run_team(tmp_path, "run", "plan.yaml")
    assert r.returncode == 1
    assert clean(r.stdout) and clean(r.stderr)
    show = run_team(tmp_path, "task", "show", "esc.loud")
    assert clean(show.stdout) and "a\\x1b[2J\\rb" in show.stdout
    jobs = run_team(tmp_path, "jobs")
    job_id = jobs.stdout.split()[0]
    detail = run_team(tmp_path, "jobs", "show", job_id)
    assert clean(detail.stdout) and "a\\x1b[2J\\rb" in detail.stdout


def test_team_chat_shows_what_a_model_streams_escaped():
    import io

    from orchestrator.cli.chat import Console

    stream = io.StringIO()
    console = Console(stream)
    console.text("ok\x1b[2J\r[x] done\n")
    console.tool("bash", '{"command": "echo \\u001b[31m"}')
    assert clean(stream.getvalue()) and stream.getvalue().startswith("ok\\x1b[2J\\r[x] done\n")
