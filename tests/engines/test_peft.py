"""PEFT: the optimistic cost table as defined, schedules by hand, valid plans everywhere."""

from __future__ import annotations

import pytest

from agora_optimizer.engines.peft import PeftEngine, oct_ranks, optimistic_cost_table, peft_schedule
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.plan import Objective
from agora_optimizer.planning.leases import makespan_s
from agora_optimizer.planning.problem import Problem
from tests.conftest import BUNDLED, CATALOGS
from tests.engines.plan_checks import bundled_problems, by_task, edge, problem_of, processor, task, violations
from tests.engines.test_heft import five_task_example

Processor = tuple[str, int]  # (type name, slot number)


def reference_oct(problem: Problem) -> dict[str, dict[Processor, float]]:
    """OCT over individual processors, literally as Arabnejad and Barbosa define it.

    ``OCT(t_i, p_k) = max_{t_j in succ(t_i)} min_{p_w} [OCT(t_j, p_w) + w(t_j, p_w) + c̄_ij]``,
    ``c̄_ij = 0`` if ``p_w = p_k``; ``p_k`` and ``p_w`` range over the processors the task fits.
    """
    workflow = problem.workflow
    processors = {
        t.id: [(r.name, n) for r in problem.options[t.id] for n in range(r.count or 1)] for t in workflow.tasks
    }
    table: dict[str, dict[Processor, float]] = {}
    for task_id in reversed(workflow.topological_order):
        row = {}
        for p_k in processors[task_id]:
            worst = 0.0
            for e in workflow.children[task_id]:
                child = workflow.by_id[e.child]
                comm = problem.catalog.transfer_s(e.bytes)
                best = min(
                    table[e.child][p_w]
                    + problem.catalog.by_name[p_w[0]].runtime_s(child)
                    + (0.0 if p_w == p_k else comm)
                    for p_w in processors[e.child]
                )
                worst = max(worst, best)
            row[p_k] = worst
        table[task_id] = row
    return table


def test_oct_and_ranks_match_the_hand_computation() -> None:
    # OCT(T4, slow) = min(4 on slow, 2 on fast + 1) = 3; OCT(T4, fast) = min(4 + 1, 2) = 2; and so on:
    # OCT(T1, slow) = max(min(4 + 6, 2 + 3 + 2), min(4 + 8, 2 + 4 + 1), min(3 + 2, 2 + 1 + 3)) = 7.
    problem = five_task_example()
    table = optimistic_cost_table(problem)
    assert table == {
        "T5": {"slow": 0.0, "fast": 0.0},
        "T4": {"slow": 3.0, "fast": 2.0},
        "T3": {"slow": 4.0, "fast": 2.0},
        "T2": {"slow": 4.0, "fast": 2.0},
        "T1": {"slow": 7.0, "fast": 6.0},
    }
    assert oct_ranks(table) == pytest.approx({"T1": 6.5, "T2": 3.0, "T3": 3.0, "T4": 2.5, "T5": 0.0})


def test_schedule_matches_the_hand_computation() -> None:
    # T1: O_EFT fast 2 + 6 < slow 4 + 7. Ready: T2 and T3 (rank 3, T2 first in file order), T4.
    # T2: fast 5 + 2 < slow 10 + 4. T3: fast 9 + 2 < slow 11 + 4. T4: slow 7 + 3 < fast 10 + 2.
    # T5: fast: inputs at max(5, 9, 7 + 1) = 9, ends 11; slow ends 16.
    problem = five_task_example()
    assignments = peft_schedule(problem)
    assert assignments is not None
    assert [a.task for a in assignments] == ["T1", "T2", "T3", "T4", "T5"]
    assert by_task(assignments) == {
        "T1": ("fast#0", 0.0, 2.0),
        "T2": ("fast#0", 2.0, 5.0),
        "T3": ("fast#0", 5.0, 9.0),
        "T4": ("slow#0", 5.0, 7.0),
        "T5": ("fast#0", 9.0, 11.0),
    }
    assert makespan_s(assignments) == pytest.approx(11.0)
    assert violations(problem, assignments) == []


def memory_limited_example() -> Problem:
    """Five tasks on three types, two of them with two machines, where memory rules some out."""
    tasks = [
        task("T1", 4, memory_gib=0.5),
        task("T2", 6, memory_gib=4),  # slow only
        task("T3", 8, memory_gib=1.5),  # slow or mid
        task("T4", 2, memory_gib=0.5),
        task("T5", 4, memory_gib=0.5),
    ]
    edges = [edge("T1", "T2", 2), edge("T1", "T3", 1), edge("T1", "T4", 3), edge("T2", "T5", 2), edge("T3", "T5", 3)]
    resources = [
        processor("slow", 1.0, memory_gib=8, count=2),
        processor("fast", 2.0, memory_gib=1, count=1),
        processor("mid", 1.5, memory_gib=2, count=2),
    ]
    return problem_of(tasks, edges, resources)


def assert_matches_reference(problem: Problem) -> None:
    table = optimistic_cost_table(problem)
    reference = reference_oct(problem)
    for task_id, row in reference.items():
        assert set(table[task_id]) == {name for name, _ in row}
        for (name, _), value in row.items():
            assert table[task_id][name] == pytest.approx(value), (task_id, name)


def test_oct_per_type_equals_oct_per_processor_with_memory_limits() -> None:
    problem = memory_limited_example()
    assert_matches_reference(problem)
    table = optimistic_cost_table(problem)
    assert set(table["T2"]) == {"slow"} and set(table["T3"]) == {"slow", "mid"}
    assignments = peft_schedule(problem)
    assert assignments is not None
    assert violations(problem, assignments) == []


def test_oct_per_type_equals_oct_per_processor_on_a_real_workflow() -> None:
    workflow = load_workflow(BUNDLED / "montage-chameleon-2mass-01d-001.json")
    catalog = load_catalog(CATALOGS / "memory-tight.yaml")
    assert_matches_reference(Problem.create(workflow, catalog, Objective(kind="time")))


def test_time_limit_is_respected() -> None:
    assert PeftEngine().solve(five_task_example(), -1.0) is None


@pytest.mark.parametrize(("label", "problem"), list(bundled_problems()), ids=lambda v: v if isinstance(v, str) else "")
def test_plans_are_valid_on_every_bundled_workflow_and_catalog(label: str, problem: Problem) -> None:
    table = optimistic_cost_table(problem)
    for task_id, children in problem.workflow.children.items():
        if not children:
            assert set(table[task_id].values()) == {0.0}, f"exit task {task_id} has a non-zero OCT"
    result = PeftEngine().solve(problem, 60.0)
    assert result is not None and result.method == "peft"
    assert len(result.assignments) == len(problem.workflow.tasks)
    assert violations(problem, result.assignments) == [], label
    for a in result.assignments:
        assert problem.catalog.by_name[a.resource].fits(problem.workflow.by_id[a.task])
