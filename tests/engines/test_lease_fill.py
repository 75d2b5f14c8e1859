"""Lease filling (engines/lease_fill.py): work moved into leases already paid for, never a worse plan."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.lease_fill import LeaseFillEngine
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.engines.peft import PeftEngine
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Assignment, Objective
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.validate import count_violations
from bench.adversarial.instances import random_instance
from tests.engines.plan_checks import violations

LIMIT_S = 5.0


def _type(name: str, vcpus: int, memory_gib: float, speed: float, price: float, count: int | None = None) -> Resource:
    return Resource(name, "aws", vcpus, memory_gib, speed, price, count, Billing(1.0, 0.0), 0.0)


def _task(task_id: str, runtime_s: float, memory_gib: float = 1.0, cores: int = 1) -> Task:
    return Task(task_id, runtime_s, cores, int(memory_gib * GIB), task_id)


def _on(task: Task, resource: Resource, machine: int, start_s: float) -> Assignment:
    end_s = start_s + resource.runtime_s(task)
    return Assignment(
        task.id, resource.name, f"{resource.name}#{machine}", start_s, end_s, task.cores, task.memory_bytes
    )


def _problem(tasks: list[Task], edges: list[Edge], types: list[Resource], objective: Objective) -> Problem:
    return Problem.create(Workflow.create("hand-made", tasks, edges), Catalog(tuple(types), 1e9), objective)


def _filled(problem: Problem, given: list[Assignment]) -> EngineResult | None:
    result = LeaseFillEngine().solve(problem, LIMIT_S, EngineResult(tuple(given), "given"))
    if result is not None:
        assert violations(problem, result.assignments) == []
        assert problem.early_starts(result.assignments) == []
        assert problem.rank(*problem.evaluate(result.assignments)) < problem.rank(*problem.evaluate(given))
    return result


BIG = _type("big", 4, 16.0, 1.0, 1.0, count=1)  # 1 USD an hour
SMALL = _type("small", 1, 2.0, 1.0, 0.5, count=2)


def test_a_small_task_moves_into_the_idle_cores_of_a_lease_a_large_one_holds_anyway() -> None:
    large, small = _task("large", 3600.0, memory_gib=12.0), _task("small", 1800.0)
    problem = _problem([large, small], [], [BIG, SMALL], Objective(kind="balanced"))
    given = [_on(large, BIG, 0, 0.0), _on(small, SMALL, 0, 0.0)]  # 1 USD + 0.25 USD
    result = _filled(problem, given)
    assert result is not None and result.method == "given+lease-fill"
    assert {a.machine for a in result.assignments} == {"big#0"}  # the small machine's lease is dropped
    assert problem.evaluate(result.assignments) == pytest.approx((3600.0, 1.0))


def test_a_child_inside_the_lease_starts_later_to_make_room() -> None:
    slow_big = _type("big", 4, 16.0, 0.5, 1.0, count=1)  # the large task holds it for two hours
    large, parent, child = _task("large", 3600.0, memory_gib=12.0), _task("parent", 1000.0), _task("child", 100.0)
    problem = _problem([large, parent, child], [Edge("parent", "child", 0)], [slow_big, SMALL], Objective())
    given = [_on(large, slow_big, 0, 0.0), _on(parent, SMALL, 0, 0.0), _on(child, slow_big, 0, 1000.0)]
    result = _filled(problem, given)
    assert result is not None
    placed = {a.task: a for a in result.assignments}
    assert placed["parent"].machine == "big#0" and placed["parent"].end_s == pytest.approx(2000.0)
    assert placed["child"].start_s == pytest.approx(2000.0)  # pushed: its parent now ends later
    assert problem.evaluate(result.assignments) == pytest.approx((7200.0, 2.0))


FAST = _type("fast", 1, 4.0, 2.0, 36.0)  # 0.01 USD a second
SLOW = _type("slow", 1, 4.0, 1.0, 3.6)  # 0.001 USD a second


@pytest.mark.parametrize(
    ("objective", "moved"),
    [
        (Objective(kind="cost", deadline_s=120.0), True),  # the deadline has room for the slow type
        (Objective(kind="cost", deadline_s=80.0), False),  # it has not
        (Objective(kind="time"), False),  # a time plan never gets slower
        (Objective(kind="balanced"), True),  # 0.5 x 1 + 0.5 x 5 (fast) against 0.5 x 2 + 0.5 x 1 (slow)
    ],
    ids=["cost-room", "cost-tight", "time", "balanced"],
)
def test_a_task_moves_to_a_cheaper_slower_type_only_within_the_horizon(objective: Objective, moved: bool) -> None:
    alone = _task("alone", 100.0)
    problem = _problem([alone], [], [FAST, SLOW], objective)
    result = _filled(problem, [_on(alone, FAST, 0, 0.0)])
    if not moved:
        assert result is None
        return
    assert result is not None
    assert [(a.machine, a.end_s) for a in result.assignments] == [("slow#0", pytest.approx(100.0))]


def test_a_balanced_plan_keeps_a_dearer_type_where_the_cheaper_one_is_too_slow_for_what_it_saves() -> None:
    crawling = _type("crawling", 1, 4.0, 0.2, 0.72)  # 500 s for 0.1 USD: 0.5 x 10 + 0.5 x 1 against 3.0
    alone = _task("alone", 100.0)
    problem = _problem([alone], [], [FAST, crawling], Objective(kind="balanced"))
    assert _filled(problem, [_on(alone, FAST, 0, 0.0)]) is None


def test_a_lease_starts_later_when_its_first_task_can_run_beside_its_last() -> None:
    # One machine at a time, billed at least 600 s: a second lease for either task would pay the minimum
    # twice; only starting the first task late, beside the released one, makes the lease shorter.
    billed = Resource("billed", "aws", 2, 4.0, 1.0, 3.6, 1, Billing(1.0, 600.0), 0.0)
    early, late = _task("early", 100.0), replace(_task("late", 100.0), release_s=900.0)
    problem = _problem([early, late], [], [billed], Objective(kind="balanced"))
    result = _filled(problem, [_on(early, billed, 0, 0.0), _on(late, billed, 0, 900.0)])  # 1,000 s leased
    assert result is not None
    placed = {a.task: a for a in result.assignments}
    assert placed["early"].machine == placed["late"].machine and placed["early"].start_s == pytest.approx(900.0)
    assert problem.evaluate(result.assignments) == pytest.approx((1000.0, 0.6))


def test_a_new_machine_is_refused_where_the_count_is_reached_and_the_open_lease_is_used() -> None:
    cheap = _type("cheap", 1, 4.0, 1.0, 3.6, count=1)
    dear = _type("dear", 1, 4.0, 1.0, 36.0)
    busy, moved = _task("busy", 100.0), _task("moved", 100.0)
    problem = _problem([busy, moved], [], [cheap, dear], Objective(kind="cost", deadline_s=300.0))
    result = _filled(problem, [_on(busy, cheap, 0, 0.0), _on(moved, dear, 0, 0.0)])
    assert result is not None
    placed = {a.task: a for a in result.assignments}
    assert placed["moved"].machine == "cheap#0" and placed["moved"].start_s == pytest.approx(100.0)
    assert count_violations(result.assignments, problem.catalog) == []


def test_a_moved_task_starts_no_earlier_than_its_types_release() -> None:
    released = Resource("released", "slurm", 1, 4.0, 1.0, 3.6, 1, Billing(1.0, 0.0), boot_s=5.0, release_s=60.0)
    alone = _task("alone", 100.0)
    problem = _problem([alone], [], [FAST, released], Objective(kind="cost", deadline_s=200.0))
    result = _filled(problem, [_on(alone, FAST, 0, 0.0)])
    assert result is not None
    assert [(a.machine, a.start_s) for a in result.assignments] == [("released#0", pytest.approx(65.0))]


def test_nothing_to_start_from_or_nothing_to_save_gives_none() -> None:
    alone = _task("alone", 100.0)
    problem = _problem([alone], [], [SLOW], Objective(kind="cost", deadline_s=200.0))
    assert LeaseFillEngine().solve(problem, LIMIT_S) is None
    assert _filled(problem, [_on(alone, SLOW, 0, 0.0)]) is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_random_small_instances_get_valid_plans_no_worse_than_the_warm_start(seed: int) -> None:
    # The adversarial benchmark's instances (transfers, boots, billing minimums, counts, deadlines): from
    # list scheduling's and PEFT's plans, every result is valid, keeps every release and count, and ranks better.
    rng = random.Random(seed)
    moved = 0
    for _ in range(25):
        problem = random_instance(rng).problem()
        for engine in (ListSchedulingEngine(), PeftEngine()):
            warm = engine.solve(problem, LIMIT_S)
            assert warm is not None
            result = _filled(problem, list(warm.assignments))
            if result is not None:
                assert count_violations(result.assignments, problem.catalog) == []
                moved += 1
    assert moved > 0  # the pass does find something on such instances


def test_a_plan_filled_already_is_not_filled_again() -> None:
    large, small = _task("large", 3600.0, memory_gib=12.0), _task("small", 1800.0)
    problem = _problem([large, small], [], [BIG, SMALL], Objective(kind="balanced"))
    given = (_on(large, BIG, 0, 0.0), _on(small, SMALL, 0, 0.0))
    assert LeaseFillEngine().solve(problem, LIMIT_S, EngineResult(given, "peft+lease-fill")) is None


def test_a_parent_moved_beside_its_child_lets_the_child_start_sooner() -> None:
    # 100 GB from parent to child take 100 s between machines: on the child's machine the child starts at 10 s.
    one = _type("one", 2, 4.0, 1.0, 3.6, count=2)
    parent, child = _task("parent", 10.0), _task("child", 10.0)
    problem = _problem([parent, child], [Edge("parent", "child", 100 * 10**9)], [one], Objective(kind="balanced"))
    result = _filled(problem, [_on(parent, one, 0, 0.0), _on(child, one, 1, 110.0)])
    assert result is not None
    assert {a.machine for a in result.assignments} == {"one#1"}
    assert problem.evaluate(result.assignments) == pytest.approx((20.0, 0.02))


def test_a_task_keeps_the_memory_its_assignment_reserves() -> None:
    # The small task's assignment holds 6 GiB (a re-plan's after an OOM kill): beside the 12 GiB task it would
    # overfill the 16 GiB machine, so it stays where it is.
    mid = _type("mid", 1, 8.0, 1.0, 0.5, count=1)
    large, small = _task("large", 3600.0, memory_gib=12.0), _task("small", 1800.0)
    problem = _problem([large, small], [], [BIG, mid], Objective(kind="balanced"))
    reserved = replace(_on(small, mid, 0, 0.0), memory_bytes=6 * GIB)
    assert _filled(problem, [_on(large, BIG, 0, 0.0), reserved]) is None
    result = _filled(problem, [_on(large, BIG, 0, 0.0), _on(small, mid, 0, 0.0)])  # with its own 1 GiB it moves
    assert result is not None and {a.machine for a in result.assignments} == {"big#0"}
