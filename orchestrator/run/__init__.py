"""``team run``: materialise a plan and run it; ``team land``: take its result.

    runner.py     run_plan: lead lock, materialise, recover, schedule
    materialise.py  the plan's tasks as store tasks: recovery of those that exist, the missing ones
                  created at reserved ids in chunks while the run goes, resumed after a kill
    scheduler.py  Scheduler: parallel, durable, retries, keep-going, deadlock detection
    rewire.py     changed ``needs:`` of a plan that ran: which completed work stays valid
    executor.py   the executor seam: Executor, Outcome, ExecutorContext, Rooted (stored cwds made absolute)
    stop.py       RunStop: how a signal or a failed thread of ours stops a run at a safe point
    shell.py      ShellExecutor: shell tasks as background jobs
    agents.py     AgentExecutor: agent tasks on teammates
    teammodels.py each teammate's model checked before a run: a price under a dollar budget, its key set
    command.py    CommandExecutor: a kind: command member's tasks, each run by its agent CLI (a job) with
                  the team's MCP server offered to it
    ray_backend.py  RayExecutor: shell tasks on a Ray cluster (--backend ray; imports ray lazily),
                  the start check of the nodes, placement, outputs and commits brought back
    ray_connect.py  the lead's connection: which cluster, checked first, its head watched
    ray_ship.py   what the lead ships: small workspaces inline, big ones as layers put once
    ray_outputs.py  outputs brought back behind an undo record: kept only if their attempt is accepted
    ray_remote.py what runs on a cluster node for one attempt (workspace in, command, work out)
    ray_cache.py  a node's cache of the layers a run ships (fetched once per node)
    ray_reaper.py a node's registry of running attempts, and what kills them once their lead is gone
    ray_agents.py RayAgentExecutor: agent tasks' teammates as Ray actors on the cluster's nodes
    ray_service.py LeadService: the lead's store, inboxes and roster for them (an actor on the lead's node)
    ray_teammate.py RemoteTeammate: a teammate on a node, with typed proxies of the lead's service
    isolation.py  ``isolation: worktree``: each task in its own worktree, merged back
    hooked.py     task_completed hooks asked before a shell task's completion is recorded
    reconcile.py  the task store and the integration branch made to agree before a run
                  (redo, reopened or lost merges)
    standing.py   each task of a plan against its integration branch (merged, missing, ...): the one
                  rule of team log, team land and the check after a run
    keptwork.py   uncommitted work in task worktrees: refused before --fresh, --redo, team land drop it
    land.py       land_plan: a finished plan's result into the user's branch (team land), the plan
                  file a run ran from (team land NAME)
    sync.py       SyncExecutor: attempts decided in-process, for testing the scheduler's policy
"""
