"""Spot capacity (docs/spot.md): the expected-cost formula, the replay with interruptions, the
worst-case makespan, and the planner's choice of spot or on-demand capacity by slack."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.spot_guard import SpotGuardEngine
from agora_optimizer.io.plan_file import plan_from_document, plan_to_dict
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.optimize import optimize
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.spot import (
    expected_attempt_s,
    expected_cost_usd,
    expected_task_cost_usd,
    expected_task_s,
    interruption_probability,
    rerun_cost_usd,
)
from agora_optimizer.planning.spot_replay import (
    all_interrupted_makespan_s,
    replay,
    sample_interruptions,
    worst_case_makespan_s,
)
from agora_optimizer.planning.validate import validate_plan
from tests import spec_checker
from tests.conftest import wfformat_15, write_json, write_yaml

ON_DEMAND = Resource("od", "aws", 4, 16, 1.0, 1.0, None, Billing(1.0, 60.0), 30.0)
SPOT = Resource(
    "od-spot", "aws", 4, 16, 1.0, 0.3, None, Billing(1.0, 60.0), 30.0, spot=True, interruption_rate_per_hour=2.0,
    fallback="od",
)  # fmt: skip
CATALOG = Catalog((ON_DEMAND, SPOT), 1e8)


def _task(name: str, runtime_s: float) -> Task:
    return Task(name, runtime_s, 1, GIB, name)


# -- the formula -------------------------------------------------------------------------------


def test_without_interruptions_a_spot_task_is_an_on_demand_task_at_the_spot_price() -> None:
    task = _task("t", 1800.0)
    calm = replace(SPOT, interruption_rate_per_hour=0.0, billing=Billing(1.0, 0.0))
    assert interruption_probability(1800.0, 0.0) == 0.0
    assert expected_attempt_s(1800.0, 0.0) == 1800.0
    assert expected_task_s(task, calm, CATALOG) == 1800.0
    assert expected_task_cost_usd(task, calm, CATALOG) == pytest.approx(0.3 * (30 + 1800) / 3600)
    assert expected_task_cost_usd(task, calm, CATALOG) == pytest.approx(calm.lease_cost_usd(30 + 1800))


def test_hand_case_one_interruption_expected_per_run() -> None:
    # lambda d = 1: p = 1 - 1/e, E[min(T, d)] = (1 - 1/e) / mu = 0.632 d.
    task = _task("t", 1800.0)
    assert interruption_probability(1800.0, 2.0) == pytest.approx(1 - math.exp(-1))
    assert expected_attempt_s(1800.0, 2.0) == pytest.approx((1 - math.exp(-1)) * 1800.0)
    p = 1 - math.exp(-1)
    assert rerun_cost_usd(task, SPOT, CATALOG) == pytest.approx(1.0 * (30 + 1800) / 3600)
    assert expected_task_s(task, SPOT, CATALOG) == pytest.approx(p * 1800.0 + p * (30 + 1800))
    assert expected_task_cost_usd(task, SPOT, CATALOG) == pytest.approx(
        0.3 * (30 + p * 1800.0) / 3600 + p * (30 + 1800) / 3600
    )


@pytest.mark.parametrize(("runtime_s", "rate_per_hour"), [(1800.0, 2.0), (120.0, 0.5), (7200.0, 0.05)])
def test_the_formula_matches_a_monte_carlo_estimate(runtime_s: float, rate_per_hour: float) -> None:
    """200,000 seeded draws of the first interruption; the formula's mean must lie within 4 standard
    errors of the sample mean (a correct formula fails this with probability about 6e-5, and the seed
    makes the test deterministic), and within 1 % (far tighter than the 15 % the benchmark targets)."""
    task = _task("t", runtime_s)
    spot = replace(SPOT, interruption_rate_per_hour=rate_per_hour, billing=Billing(1.0, 0.0))
    catalog = Catalog((ON_DEMAND, spot), 1e8)
    rng = random.Random(2112)
    mu = rate_per_hour / 3600
    rerun_usd = ON_DEMAND.lease_cost_usd(ON_DEMAND.boot_s + runtime_s)
    costs, times = [], []
    for _ in range(200_000):
        after = rng.expovariate(mu)
        if after >= runtime_s:
            costs.append(0.3 * (30 + runtime_s) / 3600)
            times.append(runtime_s)
        else:
            costs.append(0.3 * (30 + after) / 3600 + rerun_usd)
            times.append(after + ON_DEMAND.boot_s + runtime_s)
    for samples, formula in (
        (costs, expected_task_cost_usd(task, spot, catalog)),
        (times, expected_task_s(task, spot, catalog)),
    ):
        mean, error = statistics.fmean(samples), statistics.stdev(samples) / math.sqrt(len(samples))
        assert abs(formula - mean) <= 4 * error + 1e-12
        assert formula == pytest.approx(mean, rel=0.01)


# -- the replay and the plan's figures ---------------------------------------------------------


def _chain_workflow() -> Workflow:
    """a -> b -> c, and d alone; 1 s of transfer on each edge."""
    tasks = [_task("a", 100.0), _task("b", 100.0), _task("c", 100.0), _task("d", 50.0)]
    edges = [Edge("a", "b", int(1e8)), Edge("b", "c", int(1e8))]
    return Workflow.create("chain", tasks, edges)


def _assignment(task: str, resource: Resource, machine: int, start_s: float, end_s: float) -> Assignment:
    return Assignment(task, resource.name, f"{resource.name}#{machine}", start_s, end_s, 1, GIB)


def _spot_plan() -> list[Assignment]:
    # a, b and d share one spot machine; c is on demand (b's output travels 1 s).
    return [
        _assignment("a", SPOT, 0, 30.0, 130.0),
        _assignment("d", SPOT, 0, 30.0, 80.0),
        _assignment("b", SPOT, 0, 130.0, 230.0),
        _assignment("c", ON_DEMAND, 0, 231.0, 331.0),
    ]


def test_a_replay_without_interruptions_is_the_plan() -> None:
    workflow, plan = _chain_workflow(), _spot_plan()
    result = replay(plan, workflow, CATALOG, {})
    assert (result.makespan_s, result.reruns) == (makespan_s(plan), ())
    assert result.cost_usd == pytest.approx(cost_usd(plan, CATALOG))


def test_an_interrupted_task_reruns_on_demand_and_its_successors_shift() -> None:
    workflow, plan = _chain_workflow(), _spot_plan()
    result = replay(plan, workflow, CATALOG, {"a": 40.0})  # a leaves its machine at 70 s
    # a re-runs on a new od machine: up at 100 s, done at 200 s; b (same spot machine, now 1 s of transfer)
    # starts at 201 s, ends at 301 s; c starts at 302 s, ends at 402 s.
    assert result.reruns == ("a",)
    assert result.makespan_s == pytest.approx(402.0)
    spot_lease = SPOT.lease_cost_usd(301.0 - 30.0 + 30.0)
    rerun = ON_DEMAND.lease_cost_usd(30.0 + 100.0)
    planned_od = ON_DEMAND.lease_cost_usd(402.0 - 302.0 + 30.0)
    assert result.cost_usd == pytest.approx(spot_lease + rerun + planned_od)


def test_the_worst_case_is_the_latest_single_rerun_and_below_every_spot_task_interrupted() -> None:
    workflow, plan = _chain_workflow(), _spot_plan()
    singles = [replay(plan, workflow, CATALOG, {a.task: a.end_s - a.start_s}).makespan_s for a in plan if a.task != "c"]
    worst = worst_case_makespan_s(plan, workflow, CATALOG)
    assert worst == pytest.approx(max(singles))
    # a interrupted at 130 s: its re-run is up at 160 s and done at 260 s; b waits for a's output from the
    # re-run's machine (1 s) and runs 261-361 s; c 362-462 s (b interrupted instead would end it at 461 s).
    assert worst == pytest.approx(462.0)
    everything = all_interrupted_makespan_s(plan, workflow, CATALOG)
    assert everything >= worst and everything == pytest.approx(
        replay(plan, workflow, CATALOG, {"a": 100.0, "b": 100.0, "d": 50.0}).makespan_s
    )


def test_the_expected_cost_is_the_leases_plus_each_spot_tasks_chance_of_a_rerun() -> None:
    workflow, plan = _chain_workflow(), _spot_plan()
    extra = sum(interruption_probability(d, 2.0) * ON_DEMAND.lease_cost_usd(30.0 + d) for d in (100.0, 100.0, 50.0))
    assert expected_cost_usd(plan, workflow, CATALOG) == pytest.approx(cost_usd(plan, CATALOG) + extra)


def test_the_expected_cost_is_close_to_the_mean_of_many_replays() -> None:
    """The plan-level figure neglects the shifts and the leases an interruption shortens: on this plan
    (about one task in nine interrupted per run) it stays within 5 % of the mean of 4,000 seeded replays."""
    workflow, plan = _chain_workflow(), _spot_plan()
    rng = random.Random(7)
    costs = [replay(plan, workflow, CATALOG, sample_interruptions(plan, CATALOG, rng)).cost_usd for _ in range(4000)]
    assert expected_cost_usd(plan, workflow, CATALOG) == pytest.approx(statistics.fmean(costs), rel=0.05)


# -- the planner ---------------------------------------------------------------------------------


def _slack_workflow() -> Workflow:
    """A 200 s chain (no slack for a re-run under a 260 s deadline) beside a 50 s task (slack to spare)."""
    tasks = [_task("t1", 100.0), _task("t2", 100.0), _task("loose", 50.0)]
    return Workflow.create("slack", tasks, [Edge("t1", "t2", 0)])


def _calm_catalog(rate_per_hour: float) -> Catalog:
    """One core a machine (no task shares an on-demand lease for free), no boot, billed by the second."""
    on_demand = replace(ON_DEMAND, vcpus=1, boot_s=0.0, billing=Billing(1.0, 0.0), count=None)
    spot = replace(SPOT, vcpus=1, boot_s=0.0, billing=Billing(1.0, 0.0), interruption_rate_per_hour=rate_per_hour)
    return Catalog((on_demand, spot), 1e8)


def test_a_task_without_slack_stays_on_demand_and_one_with_slack_goes_on_spot(tmp_path: Path) -> None:
    workflow, catalog = _slack_workflow(), _calm_catalog(0.1)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=260.0), "catalog.yaml", time_limit_s=2.0)
    on = {a.task: a.resource for a in plan.assignments}
    assert on == {"t1": "od", "t2": "od", "loose": "od-spot"}
    assert validate_plan(plan, workflow, catalog) == []
    assert plan.spot is not None and plan.spot.spot_tasks == 1
    assert plan.spot.worst_case_makespan_s == worst_case_makespan_s(plan.assignments, workflow, catalog) <= 260.0
    problem = Problem.create(workflow, catalog, plan.objective)
    assert plan.spot.expected_cost_usd >= problem.bounds.cost_usd  # the bound holds for the expected cost
    assert plan.spot.expected_cost_usd == pytest.approx(expected_cost_usd(plan.assignments, workflow, catalog))
    assert spec_checker.check_plan(plan_to_dict(plan), *_spec_files(workflow, catalog, tmp_path)) == []


def test_the_spot_guard_moves_the_spot_machine_whose_rerun_breaks_the_deadline() -> None:
    workflow, catalog = _slack_workflow(), _calm_catalog(0.1)
    spot = catalog.by_name["od-spot"]
    late = (
        _assignment("t1", spot, 0, 0.0, 100.0),
        _assignment("t2", spot, 0, 100.0, 200.0),
        _assignment("loose", spot, 1, 0.0, 50.0),
    )
    problem = Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=260.0))
    assert problem.excess(*problem.evaluate(late)) > 0  # a re-run of t1 ends t2 at 300 s
    result = SpotGuardEngine().solve(problem, 2.0, EngineResult(late, "hand-made"))
    assert result is not None and result.method == "hand-made+spot-guard"
    assert {a.task: a.machine for a in result.assignments} == {"t1": "od#0", "t2": "od#0", "loose": "od-spot#1"}
    assert problem.excess(*problem.evaluate(result.assignments)) == 0
    assert SpotGuardEngine().solve(problem, 2.0, result) is None  # on time in the worst case: nothing to do


def test_spot_dearer_in_expectation_is_not_chosen() -> None:
    # 3,600 interruptions an hour: nearly every task re-runs, and spot then costs more than on demand.
    workflow, catalog = _slack_workflow(), _calm_catalog(3600.0)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=1000.0), "c", time_limit_s=2.0)
    assert {a.resource for a in plan.assignments} == {"od"} and plan.spot is None


def test_with_slack_everywhere_every_task_goes_on_spot() -> None:
    workflow, catalog = _slack_workflow(), _calm_catalog(0.1)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=1000.0), "c", time_limit_s=2.0)
    assert {a.resource for a in plan.assignments} == {"od-spot"}
    assert plan.spot is not None and plan.spot.worst_case_makespan_s <= 1000.0


def test_plan_files_keep_the_spot_figures_and_old_plans_read_without_them() -> None:
    workflow, catalog = _slack_workflow(), _calm_catalog(0.1)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=260.0), "c", time_limit_s=2.0)
    document = plan_to_dict(plan)
    assert set(document["spot"]) == {"spot_tasks", "expected_reruns", "expected_cost_usd", "worst_case_makespan_s"}
    assert plan_from_document(document, "p.json") == plan
    del document["spot"]
    assert plan_from_document(document, "p.json").spot is None


def test_a_catalog_without_spot_types_plans_as_before() -> None:
    workflow = _slack_workflow()
    on_demand = Catalog((_calm_catalog(0.1).resources[0],), 1e8)
    plan = optimize(workflow, on_demand, Objective(kind="cost", deadline_s=260.0), "c", time_limit_s=1.0)
    assert plan.spot is None and "spot" not in plan_to_dict(plan)
    problem = Problem.create(workflow, on_demand, plan.objective)
    assert problem.evaluate(plan.assignments) == (makespan_s(plan.assignments), cost_usd(plan.assignments, on_demand))


def _spec_files(workflow: Workflow, catalog: Catalog, folder: Path) -> tuple[Path, Path]:
    tasks = [
        {"id": t.id, "runtime": t.runtime_s, "parents": [e.parent for e in workflow.parents[t.id]], "cores": t.cores,
         "memory": t.memory_bytes}
        for t in workflow.tasks
    ]  # fmt: skip
    resources = [
        {
            "name": r.name,
            "backend": r.backend,
            "vcpus": r.vcpus,
            "memory_gib": r.memory_gib,
            "speed": r.speed,
            "price_per_hour_usd": r.price_per_hour_usd,
            "count": r.count,
            "billing": {"granularity_s": r.billing.granularity_s, "minimum_s": r.billing.minimum_s},
            "boot_s": r.boot_s,
            **({"spot": True, "interruption_rate_per_hour": r.interruption_rate_per_hour, "fallback": r.fallback}
               if r.spot else {}),
        }
        for r in catalog.resources
    ]  # fmt: skip
    return (
        write_json(folder / f"{workflow.name}.json", wfformat_15(tasks, name=workflow.name)),
        write_yaml(
            folder / "catalog.yaml",
            {"network": {"bandwidth_bytes_per_s": catalog.bandwidth_bytes_per_s}, "resources": resources},
        ),
    )
