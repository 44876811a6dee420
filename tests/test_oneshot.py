"""The collector's policy of a one-shot process (core/oneshot.py): the console script freezes the
heap at exit; code that runs commands in a process that goes on (this test suite, a program
embedding ``orchestrator``) never freezes anything, or it would never free it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from orchestrator.cli import main

PLAN = "name: tiny\ntasks:\n  - id: a\n    run: \"true\"\n  - id: b\n    run: \"true\"\n    needs: [a]\n"


def test_commands_run_in_process_freeze_nothing(tmp_path: Path) -> None:
    (tmp_path / "plan.yaml").write_text(PLAN)
    before = gc.get_freeze_count()
    assert main(["task", "create", "one", "--root", str(tmp_path)]) == 0
    assert main(["run", str(tmp_path / "plan.yaml"), "--root", str(tmp_path)]) == 0
    assert main(["task", "list", "--root", str(tmp_path)]) == 0
    assert gc.get_freeze_count() == before


def test_the_console_script_freezes_at_exit(tmp_path: Path) -> None:
    (tmp_path / "plan.yaml").write_text(PLAN)
    code = textwrap.dedent(f"""
        import gc
        from orchestrator.core.oneshot import exiting, mark_one_shot
        from orchestrator.cli import main
        assert main(["run", {str(tmp_path / "plan.yaml")!r}, "--root", {str(tmp_path)!r}]) == 0
        exiting()
        before = gc.get_freeze_count()  # not one-shot yet: nothing frozen
        mark_one_shot()
        exiting()
        print(before, gc.get_freeze_count())
    """)
    env = {k: v for k, v in os.environ.items() if k != "TEAM_ROOT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    before, after = map(int, out.stdout.split()[-2:])
    assert before == 0 and after > 1000
    # and the console script itself runs and exits cleanly with the freeze in place
    done = subprocess.run([sys.executable, "-m", "orchestrator", "task", "list", "--root", str(tmp_path)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stderr == "" and "b" in done.stdout
