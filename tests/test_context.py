"""Context projection and compaction over OpenAI-format transcripts."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from orchestrator.agent.compaction import (
    ContextWindow,
    compact,
    extractive_summary,
    files_touched,
    summary_request,
)
from orchestrator.agent.projection import estimate_tokens, project, repair_pairs
from orchestrator.agent.prompt import AgentState, build_system_prompt, render_state
from orchestrator.roles.roles import get_role

REPO = Path(__file__).resolve().parent.parent


def call(cid: str, name: str, **args) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def asst(*calls: dict, content: str | None = None) -> dict:
    m = {"role": "assistant", "content": content}
    if calls:
        m["tool_calls"] = list(calls)
    return m


def res(cid: str, text: str, **meta) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": text, **meta}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def system_prompt(ws: Path) -> dict:
    (ws / "AGENTS.md").write_text("Always run the tests.")
    prompt = build_system_prompt(name="alice", role=get_role("coder"), team="mig", workspace=ws)
    return {"role": "system", "content": prompt}


def session(ws: Path, turns: int, size: int = 5000) -> list[dict]:
    """A deterministic coding session: reads, edits, a parallel pair every 4th turn."""
    msgs = [system_prompt(ws), user("Migrate src/ from requests to httpx")]
    for t in range(turns):
        if t % 4 == 3:
            msgs.append(asst(call(f"c{t}a", "grep", pattern="requests"), call(f"c{t}b", "bash", command="pytest -q")))
            msgs.append(res(f"c{t}a", f"src/m{t}.py:1: import requests\n" * (size // 30)))
            msgs.append(res(f"c{t}b", "E" * size, _ref=f".team/outputs/alice/c{t}b.txt"))
        elif t % 4 == 2:
            msgs.append(asst(call(f"c{t}", "edit_file", path=f"src/m{t}.py", old="x" * 1500, new="y" * 1500)))
            msgs.append(res(f"c{t}", f"--- a/src/m{t}.py\n+++ b/src/m{t}.py\n"))
        else:
            msgs.append(asst(call(f"c{t}", "read_file", path=f"src/m{t}.py")))
            msgs.append(res(f"c{t}", f"{t}: line\n" * (size // 8), _ref=f".team/outputs/alice/c{t}.txt"))
        msgs.append(asst(content=f"Done with step {t}."))
    return msgs


def assert_api_valid(msgs: list[dict]) -> None:
    """Every tool_calls message is answered right after, once per id; no orphans; no private keys."""
    i = 0
    while i < len(msgs):
        m = msgs[i]
        assert not [k for k in m if k.startswith("_")], m
        assert m["role"] != "tool", f"orphan tool result at {i}: {m}"
        ids = [c["id"] for c in m.get("tool_calls") or ()]
        answers = msgs[i + 1 : i + 1 + len(ids)]
        assert [a["role"] for a in answers] == ["tool"] * len(ids), f"call at {i} not answered"
        assert sorted(a["tool_call_id"] for a in answers) == sorted(ids)
        i += 1 + len(ids)


STATE = AgentState(
    name="alice", role="coder", team="mig", task="#3 migrate-a: Replace requests with httpx in src/a.py",
    roster=[{"name": "lead", "role": "lead", "status": "working"}, {"name": "bob", "role": "tester", "status": "idle"}],
    goal="Every module on httpx, tests green", changed_files=["src/m2.py"],
)


def test_prefix_byte_identical_and_state_last_across_turns(tmp_path):
    full = session(tmp_path, 40)
    prefixes, growing = set(), []
    for end in range(2, len(full) + 1):
        if full[end - 1]["role"] != "assistant" or full[end - 1].get("tool_calls"):
            continue  # a request is sent after the user message or after tool results
        growing = full[:end]
        req = project(growing, keep_recent=3, state=STATE)
        prefixes.add(json.dumps(req[0], ensure_ascii=False).encode())
        assert req[0] is growing[0]  # the prefix object itself, untouched
        assert req[-1] == {"role": "user", "content": render_state(STATE)}
        assert_api_valid(req)
    assert len(prefixes) == 1
    # Elision is monotonic: the request for turn t+1 starts with the request for turn t
    # up to the newly elided result, so provider prompt caches keep hitting.
    a = project(full[:-4], keep_recent=3)
    b = project(full, keep_recent=3)
    first_diff = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert a[first_diff]["tool_call_id"] == "c36"  # the result that just aged out of keep_recent
    assert b[first_diff]["content"].startswith('[tool result elided: read_file {"path": "src/m36.py"}')
    assert len(a) - first_diff == 8


def test_old_results_become_placeholders_with_references(tmp_path):
    full = session(tmp_path, 8)
    before = copy.deepcopy(full)
    req = project(full, keep_recent=2, transcript_ref=".team/transcripts/alice.jsonl", preview_chars=100_000)
    assert full == before  # pure: the transcript is not modified
    by_id = {m["tool_call_id"]: m["content"] for m in req if m["role"] == "tool"}
    assert by_id["c0"] == (
        '[tool result elided: read_file {"path": "src/m0.py"} -> 5,000 chars; '
        "full: .team/outputs/alice/c0.txt]"
    )
    # No _ref on the message: the transcript and the call id are the reference.
    assert by_id["c3a"] == (
        '[tool result elided: grep {"pattern": "requests"} -> 4,814 chars; '
        "full: .team/transcripts/alice.jsonl (tool_call_id c3a)]"
    )
    assert by_id["c2"] == "--- a/src/m2.py\n+++ b/src/m2.py\n"  # small results stay as they are
    # The newest turn's results are whole, and so are the keep_recent newest overall.
    assert by_id["c7a"] == full[-3]["content"] and by_id["c7b"] == full[-2]["content"]
    assert by_id["c6"] == full[-6]["content"] == "y" * 0 + "--- a/src/m6.py\n+++ b/src/m6.py\n"
    assert by_id["c5"].startswith("[tool result elided: read_file")
    # Old tool-call arguments are elided too, and stay valid JSON.
    old_edit = next(m for m in req if m.get("tool_calls") and m["tool_calls"][0]["id"] == "c2")
    assert json.loads(old_edit["tool_calls"][0]["function"]["arguments"]) == {
        "path": "src/m2.py", "old": "[elided: 1,500 chars]", "new": "[elided: 1,500 chars]"}


def test_large_recent_result_enters_as_preview_with_reference(tmp_path):
    msgs = [system_prompt(tmp_path), user("run the suite"), asst(call("c1", "bash", command="pytest")),
            res("c1", "".join(f"line {i}\n" for i in range(10_000)), _ref=".team/outputs/alice/c1.txt")]
    out = project(msgs, preview_chars=1200)[-1]["content"]
    assert out.startswith("line 0\nline 1\n") and out.endswith("line 9998\nline 9999\n")
    assert "\nline 100\n[... 97,701 of 98,890 chars elided; full: .team/outputs/alice/c1.txt ...]\nline 9961\n" in out
    assert len(out) < 1300


def test_budget_tightens_projection(tmp_path):
    full = session(tmp_path, 12, size=20_000)
    loose = project(full, keep_recent=3)
    tight = project(full, keep_recent=3, budget=estimate_tokens(loose) // 2)
    assert estimate_tokens(tight) < estimate_tokens(loose) * 0.6
    assert_api_valid(tight)
    previews = [m["content"] for m in tight if m["role"] == "tool" and "chars elided; full:" in m["content"]]
    assert len(previews) == 2 and all(len(p) < 1200 for p in previews)  # only the newest turn, shorter


def test_tool_call_pairs_are_repaired_never_split():
    msgs = [
        {"role": "system", "content": "s"},
        user("go"),
        asst(call("a", "read_file", path="x"), call("b", "bash", command="ls"), call("c", "grep", pattern="p")),
        user("inbox: bob says hi"),  # drained between the call and its results
        res("b", "B"), res("a", "A"), res("a", "A again"),
        res("zz", "orphan"),
        asst(content="ok"),
        res("a", "late orphan"),
    ]
    out = repair_pairs(msgs[1:])
    assert out == [
        user("go"), msgs[2], res("a", "A"), res("b", "B"),
        {"role": "tool", "tool_call_id": "c",
         "content": "[no result recorded: the call was interrupted; run it again if still needed]"},
        user("inbox: bob says hi"), asst(content="ok"),
    ]
    assert_api_valid(project(msgs))


@pytest.mark.parametrize("keep_units", [0, 1, 2, 3, 5, 8, 100])
def test_compaction_never_splits_call_and_results(tmp_path, keep_units):
    full = session(tmp_path, 10)
    spans = []
    done = compact(full, state=STATE, summarize=lambda span: spans.append(span) or "S",
                   transcripts_dir=tmp_path / "t", keep_units=keep_units)
    assert_api_valid(project(done.messages, state=STATE))
    answered = {m["tool_call_id"] for m in spans[0] if m["role"] == "tool"}
    called = {c["id"] for m in spans[0] for c in m.get("tool_calls") or ()}
    assert answered == called  # the summarized span holds whole turns only


def test_failing_summarizer_falls_back_and_state_survives(tmp_path):
    msgs = [
        system_prompt(tmp_path),
        user("Replace requests with httpx in src/a.py"),
        asst(call("r1", "read_file", path="src/a.py")), res("r1", "import requests\n" * 50),
        asst(call("e1", "edit_file", path="src/a.py", old="requests", new="httpx")), res("e1", "Error: old text not unique"),
        asst(call("e2", "write_file", path="src/a.py", content="import httpx\n")), res("e2", "wrote src/a.py"),
        asst(call("t1", "bash", command="pytest -q")), res("t1", "Error: 2 failed"),
        asst(content="The import is switched; two tests still fail on timeouts."),
        user("Also update tests/test_a.py"),
        asst(call("r2", "read_file", path="tests/test_a.py")), res("r2", "def test_a(): ..."),
    ]

    def broken(span):
        raise ConnectionError("model server down")

    changed = files_touched(msgs)[0]
    state = AgentState(name="alice", role="coder", team="mig", task="#3 migrate-a: Replace requests with httpx",
                       roster=STATE.roster, goal=STATE.goal, changed_files=changed)
    done = compact(msgs, state=state, summarize=broken, transcripts_dir=tmp_path / ".team/transcripts",
                   keep_units=2, reason="requested by /compact", display_root=tmp_path)
    assert done.fallback and done.error == "ConnectionError: model server down"
    assert done.replaced == 10
    saved = [json.loads(line) for line in done.transcript_path.read_text().splitlines()]
    assert saved == msgs  # the full transcript is on disk before anything is dropped
    assert done.summary == (
        "User requests:\n- Replace requests with httpx in src/a.py\n\n"
        "Files changed: src/a.py\nFiles read: none\n\n"
        "Last assistant statements:\n- The import is switched; two tests still fail on timeouts.\n\n"
        "Open tool errors (not yet retried successfully):\n"
        '- bash {"command": "pytest -q"}: Error: 2 failed'
    )
    system, boundary, state_msg, *tail = done.messages
    assert system == msgs[0]
    rel = done.transcript_path.relative_to(tmp_path)
    assert boundary["content"].startswith(
        f"[compaction boundary #1: requested by /compact; 10 earlier messages (~{estimate_tokens(msgs[1:11]):,} "
        f"tokens) replaced by this summary; full transcript: {rel}]\n\nUser requests:")
    assert state_msg["content"] == render_state(state)
    assert tail == msgs[11:]
    # What the model is sent next still knows who it is, its task, team, goal and changes.
    req = project(done.messages, state=state)
    assert req[0] is done.messages[0] and req[0]["content"] == msgs[0]["content"]
    after = "\n".join(m["content"] or "" for m in req[1:])
    for fact in ("You are alice, a coder on team mig.", "Current task: #3 migrate-a",
                 "- bob (tester, idle)", "- lead (lead, working)",
                 "Goal (active): Every module on httpx, tests green", "Files you changed: src/a.py"):
        assert fact in req[2]["content"] and fact in req[-1]["content"], fact
    assert "Also update tests/test_a.py" in after
    assert_api_valid(req)


def test_auto_compaction_near_threshold_and_second_compaction_keeps_first(tmp_path):
    window = ContextWindow(budget=5_000, threshold=0.8, transcripts_dir=tmp_path / "t",
                           summarize=lambda span: f"summary of {len(span)} messages", keep_units=3)
    full = session(tmp_path, 6, size=2000)
    first = window.prepare(full, STATE)
    assert first.compaction is None and first.messages == full
    full = session(tmp_path, 40, size=2000)
    second = window.prepare(full, STATE)
    assert second.compaction is not None and not second.compaction.fallback
    assert second.tokens <= 5_000 * 0.8
    assert second.messages[1]["content"].endswith(f"summary of {second.compaction.replaced} messages")
    assert second.request[2]["content"] == render_state(STATE)
    # An empty answer counts as a failure: the extractive summary carries the earlier one.
    window.summarize = lambda span: "  "
    grown = second.messages + [user("next: src/m99.py"), asst(content="ok")] * 4
    third = window.compact(grown, STATE)
    assert third.fallback and third.error == "the summarizer returned an empty summary"
    assert third.summary.startswith("Earlier summary:\n[compaction boundary #1: auto at ~")
    assert third.messages[1]["content"].startswith("[compaction boundary #2: requested;")
    assert len(list((tmp_path / "t").glob("compact-*.jsonl"))) == 2


def test_summary_request_is_bounded_and_keeps_the_newest(tmp_path):
    span = session(tmp_path, 30)[1:]
    req = summary_request(span, limit=6000)
    assert [m["role"] for m in req] == ["system", "user"]
    text = req[1]["content"]
    assert len(text) < 6000 + 2000 and text.startswith("[") and "earlier messages omitted]" in text
    assert "ASSISTANT: Done with step 29." in text
    assert extractive_summary([]) == "Nothing of note happened in the replaced turns."


def test_token_estimate_is_documented_heuristic():
    assert estimate_tokens([]) == 3
    assert estimate_tokens([user("a" * 400)]) == 3 + 4 + 100
    assert estimate_tokens([user("é" * 400)]) == 3 + 4 + 200  # UTF-8 bytes / 4
    m = asst(call("id1", "bash", command="ls"))
    args = json.dumps({"command": "ls"})
    assert estimate_tokens([m]) == 3 + 4 + 8 + 1 + (len(args) + 3) // 4


def test_elide_batch_ages_results_out_in_groups(tmp_path):
    full = session(tmp_path, 12)
    reads = [m for m in full if m["role"] == "tool"]  # 15 results
    for upto in range(len(full) - 1, 1, -1):
        req = project(full[:upto], keep_recent=3, elide_batch=4, min_elide_chars=0, preview_chars=100_000)
        results = [m for m in req if m["role"] == "tool"]
        whole = [m for m in results if not m["content"].startswith("[tool result elided")]
        aged = len(results) - len(whole)
        assert aged % 4 == 0 and len(whole) >= min(3, len(results))
        assert all(not m["content"].startswith("[tool result elided") for m in results[aged:])
    assert len(reads) == 15
