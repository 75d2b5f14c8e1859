"""The CP-SAT engine: optimal against the exhaustive oracle and the MILP, valid, within limits and time.

The oracle (``brute_force`` in test_milp) tries every machine partition, type and whole-second
start on instances whose data are whole seconds. Real workflows (durations like 9.798843 /
1.3 s) exercise the rounding to ticks; there the MILP, which works in reals, is the reference.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from ortools.sat.python import cp_model

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.exact.cpsat.data import Ticks, build_data, choose_ticks, to_ticks
from agora_optimizer.engines.exact.cpsat.engine import CpSatEngine, add_hints, read_schedule, to_plan
from agora_optimizer.engines.exact.cpsat.model import build_model
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.engines.exact.repair import RealTimes, SolverSchedule, least_starts, real_starts
from agora_optimizer.engines.exact.shared import prune_types
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.model import GIB, Billing, Catalog, Edge, Objective, Resource, Task, Workflow
from agora_optimizer.model.plan import ObjectiveKind
from agora_optimizer.optimize.portfolio import Stage, default_stages, run_portfolio
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from tests.conftest import BUNDLED
from tests.engines.exact.test_milp import (
    BANDWIDTH,
    SMALL_CATALOG,
    close,
    first_tasks,
    limited_cases,
    tiny_oracle,
    tiny_problem,
    value,
    violations,
)

# Cases that take a second or more each (the oracle's or the solver's): make test runs them, make test-fast not.
SLOW = pytest.mark.slow


def real_problem(name: str, n: int, kind: ObjectiveKind) -> Problem:
    return Problem.create(first_tasks(BUNDLED / f"{name}.json", n), SMALL_CATALOG, Objective(kind=kind))


def assert_proven(problem: Problem, result: EngineResult | None, optimum: float) -> None:
    assert result is not None
    assert result.method == "cpsat"
    assert violations(problem, result.assignments) == []
    assert result.status == "optimal", (result.gap, result.bound)
    assert close(value(problem, result.assignments), optimum)
    assert result.bound is not None and result.bound <= optimum + 1e-9
    assert result.gap is not None and result.gap <= 1e-6


# 595: a 5 s minimum billed in 3 s steps; make test-fast solves ten seeds and that one, make test all
@pytest.mark.parametrize("seed", [*range(10), *(pytest.param(seed, marks=SLOW) for seed in range(10, 24)), 595])
def test_optimum_equals_the_brute_force_optimum_on_tiny_instances(seed: int) -> None:
    problem = tiny_problem(seed)
    oracle = tiny_oracle(seed)
    assert oracle is not None
    assert_proven(problem, CpSatEngine().solve(problem, time_limit_s=20), oracle[0])


@pytest.mark.parametrize("seed", [1, 4, pytest.param(6, marks=SLOW), 9, 16, 595])  # 6: seconds
def test_a_forced_inexact_tick_still_proves_the_optimum(seed: int) -> None:
    """A forced tick that the engine treats as inexact: both rounded models, "down" then "up" if needed."""
    problem = tiny_problem(seed)
    oracle = tiny_oracle(seed)
    assert oracle is not None
    engine = CpSatEngine(ticks_per_s=1000)
    assert_proven(problem, engine.solve(problem, time_limit_s=20), oracle[0])
    assert engine.last_phases[0].direction == "down"


@pytest.mark.parametrize("seed", [24, 25, 26, *(pytest.param(seed, marks=SLOW) for seed in range(27, 32))])
def test_deadline_and_budget_are_honoured_and_optimal_under_them(seed: int) -> None:
    for problem, oracle in limited_cases(seed):
        result = CpSatEngine().solve(problem, time_limit_s=20)
        if oracle is None:
            assert result is None
            continue
        assert_proven(problem, result, oracle[0])
        assert result is not None and problem.meets_limits(result.assignments)


def test_an_infeasible_deadline_returns_none() -> None:
    """a fits only on tall machines, b only on wide ones: b waits 10 s for a's data, which no bound sees."""
    tasks = [Task("a", 2.0, 1, 3 * GIB, "a"), Task("b", 2.0, 2, GIB, "b")]
    tall = Resource("tall", "aws", 1, 4, 1.0, 0.36, None, Billing(1, 0), 0)
    wide = Resource("wide", "aws", 2, 2, 1.0, 0.36, None, Billing(1, 0), 0)
    workflow = Workflow.create("apart", tasks, [Edge("a", "b", int(10 * BANDWIDTH))])
    catalog = Catalog((tall, wide), BANDWIDTH)
    fastest = CpSatEngine().solve(Problem.create(workflow, catalog, Objective(kind="time")), 20)
    assert fastest is not None and fastest.status == "optimal"
    assert Problem.create(workflow, catalog, Objective(kind="time")).evaluate(fastest.assignments)[0] == 14.0
    for deadline in (1.0, 13.0):  # below the lower bound of 4 s; above it, but the model proves it infeasible
        problem = Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=deadline))
        assert (problem.bounds.makespan_s > deadline) == (deadline == 1.0)
        assert CpSatEngine().solve(problem, 20) is None


def test_an_unaffordable_budget_returns_none() -> None:
    problem = tiny_problem(5, Objective(kind="cost"))
    result = CpSatEngine().solve(problem, time_limit_s=20)
    assert result is not None and result.status == "optimal"
    _, cheapest = problem.evaluate(result.assignments)
    objective = Objective(kind="time", budget_usd=cheapest * 0.99)
    assert CpSatEngine().solve(Problem.create(problem.workflow, problem.catalog, objective), 20) is None


def test_a_type_of_count_one_is_leased_again_after_a_gap_when_that_is_cheaper() -> None:
    """a and b on the cheap type (count 1) around c, which only fits the expensive one."""
    tasks = [Task("a", 2.0, 1, GIB, "a"), Task("c", 8.0, 1, 3 * GIB, "c"), Task("b", 2.0, 1, GIB, "b")]
    cheap = Resource("cheap", "aws", 1, 2, 1.0, 0.36, 1, Billing(1, 0), 0)
    big = Resource("big", "aws", 1, 4, 1.0, 3.6, None, Billing(1, 0), 0)
    workflow = Workflow.create("gap", tasks, [Edge("a", "c"), Edge("c", "b")])
    problem = Problem.create(workflow, Catalog((cheap, big), BANDWIDTH), Objective(kind="cost"))
    result = CpSatEngine().solve(problem, time_limit_s=20)
    assert result is not None and result.status == "optimal"
    assert violations(problem, result.assignments) == []
    on = {a.task: a.machine for a in result.assignments}
    assert on["a"] != on["b"] and {on["a"], on["b"]} <= {"cheap#0", "cheap#1"}
    assert problem.evaluate(result.assignments)[1] == pytest.approx((4 * 0.36 + 8 * 3.6) / 3600)


@pytest.mark.parametrize(
    ("name", "n", "kind"),
    [
        ("blast-chameleon-small-001", 12, "time"),
        pytest.param("montage-chameleon-2mass-01d-001", 8, "cost", marks=SLOW),
        pytest.param("bacass-dirt02-001", 8, "balanced", marks=SLOW),
    ],
)
def test_real_durations_give_the_milp_optimum(name: str, n: int, kind: ObjectiveKind) -> None:
    """Durations that are no whole number of ticks: both rounded models, against the MILP's real-valued optimum."""
    problem = real_problem(name, n, kind)
    milp = MilpEngine().solve(problem, time_limit_s=30)
    assert milp is not None and milp.status == "optimal"
    started = time.perf_counter()
    result = CpSatEngine().solve(problem, time_limit_s=10)
    assert time.perf_counter() - started < 10.5
    assert_proven(problem, result, value(problem, milp.assignments))


def test_an_up_model_schedule_retimes_into_a_valid_plan_no_worse_than_the_model() -> None:
    problem = real_problem("1000genome-chameleon-2ch-100k-001", 8, "balanced")
    ticks = choose_ticks(problem, prune_types(problem)[0])
    assert not ticks.exact
    data = build_data(problem, "up", ticks, None)
    model = build_model(data)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 5
    solver.parameters.num_workers = 2
    assert solver.solve(model.cp) in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    plan = to_plan(data, read_schedule(solver, model, data))
    assert plan is not None and violations(problem, plan) == []
    # rounded-up ticks and coefficients: the real plan scores no more than the model's objective says
    assert value(problem, plan) <= solver.objective_value / model.scale * (1 + 1e-6)


@pytest.mark.parametrize("spec", [("tiny", 6), ("tiny", 16), ("real", 0)])
def test_a_valid_plan_is_a_complete_feasible_hint_for_the_down_model(spec: tuple[str, int]) -> None:
    """The down model is a relaxation: a real plan, rounded down to ticks, solves it and scores no more."""
    if spec[0] == "tiny":
        problem = tiny_problem(spec[1])
    else:
        problem = real_problem("srasearch-chameleon-10a-001", 12, "balanced")
    bounds = problem.bounds
    plan = list_schedule(problem.workflow, problem.catalog, 0.5, bounds.makespan_s, bounds.cost_usd)
    assert violations(problem, plan) == []
    for ticks in (choose_ticks(problem, prune_types(problem)[0]), Ticks(1000, False)):
        data = build_data(problem, "down", ticks, None)
        model = build_model(data)
        assert add_hints(model, data, plan)
        solver = cp_model.CpSolver()
        solver.parameters.fix_variables_to_their_hinted_value = True
        solver.parameters.num_workers = 1
        assert solver.solve(model.cp) == cp_model.OPTIMAL
        assert solver.objective_value / model.scale <= value(problem, plan) * (1 + 1e-12)


def test_ticks_are_exact_on_whole_seconds_and_fine_enough_otherwise() -> None:
    tiny = tiny_problem(3)
    assert choose_ticks(tiny, prune_types(tiny)[0]) == Ticks(1, True)
    real = real_problem("blast-chameleon-small-001", 12, "cost")
    ticks = choose_ticks(real, prune_types(real)[0])
    assert not ticks.exact
    # 2 ticks per task cost at most 5e-7 of the makespan bound
    assert 2 * 12 / ticks.per_s <= 5e-7 * real.bounds.makespan_s
    assert to_ticks(2 / 3, 3000, "down") == 1999 and to_ticks(2 / 3, 3000, "up") == 2000
    assert to_ticks(0.1 * 3, 10, "down") == 3  # 0.30000000000000004 s: floor is exact, ceil is not
    assert to_ticks(0.1 * 3, 10, "up") == 4


@SLOW  # runs its 2 s limit
def test_a_run_cut_short_is_valid_within_its_time_and_never_worse_than_the_warm_start() -> None:
    problem = real_problem("1000genome-chameleon-2ch-100k-001", 12, "balanced")
    bounds = problem.bounds
    warm = list_schedule(problem.workflow, problem.catalog, 0.5, bounds.makespan_s, bounds.cost_usd)
    started = time.perf_counter()
    result = CpSatEngine().solve(problem, time_limit_s=2, warm_start=EngineResult(tuple(warm), "list-scheduling"))
    assert time.perf_counter() - started < 2.5
    assert result is not None
    assert violations(problem, result.assignments) == []
    assert value(problem, result.assignments) <= value(problem, warm) + 1e-9
    assert result.bound is not None and 0 < result.bound <= value(problem, result.assignments)
    if result.status == "feasible":
        assert result.gap == pytest.approx(
            (value(problem, result.assignments) - result.bound) / value(problem, result.assignments)
        )


def test_a_workflow_above_the_size_limit_returns_none_at_once() -> None:
    path: Path = BUNDLED / "montage-chameleon-2mass-01d-001.json"
    problem = Problem.create(first_tasks(path, 13), SMALL_CATALOG, Objective(kind="cost"))
    started = time.perf_counter()
    assert CpSatEngine(max_tasks=12).solve(problem, time_limit_s=60) is None
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize("slack", [1.0, 1.05])
def test_a_deadline_at_the_optimal_makespan_is_met_and_proven(slack: float) -> None:
    """Rounding to ticks must neither lose the plans that just meet the deadline nor break it."""
    fastest = CpSatEngine().solve(real_problem("bacass-dirt02-001", 8, "time"), time_limit_s=10)
    assert fastest is not None and fastest.status == "optimal"
    timed = real_problem("bacass-dirt02-001", 8, "time")
    deadline = timed.evaluate(fastest.assignments)[0] * slack
    problem = Problem.create(timed.workflow, timed.catalog, Objective(kind="cost", deadline_s=deadline))
    result = CpSatEngine().solve(problem, time_limit_s=10)
    assert result is not None and result.status == "optimal"
    assert violations(problem, result.assignments) == []
    assert problem.meets_limits(result.assignments)
    assert result.bound is not None and result.bound <= value(problem, result.assignments)


def test_retiming_keeps_the_schedule_decisions_and_starts_each_task_as_early_as_they_allow() -> None:
    """a then b on one machine, c elsewhere after a's transfer; ticks are only used for the order."""
    schedule = SolverSchedule(
        place=[(0, 0), (0, 0), (1, 0)],
        start=[10, 30, 30],
        end=[30, 50, 45],
        lease={(0, 0): (0, 50), (1, 0): (20, 45)},
    )
    real = RealTimes(
        duration_s=[1.5, 1.5, 1.0],
        edges=[(0, 2, 0.5)],
        boot_s={(0, 0): 1.0, (1, 0): 1.0},
        count_limited=frozenset(),
    )
    assert real_starts(schedule, real, None) == [1.0, 2.5, 3.0]
    # a lease allowance that cannot hold (a and b need 4 s with the boot) is dropped, not failed
    assert real_starts(schedule, real, {(0, 0): 2.0, (1, 0): 60.0}) == [1.0, 2.5, 3.0]
    # b waits for c's data: a lease allowance of 3 s delays a rather than bill machine (0, 0) 5.5 s
    waiting = SolverSchedule([(0, 0), (1, 0), (0, 0)], [10, 10, 45], [20, 40, 55], {(0, 0): (0, 55), (1, 0): (0, 40)})
    times = RealTimes([1.0, 3.0, 1.0], [(1, 2, 0.5)], {(0, 0): 1.0, (1, 0): 1.0}, frozenset())
    assert real_starts(waiting, times, None) == [1.0, 1.0, 4.5]
    assert real_starts(waiting, times, {(0, 0): 3.0, (1, 0): 60.0}) == [3.5, 1.0, 4.5]
    assert least_starts([0.0, 0.0], [(0, 1, 1.0), (1, 0, 1.0)]) is None  # a positive cycle


class _Recorder(Engine):
    """An engine that only records that the portfolio asked it."""

    name = "recorder"

    def __init__(self) -> None:
        self.asked = 0

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        self.asked += 1
        return None


def test_the_portfolio_stops_at_a_proven_optimum() -> None:
    problem = real_problem("bacass-dirt02-001", 8, "cost")
    later = _Recorder()
    stages = [Stage(ListSchedulingEngine(), share=0.25), Stage(CpSatEngine(), share=0.6), Stage(later, share=1.0)]
    outcome = run_portfolio(problem, 20.0, stages)
    proven, best = outcome.results["cpsat"], outcome.best
    assert proven.status == "optimal" and proven.bound is not None
    assert value(problem, best.assignments) <= value(problem, proven.assignments)  # ties keep the earlier
    # whichever plan is kept, the outcome is the proven optimum: status, bound and gap
    assert best.status == "optimal" and best.bound is not None and best.bound >= proven.bound
    assert best.gap is not None and best.gap <= 1e-6
    assert later.asked == 0
    names = [s.engine.name for s in default_stages()]
    assert names.index("cpsat") < names.index("milp")  # the faster prover first
