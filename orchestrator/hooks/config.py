"""Where a run's hooks come from: the plan's ``hooks:`` then ``.team/hooks.yaml``.

Both sets run (the plan's first). ``.team/hooks.yaml`` holds the same
mapping as a plan's ``hooks:`` (core/hooks.py ``HooksConfig``); a malformed
file is a ``UserError`` naming the file and the key, before anything runs.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ..core.errors import UserError
from ..core.hooks import HooksConfig
from ..core.paths import team_dir


def hooks_file(root: Path) -> Path:
    return team_dir(root) / "hooks.yaml"


def load_hooks_file(root: Path) -> HooksConfig | None:
    """``.team/hooks.yaml`` of the state root; None when there is none."""
    import yaml

    path = hooks_file(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read it: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}{where}: not valid YAML: {getattr(e, 'problem', None) or e}") from None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a mapping of event names to commands (task_completed: ./check.sh)")
    try:
        return HooksConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{path}: {loc}: {err['msg']}") from None


def run_hooks(root: Path, plan_hooks: HooksConfig | None) -> HooksConfig:
    """The hooks of a run: the plan's, then ``.team/hooks.yaml``'s."""
    base = plan_hooks if plan_hooks is not None else HooksConfig()
    return base.merged(load_hooks_file(root))
