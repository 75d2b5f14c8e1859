"""What every engine is asked: a workflow, a catalog, an objective, and the bounds that scale it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment, Objective
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.bounds import cost_lower_bound_usd, feasible_types, makespan_lower_bound_s
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.spot import expected_cost_usd
from agora_optimizer.planning.spot_replay import worst_case_makespan_s
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.windowed_cost_bound import windowed_cost_bound_usd

WINDOWED_BOUND_S = 0.5
"""The time share of the bucket bound under a deadline (:mod:`~agora_optimizer.planning.windowed_cost_bound`):
it takes about 0.3 s at 1,000 tasks and 1 s at 30,000 on 2 shared cores; past its share it gives up, and
the packed-work bound stands alone."""


@dataclass(frozen=True)
class Bounds:
    """Lower bounds: no valid plan is faster than ``makespan_s`` nor cheaper than ``cost_usd``."""

    makespan_s: float
    cost_usd: float


def lower_bounds(
    workflow: Workflow, catalog: Catalog, deadline_s: float | None = None, windowed_s: float | None = WINDOWED_BOUND_S
) -> Bounds:
    """Bounds for the workflow on the catalog; a deadline tightens the cost bound, and so does the bucket
    bound under it (given ``windowed_s`` seconds; None: as long as it takes), the larger of the two."""
    cost = cost_lower_bound_usd(workflow, catalog, deadline_s)
    if deadline_s is not None:
        windowed = windowed_cost_bound_usd(
            workflow, feasible_types(workflow, catalog), deadline_s, TimeBudget(windowed_s)
        )
        cost = max(cost, windowed)
    return Bounds(makespan_lower_bound_s(workflow, catalog), cost)


def score(objective: Objective, makespan: float, cost: float, bounds: Bounds) -> tuple[float, float]:
    """The objective's value (smaller is better); the second element breaks ties.

    time: T / T_lb; cost: C / C_lb; balanced: ``alpha * T/T_lb + (1 - alpha) * C/C_lb``.
    """
    t = makespan / max(bounds.makespan_s, 1e-9)
    c = cost / max(bounds.cost_usd, 1e-12)
    if objective.kind == "time":
        return (t, c)
    if objective.kind == "cost":
        return (c, t)
    return (objective.alpha * t + (1 - objective.alpha) * c, t)


def meets_limits(objective: Objective, makespan: float, cost: float) -> bool:
    """Whether a plan of this makespan and cost honours the deadline and the budget."""
    if objective.deadline_s is not None and makespan > objective.deadline_s + 1e-6:
        return False
    return objective.budget_usd is None or cost <= objective.budget_usd * (1 + 1e-9)


def written_assignments(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> list[Assignment]:
    """The assignments as the plan file states them: each task's own ``runtime_s / speed``.

    The engines plan with each type's ``added_latency_s`` in the duration
    (:meth:`~agora_optimizer.model.catalog.Resource.runtime_s`): a task holds its machine from
    being dispatched to its slot being free. The spec's duration is the task's run alone, so the
    run is written at the end of that hold, ``[end - runtime_s / speed, end)``. It stays a valid
    plan: each run lies within its hold (capacities hold), a child's hold begins after its parents'
    holds end (so do the runs), the makespan is unchanged, and each lease only shortens.
    """
    by_name = catalog.by_name
    written = []
    for a in assignments:
        resource, task = by_name.get(a.resource), workflow.by_id.get(a.task)
        if resource is None or task is None or resource.added_latency_s <= 0:
            written.append(a)
            continue
        written.append(replace(a, start_s=max(a.start_s, a.end_s - task.runtime_s / resource.speed)))
    return written


def planned_catalog(workflow: Workflow, catalog: Catalog) -> Catalog:
    """The types agora plans ``workflow`` with: without the GPU types when no task needs a GPU and every
    task fits a type without one; else all of them.

    GPU machines are kept for the work that needs them. A plan may put CPU work on them (the spec
    allows it), but a time plan would then lease them for work they hardly speed up, at several
    times the price per core (on the AWS catalog, the cycles 10,000-task time plan put a third of
    its tasks on GPU types for the same makespan at three times the cost). A workflow with GPU tasks
    keeps every type, so that CPU tasks may use the free cores of the GPU machines it leases.
    """
    if workflow.uses_gpus or not any(r.gpus for r in catalog.resources):
        return catalog
    without = tuple(r for r in catalog.resources if not r.gpus)
    if not all(any(r.fits(task) for r in without) for task in workflow.tasks):
        return catalog
    return replace(catalog, resources=without)


@dataclass(frozen=True)
class Problem:
    """One planning question. Build it with :meth:`create` (checks every task fits somewhere)."""

    workflow: Workflow
    catalog: Catalog
    objective: Objective
    bounds: Bounds

    @classmethod
    def create(cls, workflow: Workflow, catalog: Catalog, objective: Objective) -> Problem:
        feasible_types(workflow, catalog)
        catalog = planned_catalog(workflow, catalog)
        return cls(workflow, catalog, objective, lower_bounds(workflow, catalog, objective.deadline_s))

    @cached_property
    def options(self) -> dict[str, list[Resource]]:
        """The resource types each task fits on."""
        return feasible_types(self.workflow, self.catalog)

    def evaluate(self, assignments: Iterable[Assignment]) -> tuple[float, float]:
        """(makespan_s, cost_usd) of a schedule, recomputed from its assignments.

        With spot types in the catalog (``docs/spot.md``): the worst-case makespan (the latest end of a
        run in which one spot task is interrupted at its attempt's end and re-runs on its fallback),
        which the deadline holds, and the expected cost (the leases plus each spot task's chance of a
        re-run times its cost), which the objective and the budget see. Without, the spec's makespan
        and cost."""
        items = list(assignments)
        if self.catalog.has_spot:
            return (
                worst_case_makespan_s(items, self.workflow, self.catalog),
                expected_cost_usd(items, self.workflow, self.catalog),
            )
        return makespan_s(items), cost_usd(items, self.catalog)

    def written(self, assignments: Iterable[Assignment]) -> list[Assignment]:
        """The assignments with the spec's durations (:func:`written_assignments`)."""
        return written_assignments(assignments, self.workflow, self.catalog)

    def score(self, assignments: Iterable[Assignment]) -> tuple[float, float]:
        return score(self.objective, *self.evaluate(assignments), self.bounds)

    def meets_limits(self, assignments: Iterable[Assignment]) -> bool:
        return meets_limits(self.objective, *self.evaluate(assignments))

    def early_starts(self, assignments: Iterable[Assignment]) -> list[Assignment]:
        """The assignments that start before their type's ``earliest_start_s`` (release plus boot) or
        before their task's own ``release_s``.

        The spec's checker cannot see a release (it is a planning input, not a catalog or workflow
        field), so every engine's schedule is held to it here: no lease of a type begins before its
        release, and no task starts before its own.
        """
        by_name, tasks = self.catalog.by_name, self.workflow.by_id
        return [
            a
            for a in assignments
            if a.resource in by_name
            and a.task in tasks
            and a.start_s < by_name[a.resource].earliest_start_of(tasks[a.task]) - 1e-6
        ]

    def rank(self, makespan: float, cost: float) -> tuple[float, float, float]:
        """Order schedules: those within the limits first (by score), then by how far they miss them."""
        return (self.excess(makespan, cost), *score(self.objective, makespan, cost, self.bounds))

    def excess(self, makespan: float, cost: float) -> float:
        """How far a schedule misses the deadline and budget, relative to them (0 when it meets both)."""
        objective = self.objective
        over = 0.0
        if objective.deadline_s is not None and makespan > objective.deadline_s + 1e-6:
            over += makespan / objective.deadline_s - 1
        if objective.budget_usd is not None and cost > objective.budget_usd * (1 + 1e-9):
            over += cost / max(objective.budget_usd, 1e-12) - 1
        return over
