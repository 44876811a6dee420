"""``team run``: materialise a plan and run it.

    runner.py     run_plan: lead lock, materialise, recover, schedule
    scheduler.py  Scheduler: parallel, durable, retries, keep-going, deadlock detection
    executor.py   the executor seam: Executor, Outcome, ExecutorContext
    stop.py       RunStop: how a signal or a failed thread of ours stops a run at a safe point
    shell.py      ShellExecutor: shell tasks as background jobs
    agents.py     AgentExecutor: agent tasks on teammates
    isolation.py  ``isolation: worktree``: each task in its own worktree, merged back
    sync.py       SyncExecutor: attempts decided in-process, for testing the scheduler's policy
"""
