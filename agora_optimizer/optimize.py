"""The optimizer's front door: from a workflow, a catalog and an objective to a checked plan.

In this version every plan comes from memory-aware list scheduling, swept over the
time/cost weight so that deadlines and budgets can be met and the best plan for the
asked objective is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial

from agora_optimizer.bounds import feasible_types, makespan_lower_bound_s
from agora_optimizer.errors import InfeasibleObjectiveError
from agora_optimizer.leases import cost_usd, makespan_s
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.problem import Bounds, lower_bounds, meets_limits, score
from agora_optimizer.schedule.list_scheduler import list_schedule

SWEEP_ALPHAS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0)


def _sweep(objective: Objective) -> list[float]:
    first = {"time": 1.0, "cost": 0.0, "balanced": objective.alpha}[objective.kind]
    return [first, *(a for a in SWEEP_ALPHAS if a != first)]


def optimize(
    workflow: Workflow,
    catalog: Catalog,
    objective: Objective,
    catalog_label: str,
    time_limit_s: float = 60.0,
) -> Plan:
    """Return the best plan found within ``time_limit_s`` (at least one schedule is always built)."""
    started = time.perf_counter()
    feasible_types(workflow, catalog)
    bounds = lower_bounds(workflow, catalog)
    if objective.deadline_s is not None and objective.deadline_s < bounds.makespan_s - 1e-6:
        raise InfeasibleObjectiveError(
            f"deadline {objective.deadline_s} s is below the makespan lower bound "
            f"{bounds.makespan_s:.3f} s of workflow '{workflow.name}'"
        )
    best: tuple[tuple[float, float], list[Assignment], str] | None = None
    fastest = cheapest = None
    for method, build in _candidates(workflow, catalog, objective, bounds):
        if best is not None and time.perf_counter() - started > time_limit_s:
            break
        assignments = build()
        if assignments is None:
            continue
        makespan, cost = makespan_s(assignments), cost_usd(assignments, catalog)
        fastest = makespan if fastest is None else min(fastest, makespan)
        cheapest = cost if cheapest is None else min(cheapest, cost)
        if not meets_limits(objective, makespan, cost):
            continue
        key = score(objective, makespan, cost, bounds)
        if best is None or key < best[0]:
            best = (key, assignments, method)
    if best is None:
        raise InfeasibleObjectiveError(
            f"no plan found for workflow '{workflow.name}' within "
            f"deadline_s={objective.deadline_s} and budget_usd={objective.budget_usd}; "
            f"best achievable found: makespan {fastest:.3f} s, cost {cheapest:.6f} USD"
        )
    return _build_plan(workflow, catalog, objective, catalog_label, best[1], best[2], started)


def _candidates(
    workflow: Workflow, catalog: Catalog, objective: Objective, bounds: Bounds
) -> Iterator[tuple[str, Callable[[], list[Assignment] | None]]]:
    """Schedules to try, most promising first; each is built only when the time limit allows."""
    alphas = _sweep(objective)
    if objective.kind == "time" and objective.budget_usd is None:
        alphas = alphas[:1]  # alpha = 1 already minimises makespan; the sweep only serves limits
    for alpha in alphas:
        yield "list-scheduling", partial(list_schedule, workflow, catalog, alpha, bounds.makespan_s, bounds.cost_usd)
    yield "one-type-default", partial(one_type_default_assignments, workflow, catalog)


def _build_plan(
    workflow: Workflow,
    catalog: Catalog,
    objective: Objective,
    catalog_label: str,
    assignments: list[Assignment],
    method: str,
    started: float,
) -> Plan:
    return Plan(
        workflow=workflow.name,
        catalog=catalog_label,
        objective=objective,
        makespan_s=makespan_s(assignments),
        cost_usd=cost_usd(assignments, catalog),
        assignments=tuple(sorted(assignments, key=lambda a: (a.start_s, a.task))),
        solver=SolverInfo(method=method, status="heuristic", gap=None, wall_s=round(time.perf_counter() - started, 6)),
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def one_type_default_assignments(workflow: Workflow, catalog: Catalog) -> list[Assignment] | None:
    """The cheapest type that fits every task, list-scheduled for time; ``None`` if no type fits all."""
    fitting = [r for r in catalog.resources if all(r.fits(t) for t in workflow.tasks)]
    if not fitting:
        return None
    cheapest = min(fitting, key=lambda r: (r.price_per_hour_usd, -r.speed))
    only = catalog.restricted_to([cheapest.name])
    return list_schedule(workflow, only, 1.0, makespan_lower_bound_s(workflow, only), 1.0)


def default_plan(workflow: Workflow, catalog: Catalog, catalog_label: str) -> Plan | None:
    """The one-type default as a plan (what most Airflow deployments run), or ``None``."""
    started = time.perf_counter()
    assignments = one_type_default_assignments(workflow, catalog)
    if assignments is None:
        return None
    return _build_plan(
        workflow, catalog, Objective(kind="time", alpha=1.0), catalog_label, assignments, "one-type-default", started
    )
