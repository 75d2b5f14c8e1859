"""The plan checker: every rule of section 3 of the spec, recomputed from the assignments.

``validate_plan`` returns one :class:`Violation` per broken rule instance; an empty
list means the plan is valid. Nothing here trusts the plan's own claims: not even its optional
``spot`` figures (``docs/spot.md``, outside the spec), which are recomputed when the plan carries them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from agora_optimizer.errors import PlanMismatchError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.leases import Lease, leases
from agora_optimizer.planning.leases import cost_usd as recompute_cost
from agora_optimizer.planning.leases import makespan_s as recompute_makespan
from agora_optimizer.planning.spot_replay import spot_summary

CLAIM_TOLERANCE = 0.005
_MACHINE_ID = re.compile(r"^(?P<type>.+)#(?P<n>\d+)$")


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def ensure_plan_matches(plan: Plan, workflow: Workflow) -> None:
    """Refuse to check a plan written for another workflow."""
    if plan.workflow != workflow.name:
        raise PlanMismatchError(f"plan is for workflow '{plan.workflow}', not '{workflow.name}' ({workflow.source})")


def validate_plan(plan: Plan, workflow: Workflow, catalog: Catalog) -> list[Violation]:
    found: list[Violation] = []
    by_task = _index_assignments(plan.assignments, workflow, found)
    known = [a for a in plan.assignments if a.resource in catalog.by_name]
    found += _check_placements(plan.assignments, workflow, catalog)
    found += _check_capacity(known, catalog)
    found += _check_precedence(by_task, workflow, catalog)
    lease_list = leases(known, catalog)
    found += _check_leases(lease_list)
    found += _check_claims(plan, catalog)
    if not found:  # the figures need every task placed once, on a type of the catalog
        found += _check_spot(plan, workflow, catalog)
    return found


def _check_spot(plan: Plan, workflow: Workflow, catalog: Catalog) -> list[Violation]:
    """The plan's ``spot`` figures against the ones its assignments give (``docs/spot.md``), and its
    deadline against the worst case of one interruption, which is what the deadline holds with spot."""
    claimed = plan.spot
    if claimed is None:
        return []  # optional: a plan on spot types may leave them out
    figures = spot_summary(plan.assignments, workflow, catalog)
    if figures is None:
        return [Violation("spot", "plan carries spot figures, but none of its tasks is on a spot type")]
    found = []
    if claimed.spot_tasks != figures.spot_tasks:
        found.append(
            Violation("spot", f"plan claims {claimed.spot_tasks} spot tasks, its assignments have {figures.spot_tasks}")
        )
    for name, claim, actual, unit in (
        ("expected re-runs", claimed.expected_reruns, figures.expected_reruns, ""),
        ("expected cost", claimed.expected_cost_usd, figures.expected_cost_usd, " USD"),
        ("worst-case makespan", claimed.worst_case_makespan_s, figures.worst_case_makespan_s, " s"),
    ):
        if not _close(claim, actual, 1e-9):
            found.append(Violation("spot", f"plan claims {name} {claim}{unit}, its assignments give {actual}{unit}"))
    deadline = plan.objective.deadline_s
    if deadline is not None and figures.worst_case_makespan_s > deadline + TIME_TOLERANCE_S:
        found.append(
            Violation(
                "spot-deadline",
                f"worst-case makespan {figures.worst_case_makespan_s} s (one spot task interrupted at its end) "
                f"exceeds the deadline {deadline} s",
            )
        )
    return found


def _index_assignments(
    assignments: Iterable[Assignment], workflow: Workflow, found: list[Violation]
) -> dict[str, Assignment]:
    by_task: dict[str, Assignment] = {}
    for a in assignments:
        if a.task not in workflow.by_id:
            found.append(Violation("unknown-task", f"task '{a.task}' is not in workflow '{workflow.name}'"))
        elif a.task in by_task:
            found.append(Violation("duplicate-task", f"task '{a.task}' is assigned more than once"))
        else:
            by_task[a.task] = a
    for task in workflow.tasks:
        if task.id not in by_task:
            found.append(Violation("missing-task", f"task '{task.id}' has no assignment"))
    return by_task


def _check_placements(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> list[Violation]:
    found = []
    for a in assignments:
        resource = catalog.by_name.get(a.resource)
        if resource is None:
            found.append(
                Violation("unknown-resource", f"task '{a.task}': resource '{a.resource}' is not in the catalog")
            )
            continue
        match = _MACHINE_ID.match(a.machine)
        if match is None or match["type"] != a.resource:
            found.append(Violation("machine-id", f"task '{a.task}': machine '{a.machine}' is not '{a.resource}#N'"))
        task = workflow.by_id.get(a.task)
        if task is None:
            continue
        expected = resource.runtime_s(task)
        if abs((a.end_s - a.start_s) - expected) > TIME_TOLERANCE_S + 1e-9 * expected:
            found.append(
                Violation(
                    "duration",
                    f"task '{a.task}' on {a.resource} lasts {a.end_s - a.start_s:.6f} s, "
                    f"expected runtime_s/speed = {expected:.6f} s",
                )
            )
        if a.cores != task.cores:
            found.append(Violation("cores", f"task '{a.task}' needs {task.cores} cores, plan gives {a.cores}"))
        if a.cores > resource.vcpus:
            found.append(
                Violation("cores", f"task '{a.task}' takes {a.cores} cores, {a.resource} has {resource.vcpus}")
            )
        if task.memory_source == "recorded" and a.memory_bytes < task.memory_bytes:
            found.append(
                Violation(
                    "memory",
                    f"task '{a.task}' reserves {a.memory_bytes} bytes, below its recorded peak {task.memory_bytes}",
                )
            )
        if a.memory_bytes > resource.memory_bytes:
            found.append(
                Violation(
                    "memory",
                    f"task '{a.task}' reserves {a.memory_bytes} bytes, {a.resource} has {resource.memory_bytes}",
                )
            )
        if a.gpus < task.gpus:
            found.append(Violation("gpus", f"task '{a.task}' needs {task.gpus} GPUs, plan gives {a.gpus}"))
        if a.gpus > resource.gpus:
            found.append(Violation("gpus", f"task '{a.task}' takes {a.gpus} GPUs, {a.resource} has {resource.gpus}"))
    return found


def _overloads(intervals: list[tuple[float, float, float]], limit: float) -> float | None:
    """First instant at which the summed demand of [start, end) intervals exceeds ``limit``."""
    events: list[tuple[float, int, float]] = []
    for start, end, demand in intervals:
        if end - start > TIME_TOLERANCE_S:
            events.append((start, 1, demand))
            events.append((end - TIME_TOLERANCE_S, 0, -demand))
    events.sort()
    total = 0.0
    for time, is_start, demand in events:
        total += demand
        if is_start and total > limit + 1e-9:
            return time
    return None


def _check_capacity(assignments: list[Assignment], catalog: Catalog) -> list[Violation]:
    found = []
    per_machine: dict[str, list[Assignment]] = defaultdict(list)
    for a in assignments:
        per_machine[a.machine].append(a)
    for machine, items in sorted(per_machine.items()):
        resource = catalog.by_name[items[0].resource]
        if any(a.resource != resource.name for a in items):
            found.append(Violation("machine-id", f"machine '{machine}' is given tasks of more than one resource type"))
        when = _overloads([(a.start_s, a.end_s, a.cores) for a in items], resource.vcpus)
        if when is not None:
            found.append(
                Violation("capacity", f"machine '{machine}' runs more than {resource.vcpus} cores at t={when:.6f} s")
            )
        when = _overloads([(a.start_s, a.end_s, a.memory_bytes) for a in items], resource.memory_bytes)
        if when is not None:
            found.append(
                Violation(
                    "capacity", f"machine '{machine}' holds more than {resource.memory_bytes} bytes at t={when:.6f} s"
                )
            )
        when = _overloads([(a.start_s, a.end_s, a.gpus) for a in items if a.gpus], resource.gpus)
        if when is not None:
            running = sorted(a.task for a in items if a.gpus and a.start_s <= when < a.end_s)
            found.append(
                Violation(
                    "capacity",
                    f"machine '{machine}' runs more than {resource.gpus} GPUs at t={when:.6f} s "
                    f"(tasks {', '.join(running)})",
                )
            )
    return found


def _check_precedence(by_task: dict[str, Assignment], workflow: Workflow, catalog: Catalog) -> list[Violation]:
    found = []
    for edge in workflow.edges:
        parent, child = by_task.get(edge.parent), by_task.get(edge.child)
        if parent is None or child is None:
            continue
        ready = parent.end_s
        if parent.machine != child.machine:
            ready += catalog.transfer_s(edge.bytes)
        if child.start_s < ready - TIME_TOLERANCE_S:
            found.append(
                Violation(
                    "precedence",
                    f"task '{edge.child}' starts at {child.start_s:.6f} s before parent '{edge.parent}' "
                    f"ends and its {edge.bytes} bytes arrive ({ready:.6f} s)",
                )
            )
    return found


def count_violations(assignments: Iterable[Assignment], catalog: Catalog) -> list[Violation]:
    """Where the schedule leases more machines of a type at once than its ``count``."""
    return [v for v in _check_leases(leases(assignments, catalog)) if v.rule == "count"]


def _check_leases(lease_list: list[Lease]) -> list[Violation]:
    found = []
    per_type: dict[str, list[Lease]] = defaultdict(list)
    for lease in lease_list:
        if lease.start_s < -TIME_TOLERANCE_S:
            found.append(
                Violation(
                    "lease",
                    f"machine '{lease.machine}' would be leased from {lease.start_s:.6f} s, before time 0 (boot_s)",
                )
            )
        per_type[lease.resource.name].append(lease)
    for name, items in sorted(per_type.items()):
        limit = items[0].resource.count
        if limit is None:
            continue
        when = _overloads([(lease.start_s, lease.end_s, 1) for lease in items], limit)
        if when is not None:
            found.append(Violation("count", f"more than {limit} machines of {name} are leased at t={when:.6f} s"))
    return found


def _close(claimed: float, actual: float, floor: float) -> bool:
    return abs(claimed - actual) <= max(CLAIM_TOLERANCE * abs(actual), floor)


def _check_claims(plan: Plan, catalog: Catalog) -> list[Violation]:
    found = []
    makespan = recompute_makespan(plan.assignments)
    cost = recompute_cost(plan.assignments, catalog)
    if not _close(plan.makespan_s, makespan, TIME_TOLERANCE_S):
        found.append(Violation("makespan", f"plan claims {plan.makespan_s} s, the assignments give {makespan} s"))
    if not _close(plan.cost_usd, cost, 1e-9):
        found.append(Violation("cost", f"plan claims {plan.cost_usd} USD, the leases cost {cost} USD"))
    deadline, budget = plan.objective.deadline_s, plan.objective.budget_usd
    if deadline is not None and makespan > deadline + TIME_TOLERANCE_S:
        found.append(Violation("deadline", f"makespan {makespan} s exceeds the deadline {deadline} s"))
    if budget is not None and cost > budget * (1 + 1e-9) + 1e-12:
        found.append(Violation("budget", f"cost {cost} USD exceeds the budget {budget} USD"))
    return found
