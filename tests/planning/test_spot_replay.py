"""Replays of a plan with interruptions, and its worst-case makespan (planning/spot_replay.py)."""

from __future__ import annotations

import random
import statistics

import pytest

from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.spot import (
    expected_cost_usd,
)
from agora_optimizer.planning.spot_replay import (
    all_interrupted_makespan_s,
    replay,
    sample_interruptions,
    worst_case_makespan_s,
)
from tests.planning.spot_fixtures import (
    CATALOG,
    ON_DEMAND,
    SPOT,
    chain_workflow,
    spot_plan,
)


def test_a_replay_without_interruptions_is_the_plan() -> None:
    workflow, plan = chain_workflow(), spot_plan()
    result = replay(plan, workflow, CATALOG, {})
    assert (result.makespan_s, result.reruns) == (makespan_s(plan), ())
    assert result.cost_usd == pytest.approx(cost_usd(plan, CATALOG))


def test_an_interrupted_task_reruns_on_demand_and_its_successors_shift() -> None:
    workflow, plan = chain_workflow(), spot_plan()
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
    workflow, plan = chain_workflow(), spot_plan()
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


def test_the_expected_cost_is_close_to_the_mean_of_many_replays() -> None:
    """The plan-level figure neglects the shifts and the leases an interruption shortens: on this plan
    (about one task in nine interrupted per run) it stays within 5 % of the mean of 4,000 seeded replays."""
    workflow, plan = chain_workflow(), spot_plan()
    rng = random.Random(7)
    costs = [replay(plan, workflow, CATALOG, sample_interruptions(plan, CATALOG, rng)).cost_usd for _ in range(4000)]
    assert expected_cost_usd(plan, workflow, CATALOG) == pytest.approx(statistics.fmean(costs), rel=0.05)
