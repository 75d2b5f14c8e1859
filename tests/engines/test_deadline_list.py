"""Deadline-aware list scheduling: on time where the fastest plan is, cheaper than the time/cost sweep."""

from __future__ import annotations

import pytest

from agora_optimizer.engines.deadline_list import DeadlineListEngine
from agora_optimizer.engines.heft import HeftEngine
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.problem import Problem
from tests.conftest import CATALOGS, ENGINE_WORKFLOWS
from tests.engines.plan_checks import ENGINE_CATALOGS, violations


def _deadline_problem(workflow: Workflow, catalog: Catalog, factor: float, kind: str = "cost") -> Problem:
    """A deadline ``factor`` times HEFT's makespan (a deadline the fastest engine meets)."""
    free = Problem.create(workflow, catalog, Objective(kind="time"))
    heft = HeftEngine().solve(free, 10.0)
    assert heft is not None
    fastest = free.evaluate(heft.assignments)[0]
    return Problem.create(workflow, catalog, Objective(kind=kind, deadline_s=factor * fastest))  # type: ignore[arg-type]


@pytest.mark.slow  # a few schedules per case
@pytest.mark.parametrize("factor", [1.2, 1.5])
@pytest.mark.parametrize("catalog_name", ENGINE_CATALOGS)
@pytest.mark.parametrize("path", ENGINE_WORKFLOWS, ids=lambda p: p.stem)
def test_every_plan_is_valid_and_on_time(path, catalog_name: str, factor: float) -> None:
    problem = _deadline_problem(load_workflow(path), load_catalog(CATALOGS / f"{catalog_name}.yaml"), factor)
    result = DeadlineListEngine().solve(problem, 10.0)
    assert result is not None and result.method == "deadline-list"
    assert violations(problem, result.assignments) == []
    assert problem.early_starts(result.assignments) == []
    assert problem.meets_limits(result.assignments)


def test_without_a_deadline_it_does_not_apply() -> None:
    workflow = load_workflow(ENGINE_WORKFLOWS[0])
    catalog = load_catalog(CATALOGS / "aws-us-east-1.yaml")
    for kind in ("time", "cost", "balanced"):
        assert DeadlineListEngine().solve(Problem.create(workflow, catalog, Objective(kind=kind)), 5.0) is None  # type: ignore[arg-type]


def _type(name: str, vcpus: int, price: float) -> Resource:
    return Resource(name, "aws", vcpus, 4 * vcpus, 1.0, price, 1, Billing(1.0, 0.0), boot_s=10.0)


def test_a_large_machine_cheaper_per_core_is_opened_for_tasks_that_fill_it() -> None:
    """Four 1-core tasks: one 4-core machine at 3 USD/h runs them for 300 USD/h-units; one 1-core machine at
    1 USD/h, one after another, for 400. Counted in full, the first task alone would never open the large one."""
    tasks = [Task(f"t{i}", 100.0, 1, GIB, "t") for i in range(4)]
    catalog = Catalog((_type("small", 1, 1.0), _type("large", 4, 3.0)), 1e9)
    problem = Problem.create(Workflow.create("fill", tasks, []), catalog, Objective(kind="cost", deadline_s=1000.0))
    result = DeadlineListEngine().solve(problem, 5.0)
    assert result is not None and violations(problem, result.assignments) == []
    assert {a.resource for a in result.assignments} == {"large"} and len({a.machine for a in result.assignments}) == 1
    assert problem.evaluate(result.assignments)[1] == pytest.approx(3.0 * 110 / 3600)


def test_a_task_without_slack_pays_for_speed_and_one_with_slack_does_not() -> None:
    """A chain a -> b and a lone c, deadline 120 s: a and b (100 s of work) must run on the fast type, c not."""
    fast = Resource("fast", "aws", 1, 4, 2.0, 4.0, 2, Billing(1.0, 0.0), boot_s=0.0)
    slow = Resource("slow", "aws", 1, 4, 1.0, 1.0, 2, Billing(1.0, 0.0), boot_s=0.0)
    tasks = [Task("a", 100.0, 1, GIB, "a"), Task("b", 100.0, 1, GIB, "b"), Task("c", 100.0, 1, GIB, "c")]
    from agora_optimizer.model.workflow import Edge

    workflow = Workflow.create("slack", tasks, [Edge("a", "b", 0)])
    problem = Problem.create(workflow, Catalog((fast, slow), 1e9), Objective(kind="cost", deadline_s=120.0))
    result = DeadlineListEngine().solve(problem, 5.0)
    assert result is not None and violations(problem, result.assignments) == []
    placed = {a.task: a.resource for a in result.assignments}
    assert placed == {"a": "fast", "b": "fast", "c": "slow"}
    assert problem.meets_limits(result.assignments)


@pytest.mark.slow  # plans for seconds
def test_cheaper_than_the_time_cost_sweep_under_the_same_deadline() -> None:
    """The sweep of list scheduling over the time/cost weight against the deadline-aware one, on every bundled
    workflow of the engine tests, deadline 1.5x HEFT's makespan, AWS catalog: cheaper in total (on a small
    workflow the sweep may win; the portfolio runs both and keeps the better)."""
    catalog = load_catalog(CATALOGS / "aws-us-east-1.yaml")
    sweep_total = deadline_total = 0.0
    for path in ENGINE_WORKFLOWS:
        problem = _deadline_problem(load_workflow(path), catalog, 1.5)
        sweep = ListSchedulingEngine().solve(problem, 10.0)
        deadline = DeadlineListEngine().solve(problem, 10.0)
        assert sweep is not None and deadline is not None
        assert problem.meets_limits(deadline.assignments)
        sweep_cost, deadline_cost = problem.evaluate(sweep.assignments)[1], problem.evaluate(deadline.assignments)[1]
        sweep_total += sweep_cost
        deadline_total += deadline_cost
    assert deadline_total < sweep_total


@pytest.mark.parametrize("kind", ["cost", "balanced"])
def test_a_released_task_starts_after_its_release_and_the_deadline_holds(kind: str) -> None:
    """The released problem of test_task_release.py under a deadline 20 s past what its release forces."""
    from tests.engines.test_task_release import CATALOG, RELEASE_S, WORKFLOW

    deadline = RELEASE_S + 10.0 / 2.0 + 8.0 / 2.0 + 2.0 + 20.0  # the chain on the fast type, its boot, 20 s to spare
    problem = Problem.create(WORKFLOW, CATALOG, Objective(kind=kind, deadline_s=deadline))  # type: ignore[arg-type]
    result = DeadlineListEngine().solve(problem, 5.0)
    assert result is not None and violations(problem, result.assignments) == []
    assert problem.early_starts(result.assignments) == [] and problem.meets_limits(result.assignments)
    starts = {a.task: a.start_s for a in result.assignments}
    assert starts["wait_then"] >= RELEASE_S and starts["last"] > starts["wait_then"]


def test_a_dear_type_is_leased_for_each_burst_when_its_count_holds_at_every_instant() -> None:
    """Two bursts of two 100 s tasks around a 1,000 s task, deadline 1,200 s: each burst needs a second
    machine, and the only other one is dear (count 1). One dear lease over both bursts pays the 1,000 s
    between them; a lease per burst (never two at once, as the spec's count allows) does not."""
    from agora_optimizer.model.workflow import Edge

    cheap = Resource("cheap", "aws", 1, 4, 1.0, 1.0, 1, Billing(1.0, 0.0), boot_s=0.0)
    dear = Resource("dear", "aws", 1, 4, 1.0, 10.0, 1, Billing(1.0, 0.0), boot_s=0.0)
    tasks = [Task(n, 1000.0 if n == "c" else 100.0, 1, GIB, n) for n in ("a1", "a2", "c", "b1", "b2")]
    edges = [Edge("a1", "c", 0), Edge("a2", "c", 0), Edge("c", "b1", 0), Edge("c", "b2", 0)]
    workflow = Workflow.create("bursts", tasks, edges)
    problem = Problem.create(workflow, Catalog((cheap, dear), 1e9), Objective(kind="cost", deadline_s=1200.0))
    by_burst = DeadlineListEngine().solve(problem, 5.0)
    whole = DeadlineListEngine(instant_counts=False).solve(problem, 5.0)
    assert by_burst is not None and whole is not None
    for result in (by_burst, whole):
        assert violations(problem, result.assignments) == [] and problem.meets_limits(result.assignments)
    dear_leases = {a.machine: (a.start_s, a.end_s) for a in by_burst.assignments if a.resource == "dear"}
    assert len(dear_leases) == 2  # one per burst, one after the other
    (first, second) = sorted(dear_leases.values())
    assert first[1] <= second[0]
    assert problem.evaluate(by_burst.assignments)[1] == pytest.approx((1200 * 1.0 + 200 * 10.0) / 3600)
    assert problem.evaluate(whole.assignments)[1] == pytest.approx((1200 * 1.0 + 1200 * 10.0) / 3600)
    from agora_optimizer.engines.local_search import LocalSearchEngine

    # Local search checks each move of such a plan against the counts at every instant.
    improved = LocalSearchEngine().solve(problem, 2.0, warm_start=by_burst)
    assert improved is None or (
        violations(problem, improved.assignments) == [] and problem.meets_limits(improved.assignments)
    )


def test_a_late_first_schedule_is_followed_by_one_with_less_slack_even_when_the_time_is_spent(monkeypatch) -> None:
    """Where the time limit affords one schedule (30,000 tasks), a late one would be all there is."""
    import agora_optimizer.engines.deadline_list as deadline_list

    latest_ends: list[dict[str, float]] = []
    schedule = deadline_list.list_schedule

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        latest_ends.append(dict(kwargs["latest_end_s"]))
        return schedule(*args, **kwargs)

    monkeypatch.setattr(deadline_list, "list_schedule", spy)
    workflow = load_workflow(ENGINE_WORKFLOWS[0])  # 1000genome: on hpc-36 at 1.2 x, the first schedule is late
    problem = _deadline_problem(workflow, load_catalog(CATALOGS / "hpc-36.yaml"), 1.2)
    DeadlineListEngine(instant_counts=False).solve(problem, 1e-9)
    assert len(latest_ends) == 2
    assert all(latest_ends[1][task] < latest_ends[0][task] for task in latest_ends[0])
    latest_ends.clear()
    problem = _deadline_problem(workflow, load_catalog(CATALOGS / "aws-us-east-1.yaml"), 1.2)  # timely at once
    result = DeadlineListEngine(instant_counts=False).solve(problem, 1e-9)
    assert len(latest_ends) == 1 and result is not None and problem.meets_limits(result.assignments)


def test_with_a_plan_on_time_in_hand_it_keeps_its_limit() -> None:
    """Its schedules run past the limit only while there is no plan on time: with one in hand (the portfolio's
    best so far), a schedule is given up at the limit. At 30,000 tasks on memory-tight, one took 83 s of a 17 s
    share after the cheapest-first fleets had a plan on time."""
    workflow = load_workflow(ENGINE_WORKFLOWS[0])
    problem = _deadline_problem(workflow, load_catalog(CATALOGS / "hpc-36.yaml"), 1.5)
    on_time = HeftEngine().solve(problem, 10.0)
    assert on_time is not None and problem.meets_limits(on_time.assignments)
    assert DeadlineListEngine().solve(problem, 0.0, warm_start=on_time) is None
    assert DeadlineListEngine().solve(problem, 0.0) is not None  # nothing in hand: it completes its schedules anyway
    late = ListSchedulingEngine().solve(
        Problem.create(workflow, problem.catalog, Objective(kind="cost")), 10.0
    )  # for cost alone: late under the deadline, so no plan on time is in hand
    assert late is not None and not problem.meets_limits(late.assignments)
    assert DeadlineListEngine().solve(problem, 0.0, warm_start=late) is not None
