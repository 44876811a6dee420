"""Hooks: shell commands run on task and teammate events (docs/hooks.md).

* ``config.py``: where hooks come from (the plan's ``hooks:`` and
  ``.team/hooks.yaml``, both run) and how ``.team/hooks.yaml`` is read.
* ``dispatch.py``: ``HookDispatcher``, the one dispatcher: builds the JSON
  payload, runs each command with the allow-listed environment and a
  timeout, kills a hanging one's process group, reports failures, scrubs
  what it writes to ``.team/hooks.jsonl``, and returns a veto's verdict.

The records and the seams (``HookEvent``, ``HooksConfig``, ``Verdict``, the
``Hooks`` Protocol) are in core/hooks.py, so the task store and the bus
(floor 1) are told about events without importing this package.
"""
