"""A mapped task's planned width (predict/map_width.py): history, else a literal list, else the default."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agora_optimizer.predict.map_width import MAX_MAP_WIDTH, RECENT_RUNS, learned_width, past_widths, planned_width
from agora_optimizer.traces.records import TaskAttempt


def run(run_id: str, width: int, hour: int, task: str = "square", dag: str = "d") -> list[TaskAttempt]:
    start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=hour)
    return [
        TaskAttempt.create(dag_id=dag, task_id=task, run_id=run_id, map_index=i, started_at=start, ended_at=start)
        for i in range(width)
    ]


def test_a_runs_width_is_its_largest_map_index_plus_one_oldest_run_first() -> None:
    attempts = [*run("b", 6, hour=2), *run("a", 4, hour=1), *run("c", 2, hour=3, dag="other")]
    attempts.append(TaskAttempt.create(dag_id="d", task_id="square", run_id="a", map_index=6))  # a late instance
    attempts.append(TaskAttempt.create(dag_id="d", task_id="plain", run_id="a"))  # unmapped: no width
    assert past_widths(attempts, "d") == {"square": [7, 6]}


def test_only_the_recent_runs_count() -> None:
    attempts = [row for hour in range(RECENT_RUNS + 5) for row in run(f"r{hour}", 1 if hour < 5 else 3, hour)]
    assert past_widths(attempts, "d")["square"] == [3] * RECENT_RUNS


@pytest.mark.parametrize(
    ("widths", "p90", "median"),
    [([4, 9, 6], 9, 6.0), ([5] * 9 + [50], 5, 5.0), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 10, 6.0), ([3], 3, 3.0)],
)
def test_the_planned_width_is_the_nearest_rank_p90_with_the_median_beside_it(
    widths: list[int], p90: int, median: float
) -> None:
    width = learned_width(widths)
    assert width is not None and (width.width, width.median, width.runs, width.source) == (
        p90,
        median,
        len(widths),
        "history",
    )


def test_history_then_a_literal_list_then_the_default() -> None:
    assert planned_width("t", {"t": [2, 2]}, literal=8, default=4).width == 2
    assert planned_width("t", {}, literal=8, default=4).source == "literal"
    assert planned_width("t", {}, literal=None, default=4).describe() == "4 ([agora] default_map_width)"
    assert planned_width("t", {}, literal=0, default=4).width == 1  # an empty list: one slot, freed when skipped
    assert planned_width("t", {}, literal=10**6, default=4).width == MAX_MAP_WIDTH
