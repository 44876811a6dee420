"""``team run``: materialise a plan and run it.

    runner.py     run_plan: lead lock, materialise, recover, schedule
    scheduler.py  Scheduler: parallel, durable, retries, keep-going, deadlock detection
    executors.py  the executor seam (Executor, Outcome) and the shell executor
    agents.py     the executor for agent tasks (teammates)
    isolation.py  ``isolation: worktree``: each task in its own worktree, merged back
"""
