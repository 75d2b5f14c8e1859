"""Recording a run from Airflow's tries + the trace store (no Airflow process); ``agora runs`` is in tests/cli."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.runs.record import Repair, RunRecord
from agora_optimizer.runs.recorder import AirflowTry, record_run
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.records import TaskAttempt
from tests.conftest import CATALOGS
from tests.runs.conftest import T0, AirflowDatabase, at, placement, planned_etl
from tests.traces.conftest import write_lock_held


@pytest.fixture
def setup(tmp_path: Path) -> tuple[str, PlanStore, str]:
    return planned_etl(tmp_path)


def test_a_run_is_recorded_from_airflows_tries_and_recording_again_takes_the_late_trace_rows(
    setup: tuple[str, PlanStore, str],
) -> None:
    url, plans, version = setup
    resources = {r.name: r for r in load_catalog(CATALOGS / "local.yaml").resources}
    tries = [
        AirflowTry("extract", -1, 1, "success", at(2), at(25), "local-small", placement(version, "local-small")),
        AirflowTry("load", -1, 2, "failed", at(40), at(70), "local-large", placement(version, "local-large")),
        AirflowTry("report", -1, 0, "upstream_failed", None, None, "default", {}),
    ]
    with RunStore(url) as store:
        first = record_run(store, "etl", "r1", "failed", T0, at(71), tries, plans, resources)
        assert first.planned and first.plan_version == version and first.notes == ()
        assert first.actual_makespan_s == 70.0 and first.makespan_ratio == pytest.approx(70 / 60)
        load = next(t for t in first.tasks if t.task_id == "load")
        assert (load.try_number, load.state, load.actual_machine) == (2, "failed", "local-large#0")
        assert load.actual_start_s == 40.0
        assert {t.task_id for t in first.tasks} == {"extract", "load"}  # "report" never ran
        # The executor's rows land later: load's first try (OOM-killed, earlier) and its second try's state.
        store.add([
            TaskAttempt.create(dag_id="etl", task_id="load", run_id="r1", try_number=1, started_at=at(22),
                               ended_at=at(30), state="failed", resource_type="local-large", machine="local-large#0",
                               plan_version=version),
            TaskAttempt.create(dag_id="etl", task_id="load", run_id="r1", try_number=2, started_at=at(41),
                               ended_at=at(69), state="oom_killed", resource_type="local-large",
                               machine="local-large#0", plan_version=version),
        ])  # fmt: skip
        store.add_repair("etl", "r1", Repair(30.0, "retry with more memory", ("load",)))
        again = record_run(store, "etl", "r1", "failed", T0, at(71), tries, plans, resources)
        assert store.get("etl", "r1") == again
    load = next(t for t in again.tasks if t.task_id == "load")
    assert (load.state, load.actual_start_s) == ("oom_killed", 40.0)  # Airflow's times, the executor's state
    large = next(x for x in again.leases if x.machine == "local-large#0")
    assert (large.start_s, large.end_s) == (22.0, 70.0)  # from the first try's start
    assert [r.reason for r in again.repairs] == ["retry with more memory"]


def test_a_run_on_no_plan_and_a_plan_gone_from_the_store(setup: tuple[str, PlanStore, str]) -> None:
    url, plans, _ = setup
    with RunStore(url) as store:
        unplanned = record_run(
            store, "etl", "u1", "success", T0, at(9), [AirflowTry("x", -1, 1, "success", at(1), at(8), "default", {})],
            plans, {},
        )  # fmt: skip
        assert not unplanned.planned and unplanned.actual_makespan_s == 8.0 and unplanned.actual_cost_usd == 0.0
        gone = record_run(
            store, "etl", "g1", "success", T0, at(9),
            [AirflowTry("extract", -1, 1, "success", at(1), at(8), "q", placement("0123456789ab", "local-small"))],
            plans, {},
        )  # fmt: skip
    assert gone.planned and gone.planned_makespan_s is None
    assert any("plan 0123456789ab of DAG etl is not in the plan store" in n for n in gone.notes)


def test_the_run_listener_never_raises_and_says_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from agora_optimizer.runs.pending import PENDING_NAME, EndedRun, waiting
    from agora_optimizer.runs.recorder import RunListener

    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    listener = RunListener(store_url="mysql://nobody@nowhere/agora")  # a database the store refuses
    run = SimpleNamespace(dag_id="etl", run_id="r9", state="success", start_date=T0, end_date=at(5))
    with caplog.at_level("WARNING", logger="agora_optimizer.runs"):
        try:
            listener.on_dag_run_success(dag_run=run, msg="success")
            listener.on_dag_run_failed(dag_run=object(), msg="task_failure")  # not a DAG run at all
            deadline = time.monotonic() + 10
            while "etl/r9" not in caplog.text and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            listener.stop()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("\n" not in line for line in lines), lines
    assert "cannot record DAG run <object object at" in lines[0] and "AttributeError" in lines[0]
    assert "cannot record DAG run etl/r9 now" in lines[1] and "unsupported database 'mysql'" in lines[1]
    assert waiting(tmp_path / "jobs" / PENDING_NAME) == [EndedRun("etl", "r9")]  # to be tried again


def test_a_try_whose_row_says_it_ran_on_no_machine_is_not_put_on_its_planned_machine() -> None:
    """A spot task's same try re-run on its fallback: its row names the fallback and no machine; the
    placement still names the spot machine, which must not swallow the re-run's time in its lease."""
    from agora_optimizer.runs.recorder import merged_attempts

    spot = {"resource": "slurm-spot", "machine": "slurm-spot#0", "plan_version": "v1"}
    rerun = TaskAttempt.create(dag_id="d", task_id="t", run_id="r", started_at=at(14), ended_at=at(35),
                               resource_type="slurm-compute", machine="")  # fmt: skip
    tried = AirflowTry("t", -1, 1, "success", at(14), at(35), "slurm-spot", spot)
    [attempt] = merged_attempts("d", "r", [tried], [rerun])
    assert (attempt.resource_type, attempt.machine, attempt.plan_version) == ("slurm-compute", "", "v1")
    [unseen] = merged_attempts("d", "r", [tried], [])  # no row yet: where the placement put it
    assert (unseen.resource_type, unseen.machine) == ("slurm-spot", "slurm-spot#0")


def _etl_tries(version: str) -> list[dict[str, Any]]:
    """The last tries of the planned DAG's two tasks, as Airflow's task_instance table holds them."""
    return [
        {"task_id": "extract", "try_number": 1, "state": "success", "start_date": at(2), "end_date": at(25),
         "queue": "local-small", "executor_config": {"agora": {"placement": placement(version, "local-small")}}},
        {"task_id": "load", "try_number": 1, "state": "success", "start_date": at(26), "end_date": at(70),
         "queue": "local-large", "executor_config": {"agora": {"placement": placement(version, "local-large")}}},
    ]  # fmt: skip


def _end_run_as_the_scheduler_does(listener: Any, dag_id: str, run_id: str) -> float:
    """What the scheduler's loop does when a run's last task ends: set the run's state in its session, tell the
    listeners, then commit. Returns how long the listener held the loop, in seconds."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    with create_session() as session:
        dag_run = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).one()
        dag_run.set_state(DagRunState.SUCCESS)
        started = time.monotonic()
        listener.on_dag_run_success(dag_run=dag_run, msg="success")
        return time.monotonic() - started  # the session commits the run's end after the listener returns


def _record_of(url: str, dag_id: str, run_id: str, timeout_s: float) -> RunRecord:
    deadline = time.monotonic() + timeout_s
    while True:
        with RunStore(url) as store:
            record = store.get(dag_id, run_id)
        if record is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert record is not None, f"no record of {dag_id}/{run_id} within {timeout_s} s"
    return record


@pytest.fixture
def scheduler_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow_db: AirflowDatabase
) -> Iterator[tuple[str, str, AirflowDatabase]]:
    """The scheduler's [agora] settings (catalog, plans, state directory), its metadata database, and the
    trace store (created) of the planned DAG ``etl``: (store URL, plan version, database)."""
    url, _, version = planned_etl(tmp_path)
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "local.yaml"))
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(tmp_path / "plans"))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    RunStore(url).close()
    yield url, version, airflow_db


@pytest.mark.slow
def test_the_run_listener_does_not_hold_the_scheduler_while_another_process_holds_the_stores_lock(
    tmp_path: Path, scheduler_side: tuple[str, str, AirflowDatabase]
) -> None:
    """Finding 2 of issue 32: the listener held the scheduler's loop for as long as another process held the
    trace store's write lock (up to the 60 s busy timeout). It must return at once, and the run be recorded
    once the lock is free again, with what Airflow committed after the listener returned."""
    from agora_optimizer.runs.recorder import RunListener

    url, version, airflow_db = scheduler_side
    airflow_db.add_run("etl", "r1", "running", _etl_tries(version))
    listener = RunListener(store_url=url)
    try:
        with write_lock_held(tmp_path / "traces.db", hold_s=10) as lock:
            held_s = _end_run_as_the_scheduler_does(listener, "etl", "r1")
            assert held_s < 0.5, f"the listener held the scheduler's loop {held_s:.1f} s"
            time.sleep(3)  # longer than the recorder waits for the lock: its try fails, the run waits on disk
            with RunStore(url) as store:
                assert store.get("etl", "r1") is None
            lock.release()
        record = _record_of(url, "etl", "r1", timeout_s=20)
    finally:
        listener.before_stopping(component=None)
    assert (record.state, record.plan_version, record.planned_makespan_s) == ("success", version, 60.0)
    assert record.ended_at == airflow_db.run_end("etl", "r1") and record.actual_makespan_s == 70.0  # as committed
    assert {(t.task_id, t.actual_machine) for t in record.tasks} == {
        ("extract", "local-small#0"), ("load", "local-large#0"),
    }  # fmt: skip
