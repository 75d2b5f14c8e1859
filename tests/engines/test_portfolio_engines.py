"""List scheduling, pool search, local search and the one-type default (the portfolio's engines): valid plans,
each engine earning its place. The portfolio itself: tests/optimize/test_portfolio.py."""

from __future__ import annotations

import pytest

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine, sweep_order
from agora_optimizer.engines.local_search import LocalSearchEngine
from agora_optimizer.engines.one_type_default import OneTypeDefaultEngine, default_type
from agora_optimizer.engines.pool_search import PoolSearchEngine, pool_catalog
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.optimize.optimize import build_plan
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.retime import retime, start_order
from agora_optimizer.planning.validate import validate_plan
from tests.conftest import AWS_CATALOG, BUNDLED, ENGINE_WORKFLOWS
from tests.engines.plan_checks import problem_of, processor, task, violations

pytestmark = pytest.mark.slow  # seconds of planning per test: make test runs it, make test-fast does not

AWS = load_catalog(AWS_CATALOG)
WORKFLOWS = ENGINE_WORKFLOWS


def _valid(problem: Problem, result: EngineResult) -> bool:
    plan = build_plan(problem.workflow, problem.catalog, problem.objective, "c", result.assignments, result.method, 0.0)
    violations = validate_plan(plan, problem.workflow, problem.catalog)
    assert violations == [], violations[:3]
    return True


@pytest.fixture(scope="module", params=WORKFLOWS, ids=lambda p: p.stem)
def cost_problem(request: pytest.FixtureRequest) -> Problem:
    workflow = load_workflow(request.param)
    default = OneTypeDefaultEngine().solve(Problem.create(workflow, AWS, Objective()), 1.0)
    assert default is not None
    deadline = max(a.end_s for a in default.assignments)
    return Problem.create(workflow, AWS, Objective(kind="cost", deadline_s=deadline))


def test_pool_search_meets_the_deadline_and_beats_per_task_greedy_on_cost(cost_problem: Problem) -> None:
    pooled = PoolSearchEngine().solve(cost_problem, 5.0)
    greedy = ListSchedulingEngine().solve(cost_problem, 5.0)
    assert pooled is not None and greedy is not None
    assert _valid(cost_problem, pooled)
    assert cost_problem.excess(*cost_problem.evaluate(pooled.assignments)) == 0
    # the search starts from pools that include the default's, so it can only do better than the default
    default = OneTypeDefaultEngine().solve(cost_problem, 1.0)
    assert default is not None
    assert cost_problem.rank(*cost_problem.evaluate(pooled.assignments)) <= cost_problem.rank(
        *cost_problem.evaluate(default.assignments)
    )


def test_local_search_never_worsens_and_keeps_plans_valid(cost_problem: Problem) -> None:
    start = ListSchedulingEngine().solve(cost_problem, 5.0)
    assert start is not None
    improved = LocalSearchEngine().solve(cost_problem, 3.0, warm_start=start)
    if improved is None:  # no improving move: nothing to check but that it said so
        return
    assert _valid(cost_problem, improved)
    assert improved.method == "list-scheduling+local-search"
    before = cost_problem.rank(*cost_problem.evaluate(start.assignments))
    assert cost_problem.rank(*cost_problem.evaluate(improved.assignments)) < before


def test_local_search_repacks_one_machine_by_reordering_its_tasks() -> None:
    # One two-core machine and five independent tasks: 200, 200, 200, 300, 300 s. Taken in that
    # order they end at 700 s; the two long ones one after the other, beside the short ones, end at 600 s.
    tasks = [task(n, r) for n, r in (("a", 200), ("b", 200), ("c", 200), ("d", 300), ("e", 300))]
    timed = problem_of(tasks, [], [processor("duo", 1.0, vcpus=2, count=1)])
    problem = Problem.create(timed.workflow, timed.catalog, Objective(kind="cost"))
    start = retime(problem.workflow, problem.catalog, {t.id: "duo#0" for t in tasks}, ["a", "b", "c", "d", "e"])
    assert max(a.end_s for a in start) == 700
    improved = LocalSearchEngine().solve(problem, 5.0, warm_start=EngineResult(tuple(start), "given"))
    assert improved is not None and violations(problem, improved.assignments) == []
    assert max(a.end_s for a in improved.assignments) == 600
    assert {a.machine for a in improved.assignments} == {"duo#0"}


def test_retime_of_a_schedule_on_its_own_machines_is_no_later() -> None:
    workflow = load_workflow(BUNDLED / "montage-chameleon-2mass-01d-001.json")
    problem = Problem.create(workflow, AWS, Objective(kind="time"))
    result = ListSchedulingEngine().solve(problem, 5.0)
    assert result is not None
    assignments = list(result.assignments)
    again = retime(workflow, AWS, {a.task: a.machine for a in assignments}, start_order(assignments, workflow))
    before = {a.task: a for a in assignments}
    assert all(a.start_s <= before[a.task].start_s + 1e-9 for a in again)
    assert _valid(problem, EngineResult(tuple(again), "retime"))


def test_pool_catalog_limits_each_type_to_the_pool() -> None:
    catalog = pool_catalog(AWS, (("c5.large", 2), ("r5.large", 1)))
    assert {r.name: r.count for r in catalog.resources} == {"c5.large": 2, "r5.large": 1}


def test_sweep_order_starts_with_the_objectives_own_weight() -> None:
    assert sweep_order(Objective(kind="time")) == [1.0]
    assert sweep_order(Objective(kind="cost"))[0] == 0.0
    balanced = sweep_order(Objective(kind="balanced", alpha=0.33))
    assert balanced[0] == 0.33 and len(balanced) == len(set(balanced))
    late = sweep_order(Objective(kind="cost", deadline_s=100.0), fastest_first=True)
    assert late[:2] == [1.0, 0.0] and sorted(late) == sorted(sweep_order(Objective(kind="cost")))


def test_under_a_deadline_without_a_timely_plan_the_first_schedule_is_the_fastest() -> None:
    # A time limit that affords one schedule: with a late warm start (or none) that one is the
    # fastest (it meets a deadline the cost objective's own weight misses); with a timely warm
    # start the sweep keeps the objective's own weight first.
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    fastest = ListSchedulingEngine().solve(Problem.create(workflow, AWS, Objective(kind="time")), 0.0)
    assert fastest is not None
    deadline = max(a.end_s for a in fastest.assignments)
    problem = Problem.create(workflow, AWS, Objective(kind="cost", deadline_s=deadline))
    late = OneTypeDefaultEngine().solve(problem, 1.0)
    assert late is not None and problem.excess(*problem.evaluate(late.assignments)) > 0
    for warm in (None, late):
        first = ListSchedulingEngine().solve(problem, 0.0, warm_start=warm)
        assert first is not None and problem.excess(*problem.evaluate(first.assignments)) == 0
    cheapest = ListSchedulingEngine().solve(problem, 0.0, warm_start=fastest)
    assert cheapest is not None and problem.excess(*problem.evaluate(cheapest.assignments)) > 0


def test_default_type_is_the_cheapest_that_fits_all() -> None:
    workflow = load_workflow(BUNDLED / "bacass-dirt02-001.json")
    chosen = default_type(workflow, AWS)
    assert chosen is not None
    fitting = [r for r in AWS.resources if all(r.fits(t) for t in workflow.tasks)]
    assert chosen.price_per_hour_usd == min(r.price_per_hour_usd for r in fitting)
