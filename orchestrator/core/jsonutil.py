"""JSON text in two shapes, one helper each.

* ``dumps``: compact, keys in the order the object has them, UTF-8 kept.
  Every record and JSONL line ``team`` writes (task files list the seed's
  keys first, so field order matters there).
* ``pretty``: what ``json.dumps(indent=2)`` writes, built faster (one
  record on screen: ``task show --json``).
* ``listing``: a JSON array of records, one compact record per line. What
  ``--json`` prints for a list of records (``task list --json``): valid
  JSON for ``json.load`` and ``jq``, one line per task for ``grep`` and
  ``wc -l``, and written by the C encoder (``pretty`` of 10,000 tasks took
  ~0.1 s in Python; this ~0.02 s).
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


def listing(records: list[Any]) -> str:
    """``[`` then one compact record per line, then ``]`` and a newline."""
    return listing_of([dumps(r) for r in records])


def listing_of(encoded: list[str]) -> str:
    """``listing`` of records already encoded (each ``dumps`` of one record)."""
    if not encoded:
        return "[]\n"
    return "[\n" + ",\n".join(encoded) + "\n]\n"


def pretty(obj: Any) -> str:
    """``json.dumps(obj, ensure_ascii=False, indent=2)``, byte for byte, several times faster on
    big listings (with ``indent`` the json module encodes in pure Python; here only the
    containers are walked in Python and every string goes through the C escaper).
    ``team task list --json`` of 10,000 tasks spent most of its time there."""
    parts: list[str] = []
    _pretty(obj, 0, parts)
    return "".join(parts)


def _pretty(obj: Any, level: int, out: list[str]) -> None:
    if isinstance(obj, str):
        out.append(_escape(obj))
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif isinstance(obj, float):
        out.append(_float(obj))
    elif isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        if not all(isinstance(k, str) for k in obj):  # keys json would convert: let it
            out.append(json.dumps(obj, ensure_ascii=False, indent=2).replace("\n", "\n" + "  " * level))
            return
        pad = "\n" + "  " * (level + 1)
        sep = "{" + pad
        for key, value in obj.items():
            out.append(sep + _escape(key) + ": ")
            _pretty(value, level + 1, out)
            sep = "," + pad
        out.append("\n" + "  " * level + "}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        pad = "\n" + "  " * (level + 1)
        sep = "[" + pad
        for value in obj:
            out.append(sep)
            _pretty(value, level + 1, out)
            sep = "," + pad
        out.append("\n" + "  " * level + "]")
    else:  # anything else json knows (or refuses) the way it does
        out.append(json.dumps(obj, ensure_ascii=False, indent=2).replace("\n", "\n" + "  " * level))


_escape = json.encoder.encode_basestring  # ensure_ascii=False: the C escaper when there is one


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


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
