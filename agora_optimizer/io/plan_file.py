"""Read and write plan files (JSON, section 4 of the spec)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from agora_optimizer.io.documents import Node, read_document, write_text_atomically
from agora_optimizer.model.limits import MAX_CORES, MAX_GPUS, MAX_MEMORY_BYTES, MAX_TIME_S, MAX_USD
from agora_optimizer.model.plan import (
    OBJECTIVE_KINDS,
    PLAN_FORMAT,
    Assignment,
    Objective,
    Plan,
    SolverInfo,
    SolverStatus,
    SpotFigures,
)
from agora_optimizer.model.workflow import shown

_STATUSES: tuple[SolverStatus, ...] = ("optimal", "feasible", "heuristic")
_QUANTILE_LABEL = re.compile(r"p\d{1,2}(\.\d+)?")


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The plan as the JSON object of the spec, keys in the spec's order."""
    return {
        "format": plan.format,
        "workflow": plan.workflow,
        "catalog": plan.catalog,
        "objective": asdict(plan.objective),
        "makespan_s": plan.makespan_s,
        "cost_usd": plan.cost_usd,
        "assignments": [_assignment_dict(a) for a in plan.assignments],
        "solver": asdict(plan.solver),
        "created_at": plan.created_at,
        **({} if plan.spot is None else {"spot": asdict(plan.spot)}),
        **({} if plan.runtime_quantile is None else {"runtime_quantile": plan.runtime_quantile}),
        **({} if plan.workflow_source is None else {"workflow_source": plan.workflow_source}),
    }


def _assignment_dict(assignment: Assignment) -> dict[str, Any]:
    """An assignment's keys; ``gpus`` only where it reserves some (section 5: absent means 0), so
    that a plan without GPUs reads as it did before them."""
    a = assignment  # its fields by name, not asdict(), which deep-copies each one (a 30,000-task plan: 0.3 s)
    document: dict[str, Any] = {
        "task": a.task,
        "resource": a.resource,
        "machine": a.machine,
        "start_s": a.start_s,
        "end_s": a.end_s,
        "cores": a.cores,
        "memory_bytes": a.memory_bytes,
    }
    if a.gpus:
        document["gpus"] = a.gpus
    return document


def write_plan(plan: Plan, path: str | Path) -> None:
    write_text_atomically(path, plan_json(plan, str(path)))


def plan_json(plan: Plan, target: str) -> str:
    """The plan file's text; a plan the reader would refuse (a number out of range, never
    ``Infinity`` or ``NaN``) is refused here instead, naming ``target`` and the field."""
    document = plan_to_dict(plan)
    plan_from_document(document, target)  # what is written must read back
    return json.dumps(document, indent=1, allow_nan=False) + "\n"


def load_plan(path: str | Path) -> Plan:
    """Read a plan file, checking every required key and its type (not the schedule's rules)."""
    return plan_from_document(read_document(path), str(path))


def plan_from_document(document: Any, source: str) -> Plan:
    root = Node(document, source)
    root.mapping()
    fmt = root.get("format").string()
    if fmt != PLAN_FORMAT:
        raise root.get("format").fail(f"expected {PLAN_FORMAT!r}, got {shown(fmt)}")
    created_at = root.get("created_at").string()
    try:
        datetime.fromisoformat(created_at.replace("Z", "+00:00"))
    except ValueError:
        raise root.get("created_at").fail(f"not an ISO 8601 timestamp: {shown(created_at)}") from None
    return Plan(
        format=fmt,
        workflow=root.get("workflow").string(),
        catalog=root.get("catalog").string(),
        objective=_objective(root.get("objective")),
        makespan_s=root.get("makespan_s").number(maximum=MAX_TIME_S),
        cost_usd=root.get("cost_usd").number(maximum=MAX_USD),
        assignments=tuple(_assignment(item) for item in root.get("assignments").items()),
        solver=_solver(root.get("solver")),
        created_at=created_at,
        spot=_spot(root.get("spot", None)),
        runtime_quantile=_runtime_quantile(root.get("runtime_quantile", None)),
        workflow_source=_workflow_source(root.get("workflow_source", None)),
    )


def _workflow_source(node: Node) -> str | None:
    """The optional ``workflow_source``: the workflow file (or ``airflow:DAG_ID``) the plan was made from."""
    if node.optional() is None:
        return None
    return node.string()


def _runtime_quantile(node: Node) -> str | None:
    """The optional ``runtime_quantile`` (``p90``): the predicted runtimes' quantile the plan was made from."""
    if node.optional() is None:
        return None
    label = node.string()
    if not _QUANTILE_LABEL.fullmatch(label):
        raise node.fail(f"expected a quantile such as p50 or p90, got {shown(label)}")
    return label


def _spot(node: Node) -> SpotFigures | None:
    """The optional ``spot`` figures (``docs/spot.md``): absent in plans without spot tasks."""
    if node.optional() is None:
        return None
    return SpotFigures(
        spot_tasks=node.get("spot_tasks").integer(maximum=1e9),
        expected_reruns=node.get("expected_reruns").number(maximum=1e9),
        expected_cost_usd=node.get("expected_cost_usd").number(maximum=MAX_USD),
        worst_case_makespan_s=node.get("worst_case_makespan_s").number(maximum=MAX_TIME_S),
    )


def _objective(node: Node) -> Objective:
    kind = node.get("kind").string()
    if kind not in OBJECTIVE_KINDS:
        raise node.get("kind").fail(f"expected one of {', '.join(OBJECTIVE_KINDS)}, got {shown(kind)}")
    deadline = node.get("deadline_s").optional()
    budget = node.get("budget_usd").optional()
    return Objective(
        kind=kind,
        alpha=node.get("alpha").number(maximum=1.0),
        deadline_s=None if deadline is None else deadline.number(strictly_positive=True, maximum=MAX_TIME_S),
        budget_usd=None if budget is None else budget.number(maximum=MAX_USD),
    )


def _assignment(node: Node) -> Assignment:
    start = node.get("start_s").number(maximum=MAX_TIME_S)
    end = node.get("end_s").number(maximum=MAX_TIME_S)
    if end < start:
        raise node.get("end_s").fail(f"ends before it starts ({end} < start_s {start})")
    return Assignment(
        task=node.get("task").string(),
        resource=node.get("resource").string(),
        machine=node.get("machine").string(),
        start_s=start,
        end_s=end,
        cores=node.get("cores").integer(minimum=1, maximum=MAX_CORES),
        memory_bytes=node.get("memory_bytes").integer(maximum=MAX_MEMORY_BYTES),
        gpus=node.get("gpus", 0).integer(maximum=MAX_GPUS),
    )


def _solver(node: Node) -> SolverInfo:
    status = node.get("status").string()
    if status not in _STATUSES:
        raise node.get("status").fail(f"expected one of {', '.join(_STATUSES)}, got {shown(status)}")
    gap = node.get("gap").optional()
    return SolverInfo(
        method=node.get("method").string(),
        status=status,
        gap=None if gap is None else gap.number(maximum=1e12),
        wall_s=node.get("wall_s").number(maximum=MAX_TIME_S),
    )
