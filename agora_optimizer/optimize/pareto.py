"""The cost/makespan Pareto front of a workflow on a catalog.

The front is built from the fastest plan, the cheapest plan, and the cheapest plans
under a series of deadlines from the fastest makespan towards the cheapest plan's (the epsilon-constraint method), every
engine result of every run counting as a candidate. Only plans that no other candidate
beats on both makespan and cost stay on the front, and each point of the front keeps its
schedule: :func:`front_plans` turns every point into a plan in the spec's format, ready to be
checked, saved or put in force.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.io.documents import write_text_atomically
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverStatus
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.optimize import build_plan, default_plan_of, one_type_default_assignments
from agora_optimizer.optimize.portfolio import TIME_LIMIT_FALLBACK, run_portfolio
from agora_optimizer.planning.problem import Bounds, Problem
from agora_optimizer.planning.time_budget import TimeBudget

FORMAT = "agora-pareto/1"


@dataclass(frozen=True)
class Point:
    makespan_s: float
    cost_usd: float
    objective: Objective
    method: str
    status: SolverStatus = "heuristic"
    # The schedule as the plan file states it (spec durations); kept for the front's points only.
    assignments: tuple[Assignment, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class Front:
    workflow: str
    catalog: str
    points: tuple[Point, ...]  # the front, by makespan
    candidates: tuple[Point, ...]  # everything evaluated
    bounds: Bounds
    default: Point | None


@dataclass(frozen=True)
class SweepProgress:
    """Where the sweep is, for a display (nothing is drawn here): the runs done of those planned (the
    fastest, the cheapest, one per deadline), the last run's best plan, and the points on the front so far."""

    done: int
    planned: int
    makespan_s: float | None = None
    cost_usd: float | None = None
    front: int = 0


def non_dominated(points: list[Point]) -> list[Point]:
    """Points no other point beats on both makespan and cost, by increasing makespan."""
    front: list[Point] = []
    for p in sorted(points, key=lambda p: (p.makespan_s, p.cost_usd)):
        if not front or p.cost_usd < front[-1].cost_usd - 1e-12:
            front.append(p)
    return front


def pareto_front(
    workflow: Workflow,
    catalog: Catalog,
    catalog_label: str,
    deadlines: int = 8,
    time_limit_s: float = 60.0,
    started: float | None = None,
    progress: Callable[[SweepProgress], None] | None = None,
) -> Front:
    """The front, within ``time_limit_s`` counted from ``started`` (a ``time.perf_counter()``; default: now).

    The one-type default and the bounds come first; then each run of the sweep (the fastest plan, the
    cheapest, one per deadline) gets an equal share of what is left, one share kept back for what the
    caller does with the front (a chart, its files). The fastest and the cheapest runs keep their
    share even when their first list schedule would not (the default stands in: :func:`run_portfolio`'s
    ``fallback``); a run under a deadline starts only while the time left affords one as long as the
    longest run so far, and none when the fastest or the cheapest run was cut short so. ``progress`` is told
    after each run.
    """
    started = time.perf_counter() if started is None else started
    deadline = started + time_limit_s
    default_started = time.perf_counter()
    schedule = one_type_default_assignments(workflow, catalog) if workflow.tasks else None
    baseline = (
        None if schedule is None else default_plan_of(schedule, workflow, catalog, catalog_label, default_started)
    )
    fallback = None if schedule is None else EngineResult(tuple(schedule), TIME_LIMIT_FALLBACK)
    base = Problem.create(workflow, catalog, Objective())
    bounds = base.bounds
    sweep = TimeBudget.until(deadline)
    candidates: list[Point] = []
    planned = runs_left = deadlines + 3  # the fastest, the cheapest, and deadlines + 1 under a deadline

    def run(objective: Objective) -> list[Point]:
        nonlocal runs_left
        with sweep:  # timed: a run under a deadline starts only if the longest so far fits in the time left
            # without a deadline the bounds are the base problem's: not computed again (seconds at 30,000 tasks)
            problem = (
                Problem.create(workflow, catalog, objective)
                if objective.deadline_s is not None
                else replace(base, objective=objective)
            )
            share_s = max(deadline - time.perf_counter(), 0.0) / (runs_left + 1)
            outcome = run_portfolio(problem, share_s, fallback=fallback)
        runs_left -= 1
        points = []
        for name, (makespan, cost) in outcome.evaluated.items():
            if objective.deadline_s is not None and makespan > objective.deadline_s + 1e-6:
                continue  # only the plans in time count under a deadline
            result = outcome.results[name]
            written = tuple(problem.written(result.assignments))
            points.append(Point(makespan, cost, objective, result.method, result.status, written))
        if progress is not None:
            makespan, cost = problem.evaluate(outcome.best.assignments)
            front = len(non_dominated([*candidates, *points]))
            progress(SweepProgress(planned - runs_left, planned, makespan, cost, front))
        return points

    candidates += run(Objective(kind="time"))
    candidates += run(Objective(kind="cost"))
    fastest = min(p.makespan_s for p in candidates)
    cheapest_makespan = min(candidates, key=lambda p: (p.cost_usd, p.makespan_s)).makespan_s
    # A run whose share was too short for one list schedule was cut short, so its time says nothing of a run
    # under a deadline, which would schedule in full (the default misses the deadline): none starts then.
    cut_short = any(p.method == TIME_LIMIT_FALLBACK for p in candidates)
    for i in range(deadlines + 1):  # i = 0: the cheapest plan as fast as the fastest one
        if cut_short or not sweep.affords():
            break
        deadline_s = fastest + (cheapest_makespan - fastest) * i / (deadlines + 1)
        if i > 0 and deadline_s <= fastest:
            break
        candidates += run(Objective(kind="cost", deadline_s=deadline_s))
    default = None
    if baseline is not None:
        default = Point(baseline.makespan_s, baseline.cost_usd, baseline.objective, baseline.solver.method)
    return Front(
        workflow=workflow.name,
        catalog=catalog_label,
        points=tuple(non_dominated(candidates)),
        candidates=tuple(replace(p, assignments=()) for p in candidates),  # only the front's schedules are kept
        bounds=bounds,
        default=default,
    )


def front_plans(front: Front, workflow: Workflow, catalog: Catalog) -> list[Plan]:
    """Every point of the front as a plan (by increasing makespan), each under the objective that found it."""
    return [point_plan(point, workflow, catalog, front.catalog) for point in front.points]


def point_plan(point: Point, workflow: Workflow, catalog: Catalog, catalog_label: str) -> Plan:
    """A point of a front as a plan in the spec's format (makespan and cost recomputed from its schedule)."""
    if not point.assignments and workflow.tasks:
        raise ValueError("only a point of the front keeps its schedule; this one is a candidate")
    started = time.perf_counter()
    return build_plan(
        workflow, catalog, point.objective, catalog_label, point.assignments, point.method, started, point.status
    )


def _point(p: Point) -> dict[str, object]:
    return {
        "makespan_s": p.makespan_s,
        "cost_usd": p.cost_usd,
        "method": p.method,
        "objective": {
            "kind": p.objective.kind,
            "alpha": p.objective.alpha,
            "deadline_s": p.objective.deadline_s,
            "budget_usd": p.objective.budget_usd,
        },
    }


def write_front(front: Front, path: str | Path, plan_files: list[str] | None = None) -> None:
    """The front as JSON; ``plan_files``, one per point, names the file where each point's plan was saved."""
    points = [_point(p) for p in front.points]
    if plan_files is not None:
        for point, name in zip(points, plan_files, strict=True):
            point["plan"] = name
    document = {
        "format": FORMAT,
        "workflow": front.workflow,
        "catalog": front.catalog,
        "lower_bounds": {"makespan_s": front.bounds.makespan_s, "cost_usd": front.bounds.cost_usd},
        "default": None if front.default is None else _point(front.default),
        "points": points,
        "candidates": len(front.candidates),
    }
    write_text_atomically(path, json.dumps(document, indent=1) + "\n")


def plot_front(front: Front, path: str | Path) -> None:
    """Every candidate in grey, the front as a step line, the default and the lower bounds marked."""
    import matplotlib.pyplot as plt

    from agora_optimizer.gantt import check_chart_path, plain_text, save_figure

    path = check_chart_path(path)
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(
        [p.makespan_s for p in front.candidates],
        [p.cost_usd for p in front.candidates],
        s=12,
        color="0.7",
        label="candidates",
    )
    ax.step(
        [p.makespan_s for p in front.points],
        [p.cost_usd for p in front.points],
        where="post",
        marker="o",
        color="tab:blue",
        label="Pareto front",
    )
    if front.default is not None:
        ax.scatter(
            [front.default.makespan_s],
            [front.default.cost_usd],
            marker="s",
            s=60,
            color="tab:red",
            label="one-type default",
            zorder=3,
        )
    ax.axvline(front.bounds.makespan_s, linestyle=":", color="0.4", label="lower bounds")
    ax.axhline(front.bounds.cost_usd, linestyle=":", color="0.4")
    ax.set_xlabel("makespan (s)")
    ax.set_ylabel("cost (USD)")
    ax.set_title(f"{plain_text(front.workflow)}: cost / makespan front")
    ax.legend(fontsize=8)
    ax.grid(linestyle=":", linewidth=0.5)
    save_figure(fig, path)
