"""The team: roster, inboxes, the lead's lock and control channel, protocols (``.team/``).

    roster.py     Team: ``.team/config.json`` and heartbeats; member liveness
    inbox.py      Bus: one append-only JSONL inbox per member, delivered exactly once
    lead.py       LeadLock: one lead per state root (a flock the kernel drops on death)
    control.py    requests to the running lead from other processes (``team spawn``, ``team shutdown``)
    protocols.py  shutdown and plan approval: request/response pairs over the bus
    requests.py   approval requests people answer (plans, ``ask`` tool calls): ``team approve``
"""
