"""Numbers from a model, threads that die, agent tasks that run out of time (issue 16, item 11).

Against a real model server a background job with a model-chosen timeout of
1e300 killed the job watcher thread (``OverflowError`` from ``epoll.poll``),
after which no job notification could arrive; an agent task's ``timeout``
was not enforced; and a thread of ours or the job server that died left the
run deaf. Here: the real tools, the real job manager, the real CLI against
the scripted OpenAI-compatible server, real threads dying and a real job
server SIGKILLed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from conftest import run_team, team_env
from tools_harness import Harness
from util import wait_until

from orchestrator.core import procs, threads
from orchestrator.core.errors import ThreadDied
from orchestrator.jobs.manager import JobManager
from orchestrator.llm.script import Reply, tool_call
from orchestrator.llm.scripted import ScriptedServer
from orchestrator.run.scheduler import RunOptions, Scheduler
from orchestrator.run.stop import RunStop
from orchestrator.tasks.store import TaskStore
from orchestrator.tools.coordination import agent_registry

KEY = "sk-model-faults-0000"


def llm_env(srv: ScriptedServer) -> dict[str, str]:
    return {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": KEY, "TEAM_MODEL": "gpt-4o-mini",
            "TEAM_LLM_BACKOFF_BASE": "0", "TEAM_LLM_BACKOFF_MAX": "0"}


def text_of(body: dict) -> str:
    return json.dumps(body["messages"])


@pytest.mark.parametrize(("tool", "args"), [
    ("bash", {"command": "true", "timeout": 1e300}),
    ("bash", '{"command": "true", "timeout": 1e999}'),  # JSON's 1e999 is infinity
    ("background_run", {"command": "true", "timeout": 1e300}),
    ("read_file", {"path": "a.txt", "offset": 1e300}),
    ("task_get", {"task": 1e300}),
    ("request_shutdown", {"teammate": "bob", "timeout": 1e300}),
])
def test_numbers_a_model_sends_are_refused_before_they_reach_the_os(tmp_path, tool, args):
    h = Harness(tmp_path, registry=agent_registry())
    h.ctx.jobs = JobManager(tmp_path)
    (h.ws / "a.txt").write_text("one line\n")
    obs = h.call(tool, args)
    assert obs.is_error and obs.stage == "validate", (obs.stage, obs.content)


def test_a_huge_job_timeout_cannot_kill_the_job_watcher(tmp_path):
    jobs = JobManager(tmp_path)
    slow = jobs.start("sleep 30", owner="t", timeout=1e300)  # clamped; the watcher must live on
    try:
        quick = jobs.start("echo still-watched", owner="t", timeout=5)
        notes = jobs.wait("t", timeout=10)
        assert [(n.job_id, n.status, n.tail) for n in notes] == [(quick.id, "completed", "still-watched\n")]
        assert jobs.get(slow.id).timeout == 30 * 86_400
        with pytest.raises(Exception, match="positive number of seconds"):
            jobs.start("true", owner="t", timeout=float("nan"))
    finally:
        jobs.kill(slow.id)


def test_an_agent_whose_model_asks_for_an_absurd_timeout_goes_on_working(tmp_path):
    (tmp_path / "plan.yaml").write_text("""name: absurd
team:
  - {name: alice, role: coder}
tasks:
  - {id: work, assignee: alice, prompt: Run the check in the background and report.}
""")

    def refused_then_valid(body: dict) -> Reply:
        tool = [m for m in body["messages"] if m.get("role") == "tool"][-1]["content"]
        assert "less than or equal to 86400" in tool, tool  # the model is told; nothing started
        # the job waits for `go`, written by the next request: its notification comes while alice idles
        return Reply(tool_calls=[tool_call("background_run", {
            "command": "while [ ! -f go ]; do sleep 0.02; done; echo second-job", "timeout": 30})])

    def idle(body: dict) -> Reply:
        (tmp_path / "go").write_text("go")
        return Reply(tool_calls=[tool_call("idle", {})])

    def sees_job(body: dict) -> Reply:
        assert "[background job " in text_of(body) and "second-job" in text_of(body)
        return Reply(tool_calls=[tool_call("task_update", {"task": 1, "status": "completed", "result": "ok"})])

    script = {"alice": [Reply(tool_calls=[tool_call("background_run", {"command": "echo first", "timeout": 1e300})]),
                        refused_then_valid, idle, sees_job]}
    with ScriptedServer(script) as srv:
        r = run_team(tmp_path, "run", "plan.yaml", timeout=60, **llm_env(srv))
        assert r.returncode == 0, r.stdout + r.stderr
        srv.assert_complete()
    jobs = JobManager(tmp_path).list()
    assert [(j.command.split("; ")[-1], j.status) for j in jobs] == [("echo second-job", "completed")]


def test_an_agent_task_stops_at_its_timeout_and_says_why(tmp_path):
    (tmp_path / "plan.yaml").write_text("""name: slow
team:
  - {name: alice, role: coder}
tasks:
  - {id: think, assignee: alice, prompt: Think hard., timeout: 1}
""")
    with ScriptedServer({"alice": [Reply(content="much too late", delay=30)]}) as srv:
        t0 = time.monotonic()
        r = run_team(tmp_path, "run", "plan.yaml", timeout=60, **llm_env(srv))
        took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert took < 15, f"the run took {took:.1f}s for a 1 s timeout"
    task = TaskStore(tmp_path).all()[0]
    assert task.status.value == "failed"
    assert task.error is not None and task.error.startswith(
        "timed out after 1s; the agent was stopped during model call 1, which gave up"), task.error


class _DyingExecutor:
    """An executor whose worker thread dies of a bug (a real thread, a real exception)."""

    kind = "shell"
    inline_start = False

    def __init__(self, stop: RunStop):
        self.stop = stop
        self.closed = 0

    def start(self, task, epoch, done) -> None:
        threads.start("test-worker", lambda: 1 / 0, on_crash=self.stop.fail)

    def start_now(self, task, epoch, done) -> None:
        self.start(task, epoch, done)

    def cancel(self, task_id: int) -> None:
        pass

    def reap_orphans(self) -> list:
        return []

    def close(self) -> None:
        self.closed += 1


def test_a_thread_of_the_run_that_dies_stops_the_run_loudly(tmp_path):
    store = TaskStore(tmp_path)
    task = store.create("work", kind="shell", command="true", plan="p", plan_task="work")
    stop = RunStop()
    ex = _DyingExecutor(stop)
    with pytest.raises(ThreadDied) as raised:
        Scheduler(store, [task], {}, {"shell": ex}, RunOptions(), lambda ev: None, stop=stop).run()
    assert raised.value.thread == "test-worker" and isinstance(raised.value.__cause__, ZeroDivisionError)
    assert "the test-worker thread died (ZeroDivisionError: division by zero)" in str(raised.value)
    after = TaskStore(tmp_path).read(task.id)
    assert (after.status.value, after.interrupted, after.failures) == ("pending", 1, 0)
    assert ex.closed >= 1


def test_a_job_server_killed_under_a_run_stops_it_loudly_and_kills_its_jobs(tmp_path):
    (tmp_path / "plan.yaml").write_text("name: deaf\ntasks:\n  - {id: a, run: 'sleep 1011'}\n")
    lead = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml"], cwd=tmp_path,
                            env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        job = wait_until(lambda: next((r for r in JobManager(tmp_path).list() if r.pid), None), timeout=20,
                         what="the job's record")
        server = next(iter(procs.children(lead.pid)))
        assert procs.cmdline(server) == procs.cmdline(lead.pid)  # the forked job server
        procs.kill(server, signal.SIGKILL)
        _, err = lead.communicate(timeout=30)
    finally:
        if lead.poll() is None:
            lead.kill()
            lead.wait()
    assert lead.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"JobServerDied: the job server (pid {server}) died (killed by signal 9 (SIGKILL))"), err
    assert "Traceback" not in err
    wait_until(lambda: not procs.alive(job.pid), timeout=10, what="the dead server's job to be killed")
    assert JobManager(tmp_path).get(job.id).status == "lost"
    task = TaskStore(tmp_path).all()[0]
    assert (task.status.value, task.interrupted) == ("pending", 1)
