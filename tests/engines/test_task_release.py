"""A task's own release time (an Airflow sensor's predicted wait before it): it starts no sooner.

One small problem where the release binds: ``wait_then`` may not start before ``RELEASE_S`` (a
deferrable sensor before it waits that long, holding no machine), ``first -> after`` is free to run
at once. Every engine, under each objective, must start ``wait_then`` (and so its child) at or after
the release, its schedule must pass the spec's checks, and the exact engines' optimum must be the
one the release forces: the released chain ends at ``RELEASE_S`` + its two runtimes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from agora_optimizer.engines.base import Engine
from agora_optimizer.engines.exact.cpsat.engine import CpSatEngine
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.errors import FieldError
from agora_optimizer.model import GIB, Billing, Catalog, Edge, Objective, Resource, Task, Workflow
from agora_optimizer.model.plan import Assignment, Plan, SolverInfo
from agora_optimizer.planning.bounds import feasible_types, makespan_lower_bound_s
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.replan import replan
from agora_optimizer.planning.retime import retime
from agora_optimizer.planning.window_bound import window_bound_s
from tests.engines.plan_checks import violations
from tests.engines.test_release import ENGINES

RELEASE_S = 50.0
SMALL = Resource("small", "local", 2, 4, 1.0, 0.1, 2, Billing(1.0, 0.0))
BIG = Resource("big", "local", 4, 8, 2.0, 0.4, 1, Billing(1.0, 0.0), boot_s=2.0)
CATALOG = Catalog((SMALL, BIG), 1e9)
TASKS = [
    Task("first", 30.0, 1, GIB, "first"),
    Task("after", 20.0, 1, GIB, "after"),
    Task("wait_then", 10.0, 1, GIB, "wait_then", release_s=RELEASE_S),
    Task("last", 8.0, 1, GIB, "last"),
]
WORKFLOW = Workflow.create("released-tasks", TASKS, [Edge("first", "after"), Edge("wait_then", "last")])


def _problem(kind: str) -> Problem:
    return Problem.create(WORKFLOW, CATALOG, Objective(kind=kind))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["time", "cost"])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_every_engine_starts_a_released_task_after_its_release(engine: Engine, kind: str) -> None:
    problem = _problem(kind)
    warm = ENGINES[0].solve(problem, 10.0) if engine.name == "local-search" else None
    result = engine.solve(problem, 10.0, warm_start=warm)
    if result is None and warm is not None:
        result = warm
    assert result is not None
    starts = {a.task: a for a in result.assignments}
    assert starts["wait_then"].start_s >= RELEASE_S - 1e-6
    assert starts["last"].start_s >= starts["wait_then"].end_s - 1e-6
    assert violations(problem, result.assignments) == []
    assert problem.early_starts(result.assignments) == []
    if isinstance(engine, CpSatEngine | MilpEngine) and kind == "time":
        assert result.status == "optimal"
        # the released chain on the fast type: release, then 10 / 2 and 8 / 2 (BIG's boot overlaps the wait)
        assert problem.evaluate(result.assignments)[0] == pytest.approx(RELEASE_S + 5.0 + 4.0, abs=1e-3)


def test_without_the_release_the_same_engines_start_it_at_once() -> None:
    free = Workflow.create("free", [replace(t, release_s=0.0) for t in TASKS], list(WORKFLOW.edges))
    result = MilpEngine().solve(Problem.create(free, CATALOG, Objective(kind="time")), 10.0)
    assert result is not None
    assert min(a.start_s for a in result.assignments if a.task == "wait_then") < RELEASE_S


def test_early_starts_names_a_task_started_before_its_release() -> None:
    problem = _problem("time")
    order = list(WORKFLOW.topological_order)
    plan = retime(WORKFLOW, CATALOG, dict.fromkeys(order, "small#0"), order)
    early = replace(next(a for a in plan if a.task == "wait_then"), start_s=0.0, end_s=10.0)
    assert [a.task for a in problem.early_starts([*(a for a in plan if a.task != "wait_then"), early])] == ["wait_then"]


def test_retime_and_replan_start_nothing_before_the_release() -> None:
    order = list(WORKFLOW.topological_order)
    schedule = {a.task: a for a in retime(WORKFLOW, CATALOG, dict.fromkeys(order, "small#0"), order)}
    assert schedule["wait_then"].start_s == RELEASE_S
    assert schedule["first"].start_s == 0.0
    plan = MilpEngine().solve(_problem("time"), 10.0)
    assert plan is not None
    repaired = replan(WORKFLOW, CATALOG, _as_plan(plan.assignments), {}, now_s=1.0)
    assert {a.task: a for a in repaired.assignments}["wait_then"].start_s >= RELEASE_S - 1e-6


def test_the_makespan_bounds_count_the_release() -> None:
    least = RELEASE_S + BIG.runtime_s(TASKS[2]) + BIG.runtime_s(TASKS[3])
    assert makespan_lower_bound_s(WORKFLOW, CATALOG) >= least - 1e-6
    assert window_bound_s(WORKFLOW, feasible_types(WORKFLOW, CATALOG)) >= least * (1 - 1e-6)


def test_a_negative_release_is_refused_naming_the_task() -> None:
    with pytest.raises(FieldError, match=r"tasks\[t\]\.release_s"):
        Workflow.create("bad", [Task("t", 1.0, 1, 0, "t", release_s=-1.0)], [])


def _as_plan(assignments: Sequence[Assignment]) -> Plan:

    problem = _problem("time")
    makespan, cost = problem.evaluate(assignments)
    solver = SolverInfo("milp", "optimal", 0.0, 0.1)
    return Plan(WORKFLOW.name, "<memory>", Objective("time"), makespan, cost, tuple(assignments), solver, "2026-12-02")
