"""Who an agent is: roles (``agents/*.md``) and skills (``SKILL.md``).

    roles.py   Role: YAML front matter + role prompt; built-in and workspace roles
    skills.py  skills the agent loads on demand
"""
