"""The portfolio: each engine's share of the time limit, what survives a broken or slow engine, the
fast engines' rescue under a deadline, pooled bounds and proven optima."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.engines.one_type_default import OneTypeDefaultEngine
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.optimize.optimize import build_plan
from agora_optimizer.optimize.portfolio import TIME_LIMIT_FALLBACK, PortfolioProgress, Stage, run_portfolio
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.validate import validate_plan
from tests.conftest import AWS_CATALOG, BUNDLED

pytestmark = pytest.mark.slow  # seconds of planning per test: make test runs it, make test-fast does not

AWS = load_catalog(AWS_CATALOG)


def _valid(problem: Problem, result: EngineResult) -> bool:
    plan = build_plan(problem.workflow, problem.catalog, problem.objective, "c", result.assignments, result.method, 0.0)
    violations = validate_plan(plan, problem.workflow, problem.catalog)
    assert violations == [], violations[:3]
    return True


class _Broken(ListSchedulingEngine):
    name = "broken"

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        raise RuntimeError("engine bug")


class _Slow(ListSchedulingEngine):
    name = "slow"

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        time.sleep(time_limit_s)
        return None


def test_portfolio_survives_a_failing_or_idle_engine_and_keeps_the_best() -> None:
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    problem = Problem.create(workflow, AWS, Objective(kind="balanced"))
    stages = [Stage(ListSchedulingEngine(), 0.5), Stage(_Broken(), 0.5), Stage(_Slow(), 0.2)]
    started = time.perf_counter()
    outcome = run_portfolio(problem, 1.0, stages)
    assert time.perf_counter() - started < 1.5
    assert outcome.best.method == "list-scheduling"
    assert set(outcome.results) == {"list-scheduling"}
    assert _valid(problem, outcome.best)


class _Recording(ListSchedulingEngine):
    def __init__(self, name: str) -> None:
        self.name = name  # type: ignore[misc]
        self.calls = 0

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().solve(problem, time_limit_s, warm_start)


def test_a_stage_runs_only_for_its_objectives() -> None:
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    first, time_only = _Recording("first"), _Recording("time-only")
    stages = [Stage(first, 0.5), Stage(time_only, 0.5, objectives=("time",))]
    for kind, runs in (("cost", 0), ("balanced", 0), ("time", 1)):
        outcome = run_portfolio(Problem.create(workflow, AWS, Objective(kind=kind)), 2.0, stages)  # type: ignore[arg-type]
        assert time_only.calls == runs and ("time-only" in outcome.results) == (runs == 1)
    assert first.calls == 3


class _LateAndSlow(OneTypeDefaultEngine):
    """A first engine whose one schedule outruns its share and misses the deadline."""

    name = "late-and-slow"

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        time.sleep(0.3)
        return super().solve(problem, time_limit_s, warm_start)


class _Limits(ListSchedulingEngine):
    """Records the time limit it was given; finds nothing."""

    def __init__(self, name: str) -> None:
        self.name = name  # type: ignore[misc]
        self.limits: list[float] = []

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        self.limits.append(time_limit_s)
        return None


def test_while_no_plan_is_timely_only_an_engine_that_would_give_up_gets_a_whole_schedules_time() -> None:
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    default = OneTypeDefaultEngine().solve(Problem.create(workflow, AWS, Objective()), 1.0)
    assert default is not None
    problem = Problem.create(
        workflow, AWS, Objective(kind="cost", deadline_s=max(a.end_s for a in default.assignments) / 2)
    )
    completes, gives_up = _Limits("completes"), _Limits("gives-up")
    stages = [
        Stage(_LateAndSlow(), 0.3, fast=True, completes_one=True),
        Stage(completes, 0.3, fast=True, completes_one=True),
        Stage(gives_up, 0.3, fast=True),
    ]
    outcome = run_portfolio(problem, 0.2, stages)
    assert problem.excess(*problem.evaluate(outcome.best.assignments)) > 0  # nothing timely: every fast stage ran
    assert completes.limits == [0.01]  # past the limit: it completes its one schedule without more time
    assert gives_up.limits[0] >= 1.0 + 2 * 0.3  # one whole schedule as long as the first engine's, and more


class _OutrunsItsShare(OneTypeDefaultEngine):
    """A first engine whose one schedule outruns its share (0.4 s)."""

    name = "outruns-its-share"

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        time.sleep(0.4)
        return super().solve(problem, time_limit_s, warm_start)


@pytest.mark.parametrize(("limit_s", "runs"), [(1.2, True), (0.6, False)])
def test_after_a_schedule_longer_than_a_share_one_that_completes_a_schedule_runs_if_the_time_left_holds_it(
    limit_s: float, runs: bool
) -> None:
    """At 30,000 tasks the first engine's schedule outruns its share; list scheduling's still fits the minute."""
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    completes, gives_up = _Limits("completes"), _Limits("gives-up")
    stages = [
        Stage(_OutrunsItsShare(), 0.3, fast=True, completes_one=True),
        Stage(completes, 0.25, fast=True, completes_one=True),
        Stage(gives_up, 0.25, fast=True),
    ]
    run_portfolio(Problem.create(workflow, AWS, Objective(kind="cost")), limit_s, stages)
    assert bool(completes.limits) == runs  # its share (under 0.25 x 0.8 s) holds no 0.4 s schedule; 0.8 s left does
    assert gives_up.limits == []  # its share holds none either way


class _OverCount(ListSchedulingEngine):
    """A buggy engine: every task at time 0 on a machine of its own, whatever the type's count."""

    name = "over-count"

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        resource = problem.catalog.resources[0]
        placed = []
        for i, t in enumerate(problem.workflow.tasks):
            runtime_s = resource.runtime_s(t)
            placed.append(
                Assignment(t.id, resource.name, f"{resource.name}#{i}", 0.0, runtime_s, t.cores, t.memory_bytes)
            )
        return EngineResult(tuple(placed), self.name)


def test_a_plan_over_a_types_count_at_some_instant_is_dropped() -> None:
    cheap = Resource("cheap", "aws", 1, 4, 1.0, 0.01, 1, Billing(1.0, 0.0), boot_s=0.0)
    tasks = [Task(f"t{i}", 100.0, 1, GIB, "t") for i in range(3)]
    problem = Problem.create(Workflow.create("three", tasks, []), Catalog((cheap,), 1e9), Objective(kind="time"))
    outcome = run_portfolio(problem, 2.0, [Stage(ListSchedulingEngine(), 0.5), Stage(_OverCount(), 0.5)])
    assert set(outcome.results) == {"list-scheduling"}  # 100 s, three machines at once: faster, but not valid
    assert problem.evaluate(outcome.best.assignments)[0] == 300.0


class _BoundOnly(ListSchedulingEngine):
    """An exact engine that ran out of time: a worse plan, but a proven bound equal to the best plan's value."""

    name = "bound-only"

    def __init__(self, bound: float) -> None:
        self.bound = bound

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        worse = ListSchedulingEngine().solve(Problem.create(problem.workflow, problem.catalog, Objective()), 1.0)
        return EngineResult(worse.assignments, self.name, status="feasible", gap=0.5, bound=self.bound)


def test_bounds_from_several_engines_prove_the_best_plan_optimal() -> None:
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    problem = Problem.create(workflow, AWS, Objective(kind="cost"))
    first = ListSchedulingEngine().solve(problem, 2.0)
    assert first is not None
    value = problem.score(first.assignments)[0]
    later = _Recording("later")
    for bound, proven in ((value, True), (value * 0.99, False)):
        stages = [Stage(ListSchedulingEngine(), 0.3), Stage(_BoundOnly(bound), 0.3), Stage(later, 0.3)]
        best = run_portfolio(problem, 30.0, stages).best  # type: ignore[arg-type]  # room on a loaded machine
        assert best.method == "list-scheduling" and problem.score(best.assignments)[0] == pytest.approx(value)
        assert (best.status == "optimal") == proven
        if proven:
            assert best.bound == bound and best.gap == pytest.approx(0.0, abs=1e-12)
    assert later.calls == 1  # a proven optimum ends the run: the last engine ran only when the bound fell short


class _Budgeted(ListSchedulingEngine):
    def __init__(self, name: str) -> None:
        self.name = name  # type: ignore[misc]
        self.budgets: list[float] = []

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        self.budgets.append(time_limit_s)
        return super().solve(problem, time_limit_s, warm_start)


def test_the_first_engine_keeps_to_its_share_and_leaves_time_to_the_others() -> None:
    """A slow first sweep once took the whole limit on a loaded machine, and no cost engine ran."""
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    first, second = _Budgeted("first"), _Budgeted("second")
    run_portfolio(Problem.create(workflow, AWS, Objective(kind="cost")), 4.0, [Stage(first, 0.25), Stage(second, 1.0)])
    assert first.budgets[0] <= 0.25 * 4.0 + 1e-6
    assert second.budgets and second.budgets[0] >= 0.5 * 4.0 * 0.75  # most of what is left


class _SlowDefault(OneTypeDefaultEngine):
    """The one-type default, on a machine so loaded that its one schedule takes the whole limit."""

    name = "slow-default"

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        time.sleep(time_limit_s * 1.5)
        return super().solve(problem, time_limit_s, warm_start)


def test_until_a_plan_meets_the_deadline_the_fast_engines_run_even_past_the_limit() -> None:
    """Under load, a 2 s limit once refused a 900 s deadline that HEFT meets (803 s), for want of time."""
    from agora_optimizer.engines.heft import HeftEngine

    workflow = load_workflow(BUNDLED / "srasearch-chameleon-10a-001.json")
    free = Problem.create(workflow, AWS, Objective(kind="cost"))
    fast = free.evaluate(HeftEngine().solve(free, 60.0).assignments)[0]  # type: ignore[union-attr]
    slow = free.evaluate(OneTypeDefaultEngine().solve(free, 60.0).assignments)[0]  # type: ignore[union-attr]
    assert fast < slow
    problem = Problem.create(workflow, AWS, Objective(kind="cost", deadline_s=(fast + slow) / 2))
    stages = [
        Stage(_SlowDefault(), 0.25, fast=True),
        Stage(HeftEngine(), 0.3, fast=True),
        Stage(_Budgeted("late"), 0.6),
    ]
    late = stages[2].engine
    outcome = run_portfolio(problem, 0.4, stages)
    assert outcome.best.method == "heft" and problem.meets_limits(outcome.best.assignments)
    assert late.budgets == []  # once a plan meets the limits, the time limit holds again  # type: ignore[attr-defined]


class _Proving(ListSchedulingEngine):
    """An exact engine that proves the warm start optimal: the same value, with its bound (and a worse tie-break)."""

    name = "proving"

    def __init__(self, tie_break_s: float = 0.0) -> None:
        self.tie_break_s = tie_break_s

    def solve(self, problem, time_limit_s, warm_start=None):  # type: ignore[no-untyped-def]
        assert warm_start is not None
        value = problem.score(warm_start.assignments)[0]
        moved = tuple(
            replace(a, start_s=a.start_s + self.tie_break_s, end_s=a.end_s + self.tie_break_s)
            for a in warm_start.assignments
        )
        assignments = moved if problem.score(moved)[0] == value else warm_start.assignments
        return EngineResult(assignments, self.name, status="optimal", gap=0.0, bound=value)


@pytest.mark.parametrize("tie_break_s", [0.0, 1.0])
def test_an_optimum_proven_for_the_value_a_heuristic_reached_labels_the_kept_plan_optimal(tie_break_s: float) -> None:
    """A heuristic reaches the optimum first; an exact engine then proves that value: the outcome is optimal."""
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    problem = Problem.create(workflow, AWS, Objective(kind="cost"))
    later = _Recording("later")
    stages = [Stage(ListSchedulingEngine(), 0.3), Stage(_Proving(tie_break_s), 0.3), Stage(later, 0.3)]
    outcome = run_portfolio(problem, 30.0, stages)
    best, proven = outcome.best, outcome.results["proving"]
    assert best.method == "list-scheduling"  # the tie keeps the earlier plan
    assert (proven.assignments != best.assignments) == (tie_break_s > 0)  # a worse tie-break: a later makespan
    assert problem.score(best.assignments)[0] == pytest.approx(problem.score(proven.assignments)[0])
    assert best.status == "optimal" and best.bound == proven.bound
    assert best.gap == pytest.approx(0.0, abs=1e-12)
    assert later.calls == 0  # a proven optimum ends the run
    plan = build_plan(workflow, AWS, problem.objective, "c", best.assignments, best.method, 0.0, best.status, best.gap)
    assert plan.solver.status == "optimal" and validate_plan(plan, workflow, AWS) == []


def test_the_progress_callback_is_told_the_best_plan_so_far_and_the_best_proven_bound() -> None:
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    problem = Problem.create(workflow, AWS, Objective(kind="cost"))
    first = ListSchedulingEngine().solve(problem, 2.0)
    assert first is not None
    value = problem.score(first.assignments)[0]
    assert value * 0.99 > 1.0  # the proven bound below is tighter than the problem's own (1)
    states: list[PortfolioProgress] = []
    stages = [Stage(ListSchedulingEngine(), 0.3), Stage(_BoundOnly(value * 0.99), 0.3)]
    outcome = run_portfolio(problem, 30.0, stages, progress=states.append)  # type: ignore[arg-type]
    assert [(s.engine, s.done, s.planned) for s in states] == [
        ("list-scheduling", 0, 2),
        ("bound-only", 1, 2),
        ("", 2, 2),  # all done
    ]
    assert states[0].best_score is None and states[0].gap is None  # nothing planned yet
    makespan, cost = problem.evaluate(outcome.best.assignments)
    after_first, last = states[1], states[2]
    assert (after_first.best_makespan_s, after_first.best_cost_usd) == (makespan, cost)
    assert after_first.best_score == pytest.approx(value) and after_first.bound_score == 1.0
    assert after_first.gap == pytest.approx((value - 1.0) / value)  # to the problem's bounds
    assert last.bound_score == pytest.approx(value * 0.99)  # the exact engine's proof is tighter
    assert last.gap == pytest.approx(0.01) and last.within_limits


def _default_result(problem: Problem) -> EngineResult:
    default = OneTypeDefaultEngine().solve(problem, 1.0)
    assert default is not None
    return EngineResult(default.assignments, TIME_LIMIT_FALLBACK)


def test_with_a_plan_in_hand_the_first_list_schedule_keeps_the_time_limit_too() -> None:
    """Nothing left of the limit (it went before planning): the first list schedule is given up at once and
    the plan in hand, the one-type default, is the plan; no later engine runs."""
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    problem = Problem.create(workflow, AWS, Objective(kind="balanced"))
    fallback = _default_result(problem)
    later = _Recording("later")
    outcome = run_portfolio(problem, 0.0, [Stage(ListSchedulingEngine(), 0.5, fast=True), Stage(later, 0.5)],
                            fallback=fallback)  # fmt: skip
    assert outcome.best is fallback and outcome.best.method == TIME_LIMIT_FALLBACK
    assert set(outcome.results) == {TIME_LIMIT_FALLBACK} and later.calls == 0
    assert _valid(problem, outcome.best)
    # with time for it, the first schedule completes and wins over the default on this objective
    timed = run_portfolio(problem, 30.0, [Stage(ListSchedulingEngine(), 0.5, fast=True)], fallback=fallback)
    assert timed.best.method == "list-scheduling"


def test_a_plan_in_hand_that_misses_the_deadline_does_not_stop_the_first_schedule() -> None:
    """A late default is no answer: the first list schedule completes past the limit, as without one."""
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    fallback = _default_result(Problem.create(workflow, AWS, Objective()))
    problem = Problem.create(
        workflow, AWS, Objective(kind="cost", deadline_s=max(a.end_s for a in fallback.assignments) / 2)
    )
    assert problem.excess(*problem.evaluate(fallback.assignments)) > 0
    outcome = run_portfolio(problem, 0.0, [Stage(ListSchedulingEngine(), 0.5, fast=True)], fallback=fallback)
    assert outcome.best.method == "list-scheduling" and len(outcome.best.assignments) == len(workflow.tasks)
