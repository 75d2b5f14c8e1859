"""The expected-cost formula of spot capacity (agora_optimizer/planning/spot.py, docs/spot.md)."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import replace

import pytest

from agora_optimizer.model.catalog import Billing, Catalog
from agora_optimizer.planning.leases import cost_usd
from agora_optimizer.planning.spot import (
    expected_attempt_s,
    expected_cost_usd,
    expected_task_cost_usd,
    expected_task_s,
    interruption_probability,
    rerun_cost_usd,
)
from tests.planning.spot_fixtures import (
    CATALOG,
    ON_DEMAND,
    SPOT,
    chain_workflow,
    spot_plan,
    task,
)


def test_without_interruptions_a_spot_task_is_an_on_demand_task_at_the_spot_price() -> None:
    one = task("t", 1800.0)
    calm = replace(SPOT, interruption_rate_per_hour=0.0, billing=Billing(1.0, 0.0))
    assert interruption_probability(1800.0, 0.0) == 0.0
    assert expected_attempt_s(1800.0, 0.0) == 1800.0
    assert expected_task_s(one, calm, CATALOG) == 1800.0
    assert expected_task_cost_usd(one, calm, CATALOG) == pytest.approx(0.3 * (30 + 1800) / 3600)
    assert expected_task_cost_usd(one, calm, CATALOG) == pytest.approx(calm.lease_cost_usd(30 + 1800))


def test_hand_case_one_interruption_expected_per_run() -> None:
    # lambda d = 1: p = 1 - 1/e, E[min(T, d)] = (1 - 1/e) / mu = 0.632 d.
    one = task("t", 1800.0)
    assert interruption_probability(1800.0, 2.0) == pytest.approx(1 - math.exp(-1))
    assert expected_attempt_s(1800.0, 2.0) == pytest.approx((1 - math.exp(-1)) * 1800.0)
    p = 1 - math.exp(-1)
    assert rerun_cost_usd(one, SPOT, CATALOG) == pytest.approx(1.0 * (30 + 1800) / 3600)
    assert expected_task_s(one, SPOT, CATALOG) == pytest.approx(p * 1800.0 + p * (30 + 1800))
    assert expected_task_cost_usd(one, SPOT, CATALOG) == pytest.approx(
        0.3 * (30 + p * 1800.0) / 3600 + p * (30 + 1800) / 3600
    )


@pytest.mark.parametrize(("runtime_s", "rate_per_hour"), [(1800.0, 2.0), (120.0, 0.5), (7200.0, 0.05)])
def test_the_formula_matches_a_monte_carlo_estimate(runtime_s: float, rate_per_hour: float) -> None:
    """200,000 seeded draws of the first interruption; the formula's mean must lie within 4 standard
    errors of the sample mean (a correct formula fails this with probability about 6e-5, and the seed
    makes the test deterministic), and within 1 % (far tighter than the 15 % the benchmark targets)."""
    one = task("t", runtime_s)
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
        (costs, expected_task_cost_usd(one, spot, catalog)),
        (times, expected_task_s(one, spot, catalog)),
    ):
        mean, error = statistics.fmean(samples), statistics.stdev(samples) / math.sqrt(len(samples))
        assert abs(formula - mean) <= 4 * error + 1e-12
        assert formula == pytest.approx(mean, rel=0.01)


def test_the_expected_cost_is_the_leases_plus_each_spot_tasks_chance_of_a_rerun() -> None:
    workflow, plan = chain_workflow(), spot_plan()
    extra = sum(interruption_probability(d, 2.0) * ON_DEMAND.lease_cost_usd(30.0 + d) for d in (100.0, 100.0, 50.0))
    assert expected_cost_usd(plan, workflow, CATALOG) == pytest.approx(cost_usd(plan, CATALOG) + extra)
