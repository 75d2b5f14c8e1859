"""List scheduling swept over the time/cost weight: a fast engine for every size.

Runs the memory-aware, cost-aware list scheduler of
:mod:`agora_optimizer.planning.list_schedule` for the objective's own weight first,
then for the other weights of :data:`SWEEP_ALPHAS` while the time limit allows, and
keeps the schedule that ranks best (within the limits first, then by score).

Under a deadline with no timely schedule yet (no warm start, or a late one), the fastest weight
(1: makespan alone) comes first instead: on a large workflow the time limit may afford one
schedule, and a plan that meets the deadline at a higher cost beats none at all (the cost objective's
own weight, 0, is late under any deadline that matters).
"""

from __future__ import annotations

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.plan import Assignment, Objective
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget

LARGE_WORKFLOW_TASKS = 4000  # beyond it, each task tries only the first-idle machines of a type
LARGE_MACHINES_PER_TYPE = 3  # how many: those and its parents' machines


def machines_per_type(workflow: Workflow) -> int | None:
    """How many machines of a type a task tries, besides its parents' (None: all)."""
    return LARGE_MACHINES_PER_TYPE if len(workflow.tasks) > LARGE_WORKFLOW_TASKS else None


SWEEP_ALPHAS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0)


def sweep_order(objective: Objective, fastest_first: bool = False) -> list[float]:
    """The objective's own weight first (the fastest first when ``fastest_first``), then the rest;
    time alone needs no sweep."""
    own = {"time": 1.0, "cost": 0.0, "balanced": objective.alpha}[objective.kind]
    if objective.kind == "time" and objective.budget_usd is None:
        return [own]
    first = 1.0 if fastest_first else own
    return [first, *dict.fromkeys(a for a in (own, *SWEEP_ALPHAS) if a != first)]


class ListSchedulingEngine(Engine):
    name = "list-scheduling"

    def solve(
        self,
        problem: Problem,
        time_limit_s: float,
        warm_start: EngineResult | None = None,
        stop_at_s: float | None = None,
    ) -> EngineResult | None:
        """The best schedule of the sweep; the first is completed even past ``time_limit_s``, unless
        ``stop_at_s`` (a ``time.perf_counter()``) passes first: then ``None`` (the caller has a plan in hand)."""
        budget = TimeBudget(time_limit_s)
        stop = None if stop_at_s is None else TimeBudget.until(stop_at_s)
        best: tuple[tuple[float, float, float], list[Assignment]] | None = None
        late = problem.objective.deadline_s is not None and (
            warm_start is None or problem.excess(*problem.evaluate(warm_start.assignments)) > 0
        )
        for alpha in sweep_order(problem.objective, fastest_first=late):
            if best is not None and not budget.affords():
                break
            with budget:
                try:
                    assignments = list_schedule(
                        problem.workflow,
                        problem.catalog,
                        alpha,
                        problem.bounds.makespan_s,
                        problem.bounds.cost_usd,
                        machines_per_type=machines_per_type(problem.workflow),
                        stop=stop if best is None else None,  # later ones stop by the budget, between schedules
                    )
                except OutOfTime:
                    return None
            key = problem.rank(*problem.evaluate(assignments))
            if best is None or key < best[0]:
                best = (key, assignments)
        assert best is not None
        return EngineResult(tuple(best[1]), self.name)
