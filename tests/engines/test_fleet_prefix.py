"""Cheapest-first fleets: under a deadline, the shortest line of cheap machines that keeps it."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agora_optimizer.engines.deadline_list import DeadlineListEngine
from agora_optimizer.engines.fleet_prefix import FleetPrefixEngine, machine_line
from agora_optimizer.engines.heft import HeftEngine
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import GIB, Catalog
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.planning.problem import Problem
from tests.conftest import CATALOGS
from tests.engines.plan_checks import BANDWIDTH, processor, task, violations


def _independent(n: int, runtime_s: float = 100.0) -> list[Task]:
    return [task(f"t{i}", runtime_s) for i in range(n)]


def _cheap_and_dear(dear_memory_gib: float = 8.0) -> Catalog:
    """Four cheap machines (1 per hour) and eight dear ones (3 per hour), one core each."""
    cheap = processor("cheap", 1.0, count=4)
    dear = processor("dear", 1.0, memory_gib=dear_memory_gib, count=8)
    return Catalog((cheap, replace(dear, price_per_hour_usd=3.0)), BANDWIDTH)


def _problem(tasks: list[Task], catalog: Catalog, deadline_s: float | None) -> Problem:
    workflow = Workflow.create("fleet", tasks, [])
    return Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=deadline_s))


def test_machines_are_lined_up_cheapest_work_first() -> None:
    catalog = _cheap_and_dear()
    assert machine_line(catalog, _independent(2), unlimited=2) == ["cheap"] * 4 + ["dear"] * 8
    unlimited = Catalog((processor("free", 1.0, count=None),), BANDWIDTH)
    assert machine_line(unlimited, _independent(2), unlimited=3) == ["free"] * 3


def test_on_a_type_whose_memory_caps_sharing_work_costs_the_memory_a_task_holds() -> None:
    """Per core the 4-core type is cheaper (1.2 per hour against 1.0 for two cores), but with 2 GiB it runs two
    1 GiB tasks at a time, as the 2-core type with 2 GiB does."""
    cores = replace(processor("many-cores", 1.0, memory_gib=2.0, count=2, vcpus=4), price_per_hour_usd=1.2)
    memory = processor("two-cores", 1.0, memory_gib=2.0, count=2, vcpus=2)
    tasks = _independent(4)
    assert (
        machine_line(Catalog((cores, memory), BANDWIDTH), tasks, unlimited=1) == ["two-cores"] * 2 + ["many-cores"] * 2
    )
    assert machine_line(Catalog((cores, memory), BANDWIDTH), [], unlimited=1)[0] == "many-cores"  # no task: by name


def test_the_deadline_is_kept_on_the_cheap_machines_alone() -> None:
    """Twelve 100 s tasks: all twelve machines end at 100 s; the four cheap ones, three rounds each, at 300 s
    for a third of the cost per task."""
    problem = _problem(_independent(12), _cheap_and_dear(), deadline_s=320.0)
    result = FleetPrefixEngine().solve(problem, 10.0)
    assert result is not None and violations(problem, result.assignments) == []
    assert {a.resource for a in result.assignments} == {"cheap"}
    makespan, cost = problem.evaluate(result.assignments)
    assert makespan <= 320.0
    assert cost == pytest.approx(12 * 100 * 1.0 / 3600)


def test_a_tighter_deadline_buys_the_dear_machines_it_needs() -> None:
    problem = _problem(_independent(12), _cheap_and_dear(), deadline_s=220.0)
    result = FleetPrefixEngine().solve(problem, 10.0)
    assert result is not None and violations(problem, result.assignments) == []
    makespan, cost = problem.evaluate(result.assignments)
    assert makespan <= 220.0
    # Two rounds are needed: eight tasks on the cheap machines, four on dear ones (fewer machines need three)
    assert cost == pytest.approx((8 * 100 * 1.0 + 4 * 100 * 3.0) / 3600)


def test_a_task_only_a_dear_type_fits_brings_that_type_in() -> None:
    tasks = [*_independent(8), task("big", 100.0, memory_gib=12.0)]
    problem = _problem(tasks, _cheap_and_dear(dear_memory_gib=16.0), deadline_s=400.0)
    result = FleetPrefixEngine().solve(problem, 10.0)
    assert result is not None and violations(problem, result.assignments) == []
    placed = {a.task: a.resource for a in result.assignments}
    assert placed["big"] == "dear"
    assert problem.meets_limits(result.assignments)


def test_without_a_deadline_it_does_not_apply() -> None:
    assert FleetPrefixEngine().solve(_problem(_independent(4), _cheap_and_dear(), None), 5.0) is None


def _layered(seed: int, layers: int, width: int) -> Workflow:
    rng = random.Random(seed)
    tasks, edges = [], []
    for layer in range(layers):
        for i in range(width):
            tasks.append(Task(f"l{layer}_{i}", rng.uniform(50, 150), 1, GIB, f"c{layer}"))
            if layer:
                edges += [Edge(f"l{layer - 1}_{j}", f"l{layer}_{i}", 0) for j in rng.sample(range(width), 2)]
    return Workflow.create("layered", tasks, edges)


@pytest.mark.slow  # a few list schedules of 600 tasks
def test_on_few_machines_per_type_it_is_cheaper_than_the_time_plans_and_the_deadline_list() -> None:
    """The regression of issue 36: on eight AWS types of four machines each, the deadline-aware list scheduler's
    plan under 1.5 x the time plan's makespan cost more than the time plan itself (0.713 against 0.695 USD here)."""
    workflow = _layered(3, 3, 200)
    catalog = load_catalog(CATALOGS / "aws-small-quota.yaml")
    free = Problem.create(workflow, catalog, Objective(kind="time"))
    time_plans = [engine.solve(free, 30.0) for engine in (ListSchedulingEngine(), HeftEngine())]
    fastest = min(free.evaluate(r.assignments)[0] for r in time_plans if r is not None)
    problem = Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=1.5 * fastest))
    result = FleetPrefixEngine().solve(problem, 60.0)
    assert result is not None and violations(problem, result.assignments) == []
    assert problem.meets_limits(result.assignments)
    cost = problem.evaluate(result.assignments)[1]
    assert all(cost < problem.evaluate(r.assignments)[1] for r in time_plans if r is not None)
    deadline_list = DeadlineListEngine().solve(problem, 60.0)
    assert deadline_list is not None and cost < problem.evaluate(deadline_list.assignments)[1]


def test_out_of_time_it_gives_up_its_schedule_rather_than_overrun_its_limit() -> None:
    """No time at all: even the first schedule is given up (the portfolio's next engine answers)."""
    problem = _problem(_independent(200), _cheap_and_dear(), deadline_s=10_000.0)
    assert FleetPrefixEngine().solve(problem, 0.0) is None
    assert FleetPrefixEngine().solve(problem, 10.0) is not None


def test_the_search_goes_up_from_the_shortest_possible_fleet_as_far_as_it_was_late() -> None:
    """64 one-core machines, 64 tasks of 100 s. Under 400 s, 16 machines can do the work and do: the search
    tries that fleet first and stops, where a bisection over the whole line first scheduled 40 machines, then
    27, 21, 18 and 17 (at 30,000 tasks each schedule takes seconds). Under 250 s, 26 machines could, but end at
    300 s: 26 x 300 / 250 = 31.2, so 32 next, on time; then the bisection between them."""
    from agora_optimizer.engines.fleet_prefix import _Search
    from agora_optimizer.planning.time_budget import TimeBudget

    catalog = Catalog((processor("cheap", 1.0, count=64),), BANDWIDTH)
    problem = _problem(_independent(64), catalog, deadline_s=400.0)
    search = _Search(problem, TimeBudget(60.0))
    assert search.shortest_on_time(400.0) == 16
    assert list(search.makespans) == [16]
    late = _Search(problem, TimeBudget(60.0))
    assert late.shortest_on_time(250.0) == 32
    assert list(late.makespans) == [26, 32, 29, 30, 31]
