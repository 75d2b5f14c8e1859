"""What an Airflow task reads (integration/task_inputs.py): real operators in real DAG objects, real files.

Each source is asked as the trace listener asks it (in a run, with a context) and as planning asks it
(before a run, with recorded attempts); every expected size is the sum of the bytes the test wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.errors import FieldError
from agora_optimizer.integration.task_inputs import (
    NO_DECLARATION,
    TaskInputs,
    declared_inputs,
    inlet_sizes,
    local_path,
    planned_inputs,
    run_inputs,
    upstream_outputs,
)
from agora_optimizer.traces.records import MAX_BYTES, TaskAttempt
from tests.airflow_home import private_airflow_home

private_airflow_home("agora-inputs-tests-")  # before the first import of airflow

from airflow.providers.standard.operators.empty import EmptyOperator  # noqa: E402
from airflow.sdk import DAG, Asset, ObjectStoragePath  # noqa: E402


def _task(agora: dict[str, Any] | None = None, inlets: list[Any] | None = None, task_id: str = "t") -> Any:
    with DAG("sized", schedule=None, params={"rows": 10}):
        config = {"agora": agora} if agora is not None else None
        return EmptyOperator(task_id=task_id, executor_config=config, inlets=inlets or [])


def _declared(task: Any) -> Any:
    return declared_inputs(task, task.executor_config.get("agora", {}) if task.executor_config else {}, "dags/x.py")


def _attempt(task_id: str, run: int, **sizes: int | None) -> TaskAttempt:
    return TaskAttempt.create(dag_id="sized", task_id=task_id, run_id=f"r{run}", **sizes)


def _write(path: Path, size: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return size


CONTEXT = {"params": {"rows": 7}, "dag_run": type("Run", (), {"conf": {"row_bytes": 1000}})()}


# --- (a) executor_config["agora"]["input_bytes"] / ["input_files"] -------------------------------------------


def test_a_declared_number_is_the_size_in_a_run_and_before_it() -> None:
    task = _task({"input_bytes": 5_000_000, "input_files": 3})
    assert run_inputs(task, {}, "sized") == TaskInputs(5_000_000, 3, "declared")
    assert planned_inputs(_declared(task), ("sized", "t"), [], []) == TaskInputs(5_000_000, 3, "declared")


def test_a_template_is_rendered_with_the_runs_context_and_a_callable_called_with_it() -> None:
    task = _task({"input_bytes": "{{ params.rows * dag_run.conf['row_bytes'] }}", "input_files": "{{ params.rows }}"})
    assert run_inputs(task, CONTEXT, "sized") == TaskInputs(7000, 7, "declared")
    task = _task({"input_bytes": lambda context: context["params"]["rows"] * 2**20})
    assert run_inputs(task, CONTEXT, "sized") == TaskInputs(7 * 2**20, None, "declared")


def test_before_a_run_a_per_run_size_is_the_median_recorded_else_unknown_and_said() -> None:
    declaration = _declared(_task({"input_bytes": "{{ params.rows }}", "input_files": 2}))
    assert declaration.per_run == ("input_bytes",) and dict(declaration.literal) == {"input_files": 2}
    unknown = planned_inputs(declaration, ("sized", "t"), [], [])
    assert (unknown.input_bytes, unknown.input_files, unknown.source) == (None, 2, "declared")
    assert unknown.notes == ("input_bytes is evaluated per run; before the run, unknown: no run recorded it yet",)
    recorded = [_attempt("t", 1, input_bytes=100), _attempt("t", 2, input_bytes=900), _attempt("t", 3, input_bytes=300)]
    recorded += [_attempt("t", 4), _attempt("other", 1, input_bytes=10**9)]  # not recorded; another task's
    planned = planned_inputs(declaration, ("sized", "t"), [], recorded)
    assert (planned.input_bytes, planned.input_files) == (300, 2)
    assert planned.notes == ("input_bytes is evaluated per run; before the run, the median of 3 recorded runs",)
    callable_only = _declared(_task({"input_bytes": lambda context: 1}))
    assert planned_inputs(callable_only, ("sized", "t"), [], recorded) == TaskInputs(
        300, None, "recorded", ("input_bytes is evaluated per run; before the run, the median of 3 recorded runs",)
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (-5, "must be >= 0, got -5"),
        (1.5, "expected a whole number, got 1.5"),
        (True, "expected a number, got True"),
        ([1], "expected a number, got [1]"),
        (float("nan"), "expected a finite number"),
        (MAX_BYTES + 1, "(absurd)"),
    ],
)
def test_a_declared_value_that_cannot_be_a_size_names_the_dag_task_and_field(value: object, reason: str) -> None:
    task = _task({"input_bytes": value}, task_id="load")
    with pytest.raises(FieldError) as planned:
        _declared(task)
    assert str(planned.value).startswith("dags/x.py: field 'load.executor_config.agora.input_bytes': ")
    assert reason in str(planned.value) and "\n" not in str(planned.value)
    with pytest.raises(FieldError) as in_run:
        run_inputs(task, {}, "sized")
    assert str(in_run.value).startswith("DAG 'sized': field 'load.executor_config.agora.input_bytes': ")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{{ params.rows * -1 }}", "must be >= 0, got -7"),
        ("{{ 'lots' }}", "expected a whole number, got 'lots'"),
        ("{{ dag_run.conf['no_such_key'] }}", "cannot evaluate it: UndefinedError"),
        ("{{ params.rows ", "cannot evaluate it: TemplateSyntaxError"),
        (lambda context: 1 / 0, "cannot evaluate it: ZeroDivisionError: division by zero"),
        (lambda context: None, "expected a number, got None"),
    ],
)
def test_a_template_or_callable_that_fails_or_gives_no_size_names_the_dag_task_and_field(
    value: object, reason: str
) -> None:
    task = _task({"input_files": value}, task_id="load")
    assert _declared(task).per_run == ("input_files",)  # known only in a run: no error before it
    with pytest.raises(FieldError) as raised:
        run_inputs(task, CONTEXT, "sized")
    message = str(raised.value)
    assert message.startswith("DAG 'sized': field 'load.executor_config.agora.input_files': ")
    assert reason in message and "\n" not in message


# --- (b) inlets naming local files and directories ------------------------------------------------------------


def test_local_inlets_are_measured_a_directory_walked_and_a_missing_path_named(tmp_path: Path) -> None:
    size = _write(tmp_path / "one.csv", 1234)
    tree = tmp_path / "parts"
    size += _write(tree / "a.bin", 100) + _write(tree / "deep" / "b.bin", 50) + _write(tree / "deep" / "c.bin", 0)
    missing = tmp_path / "not-yet"
    size += _write(tmp_path / "store" / "obj", 66)
    inlets = [
        Asset(f"file://{tmp_path / 'one.csv'}"), str(tree), missing, Asset.ref(name="by-name-only"),
        ObjectStoragePath(f"file://{tmp_path / 'store' / 'obj'}"),
    ]  # fmt: skip
    task = _task(inlets=inlets)
    inputs = run_inputs(task, {}, "sized")
    assert (inputs.input_bytes, inputs.input_files, inputs.source) == (size, 5, "inlets")
    assert inputs.notes == (f"inlet {missing}: {missing} does not exist, counted 0 bytes",)
    assert planned_inputs(_declared(task), ("sized", "t"), [], []) == inputs  # the same files before the run
    _write(missing, 16)  # the run's input arrived: the next run reads more
    assert run_inputs(task, {}, "sized") == TaskInputs(size + 16, 6, "inlets")


def test_object_store_inlets_are_unknown_and_a_declared_size_wins_over_inlets(tmp_path: Path) -> None:
    remote = run_inputs(_task(inlets=[Asset("s3://bucket/key.parquet")]), {}, "sized")
    assert remote == TaskInputs(notes=("inlet s3://bucket/key.parquet: not a local path, its size is unknown",))
    _write(tmp_path / "big", 10_000)
    both = _task({"input_bytes": 42}, inlets=[str(tmp_path / "big")])
    assert run_inputs(both, {}, "sized") == TaskInputs(42, None, "declared")
    assert run_inputs(_task(), {}, "sized") == TaskInputs()  # says nothing: unknown


def test_only_file_uris_and_absolute_paths_are_local() -> None:
    assert local_path("file:///data/a%20b.csv") == Path("/data/a b.csv")
    assert local_path("file://localhost/data/x") == Path("/data/x")
    assert local_path("/data/x") == Path("/data/x")
    assert local_path("file://otherhost/data/x") is None  # another machine's disk
    assert local_path("relative/path") is None
    assert local_path("gs://bucket/x") is None
    assert inlet_sizes([]) == TaskInputs()


# --- (c) the upstream tasks' recorded outputs, before a run ---------------------------------------------------


def test_before_a_run_a_task_that_says_nothing_reads_what_its_upstream_tasks_wrote() -> None:
    recorded = [
        _attempt("extract", 1, output_bytes=1000, output_files=2),
        _attempt("extract", 2, output_bytes=3000, output_files=4),
        _attempt("extract", 3, output_bytes=2000, output_files=3),
        _attempt("clean", 1, output_bytes=500, output_files=1),
        _attempt("clean", 2),  # recorded no output
    ]
    planned = planned_inputs(NO_DECLARATION, ("sized", "load"), ["extract", "clean", "profile"], recorded)
    assert planned == TaskInputs(2500, 4, "upstream", ("no recorded output of upstream profile",))
    assert planned_inputs(NO_DECLARATION, ("sized", "load"), ["profile"], recorded) == TaskInputs()
    declared = _declared(_task({"input_bytes": 7}))
    assert planned_inputs(declared, ("sized", "t"), ["extract"], recorded).input_bytes == 7  # declared first


def test_a_mapped_upstream_task_wrote_the_sum_of_its_instances_last_tries_per_run() -> None:
    def row(run: int, map_index: int, try_number: int, size: int) -> TaskAttempt:
        return TaskAttempt.create(
            dag_id="sized", task_id="split", run_id=f"r{run}", map_index=map_index, try_number=try_number,
            output_bytes=size, output_files=1,
        )  # fmt: skip

    recorded = [row(1, 0, 1, 100), row(1, 1, 1, 999), row(1, 1, 2, 200)]  # run 1: 100 + 200 (the retry's)
    recorded += [row(2, 0, 1, 400), row(2, 1, 1, 400), row(3, 0, 1, 1000), row(3, 1, 1, 1000)]  # 800, 2000
    assert upstream_outputs("sized", ["split"], recorded) == TaskInputs(800, 2, "upstream")
    in_run_1 = [a for a in recorded if a.run_id == "r1"]  # what the listener reads in run 1
    assert upstream_outputs("sized", ["split"], in_run_1) == TaskInputs(300, 2, "upstream")
    assert upstream_outputs("other_dag", ["split"], recorded) == TaskInputs()
