"""The durable task graph: ``.tasks/``.

    store.py      TaskStore: the one class callers use; it holds the three below
    files.py      TaskFiles: layout, the lock, reads, refs, events, durable batch writes
    edits.py      TaskEdits: create / update: ids, unique names, dependency edges checked for cycles
    attempts.py   Attempts: claim, lease, hand over, finish, release, the scheduler's commit batch
    pipeline.py   Pipeline: group commit for ``team run`` (the scheduler never waits for the disk)
    index.py      the task index: listing thousands of tasks without validating every file again
    graph.py      pure queries: ready, blocked chains, waves, critical path, cycles
    render.py     text renderings: list lines, blocked chains, tree, mermaid, dot
"""
