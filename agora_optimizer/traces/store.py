"""The trace store: one row per task attempt, in SQLite (the default) or PostgreSQL.

The schema is versioned by hand, not with Alembic: a one-row table
``agora_schema_version`` holds the version, and :data:`MIGRATIONS` maps each version
to the function that brings the schema from the version before to it. Opening a
store reads the version; only when the schema is missing or older does it create or
upgrade it, in one transaction under a lock (SQLite's write lock, a PostgreSQL advisory
lock), so that several processes opening the same new database at once create it once.
Opening a current store takes no lock: the scheduler's hooks open one while others write.
A database whose version is newer than this code knows is refused with a
:class:`TraceStoreError` rather than misread. Each migration describes the schema of its
own version, not :data:`attempts_table` (always the newest), so that an old database
upgrades step by step: version 1 creates the table as first shipped, version 2 adds the
planned ``machine`` and ``plan_version`` of each attempt, version 3 the run records'
tables (:mod:`agora_optimizer.traces.run_tables`, read and written by
:class:`agora_optimizer.runs.store.RunStore`), version 4 each run's planned expected cost, version 5
each repair's forecast of its run, version 6 the count of files each attempt read and wrote
(``input_files``, ``output_files``), version 7 a mapped task's width in the attempt's run (``map_width``).

Rows are keyed by the natural key of an attempt, (dag_id, task_id, run_id,
map_index, try_number): writing the same attempt twice updates the row (an upsert,
``INSERT ... ON CONFLICT DO UPDATE`` on both databases), so collectors may re-import
freely. Bad rows are skipped and reported, never written, and never stop the good
ones (:meth:`TraceStore.add` returns an :class:`AddReport`).

Concurrency (the database is opened by :func:`agora_optimizer.database.open_engine`): SQLite runs
in WAL mode, and every writing transaction starts with ``BEGIN IMMEDIATE`` so that writers queue on
the lock instead of failing; PostgreSQL
(``postgresql+psycopg://`` URLs, psycopg 3) needs nothing special, and rows are written in
key order so that two writers cannot deadlock. How long a writer queues is the store's
``busy_timeout_s`` (SQLite's busy timeout, PostgreSQL's ``lock_timeout``): :data:`BUSY_TIMEOUT_S`
for commands and the UI, :data:`HOOK_BUSY_TIMEOUT_S` for agora's code inside Airflow's
processes, which must not hold a scheduler's loop or a task: what they cannot write within it
waits in a spool (:mod:`agora_optimizer.traces.spool`, :mod:`agora_optimizer.runs.pending`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from agora_optimizer.database import READ_ONLY, DatabaseError, failure_reason, mask_url, open_engine
from agora_optimizer.errors import AgoraError
from agora_optimizer.traces.records import TaskAttempt, TraceRecordError
from agora_optimizer.traces.run_tables import add_expected_cost_of_4, add_forecast_of_5, create_tables_of_3

SCHEMA_VERSION = 7
BUSY_TIMEOUT_S = 60.0  # how long a writer waits for the lock: a command, an import, the UI
HOOK_BUSY_TIMEOUT_S = 0.5  # ... agora's code in Airflow's processes (executor, run recorder, task listener)
KEY_COLUMNS = ("dag_id", "task_id", "run_id", "map_index", "try_number")
_PG_LOCK_KEY = 0x61676F7261  # "agora": one advisory lock for schema changes
_CHUNK_ROWS = 500


class TraceStoreError(AgoraError):
    """The trace store cannot be opened, read or written (the message names the URL, password masked)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"trace store {url}: {reason}")


metadata = sa.MetaData()

schema_version_table = sa.Table(
    "agora_schema_version",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)


def _columns_of_1() -> list[sa.Column[Any]]:
    """The attempts table's columns in schema version 1 (new objects at each call)."""
    return [
        sa.Column("dag_id", sa.String, primary_key=True),
        sa.Column("task_id", sa.String, primary_key=True),
        sa.Column("run_id", sa.String, primary_key=True),
        sa.Column("map_index", sa.Integer, primary_key=True),
        sa.Column("try_number", sa.Integer, primary_key=True),
        sa.Column("category", sa.String, nullable=False, default=""),
        sa.Column("operator", sa.String, nullable=False, default=""),
        sa.Column("resource_type", sa.String, nullable=False, default=""),
        sa.Column("backend", sa.String, nullable=False, default=""),
        sa.Column("host", sa.String, nullable=False, default=""),
        sa.Column("requested_cores", sa.Integer),
        sa.Column("requested_memory_bytes", sa.BigInteger),
        sa.Column("speed", sa.Float),
        sa.Column("queued_at", sa.DateTime(timezone=True)),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("runtime_s", sa.Float),
        sa.Column("peak_rss_bytes", sa.BigInteger),
        sa.Column("cpu_time_s", sa.Float),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("input_bytes", sa.BigInteger),
        sa.Column("output_bytes", sa.BigInteger),
        sa.Column("error_text", sa.Text, nullable=False, default=""),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    ]


attempts_table = sa.Table(
    "agora_task_attempts",
    metadata,
    *_columns_of_1(),
    sa.Column("machine", sa.String, nullable=False, default="", server_default=""),
    sa.Column("plan_version", sa.String, nullable=False, default="", server_default=""),
    sa.Column("input_files", sa.Integer),
    sa.Column("output_files", sa.Integer),
    sa.Column("map_width", sa.Integer),
)  # the primary key (dag_id, task_id, ...) also serves the look-ups by DAG and by task

_ATTEMPT_FIELDS = tuple(f.name for f in fields(TaskAttempt))
_TIME_FIELDS = ("queued_at", "started_at", "ended_at")


def _migrate_to_1(connection: Connection) -> None:
    """Version 1: the attempts table as first shipped (a frozen copy of its columns then)."""
    sa.Table(attempts_table.name, sa.MetaData(), *_columns_of_1()).create(connection, checkfirst=True)


_ADDED_IN_2 = ("machine", "plan_version")


def _add_columns(connection: Connection, columns: dict[str, str]) -> None:
    """Add each of ``columns`` (name: SQL type) the attempts table does not have yet."""
    present = {column["name"] for column in sa.inspect(connection).get_columns(attempts_table.name)}
    for name, sql_type in columns.items():
        if name not in present:
            connection.exec_driver_sql(f"ALTER TABLE {attempts_table.name} ADD COLUMN {name} {sql_type}")


def _migrate_to_2(connection: Connection) -> None:
    """Version 2: each attempt's planned ``machine`` and ``plan_version`` ('' for the rows before)."""
    _add_columns(connection, dict.fromkeys(_ADDED_IN_2, "VARCHAR NOT NULL DEFAULT ''"))


_ADDED_IN_6 = ("input_files", "output_files")


def _migrate_to_6(connection: Connection) -> None:
    """Version 6: how many files each attempt read and wrote (None for the rows before)."""
    _add_columns(connection, dict.fromkeys(_ADDED_IN_6, "INTEGER"))


def _migrate_to_7(connection: Connection) -> None:
    """Version 7: the width of a mapped task in each attempt's run (None for the rows before)."""
    _add_columns(connection, {"map_width": "INTEGER"})


MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    1: _migrate_to_1,
    2: _migrate_to_2,
    3: create_tables_of_3,
    4: add_expected_cost_of_4,
    5: add_forecast_of_5,
    6: _migrate_to_6,
    7: _migrate_to_7,
}


@dataclass(frozen=True)
class AddReport:
    """What :meth:`TraceStore.add` did: rows written (inserted or updated) and rows skipped, with why."""

    written: int
    skipped: tuple[TraceRecordError, ...] = ()

    @property
    def skipped_count(self) -> int:
        return len(self.skipped)


@dataclass(frozen=True)
class TaskStats:
    """Summary of the stored attempts of one task (``agora traces stats``)."""

    dag_id: str
    task_id: str
    attempts: int
    failed: int
    mean_runtime_s: float | None
    max_peak_rss_bytes: int | None
    mean_cpu_time_s: float | None


def default_store_url() -> str:
    """``[agora] trace_store_url`` from Airflow's config, else ``sqlite:///$AIRFLOW_HOME/agora/traces.db``.

    Imports Airflow only here, so that the store itself runs without it. The default's
    directory is created.
    """
    from agora_optimizer import settings

    return settings.get("trace_store_url") or f"sqlite:///{settings.agora_home() / 'traces.db'}"


class TraceStore:
    """Task attempts in a SQL database: ``TraceStore("sqlite:///traces.db")`` or a ``postgresql+psycopg://`` URL."""

    def __init__(self, url: str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.url = url
        self.masked_url = mask_url(url)
        self.busy_timeout_s = busy_timeout_s
        self._engine = self._create_engine(url)
        self._upsert_statement: Any = None
        try:
            self._upgrade_schema()
        except BaseException:
            self._engine.dispose()
            raise

    # -- opening ---------------------------------------------------------------------------------

    def _create_engine(self, url: str) -> Engine:
        try:
            return open_engine(url, self.busy_timeout_s, backends=("sqlite", "postgresql"))
        except DatabaseError as exc:
            raise TraceStoreError(self.masked_url, exc.reason) from None

    def _upgrade_schema(self) -> None:
        with self._read() as connection:  # most opens find the schema current: no write lock for them
            if self._checked_version(connection) == SCHEMA_VERSION:
                return
        with self._write() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
            schema_version_table.create(connection, checkfirst=True)
            current = self._checked_version(connection)
            for version in range(current + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[version](connection)
            if current == 0:
                connection.execute(sa.insert(schema_version_table).values(id=1, version=SCHEMA_VERSION))
            elif current < SCHEMA_VERSION:
                connection.execute(sa.update(schema_version_table).values(version=SCHEMA_VERSION))

    def _checked_version(self, connection: Connection) -> int:
        """The stored schema version (0 for none yet); a version newer than this code's is refused."""
        if not sa.inspect(connection).has_table(schema_version_table.name):
            return 0
        found = connection.execute(sa.select(schema_version_table.c.version)).scalar()
        current = int(found) if found is not None else 0
        if current > SCHEMA_VERSION:
            raise TraceStoreError(
                self.masked_url,
                f"schema version {current} is newer than this agora knows ({SCHEMA_VERSION}); upgrade agora",
            )
        return current

    @property
    def schema_version(self) -> int:
        with self._read() as connection:
            return int(connection.execute(sa.select(schema_version_table.c.version)).scalar_one())

    def close(self) -> None:
        """Release the store's connections."""
        self._engine.dispose()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

    def add(self, attempts: Iterable[TaskAttempt], known_resource_types: Collection[str] | None = None) -> AddReport:
        """Write the good attempts (insert, or update the row with the same key) and skip the bad ones.

        With ``known_resource_types``, an attempt that names another resource type is
        skipped too. The report lists every skipped row with its reason.
        """
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        skipped: list[TraceRecordError] = []
        recorded_at = datetime.now(UTC)
        for attempt in attempts:
            try:
                checked = _checked(attempt)
                if (
                    known_resource_types is not None
                    and checked.resource_type
                    and checked.resource_type not in known_resource_types
                ):
                    raise TraceRecordError(
                        checked.key, "resource_type", f"unknown resource type {checked.resource_type!r}"
                    )
            except TraceRecordError as exc:
                skipped.append(exc)
                continue
            row = _to_row(checked, recorded_at)
            rows[tuple(row[name] for name in KEY_COLUMNS)] = row  # the last of duplicates in one batch wins
        ordered = [rows[key] for key in sorted(rows)]
        if ordered:
            with self._write() as connection:
                for start in range(0, len(ordered), _CHUNK_ROWS):
                    connection.execute(self._upsert(connection), ordered[start : start + _CHUNK_ROWS])
        return AddReport(written=len(ordered), skipped=tuple(skipped))

    def _upsert(self, connection: Connection) -> Any:
        if self._upsert_statement is None:
            insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
            statement = insert(attempts_table)
            updated = {c.name: statement.excluded[c.name] for c in attempts_table.columns if c.name not in KEY_COLUMNS}
            self._upsert_statement = statement.on_conflict_do_update(index_elements=list(KEY_COLUMNS), set_=updated)
        return self._upsert_statement

    # -- reading ---------------------------------------------------------------------------------

    def attempts(
        self,
        dag_id: str | None = None,
        task_id: str | None = None,
        state: str | None = None,
        run_id: str | None = None,
    ) -> list[TaskAttempt]:
        """Stored attempts, optionally of one DAG, task, state, run; ordered by start time then key."""
        query = sa.select(*(attempts_table.c[name] for name in _ATTEMPT_FIELDS))
        for column, value in (("dag_id", dag_id), ("task_id", task_id), ("state", state), ("run_id", run_id)):
            if value is not None:
                query = query.where(attempts_table.c[column] == value)
        query = query.order_by(
            attempts_table.c.started_at.is_(None),
            attempts_table.c.started_at,
            *(attempts_table.c[name] for name in KEY_COLUMNS),
        )
        with self._read() as connection:
            result = connection.execute(query).mappings().all()
        return [_from_row(row) for row in result]

    def attempt(self, dag_id: str, task_id: str, run_id: str, try_number: int, map_index: int) -> TaskAttempt | None:
        """The stored row of one attempt, or None."""
        return next(
            (
                a
                for a in self.attempts(dag_id=dag_id, task_id=task_id, run_id=run_id)
                if (a.try_number, a.map_index) == (try_number, map_index)
            ),
            None,
        )

    def count(self) -> int:
        """How many attempts are stored."""
        with self._read() as connection:
            return int(connection.execute(sa.select(sa.func.count()).select_from(attempts_table)).scalar_one())

    def stats(self, dag_id: str | None = None) -> list[TaskStats]:
        """Per task: attempts, failures, mean runtime, largest peak RSS, mean CPU time."""
        c = attempts_table.c
        query = (
            sa.select(
                c.dag_id,
                c.task_id,
                sa.func.count().label("attempts"),
                sa.func.sum(sa.case((c.state != "success", 1), else_=0)).label("failed"),
                sa.func.avg(c.runtime_s).label("mean_runtime_s"),
                sa.func.max(c.peak_rss_bytes).label("max_peak_rss_bytes"),
                sa.func.avg(c.cpu_time_s).label("mean_cpu_time_s"),
            )
            .group_by(c.dag_id, c.task_id)
            .order_by(c.dag_id, c.task_id)
        )
        if dag_id is not None:
            query = query.where(c.dag_id == dag_id)
        with self._read() as connection:
            result = connection.execute(query).mappings().all()
        return [
            TaskStats(
                dag_id=row["dag_id"],
                task_id=row["task_id"],
                attempts=int(row["attempts"]),
                failed=int(row["failed"] or 0),
                mean_runtime_s=None if row["mean_runtime_s"] is None else float(row["mean_runtime_s"]),
                max_peak_rss_bytes=None if row["max_peak_rss_bytes"] is None else int(row["max_peak_rss_bytes"]),
                mean_cpu_time_s=None if row["mean_cpu_time_s"] is None else float(row["mean_cpu_time_s"]),
            )
            for row in result
        ]

    # -- connections -----------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._connect() as connection:
            try:
                with connection.begin():
                    yield connection
            except SQLAlchemyError as exc:
                raise TraceStoreError(self.masked_url, self._reason(exc)) from None

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._connect() as connection:
            try:
                yield connection.execution_options(**READ_ONLY)
            except SQLAlchemyError as exc:
                raise TraceStoreError(self.masked_url, self._reason(exc)) from None

    def _connect(self) -> Connection:
        try:
            return self._engine.connect()
        except SQLAlchemyError as exc:
            raise TraceStoreError(self.masked_url, f"cannot reach the database: {self._reason(exc)}") from None

    def _reason(self, exc: BaseException) -> str:
        return failure_reason(exc, self.url, self.busy_timeout_s)


def _checked(attempt: TaskAttempt) -> TaskAttempt:
    """``attempt.checked()``, with a malformed attempt (wrong types) reported the same way."""
    if not isinstance(attempt, TaskAttempt):
        raise TraceRecordError(repr(attempt)[:80], "*", f"not a TaskAttempt but {type(attempt).__name__}")
    for name in ("try_number", "map_index"):
        value = getattr(attempt, name)
        if isinstance(value, bool) or not isinstance(value, int):
            key = f"{attempt.dag_id}/{attempt.task_id}/{attempt.run_id}"
            raise TraceRecordError(key, name, f"must be an integer, got {value!r}")
    for name in ("category", "operator", "resource_type", "backend", "host", "error_text", "machine", "plan_version"):
        if not isinstance(getattr(attempt, name), str):
            raise TraceRecordError(attempt.key, name, f"must be a string, got {getattr(attempt, name)!r}")
    try:
        return attempt.checked()
    except TypeError as exc:
        raise TraceRecordError(attempt.key, "*", f"malformed: {exc}") from None


def _to_row(attempt: TaskAttempt, recorded_at: datetime) -> dict[str, Any]:
    row = {name: getattr(attempt, name) for name in _ATTEMPT_FIELDS}
    for name in _TIME_FIELDS:
        if row[name] is not None:
            row[name] = row[name].astimezone(UTC)
    row["recorded_at"] = recorded_at
    return row


def _from_row(row: Any) -> TaskAttempt:
    values = {name: row[name] for name in _ATTEMPT_FIELDS}
    for name in _TIME_FIELDS:
        value = values[name]
        if value is not None:
            # SQLite keeps no zone: the store writes UTC, so a naive value read back is UTC.
            values[name] = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return TaskAttempt(**values)
