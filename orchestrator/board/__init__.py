"""``team board``: a live web board of the task graph, the team and the spend, on 127.0.0.1.

How an update reaches a page: the hub's thread asks the watcher what
changed on disk (a few ``stat`` calls when nothing did), the feed turns that
into a delta of view records, and every open page's event stream gets it.
Nothing polls in the browser; nothing here writes unless ``--allow-actions``.

    watch.py    RootWatcher: which files changed (event log offsets, task file
                signatures, roster, lead, job records, inboxes), read without locks
    layout.py   each task's wave (column) and row: the left-to-right layering
    views.py    the records sent to the page (TaskView, Progress, ...), built
                from the stored facts, every string scrubbed and escaped (Shown)
    feed.py     Feed: the picture of a root as snapshots and versioned deltas
    hub.py      Hub: ticks the feed on a thread, fans deltas out to the streams
    details.py  one task opened: record, history, blocked chain, log, transcript
    actions.py  Actions: retry, cancel, send (only with --allow-actions)
    app.py      the Starlette app: routes, the session token, security headers
    serve.py    serve: uvicorn on a bound socket until a signal or the parent's end
    launch.py   bind, the token, and BoardProcess (``team run --board``'s child)

The page itself is ``static/``: board.html, board.js (vanilla, no build step,
every string set as text) and board.css. Imports: board sits beside run,
chat and status (it reads usage from status/); only the CLI imports it,
lazily.
"""
