"""The elastic per-task lease: each task on its own machine of its own best type, counts held, valid plans."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agora_optimizer.engines.elastic_lease import ElasticLeaseEngine, elastic_assignments, first_free_start
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Objective
from agora_optimizer.planning.problem import Problem
from tests.engines.plan_checks import (
    BANDWIDTH,
    bundled_problems,
    by_task,
    edge,
    problem_of,
    processor,
    task,
    violations,
)


def test_every_task_gets_its_own_machine_and_waits_for_its_inputs_to_arrive() -> None:
    # a -> b with a 3 s transfer, c alone; one fast type with room for all (count 3)
    problem = problem_of(
        [task("a", 4), task("b", 2), task("c", 6)], [edge("a", "b", 3)], [processor("fast", 2.0, count=3)]
    )
    placed = by_task(elastic_assignments(problem))
    assert len({machine for machine, _, _ in placed.values()}) == 3
    assert placed["a"][1:] == (0.0, 2.0)
    assert placed["b"][1:] == (5.0, 6.0)  # a ends at 2, its bytes take 3 s even though b could share a's machine
    assert placed["c"][1:] == (0.0, 3.0)
    assert violations(problem, elastic_assignments(problem)) == []


def test_a_type_with_one_machine_runs_its_leases_one_after_another() -> None:
    problem = problem_of([task("a", 4), task("b", 2), task("c", 6)], [], [processor("only", 1.0, count=1)])
    placed = by_task(elastic_assignments(problem))
    spans = sorted((start, end) for _, start, end in placed.values())
    assert spans == [(0.0, 4.0), (4.0, 6.0), (6.0, 12.0)]
    assert violations(problem, elastic_assignments(problem)) == []


def test_boot_time_is_kept_between_two_leases_of_a_single_machine_type() -> None:
    assert first_free_start([(0.0, 10.0)], 1, ready=0.0, boot=5.0, run=1.0) == 15.0
    assert first_free_start([(0.0, 10.0)], 2, ready=0.0, boot=5.0, run=1.0) == 0.0
    assert first_free_start([(0.0, 10.0)], None, ready=3.0, boot=5.0, run=1.0) == 3.0
    # (111.611 + 30) - 30 < 111.611: the next lease must still not count as overlapping the one before it
    assert first_free_start([(0.0, 111.611)], 1, ready=0.0, boot=30.0, run=1.0) == 111.611 + 30.0


def test_the_type_is_the_best_for_the_task_under_the_objective() -> None:
    # fast costs 4x as much per hour and runs twice as fast: dearer per task, sooner done
    fast, cheap = processor("fast", 2.0, count=2), processor("cheap", 1.0, count=2)
    fast = replace(fast, price_per_hour_usd=4.0)
    workflow_problem = problem_of([task("a", 100)], [], [fast, cheap])
    catalog = Catalog((fast, cheap), BANDWIDTH)
    for kind, expected in (("time", "fast"), ("cost", "cheap")):
        problem = Problem.create(workflow_problem.workflow, catalog, Objective(kind=kind))
        result = ElasticLeaseEngine().solve(problem, 1.0)
        assert result is not None and [a.resource for a in result.assignments] == [expected]


@pytest.mark.parametrize(("label", "problem"), list(bundled_problems()), ids=lambda v: v if isinstance(v, str) else "")
def test_plans_are_valid_on_every_bundled_workflow_and_catalog(label: str, problem: Problem) -> None:
    result = ElasticLeaseEngine().solve(problem, 60.0)
    assert result is not None and len(result.assignments) == len(problem.workflow.tasks)
    assert violations(problem, result.assignments) == [], label
