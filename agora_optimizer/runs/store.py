"""Run records, reported leases and repairs, in the trace store's database (SQLite or PostgreSQL).

:class:`RunStore` is a :class:`~agora_optimizer.traces.store.TraceStore` (same URL, same schema
versioning, same locking; the run tables come with schema version 3) with the run methods added,
so the recorder reads a run's attempts and writes its record through one connection pool. Its API,
for the CLI, the UI and the executor:

- :meth:`RunStore.put` records a run (idempotent: a run recorded again replaces its record's run
  row, task rows and priced leases, in one transaction);
- :meth:`RunStore.get` and :meth:`RunStore.list` read records back (with their repairs), and
  :meth:`RunStore.current` a run still going (its repairs and forecast so far) too;
  :meth:`RunStore.plan_versions` the plans a DAG's runs name (which the plan history keeps);
- :meth:`RunStore.add_leases` and :meth:`RunStore.leases`: the allocations backends report
  (:class:`~agora_optimizer.runs.lease_record.LeaseRecord`), upserted by their own key;
- :meth:`RunStore.add_repair` and :meth:`RunStore.repairs`: what the executor repaired during a
  run, appended; never replaced by re-recording.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair, RunLease, RunRecord, RunTask, in_progress
from agora_optimizer.traces.run_tables import (
    lease_records_table,
    repairs_table,
    run_leases_table,
    run_tasks_table,
    runs_table,
)
from agora_optimizer.traces.store import TraceStore, attempts_table

DEFAULT_LIST_LIMIT = 50
_RUN_FIELDS = (
    "state",
    "planned",
    "plan_version",
    "started_at",
    "ended_at",
    "planned_makespan_s",
    "actual_makespan_s",
    "planned_cost_usd",
    "actual_cost_usd",
    "planned_expected_cost_usd",
)
_LEASE_KEY = ("dag_id", "run_id", "backend", "machine", "external_id", "started_at")


class RunStore(TraceStore):
    """``RunStore(url)``: the trace store of ``url`` with its run records (see the module's docstring)."""

    def __enter__(self) -> RunStore:
        return self

    # -- run records -----------------------------------------------------------------------------

    def put(self, record: RunRecord) -> None:
        """Record the run, replacing any earlier record of it (its repairs are kept, whatever ``record`` holds)."""
        key = {"dag_id": record.dag_id, "run_id": record.run_id}
        row = {
            **key,
            **{name: getattr(record, name) for name in _RUN_FIELDS},
            "started_at": _to_utc(record.started_at),
            "ended_at": _to_utc(record.ended_at),
            "notes": json.dumps(list(record.notes)),
            "recorded_at": datetime.now(UTC),
        }
        with self._write() as connection:
            connection.execute(_upsert(connection, runs_table, ("dag_id", "run_id")), [row])
            for table in (run_tasks_table, run_leases_table):
                connection.execute(sa.delete(table).where(*_of_run(table, record.dag_id, record.run_id)))
            if record.tasks:
                connection.execute(sa.insert(run_tasks_table), [{**key, **asdict(task)} for task in record.tasks])
            if record.leases:
                rows = [{**key, "position": i, **asdict(lease)} for i, lease in enumerate(record.leases)]
                connection.execute(sa.insert(run_leases_table), rows)

    def get(self, dag_id: str, run_id: str) -> RunRecord | None:
        """The run's record, or None if it was never recorded."""
        found = self._records(runs_table.c.dag_id == dag_id, runs_table.c.run_id == run_id)
        return found[0] if found else None

    def current(self, dag_id: str, run_id: str) -> RunRecord | None:
        """The run's record; for a run not recorded yet that the executor repaired, what is known so far
        (:func:`~agora_optimizer.runs.record.in_progress`: its repairs and forecast); else None."""
        found = self.get(dag_id, run_id)
        if found is not None:
            return found
        repairs = self.repairs(dag_id, run_id)
        return in_progress(dag_id, run_id, tuple(repairs)) if repairs else None

    def plan_versions(self, dag_id: str) -> set[str]:
        """The plan versions the DAG's recorded runs name, and its traced attempts (of runs still going too)."""
        with self._read() as connection:
            named = {
                version
                for table in (runs_table, attempts_table)
                for version in connection.execute(
                    sa.select(table.c.plan_version).where(table.c.dag_id == dag_id).distinct()
                ).scalars()
            }
        return named - {""}

    # -- what others report ----------------------------------------------------------------------

    def add_leases(self, records: Iterable[LeaseRecord]) -> int:
        """Store reported leases (the same allocation reported again updates its row); how many were written."""
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        for record in records:
            row = asdict(record)
            row["started_at"], row["ended_at"] = _to_utc(record.started_at), _to_utc(record.ended_at)
            rows[tuple(row[name] for name in _LEASE_KEY)] = row
        if rows:
            with self._write() as connection:
                statement = _upsert(connection, lease_records_table, _LEASE_KEY)
                connection.execute(statement, [rows[key] for key in sorted(rows)])
        return len(rows)

    def leases(self, dag_id: str, run_id: str) -> builtins.list[LeaseRecord]:
        """The leases backends reported for the run, by start time."""
        table = lease_records_table
        query = sa.select(table).where(*_of_run(table, dag_id, run_id)).order_by(table.c.started_at, table.c.machine)
        with self._read() as connection:
            rows = connection.execute(query).mappings().all()
        return [
            LeaseRecord(
                **{name: row[name] for name in ("dag_id", "run_id", "machine", "resource", "backend", "external_id")},
                started_at=_from_db(row["started_at"]),
                ended_at=_from_db(row["ended_at"]),
                source=row["source"],
            )
            for row in rows
        ]

    def add_repair(self, dag_id: str, run_id: str, repair: Repair) -> None:
        """Append one repair to the run (the run need not be recorded yet: its record will show it)."""
        row = {
            "dag_id": dag_id,
            "run_id": run_id,
            "at_s": float(repair.at_s),
            "reason": repair.reason,
            "tasks": json.dumps(list(repair.tasks)),
            "detail": repair.detail,
            "forecast_end_s": repair.forecast_end_s,
            "forecast_cost_usd": repair.forecast_cost_usd,
            "forecast_end_at": _to_utc(repair.forecast_end_at),
            "recorded_at": datetime.now(UTC),
        }
        with self._write() as connection:
            connection.execute(sa.insert(repairs_table), [row])

    def repairs(self, dag_id: str, run_id: str) -> builtins.list[Repair]:
        """The run's repairs, by time."""
        return self._repairs([(dag_id, run_id)]).get((dag_id, run_id), [])

    # -- reading ---------------------------------------------------------------------------------

    def list(self, dag_id: str | None = None, limit: int = DEFAULT_LIST_LIMIT) -> builtins.list[RunRecord]:
        """Recorded runs, newest first (by the DAG run's start), of one DAG or all; at most ``limit``."""
        conditions = [runs_table.c.dag_id == dag_id] if dag_id is not None else []
        return self._records(*conditions, limit=limit)

    def _records(self, *conditions: Any, limit: int | None = None) -> builtins.list[RunRecord]:
        c = runs_table.c
        query = (
            sa.select(runs_table)
            .where(*conditions)
            .order_by(c.started_at.is_(None), c.started_at.desc(), c.dag_id, c.run_id.desc())
        )
        if limit is not None:
            query = query.limit(max(0, limit))
        with self._read() as connection:
            runs = connection.execute(query).mappings().all()
            keys = [(row["dag_id"], row["run_id"]) for row in runs]
            tasks = _grouped(connection, run_tasks_table, keys, ("task_id", "map_index"))
            leases = _grouped(connection, run_leases_table, keys, ("position",))
        repairs = self._repairs(keys)
        return [
            RunRecord(
                dag_id=row["dag_id"],
                run_id=row["run_id"],
                **{name: row[name] for name in _RUN_FIELDS if not name.endswith("_at")},
                started_at=_from_db(row["started_at"]),
                ended_at=_from_db(row["ended_at"]),
                tasks=tuple(RunTask(**_fields(r, RunTask)) for r in tasks.get(key, [])),
                leases=tuple(RunLease(**_fields(r, RunLease)) for r in leases.get(key, [])),
                repairs=tuple(repairs.get(key, [])),
                notes=tuple(json.loads(row["notes"])),
            )
            for row, key in zip(runs, keys, strict=True)
        ]

    def _repairs(self, keys: builtins.list[tuple[str, str]]) -> dict[tuple[str, str], builtins.list[Repair]]:
        if not keys:
            return {}
        table = repairs_table
        query = (
            sa.select(table)
            .where(sa.tuple_(table.c.dag_id, table.c.run_id).in_(keys))
            .order_by(table.c.at_s, table.c.id)
        )
        with self._read() as connection:
            rows = connection.execute(query).mappings().all()
        found: dict[tuple[str, str], builtins.list[Repair]] = {}
        for row in rows:
            repair = Repair(
                row["at_s"],
                row["reason"],
                tuple(json.loads(row["tasks"])),
                row["detail"],
                row["forecast_end_s"],
                row["forecast_cost_usd"],
                _from_db(row["forecast_end_at"]),
            )
            found.setdefault((row["dag_id"], row["run_id"]), []).append(repair)
        return found


def _of_run(table: sa.Table, dag_id: str, run_id: str) -> tuple[Any, ...]:
    return (table.c.dag_id == dag_id, table.c.run_id == run_id)


def _upsert(connection: Connection, table: sa.Table, key: tuple[str, ...]) -> Any:
    """``INSERT ... ON CONFLICT (key) DO UPDATE`` of every other column, on either database."""
    insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    statement = insert(table)
    updated = {c.name: statement.excluded[c.name] for c in table.columns if c.name not in key}
    return statement.on_conflict_do_update(index_elements=list(key), set_=updated)


def _grouped(
    connection: Connection, table: sa.Table, keys: builtins.list[tuple[str, str]], order: tuple[str, ...]
) -> dict[tuple[str, str], builtins.list[Any]]:
    """The rows of ``table`` for each of the runs ``keys``, in ``order``."""
    if not keys:
        return {}
    query = (
        sa.select(table)
        .where(sa.tuple_(table.c.dag_id, table.c.run_id).in_(keys))
        .order_by(*(table.c[name] for name in order))
    )
    found: dict[tuple[str, str], builtins.list[Any]] = {}
    for row in connection.execute(query).mappings().all():
        found.setdefault((row["dag_id"], row["run_id"]), []).append(row)
    return found


def _fields(row: Any, cls: type) -> dict[str, Any]:
    return {name: row[name] for name in cls.__dataclass_fields__}  # type: ignore[attr-defined]


def _to_utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def _from_db(value: datetime | None) -> Any:
    """A stored time as aware UTC (SQLite keeps no zone: the store writes UTC, so a naive value is UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
