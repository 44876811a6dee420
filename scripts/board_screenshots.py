"""Remake the screenshots of docs/board.md: a run in progress, and a blocked chain opened.

    .venv/bin/python scripts/board_screenshots.py [--out docs/img]

Runs a small migration plan (shell tasks, some held by a gate file so the
picture is taken at a steady moment) with ``team run --board``, opens the
printed URL in Debian's headless Chromium (tests/boardkit.py) and saves
``board-run.png`` and ``board-chain.png``. Needs chromium and chromium-driver
(``make browser``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import boardkit  # noqa: E402
from conftest import team_env  # noqa: E402

MODULES = ["auth", "billing", "catalog", "checkout", "search", "users", "orders", "shipping", "reports", "admin"]


def plan(gate: Path) -> str:
    lines = ["name: http-migration", "workers: 4", "tasks:",
             "  - id: setup", "    description: create the virtualenv", "    run: sleep 0.2"]
    for i, m in enumerate(MODULES):
        hold = f"while [ ! -e {gate} ]; do sleep 0.05; done" if i >= 3 else f"sleep 0.{i + 2}"
        lines += [f"  - id: port-{m}", f"    description: replace requests with httpx in {m}/",
                  f"    run: {hold}", "    needs: [setup]"]
        lines += [f"  - id: test-{m}", f"    description: unit tests of {m}", "    run: sleep 0.1",
                  f"    needs: [port-{m}]"]
    lines += ["  - id: integrate", "    description: the integration suite", "    run: sleep 0.1",
              f"    needs: [{', '.join('test-' + m for m in MODULES)}]",
              "  - id: release-notes", "    description: write the release notes", "    run: sleep 0.1",
              "    needs: [integrate]"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = ap.parse_args()
    why = boardkit.missing()
    if why:
        print(why, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="board-shots-") as tmp:
        root = Path(tmp)
        gate = root / "gate"
        (root / "plan.yaml").write_text(plan(gate))
        run = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", "plan.yaml", "--board"], cwd=root,
                               env=team_env(root), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        driver = boardkit.start(1280, 640)
        try:
            url = run.stderr.readline().split()[1]
            driver.get(url)
            # steady: the first three modules ported and tested, four ports held by the gate
            deadline = time.monotonic() + 30
            while driver.execute_script("return document.querySelectorAll('.card[data-state=\"running\"]').length") < 4:
                if time.monotonic() > deadline:
                    raise SystemExit("the run did not reach four running tasks")
                time.sleep(0.05)
            time.sleep(1.2)  # elapsed times on the cards
            driver.save_screenshot(str(args.out / "board-run.png"))
            driver.find_element("css selector", '.card[data-id="23"]').click()  # release-notes
            while not driver.execute_script("const c = document.getElementById('chain'); return c && c.textContent"):
                time.sleep(0.05)
            time.sleep(0.3)
            driver.save_screenshot(str(args.out / "board-chain.png"))
        finally:
            gate.touch()
            driver.quit()
            run.wait(timeout=60)
    for name in ("board-run.png", "board-chain.png"):
        print(f"{args.out / name}: {(args.out / name).stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
