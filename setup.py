"""Ships the top-level agents/ role files inside the package as
orchestrator.builtin_agents, so an installed `team` finds its built-in roles
(roles.py looks there first, then beside the source checkout)."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["orchestrator*"]) + ["orchestrator.builtin_agents"],
    package_dir={"orchestrator.builtin_agents": "agents"},
)
