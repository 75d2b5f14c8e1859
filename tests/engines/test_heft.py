"""HEFT: ranks and schedules computed by hand, and valid plans on every bundled workflow and catalog."""

from __future__ import annotations

import pytest

from agora_optimizer.engines.heft import HeftEngine, heft_schedule, priority_order, upward_ranks
from agora_optimizer.planning.leases import makespan_s
from agora_optimizer.planning.problem import Problem
from tests.engines.plan_checks import (
    bundled_problems,
    by_task,
    edge,
    problem_of,
    processor,
    task,
    violations,
)


def five_task_example() -> Problem:
    """T1 -> (T2, T3, T4) -> T5 on a slow (speed 1) and a fast (speed 2) processor.

    Runtimes on the reference core: T1 4, T2 6, T3 8, T4 2, T5 4, so the mean execution
    times over the two processors are 3, 4.5, 6, 1.5, 3. Transfer times: T1->T2 2,
    T1->T3 1, T1->T4 3, T2->T5 2, T3->T5 3, T4->T5 1.
    """
    tasks = [task("T1", 4), task("T2", 6), task("T3", 8), task("T4", 2), task("T5", 4)]
    edges = [
        edge("T1", "T2", 2),
        edge("T1", "T3", 1),
        edge("T1", "T4", 3),
        edge("T2", "T5", 2),
        edge("T3", "T5", 3),
        edge("T4", "T5", 1),
    ]
    return problem_of(tasks, edges, [processor("slow", 1.0), processor("fast", 2.0)])


def test_upward_ranks_match_the_hand_computation() -> None:
    # rank(T5) = 3; rank(T4) = 1.5 + 1 + 3; rank(T3) = 6 + 3 + 3; rank(T2) = 4.5 + 2 + 3;
    # rank(T1) = 3 + max(2 + 9.5, 1 + 12, 3 + 5.5) = 16.
    problem = five_task_example()
    ranks = upward_ranks(problem)
    assert ranks == pytest.approx({"T1": 16.0, "T2": 9.5, "T3": 12.0, "T4": 5.5, "T5": 3.0})
    assert priority_order(problem, ranks) == ["T1", "T3", "T2", "T4", "T5"]


def test_schedule_matches_the_hand_computation() -> None:
    # T1: fast ends 2 (slow 4). T3: fast 2->6 (slow: arrives 3, ends 11). T2: fast 6->9
    # (slow: arrives 4, ends 10). T4: fast would end 10, slow: arrives 5, ends 7. T5: on fast
    # its inputs are there at max(9, 6, 7 + 1) = 9, ends 11; on slow at 11, ends 15.
    problem = five_task_example()
    assignments = heft_schedule(problem)
    assert assignments is not None
    assert by_task(assignments) == {
        "T1": ("fast#0", 0.0, 2.0),
        "T3": ("fast#0", 2.0, 6.0),
        "T2": ("fast#0", 6.0, 9.0),
        "T4": ("slow#0", 5.0, 7.0),
        "T5": ("fast#0", 9.0, 11.0),
    }
    assert makespan_s(assignments) == pytest.approx(11.0)
    assert violations(problem, assignments) == []


def test_insertion_and_memory_limits() -> None:
    """A (4 GiB) fits only on the roomy slow processor; C fills the idle gap that B leaves on the fast one.

    Ranks: B 3 (mean of 4 and 2), A 4 + 1 + 3 = 8 (only one feasible type), C 1.5.
    A runs on slow 0->4. B: slow would end 8; fast gets A's output at 5 and ends 7. C: the
    fast processor is idle over [0, 5), so C runs there 0->1 rather than after B.
    """
    problem = problem_of(
        [task("A", 4, memory_gib=4), task("B", 4, memory_gib=0.5), task("C", 2, memory_gib=0.5)],
        [edge("A", "B", 1)],
        [processor("slow", 1.0, memory_gib=8), processor("fast", 2.0, memory_gib=1)],
    )
    assert upward_ranks(problem) == pytest.approx({"A": 8.0, "B": 3.0, "C": 1.5})
    assignments = heft_schedule(problem)
    assert assignments is not None
    assert by_task(assignments) == {"A": ("slow#0", 0.0, 4.0), "B": ("fast#0", 5.0, 7.0), "C": ("fast#0", 0.0, 1.0)}
    assert violations(problem, assignments) == []


def test_unlimited_type_uses_a_bounded_number_of_slots() -> None:
    tasks = [task(f"t{i}", 10) for i in range(6)]
    problem = problem_of(tasks, [], [processor("any", 1.0, count=None)])
    result = HeftEngine(unlimited_slots=4).solve(problem, 10.0)
    assert result is not None
    assert {a.machine for a in result.assignments} == {"any#0", "any#1", "any#2", "any#3"}
    assert makespan_s(result.assignments) == pytest.approx(20.0)
    assert violations(problem, result.assignments) == []


def test_tasks_share_a_machine_by_cores_and_memory() -> None:
    """Four 1-core 1 GiB tasks on one 2-core 2 GiB machine: two at a time."""
    tasks = [task(f"t{i}", 10) for i in range(4)]
    problem = problem_of(tasks, [], [processor("duo", 1.0, memory_gib=2, vcpus=2)])
    assignments = heft_schedule(problem)
    assert assignments is not None
    assert sorted(a.start_s for a in assignments) == [0.0, 0.0, 10.0, 10.0]
    assert violations(problem, assignments) == []


def test_time_limit_is_respected() -> None:
    assert HeftEngine().solve(five_task_example(), -1.0) is None


@pytest.mark.parametrize(("label", "problem"), list(bundled_problems()), ids=lambda v: v if isinstance(v, str) else "")
def test_plans_are_valid_on_every_bundled_workflow_and_catalog(label: str, problem: Problem) -> None:
    result = HeftEngine().solve(problem, 60.0)
    assert result is not None and result.method == "heft"
    assert len(result.assignments) == len(problem.workflow.tasks)
    assert violations(problem, result.assignments) == [], label
    for a in result.assignments:
        assert problem.catalog.by_name[a.resource].fits(problem.workflow.by_id[a.task])
