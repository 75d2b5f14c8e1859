"""Helpers for engine tests: small hand-made problems and a plan check by the project's validator."""

from __future__ import annotations

from collections.abc import Iterable

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.problem import Problem
from tests.conftest import CATALOGS, ENGINE_WORKFLOWS

BANDWIDTH = 1_000_000.0  # bytes per second: an edge of k * BANDWIDTH bytes takes k seconds
ENGINE_CATALOGS = ("aws-us-east-1", "hpc-36", "memory-tight")


def task(task_id: str, runtime_s: float, memory_gib: float = 1.0) -> Task:
    return Task(task_id, runtime_s, 1, int(memory_gib * GIB), task_id)


def edge(parent: str, child: str, transfer_s: float) -> Edge:
    return Edge(parent, child, int(transfer_s * BANDWIDTH))


def processor(name: str, speed: float, memory_gib: float = 8.0, count: int | None = 1, vcpus: int = 1) -> Resource:
    """A machine type billed per second with no minimum and no boot time."""
    return Resource(name, "slurm", vcpus, memory_gib, speed, 1.0, count, Billing(1.0, 0.0), 0.0)


def problem_of(tasks: list[Task], edges: list[Edge], resources: list[Resource]) -> Problem:
    workflow = Workflow.create("hand-made", tasks, edges)
    return Problem.create(workflow, Catalog(tuple(resources), BANDWIDTH), Objective(kind="time"))


def violations(problem: Problem, assignments: Iterable[Assignment]) -> list[str]:
    """Every rule that the schedule breaks, by :func:`agora_optimizer.planning.validate.validate_plan`."""
    from agora_optimizer.planning.validate import validate_plan

    items = tuple(assignments)
    plan = Plan(
        workflow=problem.workflow.name,
        catalog="test",
        objective=problem.objective,
        makespan_s=makespan_s(items),
        cost_usd=cost_usd(items, problem.catalog),
        assignments=items,
        solver=SolverInfo(method="test", status="heuristic", gap=None, wall_s=0.0),
        created_at="2026-01-01T00:00:00Z",
    )
    return [str(v) for v in validate_plan(plan, problem.workflow, problem.catalog)]


def bundled_problems() -> Iterable[tuple[str, Problem]]:
    """(label, problem) for every bundled workflow on every catalog the engines are benchmarked on."""
    catalogs = {name: load_catalog(CATALOGS / f"{name}.yaml") for name in ENGINE_CATALOGS}
    for path in ENGINE_WORKFLOWS:
        workflow = load_workflow(path)
        for name, catalog in catalogs.items():
            yield f"{workflow.name}@{name}", Problem.create(workflow, catalog, Objective(kind="time"))


def by_task(assignments: Iterable[Assignment]) -> dict[str, tuple[str, float, float]]:
    """task -> (machine, start, end)."""
    return {a.task: (a.machine, a.start_s, a.end_s) for a in assignments}
