"""Every stage of the tool pipeline turns a bad call into the right observation."""

from __future__ import annotations

import json
import logging

import pytest
from tools_harness import Harness

from orchestrator.tools import Args, Call, ToolRegistry, default_registry, tool
from orchestrator.tools.registry import signature


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


def test_malformed_json_is_an_error_observation_and_is_recorded(h):
    obs = h.call("read_file", '{"path": "a.py",')
    assert obs.is_error and obs.stage == "parse"
    assert obs.content == (
        "arguments for read_file are not valid JSON (Expecting property name enclosed in double quotes "
        "at char 16, near '{\"path\": \"a.py\",'). Send one JSON object: "
        '{"path": string, "offset"?: integer, "limit"?: integer}'
    )
    (rec,) = h.log()
    assert (rec["call_id"], rec["tool"], rec["stage"], rec["is_error"]) == ("call_1", "read_file", "parse", True)
    assert rec["arguments"] == '{"path": "a.py",'
    assert rec["content"] == obs.content


def test_non_object_arguments_are_refused(h):
    obs = h.call("read_file", "[1, 2]")
    assert obs.stage == "parse"
    assert obs.content.startswith("arguments for read_file must be a JSON object, not list")


def test_double_encoded_arguments_are_accepted(h):
    (h.ws / "a.txt").write_text("hi\n")
    obs = h.call("read_file", json.dumps(json.dumps({"path": "a.txt"})))
    assert (obs.is_error, obs.content) == (False, "    1\thi\n")


def test_unknown_tool_names_the_nearest_and_lists_the_known(h):
    obs = h.call("raed_file", {"path": "x"})
    assert obs.stage == "lookup"
    assert obs.content == (
        "unknown tool 'raed_file'. Did you mean 'read_file'? Known tools: bash, claim_task, edit_file, "
        "glob, grep, read_file, task_create, task_get, task_list, task_update, write_file."
    )


def test_wrong_types_and_unknown_fields_get_the_pydantic_message(h):
    obs = h.call("read_file", {"path": 3, "offset": "ten"})
    assert obs.stage == "validate"
    assert obs.content == (
        "invalid arguments for read_file: path: Input should be a valid string (got 3); "
        "offset: Input should be a valid integer, unable to parse string as an integer (got 'ten'). "
        'Expected {"path": string, "offset"?: integer, "limit"?: integer}'
    )
    obs = h.call("write_file", {"path": "a", "content": "x", "mode": "w"})
    assert obs.stage == "validate"
    assert "mode: Extra inputs are not permitted" in obs.content
    obs = h.call("write_file", {"path": "a"})
    assert obs.content.startswith("invalid arguments for write_file: content: Field required.")
    assert not (h.ws / "a").exists()


def test_paths_outside_the_workspace_are_refused_and_nothing_is_written(h):
    outside = h.root / "outside.txt"
    for path in ("../outside.txt", str(outside), "sub/../../outside.txt"):
        obs = h.call("write_file", {"path": path, "content": "pwned"})
        assert (obs.is_error, obs.stage) == (True, "path"), path
        assert f"resolves to {outside}, outside the workspace {h.ws}" in obs.content
    assert not outside.exists()
    assert h.call("read_file", {"path": "/etc/passwd"}).stage == "path"
    # `..` that stays inside is fine
    assert h.ok("write_file", {"path": "sub/../inside.txt", "content": "ok\n"}) == "created inside.txt (1 line, 3 bytes)"


def test_symlinks_pointing_outside_are_refused_and_nothing_is_written(h):
    secret_dir = h.root / "secrets"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_text("s3cret\n")
    (h.ws / "link").symlink_to(secret_dir)
    (h.ws / "keylink").symlink_to(secret_dir / "key.txt")
    (h.ws / "dangling").symlink_to(secret_dir / "new.txt")

    obs = h.call("write_file", {"path": "link/planted.txt", "content": "x"})
    assert obs.stage == "path"
    assert obs.content.startswith(f"path 'link/planted.txt' resolves through a symlink to {secret_dir}/planted.txt")
    assert h.call("write_file", {"path": "dangling", "content": "x"}).stage == "path"
    assert h.call("read_file", {"path": "keylink"}).stage == "path"
    assert h.call("edit_file", {"path": "keylink", "old_string": "s3cret", "new_string": "x"}).stage == "path"
    assert sorted(p.name for p in secret_dir.iterdir()) == ["key.txt"]
    assert (secret_dir / "key.txt").read_text() == "s3cret\n"


def test_state_directories_are_off_limits_to_file_tools(h):
    (h.ws / ".git").mkdir()
    obs = h.call("write_file", {"path": ".git/config", "content": "x"})
    assert obs.stage == "path" and "inside .git/" in obs.content
    assert not (h.ws / ".git" / "config").exists()


def test_plan_mode_refuses_write_and_execute_until_the_mode_changes(h):
    h.ctx.mode = "plan"
    for name, args in (("write_file", {"path": "a.txt", "content": "x\n"}), ("bash", {"command": "touch ran"})):
        obs = h.call(name, args)
        assert (obs.is_error, obs.stage) == (True, "plan")
        assert obs.content.startswith(f"plan mode: {name} (")
        assert "until the lead approves your plan" in obs.content
    assert not (h.ws / "a.txt").exists() and not (h.ws / "ran").exists()
    assert h.ok("glob", {"pattern": "*"}) == "no paths match '*' under ."
    assert h.ok("task_list", {}) == "no tasks yet"
    h.ctx.mode = "normal"
    assert h.ok("write_file", {"path": "a.txt", "content": "x\n"}) == "created a.txt (1 line, 2 bytes)"
    assert h.ok("bash", {"command": "touch ran"}) == "exit code: 0\n(no output)"
    assert (h.ws / "ran").exists()


class BoomArgs(Args):
    n: int


@tool("boom", args=BoomArgs, risk="read")
def boom(call: Call) -> str:
    """Divide one by n."""
    return str(1 / call.args.n)


@tool("notify", args=BoomArgs, risk="coordinate")
def notify(call: Call) -> str:
    """Needs the message bus."""
    call.ctx.need_bus().send("lead", str(call.args.n), sender=call.ctx.agent)
    return "sent"


def test_our_bugs_are_reported_and_logged_not_swallowed(tmp_path, caplog):
    h = Harness(tmp_path, registry=default_registry().add(boom, notify))
    assert h.ok("boom", {"n": 4}) == "0.25"
    with caplog.at_level(logging.ERROR, logger="orchestrator.tools"):
        obs = h.call("boom", {"n": 0})
    assert (obs.is_error, obs.stage) == (True, "crash")
    assert obs.content.startswith("internal error in tool boom: ZeroDivisionError: division by zero")
    assert any("tool boom crashed" in r.getMessage() and r.exc_info for r in caplog.records)
    rec = h.log()[-1]
    assert rec["stage"] == "crash" and "ZeroDivisionError" in rec["traceback"]


def test_a_missing_service_is_an_error_observation(tmp_path):
    h = Harness(tmp_path, registry=ToolRegistry([notify]))
    obs = h.call("notify", {"n": 1})
    assert (obs.stage, obs.content) == (
        "service",
        "messaging is not available in this session (no message bus); carry on without it",
    )


def test_every_call_is_recorded_with_its_result(h):
    h.call("glob", {"pattern": "*"})
    h.call("nope", {})
    h.call("bash", {"command": "echo hi"})
    log = h.log()
    assert [(r["call_id"], r["tool"], r["stage"]) for r in log] == [
        ("call_1", "glob", "ok"),
        ("call_2", "nope", "lookup"),
        ("call_3", "bash", "ok"),
    ]
    assert log[2]["content"] == "exit code: 0\nhi\n"
    assert all(r["agent"] == "alice" for r in log)


def test_schemas_are_byte_identical_sorted_and_compact():
    a, b = default_registry(), default_registry()
    assert a.schemas_json() == b.schemas_json()
    assert json.dumps(a.schemas()) == json.dumps(b.schemas())
    schemas = a.schemas()
    assert [s["function"]["name"] for s in schemas] == a.names() == sorted(a.names())
    text = a.schemas_json()
    assert '"title"' not in text and "$ref" not in text and "$defs" not in text
    for s in schemas:
        assert s["type"] == "function"
        params = s["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
    grep = next(s for s in schemas if s["function"]["name"] == "grep")["function"]["parameters"]
    assert grep["properties"]["glob"] == {
        "description": "Only files whose name or path matches, e.g. '*.py'.",
        "type": "string",
    }
    assert grep["required"] == ["pattern"]
    # A later add changes the list deterministically too.
    assert a.add(boom).schemas_json() == b.add(boom).schemas_json() != default_registry().schemas_json()


def test_registry_add_only_and_duplicates():
    reg = default_registry()
    with pytest.raises(ValueError, match="'bash' is already registered"):
        reg.add(reg.get("bash"))
    sub = reg.only(["read_file", "grep"])
    assert sub.names() == ["grep", "read_file"]
    with pytest.raises(ValueError, match=r"unknown tools \['nope'\]"):
        reg.only(["nope"])
    assert signature(reg.get("edit_file")) == (
        '{"path": string, "old_string": string, "new_string": string, "replace_all"?: boolean}'
    )


def test_arguments_may_be_passed_already_parsed(h):
    (h.ws / "a.txt").write_text("hi\n")
    obs = h.registry.call("read_file", {"path": "a.txt"}, h.ctx, "c-dict")
    assert (obs.is_error, obs.content) == (False, "    1\thi\n")
    assert h.log()[-1]["arguments"] == '{"path": "a.txt"}'
