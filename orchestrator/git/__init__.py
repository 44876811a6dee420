"""git for ``team``: commands, per-task worktrees and the ordered merge-back.

    command.py    Git: one subprocess helper with a clean environment and clear errors
    worktrees.py  Worktrees: a worktree per task, merged back into an integration branch
    orphans.py    leftovers of killed runs, for ``team doctor``
"""
