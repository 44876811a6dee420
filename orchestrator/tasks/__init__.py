"""The durable task graph: ``.tasks/``.

    store.py      TaskStore: files, lock, reads, refs, events; the one class callers use
    edits.py      create / update: ids, unique names, dependency edges checked for cycles
    attempts.py   claim, lease, hand over, finish, release, the scheduler's commit batch
    batch.py      durable batched writes of task files and event lines
    pipeline.py   group commit for ``team run`` (the scheduler never waits for the disk)
    graph.py      pure queries: ready, blocked chains, waves, critical path, cycles
    render.py     text renderings: list lines, blocked chains, tree, mermaid, dot
"""
