"""The spot guard: takes spot capacity away from the tasks whose re-run would break the deadline.

With spot types in the catalog (``docs/spot.md``) a schedule meets the deadline only if its
worst-case makespan does (the latest end of a run in which one spot task is interrupted at the
last moment and re-runs on its fallback:
:func:`agora_optimizer.planning.spot_replay.worst_case_makespan_s`). When the best schedule so far
does not, the guard moves its spot machines onto their fallback types (the
on-demand types their interrupted tasks would re-run on, which fit all their tasks): every spot
machine with a task whose re-run alone would end after the deadline at once, then re-times the
schedule in its order, and again until the worst case ends in time. Where moving them all would
lease more machines of a fallback type than its ``count``, the latest one alone is moved, onto its
fallback or else the cheapest on-demand type of its backend that holds its tasks; where every one
would, it is left.
Where no spot machine is left to move and the schedule is still late, it plans the workflow again
on the on-demand types alone (deadline-aware list scheduling).
"""

from __future__ import annotations

from dataclasses import replace

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment, machine_type, unused_machine_id
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.retime import retime, start_order
from agora_optimizer.planning.spot_replay import rerun_makespans_s
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.validate import count_violations


class SpotGuardEngine(Engine):
    name = "spot-guard"

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        deadline = problem.objective.deadline_s
        if deadline is None or warm_start is None or not problem.catalog.has_spot:
            return None
        if problem.evaluate(warm_start.assignments)[0] <= deadline + 1e-6:
            return None  # on time even in the worst case: nothing to guard
        budget = TimeBudget(time_limit_s)
        guarded = despot(problem, list(warm_start.assignments), budget)
        if guarded is not None:
            return EngineResult(tuple(guarded), f"{warm_start.method}+{self.name}")
        from agora_optimizer.engines.deadline_list import DeadlineListEngine  # it guards its own schedules

        on_demand = Problem(problem.workflow, problem.catalog.without_spot(), problem.objective, problem.bounds)
        result = DeadlineListEngine().solve(on_demand, max(budget.remaining_s(), 0.01))
        return None if result is None else replace(result, method=f"{result.method}+{self.name}")


def despot(problem: Problem, assignments: list[Assignment], budget: TimeBudget) -> list[Assignment] | None:
    """``assignments`` with spot machines moved onto their fallbacks until the worst case meets the
    deadline (the module's text), or None where it does not by the last spot machine or the budget."""
    deadline = problem.objective.deadline_s
    if deadline is None or not problem.catalog.has_spot:
        return None
    workflow, catalog = problem.workflow, problem.catalog
    skipped: set[str] = set()
    while budget.affords():
        if problem.evaluate(assignments)[0] <= deadline + 1e-6:
            return assignments
        ends = rerun_makespans_s(assignments, workflow, catalog)
        worst: dict[str, float] = {}  # spot machine -> the latest end a re-run of one of its tasks gives
        for a in assignments:
            if a.task in ends and a.machine not in skipped:
                worst[a.machine] = max(worst.get(a.machine, 0.0), ends[a.task])
        late = sorted((m for m in worst if worst[m] > deadline + 1e-6), key=lambda m: (-worst[m], m))
        if not late:
            return None  # late without a re-run, or only where a count forbids the move
        moved = _move(problem, assignments, {m: None for m in late})
        for on_demand in _on_demand_types(problem, late[0]) if moved is None else ():
            moved = _move(problem, assignments, {late[0]: on_demand})
            if moved is not None:
                break
        if moved is None:
            skipped.add(late[0])
            continue
        assignments = moved
    return None


def _on_demand_types(problem: Problem, machine: str) -> list[Resource]:
    """The on-demand types a spot machine may become: its fallback, then those of its backend that hold
    every task its type holds, the cheapest first."""
    catalog = problem.catalog
    spot = catalog.by_name[machine_type(machine)]
    fallback = catalog.fallback_of(spot)
    others = [
        r
        for r in catalog.resources
        if not r.spot
        and r is not fallback
        and r.backend == spot.backend
        and r.vcpus >= spot.vcpus
        and r.memory_bytes >= spot.memory_bytes
        and r.gpus >= spot.gpus
    ]
    return [fallback, *sorted(others, key=lambda r: (r.price_per_hour_usd, -r.speed, r.name))]


def _move(
    problem: Problem, assignments: list[Assignment], machines: dict[str, Resource | None]
) -> list[Assignment] | None:
    """The schedule with each of ``machines`` on the type given (None: its fallback), re-timed; None
    where a count forbids it."""
    catalog, workflow = problem.catalog, problem.workflow
    used = {a.machine for a in assignments}
    target: dict[str, str] = {}
    for machine, chosen in machines.items():
        fallback = chosen or catalog.fallback_of(catalog.by_name[machine_type(machine)])
        target[machine] = unused_machine_id(fallback.name, used)
        used.add(target[machine])
    machine_of = {a.task: target.get(a.machine, a.machine) for a in assignments}
    moved = retime(workflow, catalog, machine_of, start_order(assignments, workflow))
    return None if count_violations(moved, catalog) else moved
