"""The predictor's answers: fallback levels, memory coverage on real runs, bad input."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.shapes import TaskShape, WorkflowShape
from agora_optimizer.predict.errors import EmptyHistoryError, PredictorError, UnknownResourceError
from agora_optimizer.predict.fallback import LEVELS, History, first_answer
from agora_optimizer.predict.predictor import Predictor
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.wfformat_import import attempts_from_wfformat, read_workflow_shape
from tests.predict.conftest import BLAST_1, BLAST_2, BLAST_3, GENOME, SRA_1, SRA_2, stripped


def test_first_answer_walks_the_chain() -> None:
    assert first_answer(3.0, 2.0, 1.0, 9.0).source == "task"
    assert first_answer(None, 2.0, 1.0, 9.0).source == "category"
    assert first_answer(None, None, 1.0, 9.0).source == "hint"
    answer = first_answer(None, float("nan"), 0.0, 9.0)  # unusable values are passed over
    assert (answer.value, answer.source) == (9.0, "default")
    with pytest.raises(ValueError):
        first_answer(None, None, None, 0.0)


def test_each_level_answers_and_says_so(trained: Predictor, catalog: Catalog) -> None:
    seen = read_workflow_shape(BLAST_1).tasks[1]  # a task of a run in the history
    same_category = TaskShape("blastall_ID999", "blastall", "blastall", 7694, 12, dag_id="another-run")
    hinted = TaskShape("mystery_1", "mystery", "", 10, 10, dag_id="x", hint_runtime_s=42.0, hint_memory_bytes=2**25)
    unknown = TaskShape("mystery_2", "mystery", "", 10, 10, dag_id="x")
    shape = WorkflowShape("mixed", (seen, same_category, hinted, unknown), ())
    tasks = trained.predict(shape, catalog).tasks
    assert [t.runtime_source for t in tasks] == list(LEVELS)
    assert [t.memory_source for t in tasks] == list(LEVELS)
    assert tasks[2].reference_runtime_s == 42.0 and tasks[2].memory_bytes == 2**25
    assert tasks[3].memory_bytes >= trained.default_memory_bytes  # an unknown task gets a safe reservation


def test_the_description_names_which_tasks_each_level_answered(trained: Predictor, catalog: Catalog) -> None:
    seen = read_workflow_shape(BLAST_1).tasks[1]
    hinted = [
        TaskShape(f"mystery_{i}", "mystery", "", 10, 10, dag_id="x", hint_runtime_s=4.0, hint_memory_bytes=2**25)
        for i in range(5)
    ]
    shape = WorkflowShape("mixed", (seen, *hinted), ())
    text = trained.predict(shape, catalog).describe_sources(names_shown=3)
    runtime, memory = text.split("; ")
    hints = "5 from their hints (mystery_0, mystery_1, mystery_2, ...)"  # three names, then "..."
    assert runtime == f"runtime: 1 from their own runs ({seen.task_id}), {hints}"
    assert memory.startswith("memory: 1 from their own runs") and "mystery_3" not in memory


def test_a_task_seen_before_gets_its_own_history(trained: Predictor, catalog: Catalog) -> None:
    recorded = load_workflow(BLAST_1)
    tasks = trained.predict(read_workflow_shape(BLAST_1), catalog).tasks
    assert {t.runtime_source for t in tasks} == {"task"} and {t.memory_source for t in tasks} == {"task"}
    for task in tasks:
        truth = recorded.by_id[task.task_id]
        assert task.reference_runtime_s == pytest.approx(max(truth.runtime_s, 0.01), rel=1e-6)
        assert task.memory_bytes >= truth.memory_bytes  # never below its own past peak


def test_runtime_per_type_is_reference_over_speed(trained: Predictor, catalog: Catalog) -> None:
    prediction = trained.predict(read_workflow_shape(SRA_2), catalog)
    for task in prediction.tasks:
        assert set(task.runtime_s) == {r.name for r in catalog.resources}
        for resource in catalog.resources:
            assert task.runtime_s[resource.name] == pytest.approx(task.reference_runtime_s / resource.speed)


def test_memory_quantile_covers_a_held_out_run(catalog: Catalog) -> None:
    """Trained on two runs of blast, it covers >= 90 % of the third run's peaks, without absurd margins."""
    predictor = Predictor().fit(attempts_from_wfformat(BLAST_1) + attempts_from_wfformat(BLAST_2))
    actual = load_workflow(BLAST_3)
    tasks = predictor.predict(read_workflow_shape(BLAST_3), catalog).tasks
    peaks = np.array([actual.by_id[t.task_id].memory_bytes for t in tasks])
    quantiles = np.array([t.memory_bytes for t in tasks])
    assert np.mean(peaks <= quantiles) >= 0.9
    assert np.median(quantiles / peaks) < 3.0


def test_predict_from_a_stripped_file(trained: Predictor, catalog: Catalog, tmp_path: Path) -> None:
    bare = stripped(SRA_2, tmp_path / SRA_2.name)
    prediction = trained.predict(read_workflow_shape(bare), catalog)
    full = trained.predict(read_workflow_shape(SRA_2), catalog)
    assert prediction == full  # nothing the file measured was used
    assert all(t.runtime_source == "category" for t in prediction.tasks)
    assert all(math.isfinite(t.reference_runtime_s) and t.reference_runtime_s > 0 for t in prediction.tasks)


def test_predicted_workflow_is_plannable(trained: Predictor, catalog: Catalog) -> None:
    shape = read_workflow_shape(SRA_2)
    workflow = trained.predicted_workflow(shape, catalog)
    prediction = trained.predict(shape, catalog)
    assert {t.memory_source for t in workflow.tasks} == {"predicted"}
    assert [t.runtime_s for t in workflow.tasks] == [t.reference_runtime_s for t in prediction.tasks]
    assert len(workflow.edges) == len(load_workflow(SRA_2).edges)


def test_unknown_resource_type_is_a_clear_error(trained: Predictor, catalog: Catalog) -> None:
    shape = read_workflow_shape(SRA_2)
    with pytest.raises(UnknownResourceError, match=re.escape("x9.mega")):
        trained.predict(shape, catalog, ["c5.large", "x9.mega"])
    prediction = trained.predict(shape, catalog, ["c5.large"])
    assert prediction.resources == ("c5.large",)
    with pytest.raises(UnknownResourceError, match=re.escape("m5.large")):
        prediction.runtime_s(shape.tasks[0].task_id, "m5.large")


def test_empty_or_useless_history_is_a_clear_error() -> None:
    with pytest.raises(EmptyHistoryError, match="0 given"):
        Predictor().fit([])
    failed = [TaskAttempt.create(dag_id="d", task_id="t", run_id="r", state="failed", runtime_s=3.0)]
    with pytest.raises(EmptyHistoryError, match="1 state failed"):
        Predictor().fit(failed)
    with pytest.raises(PredictorError, match="not trained"):
        Predictor().predict(read_workflow_shape(SRA_2), Catalog((), 1.0))


def test_bad_attempts_are_skipped_and_counted(catalog: Catalog) -> None:
    good = attempts_from_wfformat(SRA_1)
    extra = [
        TaskAttempt.create(dag_id="d", task_id="t", run_id="r", state="oom_killed", requested_memory_bytes=2**30),
        TaskAttempt.create(dag_id="d", task_id="u", run_id="r", runtime_s=5.0, resource_type="no.such.type"),
    ]
    predictor = Predictor().fit(good + extra, catalog)
    assert predictor.skipped == {"state oom_killed": 1, "unknown resource type": 1}
    assert predictor.training_rows["runtime"] == len(good)
    killed = predictor.history.task("d", "t")
    assert killed is not None and killed.peak_bytes == 2**30  # an OOM kill still teaches a floor


def test_history_round_trips_through_json(trained: Predictor) -> None:
    assert History.from_json(trained.history.to_json()) == trained.history


def test_no_memory_recorded_anywhere_falls_back_to_the_default(catalog: Catalog) -> None:
    predictor = Predictor().fit(attempts_from_wfformat(GENOME))  # this family records no peaks
    tasks = predictor.predict(read_workflow_shape(GENOME), catalog).tasks
    assert {t.memory_source for t in tasks} == {"default"}
    assert {t.memory_bytes for t in tasks} == {predictor.default_memory_bytes}
    assert {t.runtime_source for t in tasks} == {"task"}


def test_a_declared_hint_beats_what_other_tasks_of_the_same_operator_did(trained: Predictor, catalog: Catalog) -> None:
    # "mystery" was never seen, but its operator was (blastall): for a task with no hint that is the best
    # there is; a task that declares its needs is planned from them (the operator may be as common as @task).
    bare = TaskShape("mystery_1", "mystery", "blastall", 10, 10, dag_id="x")
    hinted = TaskShape("mystery_2", "mystery", "blastall", 10, 10, dag_id="x", hint_runtime_s=1800.0,
                       hint_memory_bytes=24 * 2**30)  # fmt: skip
    known = TaskShape("blastall_ID9", "blastall", "blastall", 10, 10, dag_id="x", hint_runtime_s=1800.0)
    tasks = trained.predict(WorkflowShape("ops", (bare, hinted, known), ()), catalog).tasks
    assert (tasks[0].runtime_source, tasks[0].memory_source) == ("category", "category")
    assert (tasks[1].runtime_source, tasks[1].memory_source) == ("hint", "hint")
    assert tasks[1].reference_runtime_s == 1800.0 and tasks[1].memory_bytes == 24 * 2**30
    assert tasks[2].runtime_source == "category"  # its own category was learned: that outranks a hint


def test_what_a_category_used_never_undercuts_the_declared_memory(trained: Predictor, catalog: Catalog) -> None:
    """A task of a learned category that declares more memory than its category used gets what it declared
    (less and it would be killed for memory); one that declares less gets what the category learned."""
    bare = TaskShape("blastall_ID7", "blastall", "blastall", 10, 10, dag_id="x")
    learned = trained.predict(WorkflowShape("one", (bare,), ()), catalog).tasks[0].memory_bytes
    more = TaskShape("blastall_ID8", "blastall", "blastall", 10, 10, dag_id="x", hint_memory_bytes=learned * 4)
    less = TaskShape("blastall_ID9", "blastall", "blastall", 10, 10, dag_id="x", hint_memory_bytes=learned // 4)
    tasks = trained.predict(WorkflowShape("two", (more, less), ()), catalog).tasks
    assert [t.memory_source for t in tasks] == ["category", "category"]
    assert tasks[0].memory_bytes >= learned * 4 and tasks[1].memory_bytes == learned


def test_a_predicted_workflow_keeps_the_gpus_its_tasks_declare(trained: Predictor, catalog: Catalog) -> None:
    shape = read_workflow_shape(SRA_2)
    first = shape.tasks[0]
    declared = WorkflowShape(shape.name, (replace(first, gpus=1), *shape.tasks[1:]), shape.edges, shape.source)
    workflow = trained.predicted_workflow(declared, catalog)
    assert workflow.by_id[first.task_id].gpus == 1
    assert all(t.gpus == 0 for t in workflow.tasks if t.id != first.task_id)


def _mapped_runs(runtime_of: Any, widths: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16)) -> list[TaskAttempt]:
    """Runs of a DAG whose task ``work`` is mapped: one run per width, each instance's runtime ``runtime_of(index,
    width)``; ``prepare`` beside it, unmapped, 5 s."""
    from datetime import UTC, datetime, timedelta

    rows = []
    for run, width in enumerate(widths):
        start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=run)
        for index, task_id in [(-1, "prepare"), *((i, "work") for i in range(width))]:
            runtime = 5.0 if index < 0 else runtime_of(index, width)
            rows.append(
                TaskAttempt.create(
                    dag_id="fan",
                    task_id=task_id,
                    run_id=f"r{run}",
                    map_index=index,
                    map_width=width if index >= 0 else None,
                    started_at=start,
                    ended_at=start + timedelta(seconds=runtime),
                    peak_rss_bytes=2**28,
                )
            )
    return rows


def _instance(width: int, index: int = 0) -> TaskShape:
    return TaskShape(f"work[{index}]", "work", dag_id="fan", map_index=index, map_width=width)


def test_a_mapped_tasks_runtime_that_grows_with_its_width_is_predicted_to_grow(catalog: Catalog) -> None:
    """Each instance takes 10 s per instance of its run (all gather from all): the trees follow the width, where
    without it every width got the same runtime."""
    predictor = Predictor().fit(_mapped_runs(lambda index, width: 10.0 * width))
    assert predictor.runtime_model_of("work") == "trees"
    shape = WorkflowShape("fan", tuple(_instance(width) for width in (2, 4, 8, 16)), ())
    runtimes = [task.reference_runtime_s for task in predictor.predict(shape, catalog).tasks]
    assert runtimes == sorted(runtimes) and runtimes[-1] > 4 * runtimes[0]
    for width, runtime in zip((2, 4, 8, 16), runtimes, strict=True):
        assert runtime == pytest.approx(10.0 * width, rel=0.3)


def test_a_mapped_instances_runtime_that_grows_with_its_index_is_predicted_to_grow(catalog: Catalog) -> None:
    """Instance i of every run reads partition i, of 5 s x (i + 1): its index answers, not its width."""
    predictor = Predictor().fit(_mapped_runs(lambda index, width: 5.0 * (index + 1)))
    shape = WorkflowShape("fan", tuple(_instance(16, index) for index in (0, 3, 7, 15)), ())
    runtimes = [task.reference_runtime_s for task in predictor.predict(shape, catalog).tasks]
    for index, runtime in zip((0, 3, 7, 15), runtimes, strict=True):
        assert runtime == pytest.approx(5.0 * (index + 1), rel=0.3)


def test_a_mapped_run_whose_rows_recorded_no_width_is_read_with_its_largest_index_plus_one() -> None:
    """Rows of an older store or an importer keep no width: training reads it off the run's own rows."""
    from agora_optimizer.predict.features import shapes_of_attempts

    rows = [replace(a, map_width=None) for a in _mapped_runs(lambda index, width: 1.0, widths=(3, 5))]
    widths = {(s.task_id, s.map_index, s.map_width) for s in shapes_of_attempts(rows)}
    assert widths == {("prepare", -1, 1), *(("work", i, 3) for i in range(3)), *(("work", i, 5) for i in range(5))}
