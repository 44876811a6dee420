"""What ``team run`` shows while it runs, and the summary after.

The scheduler emits plain dict events (``run_started``, ``started``,
``completed``, ``failed``, ``retry``, ``cancelled``, ``stopping``,
``stale``); with worktree isolation the merge thread adds ``merge_queued``
(the task finished running and waits for its turn to merge, ``ahead`` tasks
before it), ``merging`` (its merge began) and ``junk`` (its commits add files
that look like build output: ``count``, ``examples``, ``patterns``; a warning,
repeated in the summary); ``completed`` follows once it landed. On ``--backend ray`` ``completed`` and ``failed`` carry the ``node``
the attempt ran on, and ``lost`` says an attempt was lost with its node (it
runs again elsewhere, using no retry). Events come from more than one thread: every sink takes a lock. A
sink is any callable taking one; three ship here and the CLI picks one:

* ``LiveProgress``  on a terminal: a rich live view (counts per state, the
  running tasks with elapsed time, finished/total, ETA), redrawn 4×/s.
* ``PlainProgress`` without a terminal: one line per event.
* ``JsonProgress``  ``--json``: one JSON object per line, with ``ts``.

``summarise`` turns a ``RunResult`` into data (failed tasks with log paths,
per-task durations, the critical path as it actually ran, wall time vs task
time; with worktree isolation, the integration branch and the commands to
take it); ``render_summary`` turns that into text lines that stay a screenful
at any plan size (a long critical path keeps its first and last tasks and
counts the rest, the slowest tasks are listed, failures and cancellations
are capped; the ``--json`` summary keeps everything). Sinks write to the
stream they are given; only the CLI chooses stdout. A stream whose reader
went away (a closed pipe) is silenced, not an error: the run goes on.

Attempts in the summary: a task that needed more than one attempt says how
the others ended, ``(after 1 failed and 3 interrupted attempts)``. A failed
attempt used one of the task's ``retries``; an interrupted one (Ctrl-C,
SIGTERM, a lead that died) used none.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

from ..core.text import plural, shown
from ..run.scheduler import RunResult
from .output import write_guarded

STATES = ("completed", "running", "merging", "retrying", "pending", "failed", "cancelled")


class _Tracker:
    """Per-task state rebuilt from events; counts are derived from it."""

    def __init__(self) -> None:
        self.total = 0
        self.workers = 0
        self.before = 0  # completed by earlier runs
        self.state: dict[int, str] = {}
        self.tally: Counter[str] = Counter()  # tasks per state in ``state``, kept as events arrive
        self.duration_sum = 0.0
        self.running: dict[int, tuple[str, float, int]] = {}
        self.merge: dict[int, str] = {}  # task -> "waiting (N ahead)" | "merging", for running tasks
        self.completions = 0
        self.t0 = time.monotonic()

    def apply(self, ev: dict[str, Any]) -> None:
        kind = ev["event"]
        if kind == "run_started":
            self.total, self.workers, self.before = ev["total"], ev["workers"], ev["completed"]
        elif kind == "started":
            self.running[ev["task"]] = (ev["name"], time.monotonic(), ev["attempt"])
            self._set(ev["task"], "running")
        elif kind == "merge_queued":
            self.merge[ev["task"]] = f"waiting to merge ({ev['ahead']} ahead)" if ev.get("ahead") else \
                "waiting to merge"
            self._set(ev["task"], "merging")
        elif kind == "merging":
            self.merge[ev["task"]] = "merging"
            self._set(ev["task"], "merging")
        elif kind in ("completed", "failed", "retry", "cancelled", "lost"):
            self.running.pop(ev["task"], None)
            self.merge.pop(ev["task"], None)
            self._set(ev["task"], "retrying" if kind in ("retry", "lost") else kind)
            if kind == "completed":
                self.completions += 1
                self.duration_sum += ev.get("duration") or 0.0

    def _set(self, task: int, state: str) -> None:
        before = self.state.get(task)
        if before is not None:
            self.tally[before] -= 1
        self.state[task] = state
        self.tally[state] += 1

    @property
    def done(self) -> int:
        return self.before + self.tally["completed"]

    def counts(self) -> dict[str, int]:
        """Tasks per state; O(states), not O(tasks): a line per event must not cost a pass over the
        run (at 10,000 tasks that pass made the progress lines quadratic)."""
        c = {s: self.tally[s] for s in STATES}
        c["completed"] += self.before
        c["pending"] = self.total - sum(c.values())
        return c

    def eta(self) -> float | None:
        c = self.counts()
        left = c["pending"] + c["running"] + c["retrying"]
        if not self.completions or left <= 0:
            return None
        mean = self.duration_sum / self.completions
        return mean * -(-left // max(1, self.workers))


def _first_line(text: str | None) -> str:
    """A (multi-line) error on one progress line: its first line; the summary shows it all."""
    lines = (text or "").splitlines() or [""]
    return shown(lines[0]) + (" …" if len(lines) > 1 else "")


def format_event(t: _Tracker, ev: dict[str, Any]) -> str | None:
    """One plain line for an event (None for events not worth a line)."""
    kind = ev["event"]
    stamp = f"[{time.monotonic() - t.t0:7.2f}s]"
    who = f"#{ev.get('task')} {shown(str(ev.get('name', '')))}".rstrip()
    if kind == "run_started":
        return f"{stamp} run: {plural(t.total, 'task')}, {t.before} already completed, {plural(t.workers, 'worker')}"
    if kind == "started":
        return f"{stamp} start {who} (attempt {ev['attempt']})"
    on = f" on {shown(ev['node'])}" if ev.get("node") else ""
    if kind == "completed":
        return f"{stamp} done  {who} in {ev['duration']:.2f}s{on} [{t.done}/{t.total}]"
    if kind == "failed":
        return (f"{stamp} FAIL  {who}{on}: {_first_line(ev['error'])}"
                + (f" (log: {ev['log']})" if ev.get("log") else ""))
    if kind == "lost":
        again = "; running it again elsewhere" if ev.get("again") else ""
        return f"{stamp} lost  {who}: attempt {ev['attempt']} lost with node {shown(ev['node'])}{again}"
    if kind == "retry":
        return (f"{stamp} retry {who}: {_first_line(ev['error'])}; again in {ev['delay']:.2f}s"
                + (f" (log: {ev['log']})" if ev.get("log") else ""))
    if kind == "cancelled":
        return f"{stamp} skip  {who}: {shown(ev['reason'])}"
    if kind == "stopping":
        return f"{stamp} stopping: {shown(ev['reason'])}; waiting for {plural(ev['running'], 'running task')}"
    if kind == "stale":
        return f"{stamp} stale completion of #{ev['task']} (epoch {ev['epoch']}) ignored"
    if kind == "merge_queued":
        ahead = f", {ev['ahead']} ahead" if ev.get("ahead") else ""
        return f"{stamp} ran   {who}: waiting for its turn to merge{ahead}"
    if kind == "merging":
        return f"{stamp} merge {who}"
    if kind == "junk":
        return f"{stamp} warning: {junk_text(ev)}"
    return None


class PlainProgress:
    """One line per event (no terminal)."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.t = _Tracker()
        self.lock = threading.Lock()

    def __call__(self, ev: dict[str, Any]) -> None:
        with self.lock:
            self.t.apply(ev)
            line = format_event(self.t, ev)
            if line:
                write_guarded(self.stream, line + "\n")

    def close(self) -> None:
        pass


class JsonProgress:
    """``--json``: one JSON object per event."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, ev: dict[str, Any]) -> None:
        line = json.dumps({"ts": round(time.time(), 6), **ev}) + "\n"
        with self.lock:
            write_guarded(self.stream, line)

    def close(self) -> None:
        pass


class LiveProgress:
    """A rich live view on a terminal."""

    def __init__(self, console: Any, plan: str):
        from rich.live import Live

        self.t = _Tracker()
        self.plan = plan
        self.lock = threading.Lock()
        self.console = console
        self.log: list[str] = []
        # Started on the first event: its refresh thread must not exist yet when
        # ``team run`` forks its job server (jobs/server.py).
        self.live = Live(get_renderable=self._render, console=console, refresh_per_second=4, transient=True)

    def __call__(self, ev: dict[str, Any]) -> None:
        if not self.live.is_started:
            self.live.start()
        with self.lock:
            self.t.apply(ev)
            if ev["event"] in ("failed", "cancelled", "retry", "stopping", "lost", "junk"):
                line = format_event(self.t, ev)
                if line:
                    self.console.print(line, markup=False, highlight=False)

    def _render(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        with self.lock:
            t = self.t
            now = time.monotonic()
            head = " · ".join(f"{s} {n}" for s, n in t.counts().items() if n)
            eta = t.eta()
            grid = Table.grid(padding=(0, 2))
            title = Text(self.plan, style="bold")
            title.append(f"  {t.done}/{t.total} done  {now - t.t0:.1f}s elapsed"
                         + (f"  ETA ~{eta:.0f}s" if eta is not None else ""), style="")
            grid.add_row(title)
            grid.add_row(Text(head))
            running = sorted(t.running.items(), key=lambda kv: kv[1][1])
            for tid, (name, since, attempt) in running[:12]:
                extra = f" (attempt {attempt})" if attempt > 1 else ""
                row = Text("  ")
                merge = t.merge.get(tid)
                row.append("⇄" if merge else "▶", style="magenta" if merge else "cyan")
                row.append(f" #{tid} {shown(name)}{extra}  {now - since:.1f}s" + (f"  {merge}" if merge else ""))
                grid.add_row(row)
            if len(running) > 12:
                grid.add_row(Text(f"  … and {len(running) - 12} more running"))
            return grid

    def close(self) -> None:
        self.live.stop()


# ---------------------------------------------------------------- summary
def _shown(root: Path | None, log: str | None) -> str | None:
    """A log path the user can open from where they ran ``team``."""
    if not log or root is None:
        return log
    path = root / log
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def summarise(result: RunResult, workers: int, root: Path | None = None) -> dict[str, Any]:
    runs = result.runs
    ran = [r for r in runs.values() if r.finished is not None]
    task_time = sum(r.duration for r in ran)
    path: list[int] = []
    cur = max(ran, key=lambda r: r.finished or 0.0, default=None)
    while cur is not None:
        path.append(cur.id)
        prev = [runs[d] for d in cur.deps if d in runs and runs[d].finished is not None]
        cur = max(prev, key=lambda r: r.finished or 0.0, default=None)
    path.reverse()
    return {
        "plan": result.plan,
        "ok": result.ok,
        "total": len(runs),
        "counts": result.counts,
        "wall": round(result.wall, 3),
        "task_time": round(task_time, 3),
        "speedup": round(task_time / result.wall, 2) if result.wall > 0 else None,
        "workers": workers,
        "failed": [{"task": r.id, "name": r.name, "error": r.error, "log": _shown(root, r.log)}
                   for r in runs.values() if r.status in ("failed", "lost")],
        "cancelled": [{"task": r.id, "name": r.name, "reason": r.error}
                      for r in runs.values() if r.status == "cancelled"],
        "durations": sorted(({"task": r.id, "name": r.name, "status": r.status, "seconds": round(r.duration, 3),
                              "attempts": r.attempts, "failed_attempts": r.failures,
                              "interrupted_attempts": r.interrupted,
                              **({"node": r.node} if r.node else {}),
                              **({"lost_with": r.lost} if r.lost else {})} for r in ran),
                            key=lambda d: -d["seconds"]),
        "lost": [{"task": r.id, "name": r.name, "nodes": r.lost} for r in runs.values() if r.lost],
        "critical_path": [{"task": i, "name": runs[i].name, "seconds": round(runs[i].duration, 3)} for i in path],
        "stopped": result.stopped,
        "deadlock": result.deadlock,
        "incomplete": result.incomplete,
        "worktrees": result.worktrees,
        "warnings": result.warnings,
    }


def junk_text(w: dict[str, Any]) -> str:
    """A task that committed build junk (a ``junk`` event, a summary warning), and the fix."""
    eg = ", ".join(shown(p) for p in w["examples"]) + (", …" if w["count"] > len(w["examples"]) else "")
    return (f"#{w['task']} {shown(w['name'])} committed {plural(w['count'], 'file')} that look like build output "
            f"({', '.join(w['patterns'])}: {eg}); merged, `team land` brings them into your branch. Ignore them "
            f"in a .gitignore of your project (e.g. {w['patterns'][0]}), or declare the files the task keeps "
            f"with `outputs:` in the plan (`outputs: []` for a check that keeps nothing)")


def _earlier(d: dict[str, Any]) -> str:
    """`` (after 1 failed and 3 interrupted attempts)``: how the task's other attempts ended."""
    failed, interrupted = d.get("failed_attempts", 0), d.get("interrupted_attempts", 0)
    if d.get("status") == "failed":
        failed -= 1  # the last attempt is the one the summary reports as FAILED
    lost = d.get("lost_with", [])
    interrupted -= min(len(lost), interrupted)  # a lost attempt is counted as interrupted too
    parts = ([f"{failed} failed"] if failed else []) + ([f"{interrupted} interrupted"] if interrupted else [])
    said = [f"{' and '.join(parts)} attempt{'s' if failed + interrupted > 1 else ''}"] if parts else []
    if lost:
        said.append(f"{len(lost)} attempt{'s' if len(lost) > 1 else ''} lost with node "
                    f"{', '.join(dict.fromkeys(lost))}")
    return f" (after {'; '.join(said)})" if said else ""


CHAIN_HEAD = 4
CHAIN_TAIL = 4
"""A critical path longer than HEAD + TAIL + 1 tasks keeps both ends and counts the middle."""


def _chain(path: list[dict[str, Any]]) -> str:
    """``a (1.00s) → b (2.00s) → … 312 more (40.12s) … → y (1.00s) → z (0.50s)``: readable at any length
    (the whole path is in ``--json``)."""
    def step(c: dict[str, Any]) -> str:
        return f"{c['name']} ({c['seconds']:.2f}s)"

    if len(path) <= CHAIN_HEAD + CHAIN_TAIL + 1:
        return " → ".join(step(c) for c in path)
    middle = path[CHAIN_HEAD:-CHAIN_TAIL]
    hidden = sum(c["seconds"] for c in middle)
    return " → ".join([*(step(c) for c in path[:CHAIN_HEAD]), f"… {len(middle)} more ({hidden:.2f}s) …",
                       *(step(c) for c in path[-CHAIN_TAIL:])])


def render_summary(s: dict[str, Any], limit: int = 15) -> list[str]:
    """The summary as text lines, a screenful at any size: the critical path keeps its ends,
    durations list the ``limit`` slowest tasks, failures and cancellations the first
    ``limit``; ``--json`` has all of it."""
    counts = ", ".join(f"{n} {k}" for k, n in sorted(s["counts"].items()))
    if not s["durations"] and s["ok"]:
        return [f"plan {s['plan']}: nothing to run, all {plural(s['total'], 'task')} already completed "
                "(--fresh starts over)"] + (s["worktrees"]["text"].splitlines() if s.get("worktrees") else [])
    lines = [f"plan {s['plan']}: {counts} (of {s['total']})",
             f"wall {s['wall']:.2f}s · task time {s['task_time']:.2f}s · speed-up "
             f"{s['speedup'] or 0:.2f}× with {plural(s['workers'], 'worker')}"]
    if s["critical_path"]:
        lines.append(f"critical path as run: {_chain(s['critical_path'])}")
    if s["durations"]:
        listed = s["durations"][:limit]
        more = f" (slowest {limit} of {len(s['durations'])})" if len(s["durations"]) > limit else ""
        lines.append(f"durations{more}:")
        lines += [f"  {d['seconds']:8.2f}s  #{d['task']} {d['name']}" + (f" on {d['node']}" if d.get("node") else "")
                  + _earlier(d) for d in listed]
    by_node: dict[str, list[str]] = {}
    for item in s.get("lost", []):
        for node in dict.fromkeys(item["nodes"]):
            by_node.setdefault(node, []).append(f"#{item['task']} {item['name']}")
    for node, names in by_node.items():
        shown_names = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        lines.append(f"lost with node {shown(node)}: {shown(shown_names)} (run again elsewhere; no retry used)")
    for f in s["failed"][:limit]:
        error = shown(f["error"], lines=True).replace("\n", "\n    ")  # continuation lines stay indented
        lines.append(f"FAILED #{f['task']} {f['name']}: {error}" + (f"\n  log: {f['log']}" if f["log"] else ""))
    if len(s["failed"]) > limit:
        lines.append(f"... and {len(s['failed']) - limit} more failed (`team task list --status failed`; "
                     "every one in --json)")
    for c in s["cancelled"][:limit]:
        lines.append(f"cancelled #{c['task']} {c['name']}: {shown(c['reason'])}")
    if len(s["cancelled"]) > limit:
        lines.append(f"... and {len(s['cancelled']) - limit} more cancelled")
    pending = s["counts"].get("pending", 0) + s["counts"].get("retrying", 0)
    if s["stopped"]:
        left = f"; {plural(pending, 'task')} not run" if pending else ""
        lines.append(f"stopped starting new work: {s['stopped']}{left}. "
                     "Run again to retry, or pass --keep-going to run every branch not downstream of a failure.")
    if s["deadlock"]:
        lines.append("deadlock: " + s["deadlock"])
    if s.get("incomplete"):
        lines.append("INCOMPLETE: " + s["incomplete"])
    lines += [f"warning: {junk_text(w)}" for w in s.get("warnings", [])[:limit]]
    if s.get("worktrees"):
        lines += s["worktrees"]["text"].splitlines()
    return lines
