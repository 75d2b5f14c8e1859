"""The trace listener's reading of a task's agora hints (here: Airflow imported in this process)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.traces.conftest import write_lock_held


def test_the_listener_records_the_declared_category() -> None:
    from types import SimpleNamespace

    from agora_optimizer.integration.trace_listener import declared_category

    def ti(config: object) -> SimpleNamespace:
        return SimpleNamespace(task=SimpleNamespace(executor_config=config))

    assert declared_category(ti({"agora": {"category": " train "}})) == "train"
    assert declared_category(ti({"agora": {"cores": 2}})) == declared_category(ti(None)) == ""
    assert declared_category(ti({"agora": {"category": 7}})) == ""  # the DAG's parse refuses it first


def test_a_mapped_instance_is_recorded_on_its_own_planned_machine_else_the_overflow() -> None:
    from types import SimpleNamespace

    from agora_optimizer.integration.trace_listener import _planned

    config = {
        "agora": {
            "placement": {"resource": "big", "machine": "", "plan_version": "v1", "source": "overflow"},
            "instances": {
                "0": {"machine": "small#0", "plan_version": "v1"},
                "1": {"machine": "big#1", "plan_version": "v1"},
            },
        }
    }

    def ti(map_index: int) -> SimpleNamespace:
        return SimpleNamespace(task=SimpleNamespace(executor_config=config), map_index=map_index)

    assert _planned(ti(0)) == {"machine": "small#0", "plan_version": "v1"}
    assert _planned(ti(1)) == {"machine": "big#1", "plan_version": "v1"}
    assert _planned(ti(7)) == {"machine": "", "plan_version": "v1"}  # beyond the planned width


def test_an_attempt_under_a_celery_worker_names_the_worker_as_its_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from celery import Celery
    from celery._state import _task_stack

    from agora_optimizer.integration.celery_pools import WORKER_NAME_ENV
    from agora_optimizer.integration.trace_listener import attempt_from_task_instance

    placement = {"resource": "pool_large", "machine": "pool_large#0", "plan_version": "v1"}
    config = {"agora": {"placement": placement, "backend": "celery", "resource_type": "pool_large"}}
    ti = SimpleNamespace(
        dag_id="d", task_id="t", run_id="r", try_number=1, map_index=-1, hostname="vm", queue="pool_large",
        start_date=datetime(2026, 12, 2, tzinfo=UTC), end_date=datetime(2026, 12, 2, 0, 0, 3, tzinfo=UTC),
        task=SimpleNamespace(executor_config=config, task_type="PythonOperator", queue="pool_large"),
    )  # fmt: skip
    monkeypatch.delenv(WORKER_NAME_ENV, raising=False)
    assert attempt_from_task_instance(ti, "success", None, None).host == "vm"  # no Celery worker: the machine
    app = Celery("agora-test", set_as_current=False)

    @app.task
    def execute_workload() -> None: ...

    _task_stack.push(execute_workload)  # what a Celery worker does around the task that runs the workload
    execute_workload.push_request(hostname="pool_large@vm")
    try:
        attempt = attempt_from_task_instance(ti, "success", None, None)
    finally:
        execute_workload.pop_request()
        _task_stack.pop()
    assert (attempt.host, attempt.resource_type, attempt.backend) == ("pool_large@vm", "pool_large", "celery")
    assert (attempt.machine, attempt.plan_version, attempt.runtime_s) == ("pool_large#0", "v1", 3.0)


def test_names_in_executor_config_that_are_not_strings_are_no_names() -> None:
    """The listener never raises: a list where a name is meant is left out, never turned into text by str()."""
    from types import SimpleNamespace

    from agora_optimizer.integration.trace_listener import _planned, resource_of

    bad = ["big"] * 1000
    config = {"agora": {"resource_type": bad, "backend": bad, "placement": {"machine": bad, "plan_version": "v1"}}}
    ti = SimpleNamespace(task=SimpleNamespace(executor_config=config, queue="default"), map_index=-1)
    assert resource_of(ti) == ("", "")
    assert _planned(ti) == {"machine": "", "plan_version": "v1"}
    config["agora"]["resource_type"] = "big"
    assert resource_of(ti) == ("big", "")


@pytest.mark.slow
def test_a_store_another_process_holds_does_not_hold_the_task_its_row_waits_and_lands_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task process waited out another process's hold on the store's lock (up to 60 s) before it
    could end; now it waits the hooks' short busy timeout, spools the row, and the next writer lands it."""
    from agora_optimizer.integration.trace_listener import TraceListener
    from agora_optimizer.traces.records import TaskAttempt
    from agora_optimizer.traces.spool import pending
    from agora_optimizer.traces.store import HOOK_BUSY_TIMEOUT_S, TraceStore

    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "state"))
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    TraceStore(url).close()
    listener = TraceListener(store_url=url)
    row = TaskAttempt.create(dag_id="d", task_id="t", run_id="r1", state="success")
    with write_lock_held(tmp_path / "traces.db", hold_s=10):
        started = time.monotonic()
        listener._write(row)
        assert time.monotonic() - started < HOOK_BUSY_TIMEOUT_S + 1.0
        assert pending() == 1
    listener._write(TaskAttempt.create(dag_id="d", task_id="next", run_id="r1", state="success"))
    assert pending() == 0
    with TraceStore(url) as store:
        assert sorted(a.task_id for a in store.attempts()) == ["next", "t"]


def _runtime_ti(task: Any, conf: dict[str, Any], run_id: str = "manual__1") -> Any:
    """The Task SDK's own task instance of a run whose conf is ``conf``: its template context is Airflow's."""
    import uuid
    from datetime import UTC, datetime

    from airflow.sdk.api.datamodels._generated import DagRun, DagRunState, DagRunType, TIRunContext
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

    now = datetime(2026, 12, 5, tzinfo=UTC)
    run = DagRun(
        dag_id=task.dag_id, run_id=run_id, logical_date=None, data_interval_start=None, data_interval_end=None,
        run_after=now, start_date=now, end_date=None, run_type=DagRunType.MANUAL, state=DagRunState.RUNNING, conf=conf,
        consumed_asset_events=[], partition_key=None,
    )  # fmt: skip
    return RuntimeTaskInstance.model_construct(
        id=uuid.uuid4(), task_id=task.task_id, dag_id=task.dag_id, run_id=run_id, try_number=1, map_index=-1,
        dag_version_id=uuid.uuid4(), task=task, start_date=now, end_date=now,
        _ti_context_from_server=TIRunContext(dag_run=run, max_tries=0),
    )  # fmt: skip


def test_a_recorded_attempt_reads_the_size_its_template_gives_with_the_runs_conf_and_params(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``input_bytes`` as a template of the run's params (which the run's conf overrides) and conf: each
    attempt records its own run's size; a template that fails records none, and the task is not held up."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from agora_optimizer.integration.trace_listener import TraceListener
    from agora_optimizer.traces.store import TraceStore

    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("AGORA_SAMPLED_BY_WORKER", raising=False)
    sized = {"input_bytes": "{{ params.rows * dag_run.conf['row_bytes'] }}", "input_files": "{{ params.rows }}"}
    with DAG("sized", schedule=None, params={"rows": 10}):
        load = EmptyOperator(task_id="load", executor_config={"agora": sized})
        broken = EmptyOperator(task_id="broken", executor_config={"agora": {"input_bytes": "{{ dag_run.conf['x'] }}"}})
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    listener = TraceListener(store_url=url)
    listener.on_task_instance_success(None, _runtime_ti(load, {"row_bytes": 100}))
    with TraceStore(url) as store:
        (first,) = store.attempts()
    assert (first.input_bytes, first.input_files) == (1000, 10)  # params.rows's default, conf's row_bytes
    listener.on_task_instance_success(None, _runtime_ti(load, {"row_bytes": 100, "rows": 3}, "manual__2"))
    with TraceStore(url) as store:
        (second,) = store.attempts(run_id="manual__2")
    assert (second.input_bytes, second.input_files) == (300, 3)  # this run's conf overrides params.rows
    with caplog.at_level("WARNING", logger="agora_optimizer.integration.trace_listener"):
        listener.on_task_instance_success(None, _runtime_ti(broken, {"row_bytes": 100}))
    with TraceStore(url) as store:
        (row,) = store.attempts(task_id="broken")
    assert (row.state, row.input_bytes, row.input_files) == ("success", None, None)
    (warning,) = [r.getMessage() for r in caplog.records if "input size" in r.getMessage()]
    assert "DAG 'sized': field 'broken.executor_config.agora.input_bytes': cannot evaluate it: UndefinedError" in (
        warning
    )


def test_a_task_that_says_nothing_of_its_input_records_what_its_upstream_tasks_wrote_in_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from agora_optimizer.integration.trace_listener import TraceListener
    from agora_optimizer.traces.records import TaskAttempt
    from agora_optimizer.traces.store import TraceStore

    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("AGORA_SAMPLED_BY_WORKER", raising=False)
    with DAG("piped", schedule=None):
        extract, clean = EmptyOperator(task_id="extract"), EmptyOperator(task_id="clean")
        load = EmptyOperator(task_id="load")
        [extract, clean] >> load
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    wrote = [("manual__1", "extract", 5000), ("manual__1", "clean", 700), ("manual__0", "extract", 10**9)]
    with TraceStore(url) as store:  # what an importer or an executor that measures outputs recorded
        store.add(
            TaskAttempt.create(dag_id="piped", task_id=t, run_id=r, output_bytes=b, output_files=2) for r, t, b in wrote
        )
    listener = TraceListener(store_url=url)
    listener.on_task_instance_success(None, _runtime_ti(load, {}))
    with TraceStore(url) as store:
        (row,) = store.attempts(task_id="load")
    assert (row.input_bytes, row.input_files) == (5700, 4)  # this run's upstream rows, not run manual__0's
    listener.on_task_instance_success(None, _runtime_ti(extract, {}, "manual__2"))
    with TraceStore(url) as store:
        (first,) = store.attempts(task_id="extract", run_id="manual__2")
    assert (first.input_bytes, first.input_files) == (None, None)  # no upstream task: unknown


def test_a_successful_attempt_records_what_its_local_outlets_hold_and_its_downstream_task_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Outlets that name a local file or directory are sized when the task ends, as inlets are; an object-store
    outlet is unknown; a failed attempt records no output (what it left is not what it writes)."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, Asset

    from agora_optimizer.integration.trace_listener import TraceListener
    from agora_optimizer.traces.store import TraceStore

    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("AGORA_SAMPLED_BY_WORKER", raising=False)
    (tmp_path / "out.csv").write_bytes(b"x" * 1000)
    parts = tmp_path / "parts"
    (parts / "day=1").mkdir(parents=True)
    (parts / "a.parquet").write_bytes(b"y" * 300)
    (parts / "day=1" / "b.parquet").write_bytes(b"z" * 200)
    with DAG("written", schedule=None):
        extract = EmptyOperator(
            task_id="extract", outlets=[Asset(f"file://{tmp_path / 'out.csv'}"), str(parts), Asset("s3://b/k.csv")]
        )
        remote = EmptyOperator(task_id="remote", outlets=[Asset("s3://b/other.csv")])
        load = EmptyOperator(task_id="load")
        [extract, remote] >> load
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    listener = TraceListener(store_url=url)
    with caplog.at_level("INFO", logger="agora_optimizer.integration.trace_listener"):
        listener.on_task_instance_success(None, _runtime_ti(extract, {}))
    assert any("outlet s3://b/k.csv: not a local path" in r.getMessage() for r in caplog.records)
    listener.on_task_instance_success(None, _runtime_ti(remote, {}))
    listener.on_task_instance_success(None, _runtime_ti(load, {}))
    with TraceStore(url) as store:
        rows = {row.task_id: row for row in store.attempts(run_id="manual__1")}
    assert (rows["extract"].output_bytes, rows["extract"].output_files) == (1500, 3)  # the s3 outlet: unknown
    assert (rows["remote"].output_bytes, rows["remote"].output_files) == (None, None)
    assert (rows["load"].output_bytes, rows["load"].output_files) == (None, None)  # no outlet
    assert (rows["load"].input_bytes, rows["load"].input_files) == (1500, 3)  # what extract wrote in this run
    listener.on_task_instance_failed(None, _runtime_ti(extract, {}, "manual__2"), RuntimeError("disk full"))
    with TraceStore(url) as store:
        (failed,) = store.attempts(task_id="extract", run_id="manual__2")
    assert (failed.state, failed.output_bytes, failed.output_files) == ("failed", None, None)


MAPPED_DAG = """
import sys
from datetime import datetime

from airflow.sdk import DAG, task


@task
def numbers():
    return [1, 2, 3, 4]


@task
def square(x):
    return x * x


@task
def total(values):
    return sum(values)


with DAG(dag_id="agora_mapped_width", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
    total(square.expand(x=numbers()))

if __name__ == "__main__":
    print("STATE", dag.test().state, flush=True)
"""


@pytest.mark.airflow
@pytest.mark.slow
def test_the_listener_records_each_mapped_instances_index_and_its_tasks_width_in_a_real_run(tmp_path: Path) -> None:
    """``dag.test()`` runs each task through the Task SDK's task runner, as a worker does: the listener asks the
    API server how many instances the mapped task has in the run; an unmapped task records none."""
    import os
    import subprocess
    import sys

    import agora_optimizer
    from agora_optimizer.traces.store import TraceStore
    from harness.local_airflow import migrate_database

    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    (home / "dags" / "mapped_width.py").write_text(MAPPED_DAG)
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AGORA_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__AGORA__TRACE_STORE_URL=url,
        AIRFLOW__AGORA__STATE_DIR=str(tmp_path / "state"),
        PYTHONPATH=str(Path(agora_optimizer.__file__).parents[1]),  # the task process runs this tree's listener
    )
    migrate_database(env)
    result = subprocess.run(
        [sys.executable, str(home / "dags" / "mapped_width.py")], capture_output=True, text=True, env=env, timeout=300
    )
    assert "STATE success" in result.stdout, (result.stdout + result.stderr)[-5000:]
    with TraceStore(url) as store:
        rows = {(a.task_id, a.map_index): a for a in store.attempts(dag_id="agora_mapped_width")}
    assert sorted(rows) == [("numbers", -1), *(("square", i) for i in range(4)), ("total", -1)]
    assert [rows[("square", i)].map_width for i in range(4)] == [4, 4, 4, 4]
    assert rows[("numbers", -1)].map_width is None and rows[("total", -1)].map_width is None
