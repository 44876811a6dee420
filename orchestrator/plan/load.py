"""``plan.yaml``: parse and validate whole. Pure: nothing is written here.

Parsing keeps YAML node marks: the document is composed into nodes, turned
into plain data while recording the line of every key and value, then
validated by pydantic models with ``extra="forbid"``. Every problem becomes
one line ``file:line: field: what is wrong``; all of them are collected and
raised together as one ``PlanError`` (exit 2) before anyone writes state.

Checks, in order: YAML syntax and duplicate keys; types, unknown and missing
keys (pydantic); then, on a well-typed plan, duplicate ids, exactly one of
``run``/``prompt``, unknown ``needs`` (with a "did you mean"), cycles (shown
as ``a → b → a``), unknown ``assignee``, a missing ``cwd`` directory and
agent tasks without a model (plan ``model:``, ``--model`` or ``$TEAM_MODEL``).

Bounds, checked before anything can grow: a plan file over
``MAX_PLAN_BYTES`` is refused before it is parsed (it is read through a
bound, so a FIFO or ``/dev/zero`` cannot fill memory either); while the
document is composed (``_BoundedLoader``), YAML aliases may add at most
``MAX_ALIAS_VALUES`` values to it (an alias bomb of 9 levels × 9 aliases
would expand to 387 million) and nothing may nest deeper than ``MAX_DEPTH``
levels (the composer is recursive). The size of every node is known when it
is composed (aliases are references to the anchored node, counted with its
whole size where used), so a bomb is refused at the alias that crosses the
limit, also one hidden under an unknown key, before any value is built.
A NUL byte, which no command, argument, environment variable or path can
carry, is refused in any string of the plan, at its line.

Two paths, one answer: ``_compose_checked`` is the reference (PyYAML's Python
composer over libyaml's parser, bounded as above, every YAML message comes
from it); ``_compose_fast`` composes with libyaml's Cython composer (nesting
bounded by libyaml itself, probed once) and checks the same bounds on the
tree, and declines (``_Fallback``) wherever the checked path could answer
differently. A plan that loads cleanly is read by ``_data_fast`` without its
line marks: ``LoadedPlan.lines`` composes them when a message first needs one.
tests/test_plan_fastload.py compares the paths on a corpus.

Paths: a task's ``cwd`` (or the plan's ``defaults.cwd``) is resolved against
the directory holding the plan file; without one, tasks run in that
directory. So a plan and the project it drives can be moved together.

The format (pydantic models, JSON Schema) is model.py; the analysis
(``analyse``: waves, critical path) is analysis.py.
"""

from __future__ import annotations

import difflib
import functools
import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..core.budget import Budget
from ..core.errors import PlanError
from ..core.hooks import EVENTS, HookCommand, HooksConfig
from ..core.modelspec import ModelPrice, ModelSpec
from .analysis import find_cycle
from .model import Defaults, LoadedPlan, Loc, Plan, PlanTask, TeamMember

_MODELS: dict[str, type[BaseModel]] = {"": Plan, "tasks": PlanTask, "team": TeamMember, "defaults": Defaults,
                                       "hooks": HooksConfig, "budget": Budget,
                                       "models": ModelSpec, "price": ModelPrice,
                                       **{event: HookCommand for event in EVENTS}}

MAX_PLAN_BYTES = 16 << 20
"""Largest plan file read (16 MiB: a 100,000-task plan of one-line commands is ~6 MB)."""
MAX_ALIAS_VALUES = 100_000
"""Most values YAML aliases may add to a plan (each use counts the anchored node's whole size)."""
STR_TAG = "tag:yaml.org,2002:str"
MAX_DEPTH = 50
"""Deepest nesting of a plan document (a plan needs about 5)."""


# ---------------------------------------------------------------- YAML with marks
@functools.cache
def _loader_class() -> type:
    """``yaml.SafeLoader`` whose composer refuses alias bombs and deep nesting (module docstring)."""
    import yaml
    from yaml.composer import Composer, ComposerError
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    # libyaml's parser (C) when PyYAML has it: scanning and parsing are most of the time of
    # a big plan (a pure-Python 10,000-task plan takes seconds); the composer stays PyYAML's
    # Python one, so the bounds below hold either way.
    if yaml.__with_libyaml__:
        from yaml._yaml import CParser

        class _Base(Composer, CParser, SafeConstructor, Resolver):
            def __init__(self, text: str) -> None:
                CParser.__init__(self, text)
                Composer.__init__(self)
                SafeConstructor.__init__(self)
                Resolver.__init__(self)
    else:
        _Base = yaml.SafeLoader  # type: ignore[misc]

    class _BoundedLoader(_Base):
        def __init__(self, text: str) -> None:
            super().__init__(text)
            self._sizes: dict[int, int] = {}  # id(node) -> values it holds, aliases expanded
            self._aliased = 0  # values added by aliases so far
            self._done: set[int] = set()  # id() of anchored nodes composed whole
            self._depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                node = self.anchors.get(event.anchor)
                if node is not None:  # (an undefined alias is the composer's own error)
                    # an anchor still being composed (the alias is inside it) counts 1
                    self._aliased += self._size(node) if id(node) in self._done else 1
                    if self._aliased > MAX_ALIAS_VALUES:
                        raise ComposerError(None, None, f"aliases expand this plan by more than "
                                            f"{MAX_ALIAS_VALUES} values (an alias bomb?); refusing it",
                                            event.start_mark)
                return super().compose_node(parent, index)
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels; a plan needs a "
                                    "handful", self.peek_event().start_mark)
            anchor = getattr(self.peek_event(), "anchor", None)
            try:
                node = super().compose_node(parent, index)
            finally:
                self._depth -= 1
            if anchor is not None:
                self._done.add(id(node))
            return node

        def _size(self, node: Any) -> int:
            """Values ``node`` holds, aliases expanded: computed when an alias names it, once
            per node (a plan without aliases pays nothing), without recursion. A node still
            being composed (an alias inside its own anchor) counts 1."""
            sizes = self._sizes
            stack: list[tuple[Any, bool]] = [(node, False)]
            busy: set[int] = set()
            while stack:
                n, kids_done = stack.pop()
                if id(n) in sizes:
                    continue
                kids = _children(n)
                if kids_done:
                    busy.discard(id(n))
                    sizes[id(n)] = 1 + sum(sizes.get(id(c), 1) for c in kids)
                    continue
                busy.add(id(n))
                stack.append((n, True))
                stack.extend((c, False) for c in kids if id(c) not in sizes and id(c) not in busy)
            return sizes.get(id(node), 1)

    return _BoundedLoader


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _compose(text: str, where: str) -> tuple[Any, dict[Loc, int], list[str]]:
    """YAML text -> (data, {loc: line}, errors). Lines are 1-based.

    The fast path (``_compose_fast``) when it can promise the same result, else ``_compose_checked``."""
    try:
        return _compose_fast(text, where)
    except _Fallback:
        return _compose_checked(text, where)


def _compose_checked(text: str, where: str) -> tuple[Any, dict[Loc, int], list[str]]:
    """YAML text -> (data, {loc: line}, errors), composed by ``_BoundedLoader`` (bounds checked as
    it goes); every error message of the plan's YAML comes from here. Lines are 1-based."""
    import yaml

    lines: dict[Loc, int] = {}
    errors: list[str] = []
    loader = _loader_class()(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as e:
        last = max(1, len(text.splitlines()))
        mark = e.problem_mark or e.context_mark
        line = min(mark.line + 1, last) if mark else 1
        what = e.problem or ""
        if e.context and e.context_mark is not None:
            what = f"{e.context} (line {e.context_mark.line + 1}): {what}"
        return None, lines, [f"{where}:{line}: yaml: {what}"]
    finally:
        loader.dispose()

    def build(node: Any, loc: Loc, depth: int = 0) -> Any:
        lines.setdefault(loc, node.start_mark.line + 1)
        if depth > 50:
            errors.append(f"{where}:{node.start_mark.line + 1}: {_field(loc)}: nested too deeply")
            return None
        if isinstance(node, yaml.MappingNode):
            if not _flatten(loader, node, loc, where, errors):
                return None
            out: dict[Any, Any] = {}
            for knode, vnode in node.value:
                key = _construct(loader, knode, loc, where, errors)
                if key is _UNREADABLE:
                    continue
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    errors.append(f"{where}:{knode.start_mark.line + 1}: {_field(loc)}: keys must be plain strings")
                    continue
                here = (*loc, key)
                if key in out:
                    errors.append(
                        f"{where}:{knode.start_mark.line + 1}: {_field(here)}: duplicate key "
                        f"(first at line {lines[here]})"
                    )
                    continue
                lines[here] = knode.start_mark.line + 1
                out[key] = build(vnode, here, depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [build(item, (*loc, i), depth + 1) for i, item in enumerate(node.value)]
        # a plain string (most of a plan) is its node's value, as SafeConstructor would make it
        value = node.value if node.tag == STR_TAG else _construct(loader, node, loc, where, errors)
        if value is _UNREADABLE:
            return None
        if isinstance(value, str) and "\0" in value:
            errors.append(f"{where}:{node.start_mark.line + 1}: {_field(loc)}: contains a NUL byte (\\0), "
                          "which no command, argument, environment variable or path can carry; remove it")
        return value

    data = build(root, ()) if root is not None else None
    return data, lines, errors


class _Fallback(Exception):
    """The fast path cannot promise ``_compose_checked``'s result for this text: use that."""


NESTING_PROBE = 2000
"""libyaml must refuse a document nested this deep for the fast path to be used (``_fast_loader``)."""


@functools.cache
def _fast_loader() -> type | None:
    """``yaml.CSafeLoader`` when the fast path may use it, else None.

    Its composer (Cython) is recursive, so it may only see documents whose depth is bounded:
    libyaml (0.2.6 on) refuses nesting past 1,000 levels while scanning, before anything is
    composed. That bound is probed here, once per process, not assumed from a version string:
    a libyaml that accepts ``NESTING_PROBE`` levels of ``[`` or ``- `` is not used."""
    import yaml

    if not yaml.__with_libyaml__:
        return None
    from yaml._yaml import CParser

    for probe in ("[" * NESTING_PROBE, "- " * NESTING_PROBE):
        try:
            CParser(probe).raw_parse()
        except yaml.YAMLError as e:
            if "exceeded maximum nesting depth" in str(e):
                continue
        return None
    if yaml.CSafeLoader.yaml_path_resolvers:  # (none unless someone added one: then tags depend on the path)
        return None

    class _FastLoader(yaml.CSafeLoader):
        """``CSafeLoader`` whose tag resolution is looked up once per distinct scalar: without
        path resolvers a tag depends on (kind, value, implicit) alone."""

        def __init__(self, text: str) -> None:
            super().__init__(text)
            tags: dict[tuple[Any, Any, Any], str] = {}
            resolve = super().resolve

            def cached(kind: Any, value: Any, implicit: Any) -> str:
                key = (kind, value, implicit)
                tag = tags.get(key)
                if tag is None:
                    tag = tags[key] = resolve(kind, value, implicit)
                return tag

            self.resolve = cached  # an attribute: the composer's calls skip making a bound method

        def descend_resolver(self, parent: Any, index: Any) -> None:
            pass  # (they only follow path resolvers: none here)

        def ascend_resolver(self) -> None:
            pass

    return _FastLoader


STACK_NEEDED = 4 << 20
"""C stack the fast path wants. The Cython composer recurses once per level: the deepest document
libyaml accepts (1,000 levels, two nodes each: ``[a: [a: ...``) needs about 0.7 MiB (measured: it
crashes a thread of 640 KiB, not one of 768 KiB)."""


def _stack_enough() -> bool:
    """Whether this thread's C stack is known to hold ``STACK_NEEDED``: only the main thread's is
    (it grows up to the soft ``RLIMIT_STACK``); another thread's is whatever made it, so the
    fast path is not used there (``threading.stack_size()`` tells the size of threads to come,
    not this one's)."""
    import resource
    import threading

    if threading.get_ident() != threading.main_thread().ident:
        return False
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    return soft == resource.RLIM_INFINITY or soft >= STACK_NEEDED


def _compose_fast(text: str, where: str) -> tuple[Any, dict[Loc, int], list[str]]:
    """``_compose_checked``'s result, faster, or ``_Fallback`` when it cannot promise it.

    libyaml's Cython composer makes the node tree (the same nodes, tags and marks PyYAML's
    Python composer makes, but without a Python call per node); its nesting is bounded by
    libyaml (``_fast_loader``). What ``_BoundedLoader`` checks while composing is checked on
    the tree instead (``_tree_bounds``), and whatever would make the checked path answer
    differently falls back to it: any YAML error (its messages are the checked composer's),
    a document nested deeper than ``MAX_DEPTH``, aliases that expand it by more than
    ``MAX_ALIAS_VALUES`` or that refer to themselves. Plans without aliases (most) skip the
    alias pass: no anchor, no alias, unless the text has both ``&`` and ``*``. The tree is then
    turned into data and line marks like ``_compose_checked`` does, without a function call per
    plain string. tests/test_plan_fastload.py compares both paths on a corpus."""
    root, loader, aliases = _fast_tree(text)
    lines: dict[Loc, int] = {}
    errors: list[str] = []
    if root is None:
        return None, lines, errors
    lines[()] = root.start_mark.line + 1
    data = _build_fast(root, (), 0, loader, where, lines, errors, aliases)
    return data, lines, errors


def _fast_tree(text: str) -> tuple[Any, Any, bool]:
    """(root node or None, the loader, whether the text may hold aliases) or ``_Fallback``."""
    import yaml

    loader_class = _fast_loader()
    if loader_class is None or not _stack_enough():
        raise _Fallback
    loader = loader_class(text)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError:
        raise _Fallback from None
    finally:
        loader.dispose()
    aliases = "&" in text and "*" in text
    if aliases and root is not None:
        _tree_bounds(root)
    return root, loader, aliases


def _data_fast(text: str) -> Any:
    """The data of ``_compose``, without line marks, when it has no errors; else ``_Fallback``.

    A plan that loads is read once without its marks (a tuple and a dict entry per key and
    item: most of building it); ``LoadedPlan.lines`` composes them again when a message needs
    one. Anything ``_build_fast`` would report (a NUL byte, a duplicate or non-string key,
    nesting through aliases) is ``_Fallback`` here: the caller composes with marks."""
    import yaml

    root, loader, aliases = _fast_tree(text)
    if root is None:
        return None
    mapping, scalar, sequence = yaml.MappingNode, yaml.ScalarNode, yaml.SequenceNode
    flatten, construct = loader.flatten_mapping, loader.construct_object

    def build(node: Any, depth: int) -> Any:
        # (``_build_fast`` without ``lines``/``errors``: where it would add an error, fall back)
        if depth > 50:
            raise _Fallback
        cls = node.__class__
        if not aliases and depth + 1 >= MAX_DEPTH and cls is not scalar and node.value:
            raise _Fallback
        inline = depth < 50
        if cls is mapping or isinstance(node, mapping):
            pairs = node.value
            for knode, _ in pairs:
                if knode.tag != STR_TAG:
                    try:
                        flatten(node)
                    except yaml.YAMLError:
                        raise _Fallback from None
                    pairs = node.value
                    break
            out: dict[Any, Any] = {}
            for knode, vnode in pairs:
                if knode.tag == STR_TAG and knode.__class__ is scalar:
                    key = knode.value
                else:
                    key = constructed(knode)
                    if not isinstance(key, (str, int, float, bool)) or key is None:
                        raise _Fallback
                if key in out:
                    raise _Fallback
                if inline and vnode.tag == STR_TAG and vnode.__class__ is scalar:
                    value = vnode.value
                    if "\0" in value:
                        raise _Fallback
                    out[key] = value
                else:
                    out[key] = build(vnode, depth + 1)
            return out
        if cls is sequence or isinstance(node, sequence):
            items = []
            for item in node.value:
                if inline and item.tag == STR_TAG and item.__class__ is scalar:
                    value = item.value
                    if "\0" in value:
                        raise _Fallback
                    items.append(value)
                else:
                    items.append(build(item, depth + 1))
            return items
        value = node.value if node.tag == STR_TAG else constructed(node)
        if isinstance(value, str) and "\0" in value:
            raise _Fallback
        return value

    def constructed(node: Any) -> Any:
        try:
            return construct(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError):
            raise _Fallback from None  # (``_construct`` reports it)

    return build(root, 0)


def _tree_bounds(root: Any) -> None:
    """``_Fallback`` unless the tree is within the bounds ``_BoundedLoader`` checks while composing.

    Nodes are visited in document order; the first visit of a node is where it was composed,
    every later one is an alias of it, counted with its whole size as ``_BoundedLoader`` counts
    it (an alias of a node still open is a self-reference: the checked path decides those).
    Depth is counted over composed nodes only, as ``_BoundedLoader`` does."""
    seen: set[int] = set()
    open_: set[int] = set()
    sizes: dict[int, int] = {}
    aliased = 0
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, leaving = stack.pop()
        key = id(node)
        if leaving:
            open_.discard(key)
            continue
        if key in seen:
            if key in open_:
                raise _Fallback
            aliased += _expanded(node, sizes)
            if aliased > MAX_ALIAS_VALUES:
                raise _Fallback
            continue
        seen.add(key)
        if depth > MAX_DEPTH:
            raise _Fallback
        kids = _children(node)
        if kids:
            open_.add(key)
            stack.append((node, depth, True))
            stack.extend((kid, depth + 1, False) for kid in reversed(kids))


def _expanded(node: Any, sizes: dict[int, int]) -> int:
    """Values ``node`` holds with aliases expanded (memoised by node; the graph is acyclic here)."""
    stack: list[tuple[Any, bool]] = [(node, False)]
    while stack:
        n, kids_done = stack.pop()
        if id(n) in sizes:
            continue
        kids = _children(n)
        if kids_done:
            sizes[id(n)] = 1 + sum(sizes[id(c)] for c in kids)
            continue
        stack.append((n, True))
        stack.extend((c, False) for c in kids if id(c) not in sizes)
    return sizes[id(node)]


def _build_fast(node: Any, loc: Loc, depth: int, loader: Any, where: str, lines: dict[Loc, int],
                errors: list[str], aliases: bool) -> Any:
    """``_compose_checked``'s ``build`` (data, line marks, the same errors in the same order), with
    plain strings read in the loop. Without aliases the tree is as deep as the document: a node
    as deep as ``_BoundedLoader`` refuses is ``_Fallback``; with them (depth checked already by
    ``_tree_bounds``) an alias that nests too deeply is the same error as there."""
    import yaml

    # (``lines[loc]`` is set by the caller, as ``build``'s ``setdefault`` would)
    if depth > 50:  # with aliases only: without them, no node is this deep (below)
        errors.append(f"{where}:{node.start_mark.line + 1}: {_field(loc)}: nested too deeply")
        return None
    cls = node.__class__
    if not aliases and depth + 1 >= MAX_DEPTH and cls is not yaml.ScalarNode and node.value:
        raise _Fallback  # children (keys too) as deep as _BoundedLoader refuses
    inline = depth < 50  # children need no depth check
    if cls is yaml.MappingNode or isinstance(node, yaml.MappingNode):
        pairs = node.value
        for knode, _ in pairs:
            if knode.tag != STR_TAG:  # a merge (<<) or value (=) key among them: flatten
                if not _flatten(loader, node, loc, where, errors):
                    return None
                pairs = node.value
                break
        out: dict[Any, Any] = {}
        for knode, vnode in pairs:
            if knode.tag == STR_TAG and knode.__class__ is yaml.ScalarNode:
                key = knode.value
            else:
                key = _construct(loader, knode, loc, where, errors)
                if key is _UNREADABLE:
                    continue
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    errors.append(f"{where}:{knode.start_mark.line + 1}: {_field(loc)}: keys must be plain strings")
                    continue
            here = (*loc, key)
            if key in out:
                errors.append(f"{where}:{knode.start_mark.line + 1}: {_field(here)}: duplicate key "
                              f"(first at line {lines[here]})")
                continue
            lines[here] = knode.start_mark.line + 1
            if inline and vnode.tag == STR_TAG and vnode.__class__ is yaml.ScalarNode:
                value = vnode.value
                if "\0" in value:
                    _nul(vnode, here, where, errors)
                out[key] = value
            else:
                out[key] = _build_fast(vnode, here, depth + 1, loader, where, lines, errors, aliases)
        return out
    if cls is yaml.SequenceNode or isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            here = (*loc, i)
            if here not in lines:
                lines[here] = item.start_mark.line + 1
            if inline and item.tag == STR_TAG and item.__class__ is yaml.ScalarNode:
                value = item.value
                if "\0" in value:
                    _nul(item, here, where, errors)
                items.append(value)
            else:
                items.append(_build_fast(item, here, depth + 1, loader, where, lines, errors, aliases))
        return items
    value = node.value if node.tag == STR_TAG else _construct(loader, node, loc, where, errors)
    if value is _UNREADABLE:
        return None
    if isinstance(value, str) and "\0" in value:
        _nul(node, loc, where, errors)
    return value


_UNREADABLE = object()
"""What ``_construct`` returns for a value SafeConstructor cannot make (its error is added)."""


def _construct(loader: Any, node: Any, loc: Loc, where: str, errors: list[str]) -> Any:
    """SafeConstructor's value of a tagged (or non-string) node, or ``_UNREADABLE`` with one line
    added to ``errors``: an unknown tag (``!custom``), ``!!int abc``, bad ``!!binary``... are a
    problem of the plan, not a traceback."""
    import yaml

    try:
        return loader.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError, TypeError) as e:
        errors.append(f"{where}:{node.start_mark.line + 1}: {_field(loc)}: {_unreadable(e)}")
        return _UNREADABLE


def _flatten(loader: Any, node: Any, loc: Loc, where: str, errors: list[str]) -> bool:
    """Merge the ``<<`` keys of a mapping node in; False with one line added to ``errors`` when a
    merge is not of mappings."""
    import yaml

    try:
        loader.flatten_mapping(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or node.start_mark
        errors.append(f"{where}:{mark.line + 1}: {_field(loc)}: {_unreadable(e)}")
        return False
    return True


def _unreadable(e: Exception) -> str:
    import yaml

    what = (e.problem or e.context or "") if isinstance(e, yaml.MarkedYAMLError) else str(e)
    return f"yaml: cannot read this value ({(what or type(e).__name__).splitlines()[0]})"


def _nul(node: Any, loc: Loc, where: str, errors: list[str]) -> None:
    errors.append(f"{where}:{node.start_mark.line + 1}: {_field(loc)}: contains a NUL byte (\\0), "
                  "which no command, argument, environment variable or path can carry; remove it")


def _field(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "plan"


def _line(lines: dict[Loc, int], loc: Loc) -> int:
    loc = tuple(loc)
    while loc and loc not in lines:
        loc = loc[:-1]
    return lines.get(loc, 1)


def where(lp: LoadedPlan, loc: Loc) -> str:
    """``file:line: field`` of ``loc`` in a loaded plan, as every plan problem starts."""
    return f"{lp.path}:{_line(lp.lines, loc)}: {_field(loc)}"


def _model_at(loc: Loc) -> type[BaseModel]:
    key = next((p for p in reversed(loc) if isinstance(p, str) and p in _MODELS), "")
    return _MODELS[key]


def _pydantic_errors(e: ValidationError, where: str, lines: dict[Loc, int]) -> list[str]:
    out = []
    for err in e.errors():
        loc = tuple(p for p in err["loc"] if isinstance(p, (int, str)))
        # Drop union/type tags pydantic appends (e.g. 'float', 'str') that are not in the file.
        while loc and loc not in lines and err["type"] != "missing":
            if loc[:-1] in lines and err["type"] == "extra_forbidden":
                break
            loc = loc[:-1]
        kind = err["type"]
        if kind == "extra_forbidden":
            key = str(loc[-1])
            allowed = list(_model_at(loc[:-1]).model_fields)
            near = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            msg = f"unknown key {key!r}; {hint}allowed: {', '.join(allowed)}"
        elif kind == "missing":
            msg = "required key is missing"
        elif kind == "string_pattern_mismatch":
            msg = f"{err['input']!r} is not a valid slug: use letters, digits, '.', '_', '-' (≤ 64 chars)"
        elif kind == "string_type" and isinstance(err.get("input"), (bool, int, float)):
            msg = f"expected a string, got {err['input']!r} (YAML read it as {type(err['input']).__name__}); quote it"
        else:
            msg = f"{err['msg']} (got {err['input']!r})" if "input" in err else err["msg"]
        out.append(f"{where}:{_line(lines, loc)}: {_field(loc)}: {msg}")
    return out


# ---------------------------------------------------------------- loading
def load_plan(path: str | os.PathLike, *, model: str | None = None, environ: dict | None = None,
              need_model: bool = True) -> LoadedPlan:
    """Read and validate ``path`` whole; raise ``PlanError`` listing every problem.

    ``need_model=False``: agent tasks without a model are not an error (``team run --dry-run``
    runs nothing; ``LoadedPlan.model`` is then ``None``)."""
    where = str(path)
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_PLAN_BYTES + 1)  # bounded: a FIFO or /dev/zero cannot fill memory
        if len(raw) > MAX_PLAN_BYTES:
            raise PlanError(f"{where}:1: plan: the file is over the {MAX_PLAN_BYTES >> 20} MiB limit for a "
                            "plan; split it into several plans, or remove what it does not need")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise PlanError(f"{where}: no such plan file; pass the path of a plan.yaml") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"{where}: cannot read: {e}") from None
    gc_was_on = gc.isenabled()
    gc.disable()  # loading a big plan makes ~10 objects a task, none of them garbage (the fast path
    try:          # leaves no cycles): collecting while they pile up made a 10,000-task plan several
        return _validated(text, p, where, model, environ, need_model)  # times slower
    finally:
        if gc_was_on:
            gc.enable()


def _validated(text: str, p: Path, where: str, model: str | None, environ: dict | None,
               need_model: bool) -> LoadedPlan:
    try:
        data = _data_fast(text)
    except _Fallback:  # a problem to report (or a text only the checked path may read): with marks
        data, lines, errors = _compose(text, where)
        if errors:
            raise PlanError("\n".join(errors)) from None
        marks: Callable[[], dict[Loc, int]] = lines.copy
    else:
        marks = functools.partial(_marks, text, where)
    if not isinstance(data, dict):
        raise PlanError(f"{where}:{marks().get((), 1)}: plan: expected a mapping with `name:` and `tasks:`, got {type(data).__name__}")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        raise PlanError(_join(_pydantic_errors(e, where, marks()))) from None
    env = os.environ if environ is None else environ
    loaded = LoadedPlan(plan, p, p.absolute().parent, model or plan.model or env.get("TEAM_MODEL") or None, marks)
    errors = _check(loaded, where, need_model)
    if errors:
        raise PlanError(_join(errors))
    return loaded


def _marks(text: str, where: str) -> dict[Loc, int]:
    """The line marks of a plan ``_data_fast`` read cleanly (``LoadedPlan.lines``, on first use)."""
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        return _compose(text, where)[1]
    finally:
        if gc_was_on:
            gc.enable()


def _join(errors: list[str], limit: int = 20) -> str:
    more = [f"... and {len(errors) - limit} more problems"] if len(errors) > limit else []
    return "\n".join(errors[:limit] + more)


def _glob_problem(glob: str) -> str | None:
    """What is wrong with an ``outputs:`` glob, or None: it names files inside the task's folder."""
    if not glob.strip():
        return "an empty glob names no file; remove it (`outputs: []` keeps nothing)"
    if glob.startswith("/"):
        return f"{glob!r} is absolute: an output glob is relative to the task's folder (its cwd)"
    if ".." in Path(glob).parts:
        return f"{glob!r} climbs out of the task's folder with '..': an output glob names files inside it"
    return None


def _check(lp: LoadedPlan, where: str, need_model: bool = True) -> list[str]:
    plan = lp.plan  # (lp.lines only for a message: it is made on first use)
    errors: list[str] = []

    def err(loc: Loc, msg: str) -> None:
        errors.append(f"{where}:{_line(lp.lines, loc)}: {_field(loc)}: {msg}")

    first: dict[str, int] = {}
    members = {m.name for m in plan.team}
    clis = {m.name for m in plan.command_members()}
    is_dir: dict[Path, bool] = {}  # one stat per distinct directory, not per task
    prefix = len(plan.name) + 1  # (of a task's store name)
    default_cwd = plan.defaults.cwd
    for i, t in enumerate(plan.tasks):
        if t.id in first:
            err(("tasks", i, "id"), f"duplicate id {t.id!r} (first at line {_line(lp.lines, ('tasks', first[t.id], 'id'))})")
        else:
            first[t.id] = i
        if prefix + len(t.id) > 64:
            err(("tasks", i, "id"), f"plan name + '.' + id must be ≤ 64 chars ({lp.store_name(t)!r})")
        if t.run is not None and t.prompt is not None:
            err(("tasks", i, "prompt"), f"task {t.id!r} has both run and prompt; keep `run` (shell) or `prompt` (agent)")
        elif t.run is None and t.prompt is None:
            err(("tasks", i), f"task {t.id!r} has neither run nor prompt; add `run: COMMAND` or `prompt: TEXT`")
        if t.assignee is not None and plan.team and t.assignee not in members:
            err(("tasks", i, "assignee"), f"{t.assignee!r} is not in `team:` ({', '.join(sorted(members))})")
        elif t.run is not None and t.assignee in clis:
            err(("tasks", i, "run"), f"{t.assignee} is a kind: command member, which gets its tasks as a prompt on "
                                     f"stdin: write task {t.id!r} as `prompt:`, or run it as a plain shell task "
                                     "without `assignee:`")
        cwd = lp.task_cwd(t) if t.cwd or default_cwd else lp.base
        if cwd not in is_dir:
            is_dir[cwd] = cwd.is_dir()
        if not is_dir[cwd]:
            loc = ("tasks", i, "cwd") if t.cwd else ("defaults", "cwd")
            err(loc, f"directory {cwd} does not exist (cwd is relative to the plan file)")
    for j, glob in enumerate(plan.defaults.outputs or []):
        if (problem := _glob_problem(glob)) is not None:
            err(("defaults", "outputs", j), problem)
    for i, t in enumerate(plan.tasks):
        for j, glob in enumerate(t.outputs or []):
            if (problem := _glob_problem(glob)) is not None:
                err(("tasks", i, "outputs", j), problem)
    ids = set(first)
    for i, t in enumerate(plan.tasks):
        for j, need in enumerate(t.needs):
            if need == t.id:
                err(("tasks", i, "needs", j), f"task {t.id!r} cannot need itself")
            elif need not in ids:
                near = difflib.get_close_matches(need, sorted(ids), n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
                err(("tasks", i, "needs", j), f"{need!r} is not a task in this plan{hint}")
    if not errors:
        cycle = find_cycle({t.id: t.needs for t in plan.tasks})
        if cycle:
            i = first[cycle[0]]
            err(("tasks", i, "needs", plan.tasks[i].needs.index(cycle[1])), "dependency cycle: " + " → ".join(cycle))
    agents = [t for t in plan.tasks if t.kind == "agent"]
    if agents and not lp.model and need_model:
        i = next(i for i, t in enumerate(plan.tasks) if t.kind == "agent")
        err(("tasks", i, "prompt"), "agent tasks need a model: set `model:` in the plan, pass --model or set "
            f"$TEAM_MODEL (agent tasks: {', '.join(t.id for t in agents)})")
    return errors
