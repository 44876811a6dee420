"""Roles (agents/<role>.md) and skills (SKILL.md): parsing, override, errors, on-demand bodies."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.agent.prompt import build_system_prompt
from orchestrator.core.errors import UserError
from orchestrator.roles.roles import builtin_agents_dir, check_tools, discover_roles, get_role
from orchestrator.roles.skills import discover_skills, load_skill

REPO = Path(__file__).resolve().parent.parent

ROLE = """---
name: {name}
description: Writes the docs.
tools: [read_file, write_file]
---
You write documentation.
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_builtin_roles_ship_with_useful_prompts():
    roles = discover_roles()
    assert list(roles) == ["coder", "lead", "reviewer", "tester"]
    assert builtin_agents_dir() == REPO / "agents"
    for role in roles.values():
        assert role.builtin and role.path == builtin_agents_dir() / f"{role.name}.md"
        assert role.description and role.tools and len(role.prompt) > 400
    assert "edit_file" in roles["coder"].tools
    assert "write_file" not in roles["reviewer"].tools and "edit_file" not in roles["reviewer"].tools
    assert "spawn_teammate" in roles["lead"].tools and "spawn_teammate" not in roles["coder"].tools


def test_workspace_role_overrides_builtin_and_adds_new(tmp_path):
    write(tmp_path / "agents/coder.md", ROLE.format(name="coder").replace("documentation", "Rust only"))
    write(tmp_path / "agents/docs.md", ROLE.format(name="docs"))
    roles = discover_roles(tmp_path)
    assert list(roles) == ["coder", "docs", "lead", "reviewer", "tester"]
    coder = get_role("coder", tmp_path)
    assert coder.prompt == "You write Rust only.\n" and not coder.builtin
    assert coder.tools == ("read_file", "write_file") and coder.model is None
    assert get_role("tester", tmp_path).builtin


def test_unknown_role_lists_known_ones(tmp_path):
    with pytest.raises(UserError) as exc:
        get_role("architect", tmp_path)
    assert str(exc.value) == (
        "unknown role 'architect'; known roles: coder, lead, reviewer, tester; "
        f"to define it, add {tmp_path / 'agents' / 'architect.md'}"
    )


@pytest.mark.parametrize(
    "text, problem",
    [
        ("name: x\n", "a role file must start with a '---' line opening the YAML front matter"),
        ("---\nname: bad\n", "front matter is not closed: add a '---' line after it"),
        ("---\nname: bad\ndescription: a: b\n---\nbody\n", "front matter is not valid YAML (line 3): mapping values are not allowed here (quote a value that contains ': ')"),
        ("---\n- a\n---\nbody\n", "front matter must be a mapping"),
        ("---\nname: bad\ntools: [a]\n---\nbody\n", "front matter is missing 'description'"),
        ("---\nname: bad\ndescription: d\n---\nbody\n", "front matter is missing 'tools'"),
        ("---\nname: bad\ndescription: d\ntools: bash\n---\nbody\n", "'tools' must be a list of tool names, got 'bash'"),
        ("---\nname: bad\ndescription: d\ntools: [a, a]\n---\nbody\n", "'tools' lists ['a'] more than once"),
        ("---\nname: other\ndescription: d\ntools: [a]\n---\nbody\n", "name 'other' does not match the file name; rename the file to other.md"),
        ("---\nname: bad\ndescription: d\ntools: [a]\ncolour: red\n---\nbody\n", "unknown front matter key ['colour']"),
        ("---\nname: bad\ndescription: d\ntools: [a]\nmodel: 3\n---\nbody\n", "'model' must be a non-empty string, got 3"),
        ("---\nname: bad\ndescription: d\ntools: [a]\n---\n\n", "the role prompt (the text after the front matter) is empty"),
    ],
)
def test_malformed_role_file_names_file_and_problem(tmp_path, text, problem):
    path = write(tmp_path / "agents/bad.md", text)
    with pytest.raises(UserError) as exc:
        discover_roles(tmp_path)
    assert str(exc.value).startswith(f"{path}: {problem}")


def test_broken_role_file_does_not_stop_other_roles(tmp_path):
    write(tmp_path / "agents/broken.md", "---\nname: broken\n---\nbody\n")
    assert get_role("coder", tmp_path).builtin
    with pytest.raises(UserError, match="broken.md: front matter is missing 'description'"):
        get_role("broken", tmp_path)
    with pytest.raises(UserError, match="^unknown role 'x'; known roles: broken, coder, lead, reviewer, tester;"):
        get_role("x", tmp_path)


def test_role_model_and_tool_check(tmp_path):
    write(tmp_path / "agents/fast.md", ROLE.format(name="fast").replace("tools:", "model: gpt-4o-mini\ntools:"))
    role = get_role("fast", tmp_path)
    assert role.model == "gpt-4o-mini"
    check_tools(role, ["read_file", "write_file", "bash"])
    with pytest.raises(UserError, match=r"unknown tool \['write_file'\] in 'tools'; available: bash, read_file"):
        check_tools(role, ["read_file", "bash"])


SKILL = """---
name: {name}
description: {desc}
allowed-tools: [read_file]
---
# {name}
1. Step one of {name}.
2. SECRET-BODY-{name}
"""


def test_skills_discovered_from_both_roots_body_only_on_load(tmp_path):
    write(tmp_path / "skills/release/SKILL.md", SKILL.format(name="release", desc="Cut a release."))
    write(tmp_path / ".agents/skills/review-notes/SKILL.md",
          SKILL.format(name="review-notes", desc="Review notes\n  for evidence."))
    write(tmp_path / ".agents/skills/release/SKILL.md", SKILL.format(name="release", desc="shadowed"))
    write(tmp_path / "skills/README.md", "not a skill")
    skills = discover_skills(tmp_path)
    assert [(s.name, s.description, s.path.as_posix()) for s in skills] == [
        ("release", "Cut a release.", "skills/release/SKILL.md"),
        ("review-notes", "Review notes for evidence.", ".agents/skills/review-notes/SKILL.md"),
    ]
    assert skills[0].meta == {"allowed-tools": ["read_file"]}

    prompt = build_system_prompt(name="a", role=get_role("coder"), team="t", workspace=tmp_path, skills=skills)
    assert "- release: Cut a release.\n- review-notes: Review notes for evidence." in prompt
    assert "SECRET-BODY" not in prompt and "Step one" not in prompt

    assert load_skill(tmp_path, "release") == (
        "# Skill: release (skills/release/SKILL.md)\n\n# release\n1. Step one of release.\n2. SECRET-BODY-release\n"
    )


def test_unknown_and_malformed_skills(tmp_path):
    write(tmp_path / "skills/ok/SKILL.md", SKILL.format(name="ok", desc="fine"))
    with pytest.raises(UserError, match=r"^unknown skill 'nope'; available skills: ok$"):
        load_skill(tmp_path, "nope")
    write(tmp_path / "skills/broken/SKILL.md", "---\nname: broken\n---\nbody\n")
    with pytest.raises(UserError) as exc:
        discover_skills(tmp_path)
    assert str(exc.value) == (
        "skills/broken/SKILL.md: front matter needs a non-empty 'description' saying when to use the skill"
    )
    write(tmp_path / "skills/broken/SKILL.md", "---\nname: other\ndescription: d\n---\nbody\n")
    with pytest.raises(UserError, match="name 'other' must equal its directory name 'broken'"):
        discover_skills(tmp_path)


def test_a_role_budget_is_read_from_the_front_matter_and_a_bad_one_names_the_file_and_the_key(tmp_path):
    from orchestrator.core.budget import Budget
    from orchestrator.core.errors import UserError
    from orchestrator.roles.roles import parse_role

    head = "---\nname: scout\ndescription: d\ntools: [glob]\n"
    role = parse_role(head + "budget: {tokens: 5000, dollars: 0.5}\n---\nbody\n", tmp_path / "scout.md")
    assert role.budget == Budget(tokens=5000, dollars=0.5)
    assert parse_role(head + "budget: 700\n---\nbody\n", tmp_path / "scout.md").budget == Budget(tokens=700)
    with pytest.raises(UserError) as e:
        parse_role(head + "budget: {tokens: 0}\n---\nbody\n", tmp_path / "scout.md")
    assert str(e.value).startswith(f"{tmp_path}/scout.md: 'budget.tokens': Input should be greater than or equal to 1")
