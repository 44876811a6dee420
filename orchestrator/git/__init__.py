"""git for ``team``: commands, per-task worktrees and the ordered merge-back.

    command.py    Git: one subprocess helper with a clean environment and clear errors
    worktrees.py  Worktrees: a worktree per task, merged back into an integration branch
    merge.py      TreeMerge: a merge with no checkout (git merge-tree, commit-tree, one ref transaction)
    refs.py       Refs: a ref or a worktree's HEAD read from git's files (no process), else asked of git
    pool.py       WorktreePool: a run's shell tasks reuse worktrees (moved and reset, not added and removed)
    history.py    History: the integration branch's one merge per task, read (team diff/log) and
                  rebuilt without some tasks (team run --redo)
    land.py       Land: the result into the user's branch (team land), or a refusal
    orphans.py    leftovers of killed runs, for ``team doctor``
    relink.py     worktree links rewritten after the repository was moved or copied
    keep.py       what a worktree task's result keeps (its ``outputs:`` globs) and the build junk
                  it should not commit (the run's warning)
    agentwt.py    AgentWorktrees: named worktrees agents make and bind to tasks (seed s12), their
                  index and lifecycle events; merged back through worktrees.py like a plan's tasks
"""
