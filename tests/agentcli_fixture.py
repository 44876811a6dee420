"""A small scripted agent CLI for `kind: command` teammates (run/command.py): it does what a coding-agent
CLI does with the team, through the official MCP SDK's client and nothing of `team`'s own code.

It reads its prompt from stdin, connects to the server `TEAM_MCP_CONFIG` names (the `mcpServers`
format), lists the tools, reads its inbox, sends the lead a message, creates a task for itself and
claims it, writes `hello.txt` in its working directory with what its inbox said, and ends its task.
What it saw (the prompt, the tools, its environment's names, the inbox) goes to
`$REPORT_DIR/<task>-<attempt>.json`.

`MODE` (its environment) says how it ends its task:
    mcp         task_update(status="completed") over MCP, then exit 0 (the default)
    exit        print a last line and exit 0 without telling MCP
    fail        print why and exit 3
    hang        as mcp, then on attempt 1 write `$REPORT_DIR/hanging` and wait forever (a kill test)
    stall       write `$REPORT_DIR/hanging` first and wait forever, having told nobody anything
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client


def text(result) -> str:
    return "".join(c.text for c in result.content if c.type == "text")


async def main() -> int:
    prompt = sys.stdin.read()
    task, attempt, mode = int(os.environ["TEAM_TASK_ID"]), os.environ.get("TEAM_ATTEMPT", "1"), os.environ.get("MODE", "mcp")
    report_dir = Path(os.environ["REPORT_DIR"])
    report: dict = {"prompt": prompt, "env": sorted(os.environ), "cwd": os.getcwd(),
                    "token_len": len(os.environ.get("CLI_TOKEN", ""))}
    if mode == "stall":
        (report_dir / "hanging").write_text(str(os.getpid()))
        while True:
            time.sleep(1)
    if mode == "fail":
        print("cannot do it: the spec is missing", flush=True)
        (report_dir / f"{task}-{attempt}.json").write_text(json.dumps(report))
        return 3
    server = json.loads(Path(os.environ["TEAM_MCP_CONFIG"]).read_text())["mcpServers"]["team"]
    params = StdioServerParameters(command=server["command"], args=server["args"], env=server.get("env") or None)
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        report["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
        inbox = text(await s.call_tool("inbox_read", {}))
        report["inbox"] = inbox
        await s.call_tool("message_send", {"to": "lead", "text": f"working on #{task}"})
        # assigned to itself as it is made, so no idle teammate's autonomous claim takes it first
        made = json.loads(text(await s.call_tool("task_create", {"subject": f"notes for #{task}",
                                                                 "owner": os.environ["TEAM_AGENT"]})))
        claimed = await s.call_tool("task_claim", {"task": made["id"]})
        report["claimed"] = json.loads(text(claimed))["owner"]
        await s.call_tool("task_update", {"task": made["id"], "status": "completed", "result": "notes taken"})
        Path("hello.txt").write_text(f"hello from {os.environ['TEAM_AGENT']}: {inbox}\n")
        if mode in ("mcp", "hang"):
            done = await s.call_tool("task_update", {"task": task, "status": "completed",
                                                     "result": f"wrote hello.txt (attempt {attempt})"})
            report["update"] = text(done)
        (report_dir / f"{task}-{attempt}.json").write_text(json.dumps(report))
        if mode == "hang" and attempt == "1":
            (report_dir / "hanging").write_text(str(os.getpid()))
            while True:
                time.sleep(1)
    print(f"wrote hello.txt for task {task}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
