"""``plan.yaml``: parse, validate whole, analyse. Pure: nothing is written here.

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

Paths: a task's ``cwd`` (or the plan's ``defaults.cwd``) is resolved against
the directory holding the plan file; without one, tasks run in that
directory. So a plan and the project it drives can be moved together.

Analysis (``analyse``): topological waves, the critical path weighted by
``estimate`` (1 when absent) and the widest wave (max useful parallelism).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import PlanError
from .models import NAME_RE

Loc = tuple[Any, ...]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _env_values(value: Any) -> Any:
    """Allow ``DEBUG: 1`` in env maps: numbers and booleans become strings."""
    if isinstance(value, dict):
        return {k: (str(v).lower() if isinstance(v, bool) else str(v)) if isinstance(v, (int, float, bool)) else v
                for k, v in value.items()}
    return value


class Defaults(_Strict):
    """Values every task inherits unless it sets its own."""

    timeout: float | None = Field(None, gt=0, description="Seconds before an attempt is killed.")
    retries: int = Field(0, ge=0, description="Extra attempts after a failure.")
    retry_delay: float = Field(1.0, ge=0, description="Seconds before the first retry; doubles each time.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    cwd: str | None = Field(None, description="Working directory, relative to the plan file.")

    _env = field_validator("env", mode="before")(_env_values)


class TeamMember(_Strict):
    """A named teammate for agent tasks."""

    name: str = Field(pattern=NAME_RE.pattern, description="Teammate name (a slug).")
    role: str = Field("coder", description="Role, e.g. coder, tester, reviewer.")
    plan_mode: bool = Field(False, description="Write tools refused until the lead approves its plan.")


class PlanTask(_Strict):
    """One task: a shell command (``run``) or an agent prompt (``prompt``)."""

    id: str = Field(pattern=NAME_RE.pattern, description="Unique slug within the plan.")
    run: str | None = Field(None, description="Shell command (a shell task).")
    prompt: str | None = Field(None, description="Instruction for an LLM teammate (an agent task).")
    needs: list[str] = Field(default_factory=list, description="Ids of tasks that must complete first.")
    description: str = Field("", description="What done means.")
    assignee: str | None = Field(None, description="Teammate an agent task goes to.")
    role: str | None = Field(None, description="Role an agent task wants.")
    estimate: float | None = Field(None, gt=0, description="Expected seconds (weights the critical path).")
    timeout: float | None = Field(None, gt=0, description="Seconds before an attempt is killed.")
    retries: int | None = Field(None, ge=0, description="Extra attempts after a failure.")
    retry_delay: float | None = Field(None, ge=0, description="Seconds before the first retry.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    cwd: str | None = Field(None, description="Working directory, relative to the plan file.")
    isolation: Literal["none", "worktree"] | None = Field(None, description="Per-task isolation.")

    _env = field_validator("env", mode="before")(_env_values)

    @field_validator("needs", mode="before")
    @classmethod
    def _one_need(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(dict.fromkeys(value))
        return value

    @property
    def kind(self) -> str:
        return "agent" if self.prompt is not None else "shell"


class Plan(_Strict):
    """A ``plan.yaml`` file: ``team run`` turns it into tasks."""

    name: str = Field(pattern=NAME_RE.pattern, description="Plan name; keys its tasks in the store.")
    description: str = Field("", description="What the plan does.")
    workers: int = Field(4, ge=1, le=1024, description="Max tasks running at once.")
    model: str | None = Field(None, description="Model for agent tasks (else --model or $TEAM_MODEL).")
    isolation: Literal["none", "worktree"] = Field("none", description="none, or a git worktree per task.")
    defaults: Defaults = Field(default_factory=Defaults, description="Values every task inherits.")
    team: list[TeamMember] = Field(default_factory=list, description="Named teammates.")
    tasks: list[PlanTask] = Field(min_length=1, description="The tasks.")


_MODELS: dict[str, type[BaseModel]] = {"": Plan, "tasks": PlanTask, "team": TeamMember, "defaults": Defaults}


@dataclass
class LoadedPlan:
    """A validated plan plus where it came from."""

    plan: Plan
    path: Path
    base: Path
    model: str | None
    lines: dict[Loc, int] = field(default_factory=dict)

    def task_cwd(self, task: PlanTask) -> Path:
        rel = task.cwd or self.plan.defaults.cwd
        return (self.base / rel).resolve() if rel else self.base

    def store_name(self, task: PlanTask) -> str:
        return f"{self.plan.name}.{task.id}"


# ---------------------------------------------------------------- YAML with marks
def _compose(text: str, where: str) -> tuple[Any, dict[Loc, int], list[str]]:
    """YAML text -> (data, {loc: line}, errors). Lines are 1-based."""
    import yaml

    lines: dict[Loc, int] = {}
    errors: list[str] = []
    loader = yaml.SafeLoader(text)
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
            loader.flatten_mapping(node)
            out: dict[Any, Any] = {}
            for knode, vnode in node.value:
                key = loader.construct_object(knode, deep=True)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    errors.append(f"{where}:{knode.start_mark.line + 1}: {_field(loc)}: keys must be plain strings")
                    continue
                if key in out:
                    errors.append(
                        f"{where}:{knode.start_mark.line + 1}: {_field((*loc, key))}: duplicate key "
                        f"(first at line {lines[(*loc, key)]})"
                    )
                    continue
                lines[(*loc, key)] = knode.start_mark.line + 1
                out[key] = build(vnode, (*loc, key), depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [build(item, (*loc, i), depth + 1) for i, item in enumerate(node.value)]
        return loader.construct_object(node, deep=True)

    data = build(root, ()) if root is not None else None
    return data, lines, errors


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
def load_plan(path: str | os.PathLike, *, model: str | None = None, environ: dict | None = None) -> LoadedPlan:
    """Read and validate ``path`` whole; raise ``PlanError`` listing every problem."""
    where = str(path)
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"{where}: no such plan file; pass the path of a plan.yaml") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"{where}: cannot read: {e}") from None
    data, lines, errors = _compose(text, where)
    if errors:
        raise PlanError("\n".join(errors))
    if not isinstance(data, dict):
        raise PlanError(f"{where}:{lines.get((), 1)}: plan: expected a mapping with `name:` and `tasks:`, got {type(data).__name__}")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        raise PlanError(_join(_pydantic_errors(e, where, lines))) from None
    env = os.environ if environ is None else environ
    loaded = LoadedPlan(plan, p, p.absolute().parent, model or plan.model or env.get("TEAM_MODEL") or None, lines)
    errors = _check(loaded, where)
    if errors:
        raise PlanError(_join(errors))
    return loaded


def _join(errors: list[str], limit: int = 20) -> str:
    more = [f"... and {len(errors) - limit} more problems"] if len(errors) > limit else []
    return "\n".join(errors[:limit] + more)


def _check(lp: LoadedPlan, where: str) -> list[str]:
    plan, lines = lp.plan, lp.lines
    errors: list[str] = []

    def err(loc: Loc, msg: str) -> None:
        errors.append(f"{where}:{_line(lines, loc)}: {_field(loc)}: {msg}")

    first: dict[str, int] = {}
    for i, t in enumerate(plan.tasks):
        if t.id in first:
            err(("tasks", i, "id"), f"duplicate id {t.id!r} (first at line {_line(lines, ('tasks', first[t.id], 'id'))})")
        else:
            first[t.id] = i
        if len(lp.store_name(t)) > 64:
            err(("tasks", i, "id"), f"plan name + '.' + id must be ≤ 64 chars ({lp.store_name(t)!r})")
        if t.run is not None and t.prompt is not None:
            err(("tasks", i, "prompt"), f"task {t.id!r} has both run and prompt; keep `run` (shell) or `prompt` (agent)")
        elif t.run is None and t.prompt is None:
            err(("tasks", i), f"task {t.id!r} has neither run nor prompt; add `run: COMMAND` or `prompt: TEXT`")
        members = {m.name for m in plan.team}
        if t.assignee is not None and plan.team and t.assignee not in members:
            err(("tasks", i, "assignee"), f"{t.assignee!r} is not in `team:` ({', '.join(sorted(members))})")
        cwd = lp.task_cwd(t)
        if not cwd.is_dir():
            loc = ("tasks", i, "cwd") if t.cwd else ("defaults", "cwd")
            err(loc, f"directory {cwd} does not exist (cwd is relative to the plan file)")
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
    if agents and not lp.model:
        i = next(i for i, t in enumerate(plan.tasks) if t.kind == "agent")
        err(("tasks", i, "prompt"), "agent tasks need a model: set `model:` in the plan, pass --model or set "
            f"$TEAM_MODEL (agent tasks: {', '.join(t.id for t in agents)})")
    return errors


def find_cycle(needs: dict[str, list[str]]) -> list[str] | None:
    """A cycle ``[a, b, ..., a]`` following ``needs`` edges, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1 = on stack, 2 = done
    for start in needs:
        if start in state:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path = [start]
        state[start] = 1
        while stack:
            node, k = stack[-1]
            deps = needs.get(node, [])
            if k < len(deps):
                stack[-1] = (node, k + 1)
                nxt = deps[k]
                if state.get(nxt) == 1:
                    return path[path.index(nxt):] + [nxt]
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                state[node] = 2
                stack.pop()
                path.pop()
    return None


# ---------------------------------------------------------------- analysis
@dataclass
class Analysis:
    waves: list[list[str]]
    critical_path: list[str]
    critical_length: float
    total_work: float
    max_parallelism: int
    remaining: dict[str, float]


def analyse(plan: Plan) -> Analysis:
    """Waves (ASAP levels), critical path by estimate, widest wave, path-to-end per task."""
    weight = {t.id: t.estimate or 1.0 for t in plan.tasks}
    needs = {t.id: t.needs for t in plan.tasks}
    order = topo_order(needs)
    level: dict[str, int] = {}
    for tid in order:
        level[tid] = 1 + max((level[d] for d in needs[tid]), default=-1)
    waves: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for t in plan.tasks:
        waves[level[t.id]].append(t.id)
    dependents: dict[str, list[str]] = {tid: [] for tid in needs}
    for tid, deps in needs.items():
        for d in deps:
            dependents[d].append(tid)
    remaining: dict[str, float] = {}
    nxt: dict[str, str | None] = {}
    for tid in reversed(order):
        best = max(dependents[tid], key=lambda d: remaining[d], default=None)
        remaining[tid] = weight[tid] + (remaining[best] if best else 0.0)
        nxt[tid] = best
    start = max(reversed(order), key=lambda t: remaining[t]) if order else None
    path = []
    while start is not None:
        path.append(start)
        start = nxt[start]
    return Analysis(
        waves=waves,
        critical_path=path,
        critical_length=remaining[path[0]] if path else 0.0,
        total_work=sum(weight.values()),
        max_parallelism=max((len(w) for w in waves), default=0),
        remaining=remaining,
    )


def topo_order(needs: dict[str, list[str]]) -> list[str]:
    """Kahn's order, stable in declaration order; the graph must be acyclic."""
    indeg = {tid: len(set(deps)) for tid, deps in needs.items()}
    dependents: dict[str, list[str]] = {tid: [] for tid in needs}
    for tid, deps in needs.items():
        for d in set(deps):
            dependents[d].append(tid)
    ready = [tid for tid, n in indeg.items() if n == 0]
    out = []
    while ready:
        nxt = []
        for tid in ready:
            out.append(tid)
            for dep in dependents[tid]:
                indeg[dep] -= 1
                if indeg[dep] == 0:
                    nxt.append(dep)
        ready = nxt
    return out


def json_schema() -> dict[str, Any]:
    """The plan's JSON Schema (``team plan schema``)."""
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "team plan"
    return schema
