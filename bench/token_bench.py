"""Tokens sent per model call, naive loop vs context projection (no network, no model).

A scripted, deterministic 200-turn coding session (seeded PRNG): each turn the
model calls 1-3 tools (read_file, grep, bash test runs, edit_file, write_file)
whose results are 300 to 30,000 characters (the tool layer's bound); every 25
turns a new user/inbox message arrives. For every model call we measure:

* naive: the whole transcript every call (system + tools + all messages);
* projected: ``ContextWindow.prepare`` (placeholders for old results,
  previews for large recent ones, auto-compaction at 80% of the budget with
  the extractive summary, state block last).

Tokens use ``context.estimate_tokens`` (chars/4 heuristic). "Prefix share" is
the system prompt + tool schemas as a share of each request; "cacheable
share" is the part of each request identical to the start of the previous
request (what a provider prompt cache can reuse). Run:
``python bench/token_bench.py [--turns N] [--budget TOKENS]``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.agent.compaction import ContextWindow, files_touched  # noqa: E402
from orchestrator.agent.projection import estimate_tokens, message_tokens  # noqa: E402
from orchestrator.agent.prompt import AgentState, build_system_prompt, canonical_tools
from orchestrator.core.jsonutil import stable_json
from orchestrator.roles.roles import get_role  # noqa: E402
from orchestrator.roles.skills import discover_skills  # noqa: E402

TOOL_NAMES = ["bash", "edit_file", "glob", "grep", "read_file", "write_file", "task_get", "task_update",
              "send_message", "read_inbox", "load_skill", "compact"]


def tool_schemas() -> list[dict]:
    return canonical_tools(
        {"type": "function", "function": {
            "name": n, "description": f"The {n} tool: see the tool rules in the system prompt.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
                           "required": ["path"]}}}
        for n in TOOL_NAMES)


def workspace(tmp: Path) -> Path:
    (tmp / "AGENTS.md").write_text("Use httpx, never requests.\nRun `pytest -q` before reporting.\n" * 5)
    (tmp / "src").mkdir()
    (tmp / "src/AGENTS.md").write_text("Type hints everywhere; no global state.\n")
    skill = tmp / "skills/migrate"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: migrate\ndescription: Port a module from requests to httpx.\n---\n1. ...\n")
    return tmp


def fake_output(rng: random.Random, kind: str, size: int) -> str:
    line = {"read_file": "    response = requests.get(url, timeout=30)  # line\n",
            "grep": "src/pkg/mod.py:120: import requests\n",
            "bash": "tests/test_mod.py::test_case FAILED AssertionError: expected 200\n"}.get(kind, "ok\n")
    return (line * (size // len(line) + 1))[:size]


def script(turns: int, seed: int = 7):
    """Yield, per turn, (user message or None, [(call_id, name, args, output)])."""
    rng = random.Random(seed)
    for t in range(turns):
        note = f"New request #{t // 25}: also port src/pkg/m{t}.py and keep the tests green." if t % 25 == 0 else None
        calls = []
        for k in range(rng.choice((1, 1, 2, 3))):
            name = rng.choice(("read_file", "read_file", "grep", "bash", "edit_file", "write_file"))
            path = f"src/pkg/m{rng.randrange(40)}.py"
            if name in ("edit_file", "write_file"):
                args = {"path": path, "text": "x" * rng.randrange(200, 4000)}
                out = f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-requests\n+httpx\n"
            else:
                args = {"path": path}
                out = fake_output(rng, name, rng.randrange(300, 30_000))
            calls.append((f"call_{t}_{k}", name, args, out))
        yield note, calls


def common_prefix_tokens(prev: list[dict] | None, cur: list[dict]) -> int:
    if prev is None:
        return 0
    total = 0
    for a, b in zip(prev, cur, strict=False):
        if a != b:
            break
        total += message_tokens(b)
    return total


def run(turns: int, budget: int, batches: tuple[int, ...] = (1, 4)) -> dict[str, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = workspace(Path(tmp))
        system = {"role": "system", "content": build_system_prompt(
            name="alice", role=get_role("coder"), team="bench", workspace=ws, work_dirs=["src"],
            skills=discover_skills(ws))}
        tools = tool_schemas()
        prefix_tokens = estimate_tokens([system], tools) - 3
        modes = [f"batch {b}" for b in batches]
        windows = {m: ContextWindow(budget=budget, transcripts_dir=ws / ".team/transcripts" / m.replace(" ", ""),
                                    summarize=None, elide_batch=b, transcript_ref=".team/transcripts/alice.jsonl")
                   for m, b in zip(modes, batches, strict=True)}
        full = [system, {"role": "user", "content": "Port the package from requests to httpx."}]
        work = {m: list(full) for m in modes}
        stats = {m: {"sizes": [], "prefix": [], "cache": [], "compactions": 0, "seconds": 0.0}
                 for m in ["naive", *modes]}
        prev: dict[str, list | None] = dict.fromkeys(stats)
        for note, calls in script(turns):
            if note:
                for msgs in (full, *work.values()):
                    msgs.append({"role": "user", "content": note})
            state = AgentState(name="alice", role="coder", team="bench", task="#1 port to httpx",
                               roster=[{"name": "lead", "role": "lead", "status": "working"}],
                               goal="package on httpx, tests green", changed_files=files_touched(full)[0])
            requests = [("naive", full)]
            for m in modes:
                start = time.perf_counter()
                prepared = windows[m].prepare(work[m], state, tools)
                stats[m]["seconds"] += time.perf_counter() - start
                work[m] = prepared.messages
                stats[m]["compactions"] += prepared.compaction is not None
                requests.append((m, prepared.request))
            for mode, request in requests:
                size = estimate_tokens(request, tools)
                s = stats[mode]
                s["sizes"].append(size)
                s["prefix"].append(prefix_tokens / size)
                s["cache"].append(common_prefix_tokens(prev[mode], request) / size)
                prev[mode] = [json.loads(stable_json(m)) for m in request]
            assistant = {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for cid, name, args, _ in calls]}
            results = [{"role": "tool", "tool_call_id": cid, "content": out} for cid, _, _, out in calls]
            for msgs in (full, *work.values()):
                msgs.append(assistant)
                msgs.extend(results)
        return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--budget", type=int, default=32_000, help="context budget in tokens (compaction at 80%%)")
    a = ap.parse_args()
    stats = run(a.turns, a.budget)
    print(f"{a.turns}-turn scripted session, budget {a.budget:,} tokens (tokens = chars/4 estimate)\n")
    print(f"{'mode':<9} {'calls':>5} {'peak':>9} {'mean':>9} {'total':>11} {'peak/naive':>10} "
          f"{'prefix share mean/min':>21} {'cacheable mean/min':>18} {'compact':>7} {'ms/call':>7}")
    naive_peak = max(stats["naive"]["sizes"])
    worst = 0.0
    for mode, s in stats.items():
        sizes = s["sizes"]
        ratio = max(sizes) / naive_peak
        worst = max(worst, ratio if mode != "naive" else 0.0)
        ms = f"{1000 * s['seconds'] / len(sizes):.2f}" if mode != "naive" else "-"
        comp = str(s["compactions"]) if mode != "naive" else "-"
        print(f"{mode:<9} {len(sizes):>5} {max(sizes):>9,} {sum(sizes) // len(sizes):>9,} {sum(sizes):>11,} "
              f"{ratio:>10.1%} {sum(s['prefix']) / len(sizes):>13.1%} / {min(s['prefix']):<5.1%} "
              f"{sum(s['cache'][1:]) / (len(sizes) - 1):>10.1%} / {min(s['cache'][1:]):<5.1%} {comp:>7} {ms:>7}")
    print(f"\npeak request with projection vs naive: {worst:.1%} (target <= 50%: {'ok' if worst <= 0.5 else 'MISSED'})")
    print("batch N = results age out into placeholders N at a time (ContextWindow(elide_batch=N)).")
    if worst > 0.5:
        sys.exit(1)

if __name__ == "__main__":
    main()
