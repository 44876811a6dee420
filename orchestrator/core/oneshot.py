"""The garbage collector's policy in a one-shot ``team`` process (issue 13).

CPython's cyclic collector walks every tracked object of the older
generations now and then, and once more at exit. A ``team`` command is a
process that starts, does one thing and ends: most of what it allocates at
start-up (modules, pydantic's schemas, the loaded plan) lives until the
exit. ``gc.freeze()`` moves what is alive into a generation the collector
never walks; new objects are still collected as before.

- ``settled()``: start-up is over (``team run``: the plan loaded, the scheduler
  about to start). In a 10,000-task run the full collections took 0.6-1.3 s
  of the lead's time, ~0.25 s after.
- ``exiting()``: the command is done; the interpreter's last collection then
  skips the frozen heap (~40 ms of CPU of a ``team task create``, whose
  pydantic schemas are most of its heap).

Both act only in a process marked one-shot by the console script
(``cli.entry``, ``python -m orchestrator``). The test suite and a program
that embeds ``orchestrator`` call the same code many times in one process:
there a frozen object would never be freed, so nothing is frozen.
"""

from __future__ import annotations

import gc

_one_shot = False


def mark_one_shot() -> None:
    """This process runs one command and exits (the console script's entry point)."""
    global _one_shot
    _one_shot = True


def settled() -> None:
    """What is alive now lives until the exit: keep it out of the collector's walks."""
    if _one_shot:
        gc.freeze()


def exiting() -> None:
    """The command is done: let the interpreter's exit skip a walk over the whole heap."""
    if _one_shot:
        gc.freeze()
