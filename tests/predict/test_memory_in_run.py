"""Learning memory during a run (predict/memory_in_run.py): the rule alone, no executor and no replay."""

from __future__ import annotations

import math

import pytest

from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.predict.memory_in_run import (
    KILL_GROWTH,
    LOWER_AFTER,
    MEMORY_MARGIN,
    RunMemory,
    category_of_task,
    memory_factor,
    memory_note,
    observed_ratio,
    raised_workflow,
    reservation_bytes,
    retry_bytes,
)

GIB = 2**30


def test_a_peak_is_its_ratio_to_the_model_and_a_kill_its_limit_grown() -> None:
    assert observed_ratio(GIB, peak_bytes=3 * GIB) == 3.0
    assert observed_ratio(GIB, killed_at_bytes=2 * GIB) == 2 * KILL_GROWTH  # the peak was above 2 GiB
    assert observed_ratio(GIB, killed_at_bytes=2 * GIB, peak_bytes=GIB) == 2 * KILL_GROWTH  # a kill says more
    assert observed_ratio(0, peak_bytes=GIB) is None and observed_ratio(GIB) is None  # nothing to learn


def test_a_category_under_its_prediction_keeps_it_and_one_over_reserves_its_upper_ratio_with_a_margin() -> None:
    assert memory_factor([]) == 1.0 and memory_factor([0.5]) == 1.0 and memory_factor([1.0, 0.3]) == 1.0
    assert memory_factor([3.0]) == pytest.approx(3.0 * MEMORY_MARGIN)
    assert memory_factor([0.5] * 8 + [3.0]) == pytest.approx(3.6)  # under ten: the largest
    assert memory_factor([0.5] * 19 + [3.0]) == 1.0  # one in twenty far over: its own retry grows, not the rest
    assert memory_factor([0.5] * 17 + [3.0] * 3) == pytest.approx(3.6)  # three in twenty: the category
    memory = RunMemory()
    memory.observe("align", "a1", 0.4)
    assert memory.factors() == {} and not memory.categories["align"].changed
    found = memory.observe("align", "a2", 3.0)
    assert found.changed and memory.factor("align") == pytest.approx(3.6) and memory.factor("other") == 1.0
    memory.applied_now()
    assert not memory.observe("align", "a3", 3.2).changed  # within 10 % of what the plan carries: no re-plan
    assert memory.observe("align", "a4", 4.0).changed
    assert memory.categories["align"].tasks == 4


def test_a_kill_raises_its_category_to_its_limit_doubled_until_its_retry_measures_its_peak() -> None:
    memory = RunMemory()
    killed = memory.observe("align", "a1", observed_ratio(GIB, killed_at_bytes=GIB) or 0.0, killed=True)
    assert killed.changed and killed.factor == pytest.approx(KILL_GROWTH * MEMORY_MARGIN)  # 2.4 GiB for the rest
    memory.applied_now()
    assert memory.observe("align", "a1", observed_ratio(GIB, killed_at_bytes=2 * GIB) or 0.0, killed=True).changed
    assert memory.factor("align") == pytest.approx(4.8)  # its retry was killed at 2 GiB too
    memory.applied_now()
    retried = memory.observe("align", "a1", 1.25)  # the next retry fits, and measures 1.25 GiB
    assert retried.factor == pytest.approx(1.25 * MEMORY_MARGIN) and retried.changed  # back down, above the model
    assert retried.tasks == 1 and retried.floors == {}
    for i in range(2, 21):
        memory.observe("align", f"a{i}", 0.5)
    memory.observe("align", "a21", observed_ratio(GIB, killed_at_bytes=GIB) or 0.0, killed=True)
    assert memory.factor("align") == 1.0  # one kill, one retry over, in 21 tasks: the category keeps the model ...
    assert memory.factor("align", "a21") == pytest.approx(2.0)  # ... and its retry reserves its own floor


def test_a_factor_below_one_lowers_and_nothing_is_raised_past_the_largest_type() -> None:
    assert reservation_bytes(GIB, 0.5) == GIB // 2
    assert reservation_bytes(GIB, 1.0) == GIB
    assert reservation_bytes(GIB, 3.6) == math.ceil(3.6 * GIB)
    assert reservation_bytes(GIB, 3.6, cap_bytes=2 * GIB) == 2 * GIB
    assert reservation_bytes(8 * GIB, 3.6, cap_bytes=4 * GIB) == 8 * GIB  # the model's own stays, even above the cap


def test_a_killed_tasks_retry_reserves_its_limit_grown_and_at_least_its_categorys_raised_reservation() -> None:
    assert retry_bytes(2 * GIB, GIB, 1.0) == 3 * GIB  # 2 GiB x 1.5
    assert retry_bytes(2 * GIB, GIB, 4.0) == 4 * GIB  # the category's raised reservation is more
    assert retry_bytes(2 * GIB, GIB, 4.0, cap_bytes=3 * GIB + 1) == 3 * GIB + 1


def test_a_raised_workflow_reserves_its_factors_and_the_note_names_the_categories() -> None:
    tasks = [
        Task("bwa_1", 10.0, 1, GIB, "bwa"),
        Task("bwa_2", 10.0, 1, 2 * GIB, "bwa"),
        Task("index[3]", 5.0, 1, GIB, ""),
    ]
    workflow = Workflow.create("w", tasks, [])
    raised = raised_workflow(workflow, {"bwa_1": 2.0, "bwa_2": 2.0}, cap_bytes=3 * GIB)
    assert [t.memory_bytes for t in raised.tasks] == [2 * GIB, 3 * GIB, GIB]
    assert raised_workflow(workflow, {}) is workflow
    assert memory_note(workflow, {"bwa_1": 2.0, "bwa_2": 2.0}) == "memory raised from this run: bwa x2.00 (2 tasks)"
    assert memory_note(workflow, {"index[3]": 1.0}) == ""
    assert [category_of_task(t) for t in tasks] == ["bwa", "bwa", "index"]


def test_a_category_lowers_after_ten_exact_peaks_with_no_kill_standing_and_rises_again() -> None:
    memory = RunMemory()
    for i in range(LOWER_AFTER - 1):
        found = memory.observe("blastall", f"b{i}", 0.25 if i else 0.3)
    assert found.factor == 1.0 and not found.changed  # nine peaks: the model's own still
    found = memory.observe("blastall", "b9", 0.2)
    # ten: the upper quantile by rank (the second largest, 0.25) times the margin
    assert found.factor == pytest.approx(0.25 * MEMORY_MARGIN) and found.changed
    memory.applied_now()
    killed = memory.observe("blastall", "b10", observed_ratio(GIB, killed_at_bytes=GIB // 4) or 0.0, killed=True)
    assert killed.factor == 1.0 and killed.changed  # a kill standing: back to the model, its retry too
    assert memory.factor("blastall", "b10") == 1.0 and retry_bytes(GIB // 4, GIB, 1.0) == GIB
    again = memory.observe("blastall", "b10", 0.28)  # the retry measured its peak
    assert again.factor == pytest.approx(0.28 * MEMORY_MARGIN)
    assert memory_factor([0.5] * 19 + [3.0]) == 1.0 and memory_factor([0.5] * 19 + [3.0], lowers=True) == 0.6
    assert memory_factor([0.9] * 10, lowers=True) == 1.0  # 0.9 x 1.2 is above the model: the model's own


def test_only_a_predicted_or_guessed_reservation_is_lowered_and_the_note_says_so() -> None:
    tasks = [
        Task("blastall_1", 10.0, 1, GIB, "blastall", memory_source="predicted"),
        Task("blastall_2", 10.0, 1, GIB, "blastall", memory_source="default"),
        Task("blastall_3", 10.0, 1, GIB, "blastall", memory_source="declared"),  # the author's number
        Task("blastall_4", 10.0, 1, GIB, "blastall", memory_source="recorded"),  # its measured peak
        Task("split", 10.0, 1, GIB, "split", memory_source="predicted"),
    ]
    workflow = Workflow.create("w", tasks, [])
    factors = dict.fromkeys(("blastall_1", "blastall_2", "blastall_3", "blastall_4"), 0.5) | {"split": 2.0}
    moved = raised_workflow(workflow, factors)
    assert [t.memory_bytes for t in moved.tasks] == [GIB // 2, GIB // 2, GIB, GIB, 2 * GIB]
    assert memory_note(workflow, factors) == (
        "memory raised from this run: split x2.00 (1 tasks); memory lowered from this run: blastall x0.50 (2 tasks)"
    )
