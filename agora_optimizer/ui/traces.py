"""The trace rows the agora view shows: filtered, paginated and aggregated in SQL.

Reads the trace store's table (:data:`agora_optimizer.traces.store.attempts_table`) with
queries the store itself has no use for: a page of attempts under filters, a DAG's most
recent runs, and per-task aggregates over those runs. The store is opened once with
:class:`~agora_optimizer.traces.store.TraceStore` (which creates or upgrades its schema);
reads then go through this module's own engine (:func:`agora_optimizer.database.open_engine`, read-only
transactions). A store that cannot be read raises
:class:`~agora_optimizer.traces.store.TraceStoreError` with the URL's password masked.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from agora_optimizer.database import READ_ONLY, DatabaseError, mask_url, open_engine
from agora_optimizer.traces.store import TraceStore, TraceStoreError, attempts_table, default_store_url

READ_BUSY_TIMEOUT_S = 30.0  # how long a read waits for SQLite's lock (10 s at most to reach PostgreSQL)
ROW_COLUMNS = (
    "dag_id",
    "task_id",
    "run_id",
    "map_index",
    "try_number",
    "state",
    "resource_type",
    "backend",
    "host",
    "operator",
    "started_at",
    "ended_at",
    "runtime_s",
    "peak_rss_bytes",
    "cpu_time_s",
    "error_text",
)


@dataclass(frozen=True)
class TraceFilter:
    """Exact matches on the attempts' columns; None matches anything."""

    dag_id: str | None = None
    task_id: str | None = None
    state: str | None = None
    resource_type: str | None = None


@dataclass(frozen=True)
class TaskActual:
    """What a task's successful attempts in the recent runs did."""

    task_id: str
    runs: int
    failed: int
    mean_runtime_s: float | None
    max_runtime_s: float | None
    max_peak_rss_bytes: int | None
    resource_types: tuple[str, ...]


class TraceReader:
    """Read-only queries on the trace store at ``url``."""

    def __init__(self, url: str) -> None:
        self.masked_url = mask_url(url)
        TraceStore(url).close()  # creates or upgrades the schema, refuses a newer one
        try:
            self._engine = open_engine(url, READ_BUSY_TIMEOUT_S)
        except DatabaseError as exc:
            raise TraceStoreError(self.masked_url, exc.reason) from None

    def page(
        self, dag_ids: Collection[str], where: TraceFilter, offset: int, limit: int
    ) -> tuple[int, list[dict[str, Any]]]:
        """How many attempts of ``dag_ids`` match, and ``limit`` of them from ``offset``, newest first."""
        c = attempts_table.c
        conditions = [c.dag_id.in_(sorted(dag_ids))]
        for column, value in vars(where).items():
            if value is not None:
                conditions.append(c[column] == value)
        count = sa.select(sa.func.count()).select_from(attempts_table).where(*conditions)
        rows = (
            sa.select(*(c[name] for name in ROW_COLUMNS))
            .where(*conditions)
            .order_by(c.started_at.is_(None), c.started_at.desc(), c.dag_id, c.task_id, c.run_id, c.try_number)
            .offset(offset)
            .limit(limit)
        )
        with self._read() as connection:
            total = int(connection.execute(count).scalar_one())
            found = [_utc(dict(row)) for row in connection.execute(rows).mappings()]
        return total, found

    def recent_runs(self, dag_id: str, count: int) -> list[str]:
        """The DAG's ``count`` most recent run ids (by their latest attempt's start), newest first."""
        c = attempts_table.c
        latest = sa.func.max(c.started_at)
        query = (
            sa.select(c.run_id)
            .where(c.dag_id == dag_id)
            .group_by(c.run_id)
            .order_by(latest.is_(None), latest.desc(), c.run_id)
            .limit(count)
        )
        with self._read() as connection:
            return [str(run_id) for run_id in connection.execute(query).scalars()]

    def actuals(self, dag_id: str, run_ids: Sequence[str], task_ids: Sequence[str]) -> dict[str, TaskActual]:
        """Per task of ``task_ids``: its attempts in ``run_ids``, aggregated."""
        if not run_ids or not task_ids:
            return {}
        c = attempts_table.c
        success = c.state == "success"
        scope = (c.dag_id == dag_id, c.run_id.in_(list(run_ids)), c.task_id.in_(list(task_ids)))
        totals = (
            sa.select(
                c.task_id,
                sa.func.sum(sa.case((success, 1), else_=0)).label("runs"),
                sa.func.sum(sa.case((success, 0), else_=1)).label("failed"),
                sa.func.avg(sa.case((success, c.runtime_s))).label("mean_runtime_s"),
                sa.func.max(sa.case((success, c.runtime_s))).label("max_runtime_s"),
                sa.func.max(c.peak_rss_bytes).label("max_peak_rss_bytes"),
            )
            .where(*scope)
            .group_by(c.task_id)
        )
        types = sa.select(c.task_id, c.resource_type).where(*scope, c.resource_type != "").distinct()
        with self._read() as connection:
            rows = list(connection.execute(totals).mappings())
            ran_on: dict[str, list[str]] = {}
            for task_id, resource_type in connection.execute(types):
                ran_on.setdefault(task_id, []).append(resource_type)
        return {row["task_id"]: _actual(row, sorted(ran_on.get(row["task_id"], []))) for row in rows}

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._engine.connect() as connection:
                yield connection.execution_options(**READ_ONLY)
        except SQLAlchemyError as exc:
            raise TraceStoreError(self.masked_url, f"cannot be read ({type(exc).__name__})") from None


def _actual(row: Any, resource_types: list[str]) -> TaskActual:
    def number(name: str) -> float | None:
        return None if row[name] is None else float(row[name])

    peak = row["max_peak_rss_bytes"]
    return TaskActual(
        task_id=row["task_id"],
        runs=int(row["runs"] or 0),
        failed=int(row["failed"] or 0),
        mean_runtime_s=number("mean_runtime_s"),
        max_runtime_s=number("max_runtime_s"),
        max_peak_rss_bytes=None if peak is None else int(peak),
        resource_types=tuple(resource_types),
    )


def _utc(row: dict[str, Any]) -> dict[str, Any]:
    """SQLite keeps no time zone: the store writes UTC, so a naive time read back is UTC."""
    for name in ("started_at", "ended_at"):
        value = row.get(name)
        if isinstance(value, datetime) and value.tzinfo is None:
            row[name] = value.replace(tzinfo=UTC)
    return row


@cache
def _reader(url: str) -> TraceReader:
    return TraceReader(url)


def trace_reader() -> TraceReader:
    """The reader of ``[agora] trace_store_url``, one per URL and process."""
    return _reader(default_store_url())
