"""The garbage collector's policy in a one-shot ``team`` process (issue 13).

At exit the interpreter walks every object once more with the cyclic
collector. A ``team`` command starts, does one thing and ends; most of
its heap is what start-up made (modules, pydantic's schemas). ``exiting()``
runs ``gc.freeze()`` once the command is done, so that last walk skips
the heap: ~20-40 ms of CPU of every command that loaded pydantic
(``team task create`` at 1,000 tasks: 150 -> 130 ms, median of 15).

Tried and left out: freezing when a run's scheduler starts. Its full
collections got cheaper, but the lead's peak RSS grew by ~12 % (20,000
tasks: 219 -> 250 MB), against the 1 GB target at 100,000 tasks.

It acts only in a process marked one-shot by the console script
(``cli.entry``, ``python -m orchestrator``). The test suite and a program
that embeds ``orchestrator`` call the same code many times in one
process; there a frozen object would never be freed, so nothing is frozen.
"""

from __future__ import annotations

import gc

_one_shot = False


def mark_one_shot() -> None:
    """This process runs one command and exits (the console script's entry point)."""
    global _one_shot
    _one_shot = True


def exiting() -> None:
    """The command is done: let the interpreter's exit skip a walk over the whole heap."""
    if _one_shot:
        gc.freeze()
