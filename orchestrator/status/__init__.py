"""What the state root says: overview, token usage, consistency checks. No model call.

    overview.py  roster, tasks, jobs and inboxes as data and text (``team status``)
    usage.py     token accounting per agent and per task
    doctor.py    ``team doctor``: consistency checks and repairs
    planlog.py   ``team log`` / ``team diff``: a plan's tasks in merge order, one task's own change
"""
