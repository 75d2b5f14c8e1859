"""The one-type default: what most Airflow deployments run, and a floor no plan should be worse than.

Every task on the cheapest on-demand resource type (spot capacity is not what deployments run by
default) that fits all of them, list-scheduled for
time on as many machines of it as its ``count`` allows.
"""

from __future__ import annotations

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.bounds import makespan_lower_bound_s
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem


def default_type(workflow: Workflow, catalog: Catalog) -> Resource | None:
    """The cheapest on-demand type that fits every task (the faster on a tie), or ``None``."""
    fitting = [r for r in catalog.resources if not r.spot and all(r.fits(t) for t in workflow.tasks)]
    if not fitting:
        return None
    return min(fitting, key=lambda r: (r.price_per_hour_usd, -r.speed))


def one_type_default_assignments(workflow: Workflow, catalog: Catalog) -> list[Assignment] | None:
    """The default's schedule, or ``None`` when no single type fits every task."""
    resource = default_type(workflow, catalog)
    if resource is None:
        return None
    only = catalog.restricted_to([resource.name])
    return list_schedule(workflow, only, 1.0, makespan_lower_bound_s(workflow, only), 1.0)


class OneTypeDefaultEngine(Engine):
    name = "one-type-default"

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        assignments = one_type_default_assignments(problem.workflow, problem.catalog)
        return None if assignments is None else EngineResult(tuple(assignments), self.name)
