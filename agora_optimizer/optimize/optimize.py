"""The optimizer's front door: from a workflow, a catalog and an objective to a plan.

It builds the :class:`~agora_optimizer.planning.problem.Problem`, runs the engine portfolio
within the time limit, and returns the best plan, or raises
:class:`InfeasibleObjectiveError` with the best values reached when no plan meets the
deadline or budget. Under a deadline a caller may ask for a margin: the engines then aim that share
of the deadline early, as a repair during the run does (:mod:`~agora_optimizer.planning.deadline_aim`),
so that the platform's own delays do not make the plan late; where no plan is found that ends by the
aim, the one that ends earliest wins, and the plan is held to the deadline itself. A workflow with no
tasks (an Airflow DAG may have none, and runs to success) gets the empty plan from the portfolio: no
assignments, makespan 0, cost 0, optimal.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.one_type_default import one_type_default_assignments
from agora_optimizer.errors import InfeasibleObjectiveError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo, SolverStatus
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.portfolio import TIME_LIMIT_FALLBACK, Progress, Stage, run_portfolio
from agora_optimizer.planning.deadline_aim import aimed_deadline_s
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.problem import Problem, lower_bounds, score, written_assignments
from agora_optimizer.planning.spot_replay import spot_summary

__all__ = [
    "default_plan",
    "default_plan_of",
    "lower_bounds",
    "one_type_default_assignments",
    "optimize",
    "optimize_problem",
    "score",
]


def optimize(
    workflow: Workflow,
    catalog: Catalog,
    objective: Objective,
    catalog_label: str,
    time_limit_s: float = 60.0,
    stages: list[Stage] | None = None,
    progress: Progress | None = None,
    deadline_margin: float = 0.0,
) -> Plan:
    """Return the best plan found within ``time_limit_s``, bounds included (the first engine always completes);
    ``deadline_margin``: as for :func:`optimize_problem`."""
    started = time.perf_counter()
    problem = Problem.create(workflow, catalog, objective)
    return optimize_problem(
        problem, catalog_label, time_limit_s, stages, progress, started=started, deadline_margin=deadline_margin
    )


def optimize_problem(
    problem: Problem,
    catalog_label: str,
    time_limit_s: float = 60.0,
    stages: list[Stage] | None = None,
    progress: Progress | None = None,
    started: float | None = None,
    fallback: Sequence[Assignment] | None = None,
    deadline_margin: float = 0.0,
) -> Plan:
    """:func:`optimize` for a problem already built (its bounds are reused).

    ``started``: the ``time.perf_counter()`` from which ``time_limit_s`` counts (default:
    now), so that a caller can count the time it spent loading and bounding too. ``fallback``: the
    one-type default's schedule on the problem's catalog, when the caller made it already: the plan
    when even the first list schedule would overrun the limit (:func:`run_portfolio`). ``deadline_margin``:
    under a deadline, the share of it the engines aim early (:func:`aimed_problem`); the plan's objective
    is the deadline itself, and a plan made for the aim is at best ``feasible`` for it.
    """
    started = time.perf_counter() if started is None else started
    workflow, catalog, objective = problem.workflow, problem.catalog, problem.objective
    if objective.deadline_s is not None and objective.deadline_s < problem.bounds.makespan_s - 1e-6:
        raise InfeasibleObjectiveError(
            f"deadline {objective.deadline_s} s is below the makespan lower bound "
            f"{problem.bounds.makespan_s:.3f} s of workflow '{workflow.name}'"
        )
    default = None if fallback is None else EngineResult(tuple(fallback), TIME_LIMIT_FALLBACK)
    remaining_s = max(time_limit_s - (time.perf_counter() - started), 0.0)
    aimed = aimed_problem(problem, deadline_margin)
    outcome = run_portfolio(aimed, remaining_s, stages, progress, fallback=default)
    makespan, cost = problem.evaluate(outcome.best.assignments)
    if problem.excess(makespan, cost) > 0:
        fastest = min(m for m, _ in outcome.evaluated.values())
        cheapest = min(c for _, c in outcome.evaluated.values())
        raise InfeasibleObjectiveError(
            f"no plan found for workflow '{workflow.name}' within deadline_s={objective.deadline_s} and "
            f"budget_usd={objective.budget_usd}; best achievable found: makespan {fastest:.3f} s, "
            f"cost {cheapest:.6f} USD"
        )
    best = outcome.best
    if aimed is not problem and best.status == "optimal":  # optimal for the aim, a feasible plan for the deadline
        best = replace(best, status="feasible", gap=None)
    return build_plan(
        workflow,
        catalog,
        objective,
        catalog_label,
        problem.written(best.assignments),  # the platform's latency planned in, the spec's durations written
        best.method,
        started,
        status=best.status,
        gap=best.gap,
    )


def aimed_problem(problem: Problem, margin: float) -> Problem:
    """``problem`` with its deadline ``margin`` of it earlier, but not before its makespan bound (``problem``
    itself without a deadline or a margin). The bounds stay: a lower bound under the deadline bounds the aim
    too."""
    if not 0 <= margin < 1:
        raise ValueError(f"deadline margin must be in [0, 1), got {margin}")
    deadline_s = problem.objective.deadline_s
    aimed_s = None if deadline_s is None else aimed_deadline_s(deadline_s, problem.bounds.makespan_s, margin)
    if aimed_s is None or aimed_s == deadline_s:
        return problem
    return replace(problem, objective=replace(problem.objective, deadline_s=aimed_s))


def build_plan(
    workflow: Workflow,
    catalog: Catalog,
    objective: Objective,
    catalog_label: str,
    assignments: Iterable[Assignment],
    method: str,
    started: float,
    status: SolverStatus = "heuristic",
    gap: float | None = None,
) -> Plan:
    """A plan in the spec's format, with makespan and cost recomputed from the assignments (and, where
    tasks are on spot types, the plan's spot figures: ``docs/spot.md``)."""
    items = sorted(assignments, key=lambda a: (a.start_s, a.task))
    return Plan(
        workflow=workflow.name,
        catalog=catalog_label,
        objective=objective,
        makespan_s=makespan_s(items),
        cost_usd=float(cost_usd(items, catalog)),  # 0.0, not 0, when there is no lease
        assignments=tuple(items),
        solver=SolverInfo(
            method=method,
            status=status,
            gap=gap,
            wall_s=round(time.perf_counter() - started, 6),
        ),
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        spot=spot_summary(items, workflow, catalog) if catalog.has_spot else None,
    )


def default_plan(workflow: Workflow, catalog: Catalog, catalog_label: str) -> Plan | None:
    """The one-type default as a plan (what most Airflow deployments run), or ``None`` (also for no tasks)."""
    started = time.perf_counter()
    assignments = one_type_default_assignments(workflow, catalog) if workflow.tasks else None
    return None if assignments is None else default_plan_of(assignments, workflow, catalog, catalog_label, started)


def default_plan_of(
    assignments: Sequence[Assignment], workflow: Workflow, catalog: Catalog, catalog_label: str, started: float
) -> Plan:
    """The plan of the one-type default's ``assignments`` (made from ``started``, a ``time.perf_counter()``)."""
    objective = Objective(kind="time", alpha=1.0)
    written = written_assignments(assignments, workflow, catalog)  # a catalog with latency: as optimize writes
    return build_plan(workflow, catalog, objective, catalog_label, written, "one-type-default", started)
