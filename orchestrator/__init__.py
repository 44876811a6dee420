"""team: a multi-agent team orchestrator with a durable task graph."""

__version__ = "0.1.0"
