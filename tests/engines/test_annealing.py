"""Simulated annealing (engines/annealing.py): plans no worse than its warm start and valid; the joint
moves single-move searches cannot make; counts held at every instant; its time guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from agora_optimizer.engines.annealing import RETIME_S_PER_TASK, AnnealingEngine
from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.engines.local_search import LocalSearchEngine
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import Billing, Resource
from agora_optimizer.model.plan import machine_type
from agora_optimizer.optimize.portfolio import run_portfolio
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.retime import retime
from agora_optimizer.planning.validate import count_violations
from bench.adversarial.instances import load_case
from bench.adversarial.targets import scale_stages
from tests.engines.plan_checks import bundled_problems, edge, problem_of, processor, task, violations

CASES = Path(__file__).parent / "adversarial"


def _rank(problem: Problem, result: EngineResult) -> tuple[float, float, float]:
    return problem.rank(*problem.evaluate(result.assignments))


@pytest.mark.slow
@pytest.mark.parametrize("label_problem", list(bundled_problems())[:6], ids=lambda lp: lp[0])
def test_annealing_never_worsens_and_keeps_plans_valid(label_problem: tuple[str, Problem]) -> None:
    _, timed = label_problem
    problem = Problem.create(timed.workflow, timed.catalog, Objective(kind="balanced"))
    start = ListSchedulingEngine().solve(problem, 5.0)
    assert start is not None
    improved = AnnealingEngine().solve(problem, 1.0, warm_start=start)
    if improved is None:  # nothing better found: it says so rather than return the same plan
        return
    assert violations(problem, improved.assignments) == []
    assert count_violations(improved.assignments, problem.catalog) == []
    assert improved.method == "list-scheduling+annealing"
    assert _rank(problem, improved) < _rank(problem, start)


def test_annealing_makes_the_joint_move_that_single_moves_cannot() -> None:
    # The adversarial search's worst case at scale settings before annealing: five tasks had to leave the dearest
    # type together, each single move making the plan worse first (171x the optimum).
    instance, _ = load_case(CASES / "scale-vs-optimum-joint-move.json")
    problem = instance.problem()
    without = [s for s in scale_stages(10_000) if s.engine.name != "annealing"]
    start = run_portfolio(problem, 2.0, without).best
    assert "annealing" not in start.method
    local = LocalSearchEngine().solve(problem, 2.0, warm_start=start)
    local_rank = _rank(problem, local or start)
    annealed = AnnealingEngine().solve(problem, 2.0, warm_start=start)
    assert annealed is not None and violations(problem, annealed.assignments) == []
    assert _rank(problem, annealed)[0] == 0  # on time
    assert _rank(problem, annealed)[1] < local_rank[1] / 10  # the dear type left behind: an order of magnitude


def test_a_machine_past_its_count_is_leased_only_after_another_is_released() -> None:
    # "fast" (one machine) does a unit of work for a quarter of "slow"'s price but cannot hold "x" (16 GiB); "b" waits
    # for "x". Cheapest: "a" and "b" each on a short lease of "fast" (fast#0, then fast#1 once fast#0 is released),
    # 220 s of slow-price work, where one lease of fast#0 from "a" to "b" costs 610 and "b" after "x" on slow 230.
    fast = Resource("fast", "slurm", 1, 8.0, 4.0, 2.0, 1, Billing(1.0, 0.0), 0.0)
    slow = Resource("slow", "slurm", 1, 32.0, 1.0, 1.0, 2, Billing(1.0, 0.0), 0.0)
    tasks = [task("a", 20), task("x", 200, memory_gib=16), task("b", 20)]
    timed = problem_of(tasks, [edge("x", "b", 0)], [fast, slow])
    problem = Problem.create(timed.workflow, timed.catalog, Objective(kind="cost"))
    start = retime(problem.workflow, problem.catalog, {"a": "fast#0", "x": "slow#0", "b": "fast#0"}, ["a", "x", "b"])
    result = AnnealingEngine().solve(problem, 1.0, warm_start=EngineResult(tuple(start), "given"))
    assert result is not None and violations(problem, result.assignments) == []
    assert count_violations(result.assignments, problem.catalog) == []
    machines = {a.task: a.machine for a in result.assignments}
    assert machine_type(machines["a"]) == machine_type(machines["b"]) == "fast" and machines["a"] != machines["b"]
    assert problem.evaluate(result.assignments)[1] == pytest.approx(220 / 3600)


def test_annealing_needs_a_warm_start_and_time_for_its_first_steps() -> None:
    tasks = [task(f"t{i}", 10) for i in range(4)]
    problem = problem_of(tasks, [], [processor("p", 1.0, count=2)])
    start = ListSchedulingEngine().solve(problem, 1.0)
    assert start is not None
    assert AnnealingEngine().solve(problem, 1.0) is None
    too_short = len(tasks) * RETIME_S_PER_TASK  # one re-timing's worth: the search would overrun its limit
    assert AnnealingEngine().solve(problem, too_short, warm_start=start) is None
