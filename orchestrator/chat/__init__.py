"""``team chat``: the interactive lead.

    session.py   ChatSession: the lead's agent, routing, goals
    commands.py  slash commands and input routing
"""
