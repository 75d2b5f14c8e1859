"""Learning runtimes during a run: the executor's rule, shared with the simulated runs."""

from __future__ import annotations

import pytest

from agora_optimizer.model.limits import MAX_RUNTIME_S
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.predict.runtime_in_run import (
    RATIO_LIMIT,
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


def test_a_corrected_workflow_lasts_its_factor_longer_up_to_the_limit() -> None:
    workflow = Workflow.create("w", [Task("a", 10.0, 1, 1, "a"), Task("b", 10.0, 1, 1, "b")], [])
    corrected = corrected_workflow(workflow, {"a": 1.85})
    assert [t.runtime_s for t in corrected.tasks] == pytest.approx([18.5, 10.0])
    assert corrected_workflow(workflow, {"a": 1e30}).by_id["a"].runtime_s == MAX_RUNTIME_S
    assert corrected_workflow(workflow, {}) is workflow
