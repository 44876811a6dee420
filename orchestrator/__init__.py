"""team: a multi-agent team orchestrator with a durable task graph.

The package is a set of subpackages, one concept each; imports point one way
(a package imports only those to its right)::

    cli → {run, chat, status, board} → runtime → agent → tools
        → {tasks, team, jobs, git, llm, plan, roles} → core

    core/     errors, records, paths, crash-safe files, processes, secrets, the environment
              policy and the sandbox of agent commands
    tasks/    the durable task store and graph queries (.tasks/)
    team/     roster, inboxes, the lead lock and control channel, protocols (.team/)
    jobs/     background shell jobs
    git/      git commands, worktrees and merge-back
    llm/      the model client (the only importer of openai), pricing, a scripted server
    plan/     plan.yaml: format, loading, analysis
    roles/    roles and skills
    tools/    tool contracts and the tools agents call
    agent/    the agent loop, context projection, compaction, prompt, transcripts
    runtime/  teammates, subagents, autonomous claiming
    run/      team run: runner, scheduler, executors, worktree isolation
    chat/     team chat: the interactive lead
    status/   overview, usage, doctor
    board/    team board: the live web board
    cli/      the typer commands: the only place that prints or exits
"""

__version__ = "0.1.0"
