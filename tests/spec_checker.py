"""Independent checker for agora plans ("agora-plan/1").

Written from the contract page ``docs/spec/agora-model.md`` (the repository's copy of the shared spec) (sections 1-5;
section 5's GPUs: a WfFormat task's ``gpus`` key in its execution record, else in its specification entry, else 0)
and the WfFormat 1.5 input files alone: it deliberately imports nothing from the
project, so that a plan which passes here is checkable by an outsider with only
the spec page, the workflow file and the catalog file.

Dependencies: the standard library and PyYAML.

Public functions
----------------
``check_plan(plan, workflow_path, catalog_path) -> list[str]``
    One human-readable violation per problem; an empty list means the plan is
    valid. Every message starts with ``[rule]`` naming the rule it breaks.
``recompute(plan, workflow_path, catalog_path) -> (makespan_s, cost_usd)``
    The makespan and cost that section 3 gives for the plan's assignments.
``lease_cost(price_per_hour_usd, granularity_s, minimum_s, lease_s) -> float``
    The section 3 cost of one lease.
``load_workflow(path)`` / ``load_catalog(path)``
    The parsed inputs (raise ``ValueError`` for files that do not follow the format).
``main(argv=None) -> int``
    CLI: ``python tests/spec_checker.py PLAN.json --workflow W.json --catalog C.yaml``.

Tolerances
----------
- times: 1e-6 s (``TIME_TOL``), as the spec says; tasks and leases occupy
  ``[start, end)`` and an overlap of at most 1e-6 s is not an overlap;
- durations: ``1e-6 s + 1e-9 * runtime_s / speed``;
- billing: the lease length is shortened by 1e-6 s and a further 1e-9 billing
  unit is removed before ``ceil`` so float noise never bills an extra unit;
- makespan/cost claims: 0.5 % of the recomputed value, at least 1e-9;
- budget: ``cost <= budget + 1e-9 + 1e-9 * budget``; deadline: ``+ 1e-6 s``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

PLAN_FORMAT = "agora-plan/1"
SOLVER_STATUSES = ("optimal", "feasible", "heuristic")

TIME_TOL = 1e-6  # seconds
DURATION_REL_TOL = 1e-9
CEIL_TOL = 1e-9  # billing units
CLAIM_REL_TOL = 0.005
CLAIM_ABS_FLOOR = 1e-9
BUDGET_TOL = 1e-9

MACHINE_RE = re.compile(r"^(?P<type>.+)#(?P<n>0|[1-9][0-9]*)$")
ASSIGNMENT_KEYS = (
    "task",
    "resource",
    "machine",
    "start_s",
    "end_s",
    "cores",
    "memory_bytes",
)


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Task:
    id: str
    runtime_s: float
    cores: float
    memory_bytes: float | None  # None = not recorded (missing or 0)
    gpus: float = 0.0  # section 5


@dataclass(frozen=True)
class Workflow:
    tasks: dict[str, Task]
    edges: dict[tuple[str, str], float]  # (parent, child) -> bytes


@dataclass(frozen=True)
class Resource:
    name: str
    vcpus: float
    memory_bytes: float
    speed: float
    price_per_hour_usd: float
    count: int | None  # None = unlimited
    granularity_s: float
    minimum_s: float
    boot_s: float
    gpus: float = 0.0  # section 5


@dataclass(frozen=True)
class Catalog:
    bandwidth_bytes_per_s: float
    resources: dict[str, Resource]


def _number(value: Any, what: str) -> float:
    """float() of a catalog/workflow number (YAML 1.1 may hand us '1.25e9' as a str)."""
    try:
        result = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: expected a number, got {value!r}") from None
    if not math.isfinite(result):
        raise ValueError(f"{what}: expected a finite number, got {value!r}")
    return result


def load_workflow(path: str | Path) -> Workflow:
    """Read a WfFormat 1.5 instance: runtimes, cores, memory and byte-weighted edges."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    try:
        spec = doc["workflow"]["specification"]
        spec_tasks = spec["tasks"]
        exec_tasks = doc["workflow"]["execution"]["tasks"]
    except (KeyError, TypeError):
        raise ValueError(
            f"{path}: not WfFormat 1.5 (needs workflow.specification.tasks and workflow.execution.tasks)"
        ) from None
    sizes = {f["id"]: _number(f.get("sizeInBytes", 0) or 0, f"file {f['id']}") for f in spec.get("files", [])}
    executed = {t["id"]: t for t in exec_tasks}

    tasks: dict[str, Task] = {}
    for st in spec_tasks:
        tid = st["id"]
        et = executed.get(tid)
        if et is None or et.get("runtimeInSeconds") is None:
            raise ValueError(f"{path}: task {tid} has no recorded runtimeInSeconds")
        core_count = et.get("coreCount")
        gpus = et.get("gpus", st.get("gpus"))
        memory = et.get("memoryInBytes")
        memory = _number(memory, f"{tid}.memoryInBytes") if memory is not None else 0.0
        tasks[tid] = Task(
            id=tid,
            runtime_s=_number(et["runtimeInSeconds"], f"{tid}.runtimeInSeconds"),
            cores=_number(core_count, f"{tid}.coreCount") if core_count is not None else 1.0,
            memory_bytes=memory if memory > 0 else None,
            gpus=_number(gpus, f"{tid}.gpus") if gpus is not None else 0.0,
        )

    by_id = {st["id"]: st for st in spec_tasks}
    edges: dict[tuple[str, str], float] = {}
    for st in spec_tasks:
        pairs = [(p, st["id"]) for p in st.get("parents", []) or []]
        pairs += [(st["id"], c) for c in st.get("children", []) or []]
        for parent, child in pairs:
            if parent not in by_id or child not in by_id:
                raise ValueError(f"{path}: edge {parent} -> {child} names an unknown task")
            if (parent, child) not in edges:
                edges[(parent, child)] = _edge_bytes(by_id[parent], by_id[child], sizes, path)
    return Workflow(tasks=tasks, edges=edges)


def _edge_bytes(parent: dict[str, Any], child: dict[str, Any], sizes: dict[str, float], path: Any) -> float:
    """Total size of the files the parent writes and the child reads."""
    shared = set(parent.get("outputFiles", []) or []) & set(child.get("inputFiles", []) or [])
    missing = sorted(shared - sizes.keys())
    if missing:
        raise ValueError(f"{path}: files referenced but not declared: {missing}")
    return float(sum(sizes[f] for f in shared))


def _load_mapping(path: str | Path) -> Any:
    text = Path(path).read_text(encoding="utf-8")
    if str(path).lower().endswith(".json"):
        return json.loads(text)
    return yaml.safe_load(text)


def load_catalog(path: str | Path) -> Catalog:
    """Read a section-2 catalog (YAML or JSON)."""
    doc = _load_mapping(path)
    try:
        bandwidth = _number(doc["network"]["bandwidth_bytes_per_s"], "network.bandwidth_bytes_per_s")
        entries = doc["resources"]
    except (KeyError, TypeError):
        raise ValueError(f"{path}: needs network.bandwidth_bytes_per_s and resources[]") from None
    if bandwidth <= 0:
        raise ValueError(f"{path}: bandwidth must be > 0")
    resources: dict[str, Resource] = {}
    for entry in entries:
        res = _resource(entry, path)
        if res.name in resources:
            raise ValueError(f"{path}: resource name {res.name!r} is not unique")
        resources[res.name] = res
    return Catalog(bandwidth_bytes_per_s=bandwidth, resources=resources)


def _resource(entry: dict[str, Any], path: Any) -> Resource:
    required = (
        "name",
        "backend",
        "vcpus",
        "memory_gib",
        "speed",
        "price_per_hour_usd",
        "count",
        "billing",
        "boot_s",
    )
    missing = [k for k in required if k not in entry]
    if missing or not isinstance(entry.get("billing"), dict):
        raise ValueError(f"{path}: resource {entry.get('name')!r} lacks {missing or ['billing{}']}")
    name = str(entry["name"])
    billing = entry["billing"]
    if "granularity_s" not in billing or "minimum_s" not in billing:
        raise ValueError(f"{path}: resource {name}: billing needs granularity_s and minimum_s")
    speed = _number(entry["speed"], f"{name}.speed")
    if speed <= 0:
        raise ValueError(f"{path}: resource {name}: speed must be > 0")
    count = entry["count"]
    return Resource(
        name=name,
        vcpus=_number(entry["vcpus"], f"{name}.vcpus"),
        memory_bytes=_number(entry["memory_gib"], f"{name}.memory_gib") * 2**30,
        speed=speed,
        price_per_hour_usd=_number(entry["price_per_hour_usd"], f"{name}.price_per_hour_usd"),
        count=None if count is None else int(_number(count, f"{name}.count")),
        granularity_s=_number(billing["granularity_s"], f"{name}.billing.granularity_s"),
        minimum_s=_number(billing["minimum_s"], f"{name}.billing.minimum_s"),
        boot_s=_number(entry["boot_s"], f"{name}.boot_s"),
        gpus=_number(entry.get("gpus", 0), f"{name}.gpus"),
    )


# --------------------------------------------------------------------------- plan model


@dataclass(frozen=True)
class Placement:
    """One assignment that is well-formed enough to take part in schedule checks."""

    task: str
    resource: Resource
    machine: str
    start: float
    end: float
    cores: float
    memory: float
    gpus: float = 0.0


@dataclass(frozen=True)
class Lease:
    machine: str
    resource: Resource
    start: float
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start

    @property
    def cost(self) -> float:
        r = self.resource
        return lease_cost(r.price_per_hour_usd, r.granularity_s, r.minimum_s, self.length)


def lease_cost(price_per_hour_usd: float, granularity_s: float, minimum_s: float, lease_s: float) -> float:
    """price/3600 * max(minimum, ceil(lease/granularity) * granularity), float-safe."""
    length = max(0.0, lease_s - TIME_TOL)
    if granularity_s and granularity_s > 0:
        billed = max(0, math.ceil(length / granularity_s - CEIL_TOL)) * granularity_s
    else:  # no granularity given: bill the exact length
        billed = max(0.0, lease_s)
    return price_per_hour_usd / 3600.0 * max(minimum_s, billed)


def _as_number(value: Any) -> float | None:
    """The value as a float if it is a finite JSON number (not a bool), else None."""
    return float(value) if _is_number(value) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _fmt(x: float) -> str:
    return f"{x:.9g}"


# --------------------------------------------------------------------------- header checks


def _check_header(plan: dict[str, Any], out: list[str]) -> None:
    """Section 4: every key shown is required; format, created_at, solver status."""
    required = (
        "format",
        "workflow",
        "catalog",
        "objective",
        "makespan_s",
        "cost_usd",
        "assignments",
        "solver",
        "created_at",
    )
    for key in required:
        if key not in plan:
            out.append(f"[keys] plan lacks required key {key!r}")
    if "format" in plan and plan["format"] != PLAN_FORMAT:
        out.append(f"[format] format is {plan['format']!r}, expected {PLAN_FORMAT!r}")
    for key in ("workflow", "catalog"):
        if key in plan and not (isinstance(plan[key], str) and plan[key]):
            out.append(f"[keys] {key} must be a non-empty string, got {plan[key]!r}")
    for key in ("makespan_s", "cost_usd"):
        if key in plan and not _is_number(plan[key]):
            out.append(f"[keys] {key} must be a number, got {plan[key]!r}")
    if "assignments" in plan and not isinstance(plan["assignments"], list):
        out.append("[keys] assignments must be a list")
    if "objective" in plan:
        _check_objective_keys(plan["objective"], out)
    if "solver" in plan:
        _check_solver_keys(plan["solver"], out)
    if "created_at" in plan:
        _check_created_at(plan["created_at"], out)


def _check_objective_keys(objective: Any, out: list[str]) -> None:
    if not isinstance(objective, dict):
        out.append("[objective] objective must be an object")
        return
    for key in ("kind", "alpha", "deadline_s", "budget_usd"):
        if key not in objective:
            out.append(f"[objective] objective lacks required key {key!r}")
    if "kind" in objective and not (isinstance(objective["kind"], str) and objective["kind"]):
        out.append(f"[objective] kind must be a non-empty string, got {objective['kind']!r}")
    if "alpha" in objective and not _is_number(objective["alpha"]):
        out.append(f"[objective] alpha must be a number, got {objective['alpha']!r}")
    for key in ("deadline_s", "budget_usd"):
        value = objective.get(key)
        if value is not None and not (_is_number(value) and value >= 0):
            out.append(f"[objective] {key} must be null or a number >= 0, got {value!r}")


def _check_solver_keys(solver: Any, out: list[str]) -> None:
    if not isinstance(solver, dict):
        out.append("[solver] solver must be an object")
        return
    for key in ("method", "status", "gap", "wall_s"):
        if key not in solver:
            out.append(f"[solver] solver lacks required key {key!r}")
    if "method" in solver and not (isinstance(solver["method"], str) and solver["method"]):
        out.append(f"[solver] method must be a non-empty string, got {solver['method']!r}")
    if "status" in solver and solver["status"] not in SOLVER_STATUSES:
        out.append(f"[solver] status {solver['status']!r} is not one of {SOLVER_STATUSES}")
    if solver.get("gap") is not None and not _is_number(solver["gap"]):
        out.append(f"[solver] gap must be null or a number, got {solver['gap']!r}")
    if "wall_s" in solver and not (_is_number(solver["wall_s"]) and solver["wall_s"] >= 0):
        out.append(f"[solver] wall_s must be a number >= 0, got {solver['wall_s']!r}")


def _check_created_at(value: Any, out: list[str]) -> None:
    if not isinstance(value, str):
        out.append(f"[created_at] created_at must be an ISO 8601 string, got {value!r}")
        return
    try:
        datetime.fromisoformat(value)
    except ValueError:
        out.append(f"[created_at] created_at {value!r} is not ISO 8601")


# --------------------------------------------------------------------------- assignments


def _placements(plan: dict[str, Any], wf: Workflow, cat: Catalog, out: list[str]) -> dict[str, Placement]:
    """Per-assignment rules; returns the well-formed assignments keyed by task id."""
    assignments = plan.get("assignments")
    if not isinstance(assignments, list):
        assignments = []
    placed: dict[str, Placement] = {}
    seen: set[str] = set()
    for index, a in enumerate(assignments):
        p = _placement(index, a, wf, cat, seen, out)
        if p is not None:
            placed[p.task] = p
    for tid in wf.tasks:
        if tid not in seen:
            out.append(f"[missing-task] workflow task {tid} has no assignment")
    return placed


def _placement(index: int, a: Any, wf: Workflow, cat: Catalog, seen: set[str], out: list[str]) -> Placement | None:
    where = f"assignment #{index}"
    if not isinstance(a, dict):
        out.append(f"[assignment] {where} is not an object")
        return None
    missing = [k for k in ASSIGNMENT_KEYS if k not in a]
    if missing:
        out.append(f"[assignment] {where} lacks keys {missing}")
    tid = a.get("task")
    where = f"assignment #{index} (task {tid})"
    if not isinstance(tid, str) or tid not in wf.tasks:
        out.append(f"[unknown-task] {where}: task {tid!r} is not in the workflow")
        return None
    if tid in seen:
        out.append(f"[duplicate-task] task {tid} is assigned more than once")
        return None
    seen.add(tid)
    task = wf.tasks[tid]

    ok = not missing
    bad_numbers = [k for k in ("start_s", "end_s", "cores", "memory_bytes", "gpus") if k in a and not _is_number(a[k])]
    if bad_numbers:
        out.append(f"[assignment] {where}: {bad_numbers} must be finite numbers")
        ok = False
    name = a.get("resource")
    resource = cat.resources.get(name) if isinstance(name, str) else None
    if resource is None:
        out.append(f"[unknown-resource] {where}: resource {a.get('resource')!r} is not in the catalog")
        ok = False
    if not _machine_ok(a.get("machine"), a.get("resource"), where, out):
        ok = False
    if not ok or resource is None:
        return None

    _check_duration(task, resource, a, where, out)
    _check_task_fit(task, resource, a, where, out)
    return Placement(
        task=tid,
        resource=resource,
        machine=a["machine"],
        start=float(a["start_s"]),
        end=float(a["end_s"]),
        cores=float(a["cores"]),
        memory=float(a["memory_bytes"]),
        gpus=float(a.get("gpus", 0)),
    )


def _machine_ok(machine: Any, resource_name: Any, where: str, out: list[str]) -> bool:
    m = MACHINE_RE.match(machine) if isinstance(machine, str) else None
    if m is None:
        out.append(f"[machine-id] {where}: machine {machine!r} is not of the form TYPE#N")
        return False
    if m.group("type") != resource_name:
        out.append(f"[machine-id] {where}: machine {machine} is not of type {resource_name!r}")
        return False
    return True


def _check_duration(task: Task, res: Resource, a: dict[str, Any], where: str, out: list[str]) -> None:
    expected = task.runtime_s / res.speed
    actual = a["end_s"] - a["start_s"]
    if abs(actual - expected) > TIME_TOL + DURATION_REL_TOL * abs(expected):
        out.append(
            f"[duration] {where}: end_s - start_s = {_fmt(actual)} s but "
            f"runtime_s / speed = {_fmt(task.runtime_s)} / {_fmt(res.speed)} "
            f"= {_fmt(expected)} s"
        )


def _check_task_fit(task: Task, res: Resource, a: dict[str, Any], where: str, out: list[str]) -> None:
    cores, memory = a["cores"], a["memory_bytes"]
    if cores != task.cores:
        out.append(f"[cores] {where}: cores {cores} != the task's cores {_fmt(task.cores)}")
    if cores > res.vcpus:
        out.append(f"[cores] {where}: cores {cores} > vcpus {_fmt(res.vcpus)} of {res.name}")
    if memory < 0:
        out.append(f"[memory] {where}: memory_bytes {memory} is negative")
    if task.memory_bytes is not None and memory < task.memory_bytes:
        out.append(
            f"[memory] {where}: memory_bytes {_fmt(memory)} < the task's recorded "
            f"memoryInBytes {_fmt(task.memory_bytes)}"
        )
    if memory > res.memory_bytes:
        out.append(f"[memory] {where}: memory_bytes {_fmt(memory)} > {res.name} memory {_fmt(res.memory_bytes)} bytes")
    gpus = a.get("gpus", 0)  # section 5: absent means 0
    if gpus < task.gpus:
        out.append(f"[gpus] {where}: gpus {gpus} < the task's gpus {_fmt(task.gpus)}")
    if gpus > res.gpus:
        out.append(f"[gpus] {where}: gpus {gpus} > gpus {_fmt(res.gpus)} of {res.name}")


# --------------------------------------------------------------------------- schedule checks


def _first_overload(
    items: Iterable[tuple[float, float, float, str]], capacity: float
) -> tuple[float, float, list[str]] | None:
    """Sweep intervals [start, end) with an amount each; the first instant where the
    total exceeds capacity, as (time, total, labels), or None.

    An interval stops counting TIME_TOL before its end, so overlaps of at most
    TIME_TOL are ignored; intervals no longer than TIME_TOL occupy nothing.
    """
    events = []
    for start, end, amount, label in items:
        if end - start <= TIME_TOL:
            continue
        events.append((end - TIME_TOL, 0, amount, label))  # releases sort first
        events.append((start, 1, amount, label))
    events.sort(key=lambda e: (e[0], e[1]))
    active: dict[str, float] = {}
    total = 0.0
    for time, kind, amount, label in events:
        if kind == 0:
            total -= active.pop(label)
            continue
        active[label] = amount
        total += amount
        if total > capacity:
            return time, total, sorted(active)
    return None


def _by_machine(placed: dict[str, Placement]) -> dict[str, list[Placement]]:
    groups: dict[str, list[Placement]] = {}
    for p in placed.values():
        groups.setdefault(p.machine, []).append(p)
    return groups


def _check_capacity(placed: dict[str, Placement], out: list[str]) -> None:
    for machine, ps in sorted(_by_machine(placed).items()):
        res = ps[0].resource
        for rule, field, cap in (
            ("capacity-cores", "cores", res.vcpus),
            ("capacity-memory", "memory", res.memory_bytes),
            ("capacity-gpus", "gpus", res.gpus),
        ):
            hit = _first_overload(((p.start, p.end, getattr(p, field), p.task) for p in ps), cap)
            if hit:
                time, total, tasks = hit
                out.append(
                    f"[{rule}] machine {machine} at t={_fmt(time)} s: sum of {field} "
                    f"{_fmt(total)} > {_fmt(cap)} (tasks {', '.join(tasks)})"
                )


def _check_precedence(placed: dict[str, Placement], wf: Workflow, cat: Catalog, out: list[str]) -> None:
    for (i, j), nbytes in sorted(wf.edges.items()):
        pi, pj = placed.get(i), placed.get(j)
        if pi is None or pj is None:
            continue
        transfer = nbytes / cat.bandwidth_bytes_per_s if pi.machine != pj.machine else 0.0
        ready = pi.end + transfer
        if pj.start < ready - TIME_TOL:
            out.append(
                f"[precedence] {j} starts at {_fmt(pj.start)} s before parent {i} "
                f"end {_fmt(pi.end)} s + transfer {_fmt(transfer)} s "
                f"({_fmt(nbytes)} bytes, {pi.machine} -> {pj.machine})"
            )


def _leases(placed: dict[str, Placement]) -> list[Lease]:
    leases = []
    for machine, ps in sorted(_by_machine(placed).items()):
        res = ps[0].resource
        leases.append(
            Lease(
                machine=machine,
                resource=res,
                start=min(p.start for p in ps) - res.boot_s,
                end=max(p.end for p in ps),
            )
        )
    return leases


def _check_leases(leases: list[Lease], out: list[str]) -> None:
    for lease in leases:
        if lease.start < -TIME_TOL:
            out.append(
                f"[lease-start] machine {lease.machine}: lease starts at "
                f"{_fmt(lease.start)} s (first start - boot_s {_fmt(lease.resource.boot_s)}) < 0"
            )
    by_type: dict[str, list[Lease]] = {}
    for lease in leases:
        by_type.setdefault(lease.resource.name, []).append(lease)
    for name, group in sorted(by_type.items()):
        count = group[0].resource.count
        if count is None:
            continue
        hit = _first_overload(((ls.start, ls.end, 1.0, ls.machine) for ls in group), count)
        if hit:
            time, total, machines = hit
            out.append(
                f"[lease-count] {int(total)} machines of {name} leased at "
                f"t={_fmt(time)} s > count {count} ({', '.join(machines)})"
            )


# --------------------------------------------------------------------------- totals


def _totals(placed: dict[str, Placement]) -> tuple[float, float]:
    makespan = max((p.end for p in placed.values()), default=0.0)
    cost = sum(lease.cost for lease in _leases(placed))
    return makespan, cost


def _check_claims(plan: dict[str, Any], makespan: float, cost: float, out: list[str]) -> None:
    for key, rule, actual in (("makespan_s", "makespan-claim", makespan), ("cost_usd", "cost-claim", cost)):
        claim = _as_number(plan.get(key))
        if claim is not None and abs(claim - actual) > max(CLAIM_REL_TOL * abs(actual), CLAIM_ABS_FLOOR):
            out.append(
                f"[{rule}] plan claims {key} = {_fmt(claim)} but the assignments "
                f"give {_fmt(actual)} (more than 0.5 % apart)"
            )


def _check_limits(plan: dict[str, Any], makespan: float, cost: float, out: list[str]) -> None:
    """A plan whose objective sets deadline_s or budget_usd must meet it (recomputed and claimed)."""
    objective = plan.get("objective")
    if not isinstance(objective, dict):
        return
    deadline, budget = _as_number(objective.get("deadline_s")), _as_number(objective.get("budget_usd"))
    if deadline is not None:
        for label, value in (("recomputed", makespan), ("claimed", _as_number(plan.get("makespan_s")))):
            if value is not None and value > deadline + TIME_TOL:
                out.append(f"[deadline] {label} makespan {_fmt(value)} s > deadline_s {_fmt(deadline)}")
    if budget is not None:
        for label, value in (("recomputed", cost), ("claimed", _as_number(plan.get("cost_usd")))):
            if value is not None and value > budget + BUDGET_TOL + BUDGET_TOL * abs(budget):
                out.append(f"[budget] {label} cost {_fmt(value)} USD > budget_usd {_fmt(budget)}")


# --------------------------------------------------------------------------- public API


def check_plan(plan: dict[str, Any], workflow_path: str | Path, catalog_path: str | Path) -> list[str]:
    """All violations of spec sections 3 and 4 by ``plan``; [] when it is valid."""
    wf = load_workflow(workflow_path)
    cat = load_catalog(catalog_path)
    if not isinstance(plan, dict):
        return ["[format] the plan is not a JSON object"]
    out: list[str] = []
    _check_header(plan, out)
    placed = _placements(plan, wf, cat, out)
    _check_capacity(placed, out)
    _check_precedence(placed, wf, cat, out)
    _check_leases(_leases(placed), out)
    makespan, cost = _totals(placed)
    _check_claims(plan, makespan, cost, out)
    _check_limits(plan, makespan, cost, out)
    return out


def recompute(plan: dict[str, Any], workflow_path: str | Path, catalog_path: str | Path) -> tuple[float, float]:
    """(makespan_s, cost_usd) per section 3, from the plan's well-formed assignments."""
    wf = load_workflow(workflow_path)
    cat = load_catalog(catalog_path)
    placed = _placements(plan if isinstance(plan, dict) else {}, wf, cat, [])
    return _totals(placed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check an agora-plan/1 plan against the spec.")
    parser.add_argument("plan", help="plan JSON file")
    parser.add_argument("--workflow", required=True, help="WfFormat 1.5 workflow JSON")
    parser.add_argument("--catalog", required=True, help="catalog YAML or JSON")
    args = parser.parse_args(argv)
    try:
        with open(args.plan, encoding="utf-8") as fh:
            plan = json.load(fh)
        violations = check_plan(plan, args.workflow, args.catalog)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:  # bad inputs
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in violations:
        print(line)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
