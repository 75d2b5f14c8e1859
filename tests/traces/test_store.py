"""The trace store on real SQLite and real PostgreSQL: round trip, upsert, bad rows, many writers, schema versions."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from agora_optimizer.errors import AgoraError
from agora_optimizer.traces.records import TaskAttempt, TraceRecordError
from agora_optimizer.traces.store import HOOK_BUSY_TIMEOUT_S, SCHEMA_VERSION, TraceStore, TraceStoreError
from tests.traces.conftest import START_POSTGRES, PostgresServer, write_lock_held

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def attempt(task_id: str = "t", run_id: str = "r1", try_number: int = 1, **fields: Any) -> TaskAttempt:
    values: dict[str, Any] = {
        "dag_id": "dag",
        "task_id": task_id,
        "run_id": run_id,
        "try_number": try_number,
        "started_at": T0,
        "ended_at": T0 + timedelta(seconds=42.5),
    }
    values.update(fields)
    return TaskAttempt.create(**values)


def test_every_field_survives_a_round_trip(store_url: str) -> None:
    paris = timezone(timedelta(hours=1))
    full = attempt(
        map_index=3,
        category="align",
        operator="BashOperator",
        resource_type="m7i.large",
        backend="aws",
        host="ip-10-0-0-1",
        requested_cores=2,
        requested_memory_bytes=8 * 2**30,
        speed=1.25,
        queued_at=(T0 - timedelta(seconds=5)).astimezone(paris),  # a non-UTC zone comes back as the same instant
        peak_rss_bytes=3 * 2**40,  # beyond 32 bits
        cpu_time_s=80.25,
        state="oom_killed",
        input_bytes=10**12,
        output_bytes=0,
        input_files=12,
        output_files=0,
        map_width=8,
        error_text="Killed\nexit code 137 ✗",
    )
    with TraceStore(store_url) as store:
        report = store.add([full])
        assert (report.written, report.skipped_count) == (1, 0)
        [back] = store.attempts()
    assert back == full
    assert back.queued_at is not None and back.queued_at.tzinfo is not None
    assert back.runtime_s == 42.5


def test_a_second_write_of_an_attempt_updates_it(store_url: str) -> None:
    with TraceStore(store_url) as store:
        store.add([attempt(peak_rss_bytes=100), attempt(task_id="other")])
        store.add([attempt(peak_rss_bytes=200, state="failed", error_text="boom")])
        assert store.count() == 2
        [updated] = store.attempts(task_id="t")
    assert (updated.peak_rss_bytes, updated.state, updated.error_text) == (200, "failed", "boom")


def test_the_same_key_twice_in_one_batch_keeps_the_last(store_url: str) -> None:
    with TraceStore(store_url) as store:
        report = store.add([attempt(cpu_time_s=1.0), attempt(cpu_time_s=2.0)])
        assert report.written == 1
        assert [a.cpu_time_s for a in store.attempts()] == [2.0]


def test_the_natural_key_tells_tries_and_map_indexes_apart(store_url: str) -> None:
    rows = [attempt(try_number=n, map_index=m) for n in (1, 2) for m in (-1, 0, 1)]
    with TraceStore(store_url) as store:
        store.add(rows)
        assert store.count() == 6
        assert {(a.try_number, a.map_index) for a in store.attempts()} == {(n, m) for n in (1, 2) for m in (-1, 0, 1)}


def test_bad_rows_are_skipped_and_counted_while_good_rows_land(store_url: str) -> None:
    good = [attempt(task_id=f"good{i}") for i in range(3)]
    ends_before_start = replace(good[0], task_id="backwards", ended_at=T0 - timedelta(seconds=1), runtime_s=None)
    negative_memory = replace(good[0], task_id="negative", peak_rss_bytes=-5)
    unknown_state = replace(good[0], task_id="state", state="exploded")  # type: ignore[arg-type]
    naive_time = replace(good[0], task_id="naive", started_at=datetime(2026, 3, 1, 12, 0))
    wrong_type = replace(good[0], task_id="wrongtype", try_number="1")  # type: ignore[arg-type]
    not_an_attempt: Any = {"dag_id": "dag"}
    rows = [good[0], ends_before_start, good[1], negative_memory, unknown_state, naive_time, wrong_type, not_an_attempt]
    with TraceStore(store_url) as store:
        report = store.add([*rows, good[2]])
        stored = {a.task_id for a in store.attempts()}
    assert stored == {"good0", "good1", "good2"}
    assert report.written == 3
    assert report.skipped_count == 6
    assert all(isinstance(problem, TraceRecordError) for problem in report.skipped)
    fields = [problem.field for problem in report.skipped]
    assert fields[:5] == ["ended_at", "peak_rss_bytes", "state", "started_at", "try_number"]
    assert "backwards" in str(report.skipped[0]) and "negative" in str(report.skipped[1])


def test_an_unknown_resource_type_is_skipped_when_the_catalog_is_given(store_url: str) -> None:
    rows = [attempt(task_id="a", resource_type="m7i.large"), attempt(task_id="b", resource_type="m9z.huge")]
    rows.append(attempt(task_id="c"))  # no resource type: nothing to check
    with TraceStore(store_url) as store:
        report = store.add(rows, known_resource_types={"m7i.large", "c7i.xlarge"})
        assert sorted(a.task_id for a in store.attempts()) == ["a", "c"]
    [problem] = report.skipped
    assert problem.field == "resource_type" and "m9z.huge" in str(problem)


def test_an_empty_batch_writes_nothing(store_url: str) -> None:
    with TraceStore(store_url) as store:
        assert store.add([]) == store.add(iter(()))
        assert store.add([]).written == 0
        assert store.count() == 0
        assert store.attempts() == []
        assert store.stats() == []


def test_filters_and_per_task_stats(store_url: str) -> None:
    rows = [
        attempt(task_id="a", run_id="r1", peak_rss_bytes=100, cpu_time_s=1.0),
        attempt(task_id="a", run_id="r2", peak_rss_bytes=300, cpu_time_s=3.0, state="failed"),
        attempt(task_id="b", run_id="r1", ended_at=T0 + timedelta(seconds=10)),
        replace(attempt(task_id="x"), dag_id="other"),
    ]
    with TraceStore(store_url) as store:
        store.add(rows)
        assert len(store.attempts(dag_id="dag")) == 3
        assert [a.run_id for a in store.attempts(task_id="a")] == ["r1", "r2"]
        assert [a.task_id for a in store.attempts(state="failed")] == ["a"]
        stats = {(s.dag_id, s.task_id): s for s in store.stats()}
    a = stats[("dag", "a")]
    assert (a.attempts, a.failed, a.max_peak_rss_bytes) == (2, 1, 300)
    assert a.mean_cpu_time_s == pytest.approx(2.0)
    assert stats[("dag", "b")].mean_runtime_s == pytest.approx(10.0)
    assert stats[("dag", "b")].max_peak_rss_bytes is None
    assert set(stats) == {("dag", "a"), ("dag", "b"), ("other", "x")}


def _write_rows(url: str, writer: int, rows: int, ready: Any, go: Any) -> None:
    ready.put(writer)
    go.wait(120)
    store = TraceStore(url)  # every writer also races to create the schema of the new database
    for i in range(rows):
        report = store.add([attempt(task_id=f"w{writer}", run_id=f"r{i}", cpu_time_s=float(i))])
        assert report.written == 1
    store.close()


def test_concurrent_writers_in_several_processes_lose_no_row(store_url: str) -> None:
    writers, rows = 4, 200
    context = multiprocessing.get_context("fork")  # each writer opens its own store after the fork
    ready, go = context.Queue(), context.Event()
    processes = [context.Process(target=_write_rows, args=(store_url, w, rows, ready, go)) for w in range(writers)]
    for process in processes:
        process.start()
    assert sorted(ready.get(timeout=120) for _ in processes) == list(range(writers))
    go.set()  # all writers are loaded: they start writing together
    for process in processes:
        process.join(240)
    assert [p.exitcode for p in processes] == [0] * writers
    with TraceStore(store_url) as store:
        assert store.count() == writers * rows
        keys = {(a.task_id, a.run_id) for a in store.attempts()}
    assert keys == {(f"w{w}", f"r{i}") for w in range(writers) for i in range(rows)}


def test_reopening_keeps_rows_and_the_schema_version(store_url: str) -> None:
    with TraceStore(store_url) as store:
        store.add([attempt()])
        assert store.schema_version == SCHEMA_VERSION
    with TraceStore(store_url) as store:
        assert store.count() == 1
        assert store.schema_version == SCHEMA_VERSION


def test_a_schema_newer_than_the_code_is_refused(store_url: str) -> None:
    TraceStore(store_url).close()
    engine = sa.create_engine(store_url)
    with engine.begin() as connection:
        connection.exec_driver_sql(f"UPDATE agora_schema_version SET version = {SCHEMA_VERSION + 1}")
    engine.dispose()
    with pytest.raises(TraceStoreError, match=rf"schema version {SCHEMA_VERSION + 1} is newer"):
        TraceStore(store_url)


def test_an_unreachable_postgresql_is_a_clear_error_without_the_password() -> None:
    url = "postgresql+psycopg://agora:s3cret-pw@127.0.0.1:1/agora"
    with pytest.raises(TraceStoreError) as caught:
        TraceStore(url)
    message = str(caught.value)
    assert message.startswith("trace store postgresql+psycopg://agora:***@127.0.0.1:1/agora: cannot reach the database")
    assert "s3cret-pw" not in message
    assert isinstance(caught.value, AgoraError)


def test_wrong_postgresql_credentials_are_a_clear_error(postgres_url: str) -> None:
    url = sa.engine.make_url(postgres_url).set(password="wrong-password").render_as_string(hide_password=False)
    with pytest.raises(TraceStoreError, match=r"cannot reach the database.*password authentication failed") as caught:
        TraceStore(url)
    assert "wrong-password" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("not a url", "not a database URL"),
        ("mysql://u:p@localhost/db", "unsupported database 'mysql'"),
    ],
)
def test_a_url_agora_cannot_use_is_a_clear_error(url: str, reason: str) -> None:
    with pytest.raises(TraceStoreError, match=reason):
        TraceStore(url)


def test_an_unwritable_sqlite_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(TraceStoreError, match=str(blocker)):
        TraceStore(f"sqlite:///{blocker}/sub/traces.db")


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "traces.db"  # missing directories are created
    TraceStore(f"sqlite:///{path}").close()
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()


@pytest.mark.slow  # starts a Python that imports Airflow
def test_the_default_store_is_sqlite_under_airflow_home_unless_configured(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})
    configured = "postgresql+psycopg://u:p@db.example:5432/traces"
    code = (
        "import os\n"
        "from agora_optimizer.traces.store import default_store_url\n"
        "print(default_store_url())\n"
        f"os.environ['AIRFLOW__AGORA__TRACE_STORE_URL'] = {configured!r}\n"
        "print(default_store_url())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-2:] == [f"sqlite:///{tmp_path}/agora/traces.db", configured]
    assert (tmp_path / "agora").is_dir()


def test_start_postgres_is_idempotent(postgres_server: PostgresServer) -> None:
    again = subprocess.run(
        ["bash", str(START_POSTGRES), str(postgres_server.directory)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == postgres_server.url  # the same server, found running, same URL
    with TraceStore(postgres_server.url) as store:
        assert store.schema_version == SCHEMA_VERSION


def test_a_version_1_store_upgrades_and_keeps_its_rows_with_no_machine(tmp_path: Path) -> None:
    from agora_optimizer.traces import store as store_module

    url = f"sqlite:///{tmp_path / 'v1.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # a store as version 1 left it, with one row
        store_module.schema_version_table.create(connection)
        connection.execute(sa.insert(store_module.schema_version_table).values(id=1, version=1))
        store_module._migrate_to_1(connection)
        connection.exec_driver_sql(
            "INSERT INTO agora_task_attempts (dag_id, task_id, run_id, map_index, try_number, category, operator,"
            " resource_type, backend, host, state, error_text, recorded_at)"
            " VALUES ('dag', 'old', 'r1', -1, 1, '', '', '', '', '', 'success', '', '2026-03-01 12:00:00')"
        )
    engine.dispose()
    with TraceStore(url) as store:
        assert store.schema_version == SCHEMA_VERSION >= 2
        (old,) = store.attempts()
        assert (old.task_id, old.machine, old.plan_version) == ("old", "", "")
        store.add([attempt("new", machine="local-large#0", plan_version="abc123def456")])
        new = store.attempt("dag", "new", "r1", 1, -1)
        assert new is not None and (new.machine, new.plan_version) == ("local-large#0", "abc123def456")


def test_a_version_4_store_upgrades_and_its_old_rows_read_with_no_file_counts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v4.db'}"
    with TraceStore(url) as store:
        store.add([attempt("old", input_bytes=100)])
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # back to version 4: the attempts table without the file counts
        for name in ("input_files", "output_files"):
            connection.exec_driver_sql(f"ALTER TABLE agora_task_attempts DROP COLUMN {name}")
        connection.exec_driver_sql("UPDATE agora_schema_version SET version = 4")
    engine.dispose()
    with TraceStore(url) as store:
        assert store.schema_version == SCHEMA_VERSION >= 5
        (old,) = store.attempts()
        assert (old.input_bytes, old.input_files, old.output_files) == (100, None, None)
        store.add([attempt("new", input_bytes=100, input_files=4, output_files=1)])
        new = store.attempt("dag", "new", "r1", 1, -1)
        assert new is not None and (new.input_files, new.output_files) == (4, 1)


def test_a_version_6_store_upgrades_and_its_old_rows_read_with_no_map_width(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'v6.db'}"
    with TraceStore(url) as store:
        store.add([attempt("old", map_index=2)])
    engine = sa.create_engine(url)
    with engine.begin() as connection:  # back to version 6: the attempts table without the map width
        connection.exec_driver_sql("ALTER TABLE agora_task_attempts DROP COLUMN map_width")
        connection.exec_driver_sql("UPDATE agora_schema_version SET version = 6")
    engine.dispose()
    with TraceStore(url) as store:
        assert store.schema_version == SCHEMA_VERSION >= 7
        (old,) = store.attempts()
        assert (old.map_index, old.map_width) == (2, None)
        store.add([attempt("new", map_index=2, map_width=5)])
        new = store.attempt("dag", "new", "r1", 1, 2)
        assert new is not None and new.map_width == 5


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"map_index": 0, "map_width": 0}, r"must be a whole number in \[1, 1000000\], got 0"),
        ({"map_index": 0, "map_width": 2.0}, r"must be a whole number in \[1, 1000000\], got 2.0"),
        ({"map_index": 3, "map_width": 3}, r"must be above the map index 3, got 3"),
    ],
)
def test_an_impossible_map_width_is_refused_and_named(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(TraceRecordError, match=r"field 'map_width': " + reason):
        attempt(**fields)


def test_a_negative_file_count_is_refused_and_named() -> None:
    with pytest.raises(TraceRecordError, match=r"field 'input_files': must be >= 0"):
        attempt(input_files=-1)


@contextmanager
def _writes_locked(store_url: str, tmp_path: Path) -> Iterator[None]:
    """Another writer holds the store's lock: on SQLite another process's ``BEGIN IMMEDIATE``, on PostgreSQL
    another session's lock on the attempts table."""
    if store_url.startswith("sqlite"):
        with write_lock_held(tmp_path / "traces.db"):
            yield
        return
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql("LOCK TABLE agora_task_attempts IN EXCLUSIVE MODE")
            yield
    finally:
        engine.dispose()


def test_opening_a_current_store_does_not_wait_for_another_writers_lock(tmp_path: Path) -> None:
    """The scheduler's hooks open the store while tasks write to it: only creating or upgrading the schema
    takes the write lock (each open took it, and waited up to 60 s for it)."""
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(url) as store:
        store.add([attempt()])
    with write_lock_held(tmp_path / "traces.db", hold_s=10):
        started = time.monotonic()
        with TraceStore(url) as store:
            assert store.count() == 1 and store.schema_version == SCHEMA_VERSION
        assert time.monotonic() - started < 1.0


def test_a_writer_with_a_short_busy_timeout_gives_up_within_it_and_says_so(store_url: str, tmp_path: Path) -> None:
    with TraceStore(store_url) as store:
        store.add([attempt()])
    with TraceStore(store_url, busy_timeout_s=HOOK_BUSY_TIMEOUT_S) as store, _writes_locked(store_url, tmp_path):
        started = time.monotonic()
        with pytest.raises(TraceStoreError, match=rf"still locked after waiting {HOOK_BUSY_TIMEOUT_S:g} s"):
            store.add([attempt(task_id="u")])
        waited_s = time.monotonic() - started
        assert HOOK_BUSY_TIMEOUT_S * 0.8 <= waited_s < HOOK_BUSY_TIMEOUT_S + 1.0
        assert store.count() == 1  # reading never waits for the writer
    with TraceStore(store_url) as store:  # the lock is free again: the row lands
        store.add([attempt(task_id="u")])
        assert store.count() == 2
