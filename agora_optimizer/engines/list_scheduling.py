"""List scheduling swept over the time/cost weight: a fast engine for every size.

Runs the memory-aware, cost-aware list scheduler of
:mod:`agora_optimizer.planning.list_schedule` for the objective's own weight first,
then for the other weights of :data:`SWEEP_ALPHAS` while the time limit allows, and
keeps the schedule that ranks best (within the limits first, then by score).
"""

from __future__ import annotations

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.plan import Assignment, Objective
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import TimeBudget

LARGE_WORKFLOW_TASKS = 4000  # beyond it, each task tries only the first-idle machines of a type
SWEEP_ALPHAS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0)


def sweep_order(objective: Objective) -> list[float]:
    """The objective's own weight first, then the rest; time alone needs no sweep."""
    first = {"time": 1.0, "cost": 0.0, "balanced": objective.alpha}[objective.kind]
    if objective.kind == "time" and objective.budget_usd is None:
        return [first]
    return [first, *(a for a in SWEEP_ALPHAS if a != first)]


class ListSchedulingEngine(Engine):
    name = "list-scheduling"

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        budget = TimeBudget(time_limit_s)
        best: tuple[tuple[float, float, float], list[Assignment]] | None = None
        for alpha in sweep_order(problem.objective):
            if best is not None and not budget.affords():
                break
            with budget:
                assignments = list_schedule(
                    problem.workflow,
                    problem.catalog,
                    alpha,
                    problem.bounds.makespan_s,
                    problem.bounds.cost_usd,
                    machines_per_type=3 if len(problem.workflow.tasks) > LARGE_WORKFLOW_TASKS else None,
                )
            key = problem.rank(*problem.evaluate(assignments))
            if best is None or key < best[0]:
                best = (key, assignments)
        assert best is not None
        return EngineResult(tuple(best[1]), self.name)
