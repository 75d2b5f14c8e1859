"""Lease packing (planning/lease_packing.py): each machine's tasks moved toward one end of its lease, the lease
shorter, the schedule valid, the makespan no later; a machine that cannot move keeps its times."""

from __future__ import annotations

import pytest

from agora_optimizer.model import Objective
from agora_optimizer.planning.lease_packing import pack_earlier, pack_later
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.retime import retime, retime_late
from tests.engines.plan_checks import edge, problem_of, processor, task, violations


def _spread() -> tuple[Problem, dict[str, str], list[str]]:
    # "a" feeds nothing but shares a machine with "b", which waits for the long "x" elsewhere.
    tasks = [task("a", 10), task("x", 100), task("b", 10)]
    timed = problem_of(tasks, [edge("x", "b", 0)], [processor("p", 1.0, count=2)])
    problem = Problem.create(timed.workflow, timed.catalog, Objective(kind="cost"))
    return problem, {"a": "p#0", "x": "p#1", "b": "p#0"}, ["a", "x", "b"]


def _by_task(assignments: list) -> dict[str, tuple[float, float]]:
    return {a.task: (a.start_s, a.end_s) for a in assignments}


def test_pack_later_starts_a_spread_lease_later() -> None:
    problem, machine_of, order = _spread()
    early = retime(problem.workflow, problem.catalog, machine_of, order)
    assert _by_task(early)["a"] == (0.0, 10.0)  # p#0 leased 0..110 for 20 s of work
    packed = pack_later(problem.workflow, problem.catalog, early)
    assert violations(problem, packed) == []
    assert _by_task(packed)["a"] == (90.0, 100.0)  # beside "x"'s end: p#0 leased 90..110
    assert _by_task(packed)["b"] == _by_task(early)["b"]  # the lease's end kept
    assert makespan_s(packed) == makespan_s(early)
    assert cost_usd(packed, problem.catalog) < cost_usd(early, problem.catalog)


def test_pack_earlier_ends_a_spread_lease_sooner() -> None:
    # The mirror: "x" waits for "b"; ending as late as it can, the free "a" runs at the end, "b" at the start.
    tasks = [task("x", 100), task("a", 10), task("b", 10)]
    timed = problem_of(tasks, [edge("b", "x", 0)], [processor("p", 1.0, count=2)])
    problem = Problem.create(timed.workflow, timed.catalog, Objective(kind="cost"))
    machine_of = {"a": "p#0", "b": "p#0", "x": "p#1"}
    late = retime_late(problem.workflow, problem.catalog, machine_of, ["b", "x", "a"], 110.0)
    assert late is not None and _by_task(late)["a"] == (100.0, 110.0)  # p#0 leased 0..110 for 20 s of work
    packed = pack_earlier(problem.workflow, problem.catalog, late)
    assert violations(problem, packed) == []
    assert _by_task(packed)["a"] == (10.0, 20.0) and _by_task(packed)["b"] == (0.0, 10.0)
    assert cost_usd(packed, problem.catalog) < cost_usd(late, problem.catalog)


def test_a_machine_with_no_room_to_move_keeps_its_times() -> None:
    # A chain on one machine: nothing can move toward either end of the lease.
    tasks = [task("a", 10), task("b", 10), task("c", 10)]
    timed = problem_of(tasks, [edge("a", "b", 0), edge("b", "c", 0)], [processor("p", 1.0, count=1)])
    early = retime(timed.workflow, timed.catalog, dict.fromkeys("abc", "p#0"), ["a", "b", "c"])
    assert pack_later(timed.workflow, timed.catalog, early) == early
    assert pack_earlier(timed.workflow, timed.catalog, early) == early


def test_retime_late_refuses_a_horizon_too_short_for_the_work() -> None:
    problem, machine_of, order = _spread()
    assert retime_late(problem.workflow, problem.catalog, machine_of, order, 50.0) is None
    late = retime_late(problem.workflow, problem.catalog, machine_of, order, 200.0)
    assert late is not None and max(a.end_s for a in late) == pytest.approx(200.0)
    assert violations(problem, late) == []
