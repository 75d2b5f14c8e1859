"""Learning runtimes during a run: the executor's rule, shared with the simulated runs."""

from __future__ import annotations

import math

import pytest

from agora_optimizer.model.limits import MAX_RUNTIME_S
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.predict.runtime_in_run import (
    RATIO_LIMIT,
    RUN_SHRINK_K,
    SHRINK_K,
    RunRuntimes,
    corrected_workflow,
    runtime_ratio,
)


def test_an_observation_is_the_true_over_the_planned_runtime_within_jitter_and_clamped() -> None:
    assert runtime_ratio(20.0, 10.0) == 2.0 and runtime_ratio(5.0, 10.0) == 0.5
    assert runtime_ratio(10.5, 10.0, min_late_s=1.0) == 1.0  # the platform's jitter: ran as planned
    assert runtime_ratio(1e9, 1.0) == RATIO_LIMIT and runtime_ratio(1e-9, 1.0) == 1 / RATIO_LIMIT
    assert runtime_ratio(0.0, 10.0) is None and runtime_ratio(10.0, 0.0) is None


def test_a_category_whose_first_tasks_take_2x_moves_toward_2x_and_calls_for_a_re_plan_once_past_the_slack() -> None:
    learned = RunRuntimes()
    first = learned.observe("align", 2.0)
    assert learned.factors() == pytest.approx({"align": 2 ** (1 / (1 + SHRINK_K))})  # 1.74x after one
    assert first.moved(slack=0.2)  # from the 1x the plan carries
    learned.applied_now()
    second = learned.observe("align", 2.0)  # 1.85x: 6 % from the 1.74x the re-plan carries
    assert not second.moved(slack=0.2) and second.moved(slack=0.05)
    learned.observe("sort", 1.0)
    assert set(learned.factors()) == {"align"}  # a category as planned has no factor


def test_a_category_whose_ratios_spread_is_corrected_by_their_mean_not_by_their_geometric_mean() -> None:
    # half and twice their plan: the geometric mean says "as planned", while the two took 25 % longer together,
    # and a makespan adds its tasks' times (a seismology run forecast 20 % short by the geometric mean). Their
    # log-normal mean: logs +-0.69, variance 0.69^2, half of it 0.24 in log (x1.27), shrunk by 2 / 2.25.
    learned = RunRuntimes()
    learned.observe("align", 0.5)
    learned.observe("align", 2.0)
    assert learned.factors() == pytest.approx({"align": math.exp(math.log(2) ** 2 / 2 * 2 / (2 + SHRINK_K))})
    assert 1.2 < learned.factors()["align"] < 1.25


def test_a_category_not_seen_takes_the_runs_factor_shrunk_by_the_categories_seen() -> None:
    learned = RunRuntimes()
    assert learned.factor_of("sort") == 1.0  # nothing ended: as planned
    learned.observe("align", 2.0)
    assert learned.factor_of("align") == pytest.approx(2 ** (1 / (1 + SHRINK_K)))
    assert learned.factor_of("sort") == pytest.approx(2 ** (1 / (1 + RUN_SHRINK_K)))  # one category seen: half
    learned.observe("index", 2.0)
    assert learned.factor_of("sort") == pytest.approx(2 ** (2 / (2 + RUN_SHRINK_K)))  # two agree: more
    assert set(learned.factors()) == {"align", "index"}  # only the categories seen have a factor of their own
    fast = RunRuntimes()
    fast.observe("sift", 0.5)  # one category twice as fast does not make the others fast: they stay as planned
    assert fast.factor_of("sift") < 1.0 and fast.factor_of("sort") == 1.0


def test_a_corrected_workflow_lasts_its_factor_longer_up_to_the_limit() -> None:
    workflow = Workflow.create("w", [Task("a", 10.0, 1, 1, "a"), Task("b", 10.0, 1, 1, "b")], [])
    corrected = corrected_workflow(workflow, {"a": 1.85})
    assert [t.runtime_s for t in corrected.tasks] == pytest.approx([18.5, 10.0])
    assert corrected_workflow(workflow, {"a": 1e30}).by_id["a"].runtime_s == MAX_RUNTIME_S
    assert corrected_workflow(workflow, {}) is workflow
