"""The ground floor: what every other package may use, and which imports nothing of ours.

    errors.py   the exception tree (TeamError and its exit codes)
    models.py   pydantic records kept on disk: Task, Event, Member, Roster, Message
    states.py   task statuses, names, message types: what a lean command needs, without pydantic
    paths.py    where state lives (--root, $TEAM_ROOT, the current directory)
    fsutil.py   crash-safe files: atomic_write, append_line, read_jsonl, file_lock
    jsonutil.py JSON text: dumps (records on disk), stable_json and canonical (byte-stable)
    text.py     text from users, plans and models made safe to show (shown) and to store
    procs.py    process identity robust against pid reuse (/proc)
    redact.py   secrets that must never reach disk, and scrubbing them out (strings, streams, files)
    environ.py  the one environment policy of every process started for a task or an agent
    sandbox.py  the OS sandbox (bubblewrap) of agents' shell commands: policy to argv, probe, opt-out
    threads.py  threads that must not die quietly: an exception reaches their owner
    oneshot.py  the garbage collector's policy in a one-shot process (gc.freeze at exit)
    hooks.py    hook events, the hooks: config record, Verdict, the Hooks/observer seams
    budget.py   Budget (tokens and/or dollars) and how a spend is measured against one
    mcpspec.py  an MCP server a plan or role declares (mcp_servers:), and its tools' names (server__tool)
    modelspec.py a model's endpoint, key variable and price, as a plan or role declares it (models:)
"""
