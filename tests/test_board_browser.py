"""The board in a real browser: Debian's headless Chromium, driven by Selenium (tests/boardkit.py).

One browser serves the module. What a person would check: a running plan's
board changes live without a reload, a task opened shows why it waits (the
text of ``team task blocked``), a 200-task plan renders (a screenshot is kept),
the page never runs markup from the data, and with ``--allow-actions`` a
button retries while a request without the token is refused.

Screenshots go to the test's tmp dir, and also to ``$TEAM_ARTIFACTS`` when
that names a directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import boardkit
import pytest
from boardkit import board_process
from conftest import run_team, team_env
from util import wait_until

from orchestrator.core.models import Status
from orchestrator.tasks.store import TaskStore


@pytest.fixture(scope="module")
def browser():
    why = boardkit.missing()
    if why:
        if os.environ.get(boardkit.SKIP_ENV) == "1":
            pytest.skip(why)
        pytest.fail(why)
    driver = boardkit.start()
    driver.set_script_timeout(10)
    yield driver
    driver.quit()


def open_board(driver, url: str) -> None:
    driver.get(url)
    wait_until(lambda: driver.execute_script("return document.body.dataset.ready === '1'"), timeout=20,
               what="the board's first render")


def card_state(driver, tid: int) -> str | None:
    return driver.execute_script(f"const c = document.querySelector('.card[data-id=\"{tid}\"]'); "
                                 "return c ? c.dataset.state : null;")


def text_of(driver, selector: str) -> str:
    return driver.execute_script(f"const e = document.querySelector('{selector}'); return e ? e.textContent : '';")


def keep(path: Path) -> Path:
    """Copy a screenshot to $TEAM_ARTIFACTS too, if set."""
    target = os.environ.get("TEAM_ARTIFACTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)
    return path


LIVE_PLAN = """\
name: live
workers: 2
tasks:
  - id: build
    description: compile everything
    run: while [ ! -e {gate} ]; do sleep 0.02; done
  - id: test
    description: run the tests
    run: "true"
    needs: [build]
  - id: package
    description: build the wheel
    run: while [ ! -e {gate2} ]; do sleep 0.02; done
    needs: [test]
"""


def test_a_running_plan_changes_live_and_a_task_shows_its_blocked_chain(browser, tmp_path):
    gate, gate2 = tmp_path / "gate", tmp_path / "gate2"
    (tmp_path / "plan.yaml").write_text(LIVE_PLAN.format(gate=gate, gate2=gate2))
    run = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--board"], cwd=tmp_path,
                           env=team_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = run.stderr.readline()
        assert line.startswith("board: http://127.0.0.1:"), line
        open_board(browser, line.split()[1])
        wait_until(lambda: card_state(browser, 1) == "running", timeout=20, what="#1 running on the page")
        assert card_state(browser, 3) == "blocked"
        assert "lead: running" in text_of(browser, "#lead") and "plan live" in text_of(browser, "#lead")
        browser.execute_script("window.__sameLoad = 'yes'")  # a reload would forget it

        browser.find_element("css selector", '.card[data-id="3"]').click()
        wait_until(lambda: text_of(browser, "#chain"), timeout=10, what="the blocked chain of #3")
        cli = run_team(tmp_path, "task", "blocked", "3")
        assert cli.returncode == 0 and cli.stdout.startswith("#3 ")
        assert text_of(browser, "#chain") + "\n" == cli.stdout
        assert "#3 → #2 → #1" in cli.stdout and "running by lead" in cli.stdout
        classes = browser.execute_script("return [1, 2, 3].map(i => document.querySelector("
                                         "`.card[data-id=\"${i}\"]`).className)")
        assert all("chain" in c for c in classes) and "sel" in classes[2]
        shot = tmp_path / "board-blocked-chain.png"
        assert browser.get_screenshot_as_file(str(shot))
        keep(shot)

        gate.touch()  # #1 ends, #2 runs and ends, #3 starts
        wait_until(lambda: card_state(browser, 3) == "running", timeout=20, what="#3 running on the page")
        assert [card_state(browser, i) for i in (1, 2)] == ["completed"] * 2
        assert browser.execute_script("return window.__sameLoad") == "yes"
        assert text_of(browser, "#progress-text").startswith("2/3 done · 1 running")
        wait_until(lambda: text_of(browser, "#chain").endswith("is not blocked: it is running by lead."),
                   timeout=10, what="the open task's panel to follow the run")
        assert not browser.execute_script("return document.querySelectorAll('.card.chain').length - 1")

        gate2.touch()  # the run ends, and its board with it: the page keeps the final state
        assert run.wait(timeout=30) == 0
        wait_until(lambda: card_state(browser, 3) == "completed", timeout=10, what="the final state on the page")
        assert text_of(browser, "#progress-text").startswith("3/3 done")
        wait_until(lambda: "the run it served has ended" in text_of(browser, "#problem"), timeout=10,
                   what="the page to say the board stopped")
        assert text_of(browser, "#live") == "stopped"
        assert browser.execute_script("return window.__sameLoad") == "yes"
    finally:
        gate.touch()
        gate2.touch()
        if run.poll() is None:
            run.kill()
            run.wait()


def two_hundred(root: Path) -> None:
    """A 200-task plan in ten waves of twenty, part way through: done, running, failed, waiting."""
    store = TaskStore(root, durable=False)
    specs = []
    for wave in range(10):
        for i in range(20):
            n = wave * 20 + i
            deps = [] if wave == 0 else sorted({(wave - 1) * 20 + i, (wave - 1) * 20 + (i * 7 + 3) % 20})
            specs.append({"subject": f"migrate module {n:03d} to httpx", "name": f"m{n:03d}", "plan": "migrate",
                          "blockedBy": [("new", d) for d in deps]})
    specs[95]["subject"] = "<img src=x onerror=\"document.title='pwned'\"> tricky subject"
    store.create_many(specs)
    for tid in range(1, 81):
        store.update(tid, status=Status.completed)
    for tid in range(81, 101):
        status = Status.failed if tid % 9 == 0 else Status.in_progress if tid % 3 else Status.completed
        store.update(tid, status=status, owner="lead" if status == Status.in_progress else None)


def test_a_200_task_plan_renders_and_is_kept_as_a_screenshot(browser, tmp_path):
    two_hundred(tmp_path)
    with board_process(tmp_path) as url:
        t0 = time.monotonic()
        open_board(browser, url)
        loaded = time.monotonic() - t0
        assert browser.execute_script("return document.querySelectorAll('.card').length") == 200
        folded = browser.execute_script("return [...document.querySelectorAll('.fold')].map(f => f.textContent)")
        assert folded == ["▸ [x] 20 completed (show)"] * 4  # the four finished waves
        hidden = browser.execute_script("return document.querySelectorAll('.card[hidden]').length")
        assert hidden == 80 and "migrate module 005 to httpx" in text_of(browser, '.card[data-id="6"]')
        # markup in a subject stays text: no element was made of it, no script ran
        assert "<img src=x" in text_of(browser, '.card[data-id="96"]')
        assert browser.execute_script("return document.querySelectorAll('#nodes img').length") == 0
        assert "pwned" not in browser.title
        assert browser.execute_script("return getComputedStyle(document.getElementById('send')).display") == "none"
        path = tmp_path / "board-200-tasks.png"
        assert browser.get_screenshot_as_file(str(path))
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        keep(path)
        browser.execute_script("document.querySelector('.fold').click()")  # scrolled out of sight: the work is shown
        wait_until(lambda: browser.execute_script("return document.querySelectorAll('.card[hidden]').length") == 60,
                   timeout=5, what="the first wave to unfold")
        print(f"200-task board: first render {loaded:.2f}s; screenshot {path}")


def test_actions_from_the_page_and_a_request_without_the_token_is_refused(browser, tmp_path):
    store = TaskStore(tmp_path)
    store.create("flaky step", name="flaky")
    store.create("after it", blocked_by=["flaky"])
    store.update(1, status=Status.failed, error="exit 1")
    with board_process(tmp_path, "--allow-actions") as url:
        open_board(browser, url)
        assert card_state(browser, 1) == "failed"
        assert browser.execute_script("return getComputedStyle(document.getElementById('send')).display") == "grid"
        refused = browser.execute_async_script("""
            const done = arguments[arguments.length - 1];
            Promise.all([
              fetch('/api/task/1/retry', {method: 'POST'}).then(r => r.status),
              fetch('/api/task/1/retry', {method: 'POST', headers: {'X-Board-Token': 'guess'}}).then(r => r.status),
              fetch('/api/snapshot').then(r => r.status),
            ]).then(done);""")
        assert refused == [403, 403, 403]
        assert TaskStore(tmp_path).read(1).status == Status.failed
        browser.find_element("css selector", '.card[data-id="1"]').click()
        wait_until(lambda: browser.find_elements("xpath", "//button[text()='Retry']"), timeout=10,
                   what="the Retry button")
        browser.find_element("xpath", "//button[text()='Retry']").click()
        wait_until(lambda: card_state(browser, 1) == "ready", timeout=10, what="#1 ready again on the page")
        assert "pending again" in text_of(browser, ".acts .said")
        assert TaskStore(tmp_path).read(1).status == Status.pending


def test_the_board_bench_runs_and_prints_its_table(browser):
    """A brief sample (`make bench` runs it at 1,000 tasks); the browser fixture only gates it."""
    proc = subprocess.run([sys.executable, "bench/board_bench.py", "--tasks", "120", "--changes", "3"],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split()[0] for line in proc.stdout.splitlines()[2:6]]
    assert rows == ["first", "loaded", "state", "state"] and "120 tasks" in proc.stdout
