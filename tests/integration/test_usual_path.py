"""A DAG with a branch planned on the path its runs take most often (integration/usual_path.py): no Airflow."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agora_optimizer.integration.dag_shape import DagShape, DagTask
from agora_optimizer.integration.usual_path import MIN_RUNS, off_path, without
from agora_optimizer.traces.records import TaskAttempt

SHAPE = DagShape(
    "d",
    "d.py",
    (
        DagTask("branch", "Branch", ()),
        DagTask("fast", "Python", ("branch",)),
        DagTask("slow_a", "Python", ("branch",)),
        DagTask("slow_b", "Python", ("slow_a",)),
        DagTask("join", "Empty", ("fast", "slow_b")),
        DagTask("new", "Python", ("join",)),
    ),
)


def runs(*paths: tuple[str, ...]) -> list[TaskAttempt]:
    rows = []
    for number, tasks in enumerate(paths):
        start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=number)
        for task in tasks:
            rows.append(
                TaskAttempt.create(dag_id="d", task_id=task, run_id=f"r{number}", started_at=start, ended_at=start)
            )
    return rows


USUAL = ("branch", "fast", "join")
RARE = ("branch", "slow_a", "slow_b", "join")


def test_tasks_a_run_rarely_takes_are_left_out_and_their_children_follow_their_parents() -> None:
    left = off_path(SHAPE, runs(RARE, USUAL, USUAL, USUAL, USUAL))
    assert [(o.task_id, o.ran, o.runs) for o in left] == [("slow_a", 1, 5), ("slow_b", 1, 5)]
    assert left[0].describe() == "slow_a (ran in 1 of 5 runs)"
    tasks = {t.task_id: t.upstream for t in without(SHAPE, [o.task_id for o in left]).tasks}
    assert tasks == {"branch": (), "fast": ("branch",), "join": ("branch", "fast"), "new": ("join",)}


def test_every_path_is_planned_without_enough_history_or_when_both_are_taken_as_often() -> None:
    assert off_path(SHAPE, runs(USUAL, USUAL)[: MIN_RUNS - 1]) == []
    assert off_path(SHAPE, runs(RARE, USUAL, RARE, USUAL)) == []  # half the runs each: both planned
    assert off_path(SHAPE, []) == []
    assert without(SHAPE, []) == SHAPE


def test_a_task_added_lately_counts_only_the_runs_since_it_first_ran() -> None:
    with_new = (*USUAL, "new")
    left = off_path(SHAPE, runs(USUAL, USUAL, USUAL, USUAL, with_new, with_new, with_new))
    assert "new" not in {o.task_id for o in left}  # ran in each of the 3 runs since it was added
