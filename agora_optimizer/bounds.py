"""Lower bounds on makespan and cost, used to normalise objectives and to report plan quality."""

from __future__ import annotations

from agora_optimizer.errors import UnplaceableTaskError
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.workflow import Task, Workflow


def feasible_types(workflow: Workflow, catalog: Catalog) -> dict[str, list[Resource]]:
    """The resource types each task fits on; raises ``UnplaceableTaskError`` for a task with none."""
    result: dict[str, list[Resource]] = {}
    for task in workflow.tasks:
        options = catalog.feasible(task)
        if not options:
            largest = catalog.largest()
            raise UnplaceableTaskError(
                task.id,
                task.cores,
                task.memory_bytes,
                f"{largest.name} ({largest.vcpus} vcpus, {largest.memory_bytes} bytes)",
            )
        result[task.id] = options
    return result


def fastest_runtime_s(task: Task, options: list[Resource]) -> float:
    return min(r.runtime_s(task) for r in options)


def makespan_lower_bound_s(workflow: Workflow, catalog: Catalog) -> float:
    """Critical path with no transfers, each task on the type that would finish it first.

    A task on type k starts no earlier than ``boot_s`` of k (a lease cannot begin before 0).
    """
    options = feasible_types(workflow, catalog)
    finish: dict[str, float] = {}
    for task_id in workflow.topological_order:
        ready = max((finish[e.parent] for e in workflow.parents[task_id]), default=0.0)
        task = workflow.by_id[task_id]
        finish[task_id] = min(max(ready, r.boot_s) + r.runtime_s(task) for r in options[task_id])
    return max(finish.values(), default=0.0)


def task_cost_lower_bound_usd(task: Task, resource: Resource) -> float:
    """The share of a machine's price that the task occupies (its larger of cores and memory)."""
    share = max(task.cores / resource.vcpus, task.memory_bytes / resource.memory_bytes)
    return resource.price_per_hour_usd / 3600.0 * resource.runtime_s(task) * share


def cost_lower_bound_usd(workflow: Workflow, catalog: Catalog) -> float:
    """Each task at its cheapest share of a feasible machine, ignoring billing steps and idle time."""
    options = feasible_types(workflow, catalog)
    return sum(min(task_cost_lower_bound_usd(t, r) for r in options[t.id]) for t in workflow.tasks)
