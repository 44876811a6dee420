"""The stable prefix (system prompt, tools) and the per-turn state block."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.agent.prompt import (
    AgentState,
    agents_md_files,
    build_system_prompt,
    canonical_tools,
    prefix_fingerprint,
    render_state,
    state_message,
)
from orchestrator.core.errors import UserError
from orchestrator.core.jsonutil import stable_json
from orchestrator.core.models import Member
from orchestrator.roles.roles import get_role
from orchestrator.roles.skills import discover_skills

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def ws(tmp_path):
    files = {
        "AGENTS.md": "Root rule: run `make test` before you report.",
        "src/AGENTS.md": "src rule: type hints everywhere.",
        "src/api/AGENTS.md": "api rule: never break the v1 routes.",
        "docs/AGENTS.md": "docs rule: British spelling.",
        "skills/deploy/SKILL.md": "---\nname: deploy\ndescription: Ship to staging.\n---\nDEPLOY-BODY\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def build(ws: Path, work_dirs=("src/api",)) -> str:
    return build_system_prompt(
        name="alice", role=get_role("coder", ws), team="mig", workspace=ws,
        work_dirs=work_dirs, skills=discover_skills(ws),
    )


def test_system_prompt_layout_and_agents_md_scoping(ws):
    prompt = build(ws)
    coder = get_role("coder", ws)
    assert prompt.startswith(f"You are alice, a coder on team mig.\n\n# Role: coder\n\n{coder.prompt.strip()}\n\n")
    assert (
        "## AGENTS.md\n\nRoot rule: run `make test` before you report.\n\n"
        "## src/AGENTS.md\n\nsrc rule: type hints everywhere.\n\n"
        "## src/api/AGENTS.md\n\napi rule: never break the v1 routes.\n\n# Skills"
    ) in prompt
    assert "British spelling" not in prompt  # docs/ is not a directory this task works in
    assert "- deploy: Ship to staging." in prompt and "DEPLOY-BODY" not in prompt
    assert prompt.rstrip().endswith("A tool error is an observation: fix the call, do not repeat it unchanged.")
    # Only the root file when the task names no directories.
    assert [p for p, _ in agents_md_files(ws)] == ["AGENTS.md"]
    # A file path scopes like its directory; order and duplicates of work dirs do not matter.
    assert build(ws, ["src/api/routes.py", "docs", "src"]) == build(ws, ["docs", "src/api", "src/api"])


def test_system_prompt_is_byte_identical_across_processes(ws):
    """Same inputs, different interpreter runs (and hash seeds): the same bytes."""
    code = (
        "import sys; from pathlib import Path; "
        "from orchestrator.agent.prompt import build_system_prompt; "
        "from orchestrator.roles.roles import get_role; from orchestrator.roles.skills import discover_skills; "
        "ws = Path(sys.argv[1]); "
        "sys.stdout.write(build_system_prompt(name='alice', role=get_role('coder', ws), team='mig', "
        "workspace=ws, work_dirs=['src/api', 'docs'], skills=discover_skills(ws)))"
    )
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", code, str(ws)], env=env, capture_output=True, check=True)
        outputs.add(out.stdout)
    assert outputs == {build(ws, ["docs", "src/api"]).encode()}


def test_work_dir_outside_workspace_is_refused(ws):
    with pytest.raises(UserError, match="work directory '../elsewhere' is outside the workspace"):
        build(ws, ["../elsewhere"])


def test_oversized_agents_md_is_bounded(ws):
    (ws / "AGENTS.md").write_text("x" * 20_000)
    prompt = build(ws, [])
    assert "x" * 16_000 + "\n[... truncated at 16000 chars; read AGENTS.md for the rest]" in prompt
    assert "x" * 16_001 not in prompt


def test_tools_are_canonical_whatever_the_input_order():
    a = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
    b = {"function": {"parameters": {"properties": {}, "type": "object"}, "name": "bash"}, "type": "function"}
    b_reordered = json.loads(json.dumps(b))
    assert stable_json(canonical_tools([a, b])) == stable_json(canonical_tools([b_reordered, a]))
    assert [t["function"]["name"] for t in canonical_tools([a, b])] == ["bash", "read_file"]
    assert prefix_fingerprint("sys", [a, b]) == prefix_fingerprint("sys", [b, a]) != prefix_fingerprint("sys2", [a, b])


def test_state_block_carries_every_dynamic_fact():
    state = AgentState(
        name="alice", role="coder", team="mig",
        task="#3 migrate-a: Replace requests with httpx in src/a.py",
        roster=[Member(name="bob", role="tester", status="idle"), {"name": "alice", "role": "coder", "status": "working"},
                {"name": "lead", "role": "lead"}],
        goal="Move every module to httpx", goal_status="paused",
        changed_files=["src/b.py", "src/a.py", "src/a.py"],
        notes=["src/c.py changed on disk since you read it"],
    )
    assert render_state(state) == (
        "[team state: maintained by the harness and refreshed every turn; this is not a user request]\n"
        "You are alice, a coder on team mig.\n"
        "Current task: #3 migrate-a: Replace requests with httpx in src/a.py\n"
        "Goal (paused): Move every module to httpx\n"
        "Team roster:\n"
        "- alice (coder, working)\n"
        "- bob (tester, idle)\n"
        "- lead (lead)\n"
        "Files you changed: src/a.py, src/b.py\n"
        "Note: src/c.py changed on disk since you read it"
    )
    assert state_message(AgentState(name="x", role="lead", team="t")) == {
        "role": "user",
        "content": (
            "[team state: maintained by the harness and refreshed every turn; this is not a user request]\n"
            "You are x, a lead on team t.\nCurrent task: none\nGoal: none set\n"
            "Team roster: just you\nFiles you changed: none yet"
        ),
        "_kind": "state",
    }
