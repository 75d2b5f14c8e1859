"""RunStore on real SQLite and real PostgreSQL: round trip, idempotent re-recording, leases, repairs, listing."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import sqlalchemy as sa

from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Forecast, Repair, RunLease, RunRecord, RunTask, forecast_of
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.store import SCHEMA_VERSION, TraceStore
from tests.traces.test_store import attempt

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def record(run_id: str = "r1", started_at: datetime | None = T0, **fields: object) -> RunRecord:
    values: dict[str, object] = {
        "dag_id": "dag",
        "run_id": run_id,
        "state": "success",
        "planned": True,
        "plan_version": "abc123def456",
        "started_at": started_at,
        "ended_at": None if started_at is None else started_at + timedelta(seconds=90),
        "planned_makespan_s": 60.0,
        "actual_makespan_s": 75.5,
        "planned_cost_usd": 0.5,
        "actual_cost_usd": 0.625,
        "tasks": (
            RunTask("a", -1, 2, "success", "vm", "vm#0", 0.0, 30.0, "vm", "vm#0", 1.5, 40.0),
            RunTask("b", 3, 1, "oom_killed", "vm", "vm#1", 30.0, 60.0, "big", "big#0", 41.0, 75.5),
            RunTask("c", planned_resource="vm", planned_machine="vm#1", planned_start_s=60.0, planned_end_s=70.0),
        ),
        "leases": (
            RunLease("vm#0", "vm", 0.0, 40.0, 0.25, "slurm accounting", "42"),
            RunLease("", "big", 41.0, 75.5, 0.375, "attempt"),
        ),
        "notes": ("a note ✓",),
    }
    values.update(fields)
    return RunRecord(**values)  # type: ignore[arg-type]


def test_a_record_survives_a_round_trip_with_its_times_in_utc(store_url: str) -> None:
    paris = timezone(timedelta(hours=1))
    original = record(started_at=T0.astimezone(paris))
    with RunStore(store_url) as store:
        assert store.get("dag", "r1") is None
        store.put(original)
        back = store.get("dag", "r1")
    assert back == original  # the same instants; dataclass equality compares datetimes as instants
    assert back is not None and back.started_at is not None and back.started_at.utcoffset() == timedelta(0)
    assert back.makespan_ratio == original.actual_makespan_s / 60.0


def test_recording_again_replaces_the_record_and_keeps_the_repairs(store_url: str) -> None:
    with RunStore(store_url) as store:
        store.put(record())
        store.add_repair("dag", "r1", Repair(12.5, "machine lost", ("a", "b"), "vm#0 stopped answering"))
        fewer = record(tasks=(RunTask("a", state="failed"),), leases=(), actual_cost_usd=0.0, notes=())
        store.put(fewer)
        store.put(fewer)  # idempotent
        back = store.get("dag", "r1")
    assert back is not None
    assert back.tasks == fewer.tasks and back.leases == () and back.notes == ()
    assert back.repairs == (Repair(12.5, "machine lost", ("a", "b"), "vm#0 stopped answering"),)


def test_repairs_of_a_run_not_yet_recorded_are_kept_in_time_order(store_url: str) -> None:
    with RunStore(store_url) as store:
        store.add_repair("dag", "r1", Repair(30.0, "late start", ("c",)))
        store.add_repair("dag", "r1", Repair(10.0, "machine lost", ("a",), "x"))
        store.add_repair("dag", "r2", Repair(1.0, "other run"))
        assert [r.at_s for r in store.repairs("dag", "r1")] == [10.0, 30.0]
        store.put(record())
        back = store.get("dag", "r1")
    assert back is not None and [r.reason for r in back.repairs] == ["machine lost", "late start"]


def test_a_runs_forecast_is_its_last_re_plans_and_survives_the_store_while_the_run_has_no_record(
    store_url: str,
) -> None:
    paris = timezone(timedelta(hours=1))
    first = Repair(10.0, "task a ended late", ("b",), "d", 70.0, 0.6, (T0 + timedelta(seconds=70)).astimezone(paris))
    lost = Repair(12.0, "machine vm#1 cannot be had")  # re-planned nothing: no forecast
    second = Repair(20.0, "category sim runs 1.85x", ("c",), "d", 95.5, 0.75, T0 + timedelta(seconds=95.5))
    with RunStore(store_url) as store:
        for repair in (first, lost, second):
            store.add_repair("dag", "r1", repair)
        back = store.repairs("dag", "r1")
        assert back == [first, lost, second]  # the same instants, back in UTC
        assert back[0].forecast_end_at is not None and back[0].forecast_end_at.utcoffset() == timedelta(0)
        store.put(record())
        recorded = store.get("dag", "r1")
    assert forecast_of(back) == Forecast(20.0, 95.5, 0.75, T0 + timedelta(seconds=95.5))
    assert forecast_of(back[:2]) == Forecast(10.0, 70.0, 0.6, T0 + timedelta(seconds=70))
    assert forecast_of([lost]) is None and record().forecast is None
    assert recorded is not None and recorded.forecast == forecast_of(back)
    data = recorded.to_json()
    assert data["forecast"] == {
        "at_s": 20.0,
        "end_s": 95.5,
        "cost_usd": 0.75,
        "end_at": "2026-03-01T12:01:35.500000+00:00",
    }
    assert data["repairs"][1]["forecast_end_at"] is None
    assert Forecast(20.0, 95.5, 0.75, T0 + timedelta(seconds=95.5)).text() == (
        "ends at 95.5 s (2026-03-01 12:01:35 UTC), costs 0.7500 USD (forecast at 20.0 s)"
    )


def test_the_plan_versions_a_dags_runs_name_are_its_records_and_its_traced_attempts(store_url: str) -> None:
    with RunStore(store_url) as store:
        assert store.plan_versions("dag") == set()
        store.put(record("r1", plan_version="aaaaaaaaaaaa"))
        store.put(record("r2", plan_version="", planned=False))  # an unplanned run names none
        store.put(record("r3", dag_id="other", plan_version="cccccccccccc"))
        store.add([attempt("a", "r4", plan_version="bbbbbbbbbbbb"), attempt("b", "r4", plan_version="")])
        assert store.plan_versions("dag") == {"aaaaaaaaaaaa", "bbbbbbbbbbbb"}  # r4 is still going
        assert store.plan_versions("other") == {"cccccccccccc"}


def test_reported_leases_upsert_by_allocation(store_url: str) -> None:
    first = LeaseRecord("dag", "r1", "vm#0", "vm", "slurm", "42", T0, T0 + timedelta(seconds=30), "slurm accounting")
    later = replace(first, ended_at=T0 + timedelta(seconds=45))  # the same allocation, reported again
    other = replace(first, external_id="43", started_at=T0 + timedelta(seconds=60), ended_at=T0 + timedelta(seconds=99))
    local = LeaseRecord("dag", "r1", "pool#0", "pool", "local", "", T0, T0 + timedelta(seconds=5), "task times")
    with RunStore(store_url) as store:
        assert store.add_leases([first, local]) == 2
        assert store.add_leases([later, other]) == 2
        assert store.add_leases([]) == 0
        leases = store.leases("dag", "r1")
        assert store.leases("dag", "r2") == []
    assert sorted(leases, key=lambda x: (x.started_at, x.machine)) == leases
    assert set(leases) == {later, other, local}


def test_list_is_newest_first_per_dag_and_limited(store_url: str) -> None:
    with RunStore(store_url) as store:
        for i in range(4):
            store.put(record(f"r{i}", started_at=T0 + timedelta(hours=i)))
        store.put(record("never-started", started_at=None))
        store.put(replace(record("x"), dag_id="other"))
        assert [r.run_id for r in store.list(dag_id="dag")] == ["r3", "r2", "r1", "r0", "never-started"]
        assert [r.run_id for r in store.list(dag_id="dag", limit=2)] == ["r3", "r2"]
        assert {r.dag_id for r in store.list()} == {"dag", "other"}
        assert store.list(dag_id="none") == []
        listed = store.list(dag_id="dag", limit=1)[0]
    assert listed.tasks == record().tasks and listed.leases == record().leases


def test_a_version_2_store_upgrades_to_the_run_tables_keeping_its_attempts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(url):
        pass
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # back to version 2: no run tables yet
        for table in ("agora_runs", "agora_run_tasks", "agora_run_leases", "agora_lease_records", "agora_run_repairs"):
            connection.exec_driver_sql(f"DROP TABLE {table}")
        connection.exec_driver_sql("UPDATE agora_schema_version SET version = 2")
    engine.dispose()
    with RunStore(url) as store:
        assert store.schema_version == SCHEMA_VERSION >= 3
        store.put(record())
        assert store.get("dag", "r1") == record()


def test_a_version_3_store_upgrades_and_its_records_read_with_no_expected_cost(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with RunStore(url) as store:
        store.put(record("old"))
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # back to version 3: the runs table without the expected cost
        connection.exec_driver_sql("ALTER TABLE agora_runs DROP COLUMN planned_expected_cost_usd")
        connection.exec_driver_sql("UPDATE agora_schema_version SET version = 3")
    engine.dispose()
    with RunStore(url) as store:
        assert store.schema_version == SCHEMA_VERSION >= 4
        old = store.get("dag", "old")
        assert old is not None and old.planned_expected_cost_usd is None and old.tasks == record().tasks
        store.put(record("spot", planned_expected_cost_usd=0.0123))
        spot = store.get("dag", "spot")
        assert spot is not None and spot.planned_expected_cost_usd == 0.0123


def test_a_version_4_store_upgrades_and_its_repairs_read_with_no_forecast(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with RunStore(url) as store:
        store.add_repair("dag", "r1", Repair(10.0, "machine lost", ("a",), "x"))
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # back to version 4: the repairs table without the forecast
        for column in ("forecast_end_s", "forecast_cost_usd", "forecast_end_at"):
            connection.exec_driver_sql(f"ALTER TABLE agora_run_repairs DROP COLUMN {column}")
        connection.exec_driver_sql("UPDATE agora_schema_version SET version = 4")
    engine.dispose()
    with RunStore(url) as store:
        assert store.schema_version == SCHEMA_VERSION >= 5
        assert store.repairs("dag", "r1") == [Repair(10.0, "machine lost", ("a",), "x")]
        store.add_repair("dag", "r1", Repair(20.0, "late", ("b",), "y", 50.0, 0.1, T0))
        assert forecast_of(store.repairs("dag", "r1")) == Forecast(20.0, 50.0, 0.1, T0)
