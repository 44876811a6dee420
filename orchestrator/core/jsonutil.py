"""JSON text in two shapes, one helper each.

* ``dumps``: compact, keys in the order the object has them, UTF-8 kept.
  Every record and JSONL line ``team`` writes (task files list the seed's
  keys first, so field order matters there).
* ``stable_json``: compact with sorted keys: the same bytes for the same
  data, whatever the order it was built in. What goes into a model request
  that must stay byte-identical from turn to turn (tool schemas, so prompt
  caches hit) and into fingerprints. ``canonical`` is the same data as a
  key-sorted copy, for callers that keep building on it.
"""

from __future__ import annotations

import json
from typing import Any


def dumps(obj: Any) -> str:
    """Compact JSON, field order kept."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def stable_json(obj: Any) -> str:
    """Compact JSON with sorted keys: byte-identical for equal data."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def canonical(obj: Any) -> Any:
    """A recursively key-sorted copy of ``obj`` (so plain ``json.dumps`` is stable too)."""
    if isinstance(obj, dict):
        return {k: canonical(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj
