"""The run tables of the trace store's database (schema versions 3 to 5, :mod:`agora_optimizer.traces.store`).

They live beside the store because the store owns the database's schema: its migrations create
every table, whatever reads it; :class:`agora_optimizer.runs.store.RunStore` reads and writes them.

- ``agora_runs``: one row per DAG run record, keyed by (dag_id, run_id); notes as a JSON list;
- ``agora_run_tasks``: the record's task table, one row per task instance;
- ``agora_run_leases``: the record's priced leases (reported or derived), in their order;
- ``agora_lease_records``: the allocations backends reported (:class:`LeaseRecord`), as reported;
- ``agora_run_repairs``: what the executor repaired, appended one by one.

A record's own rows (run, tasks, priced leases) are replaced together when it is recorded again;
reported leases and repairs are written by others (backends, the executor's repair logic) and
are never touched by re-recording. :func:`create_tables_of_3` is the migration's frozen copy:
a later version changes these tables with a migration of its own (version 4:
:func:`add_expected_cost_of_4`, the plan's expected cost with spot interruptions; version 5:
:func:`add_forecast_of_5`, each repair's forecast of the run).
"""

from __future__ import annotations

import sqlalchemy as sa


def _run_key() -> list[sa.Column[str]]:
    return [sa.Column("dag_id", sa.String, primary_key=True), sa.Column("run_id", sa.String, primary_key=True)]


ADDED_IN_4 = "planned_expected_cost_usd"
ADDED_IN_5 = {"forecast_end_s": "FLOAT", "forecast_cost_usd": "FLOAT", "forecast_end_at": "TIMESTAMP"}


def _tables(metadata: sa.MetaData, version: int = 5) -> tuple[sa.Table, ...]:
    """The run tables as in schema version ``version`` (new objects on ``metadata`` at each call)."""
    runs = sa.Table(
        "agora_runs",
        metadata,
        *_run_key(),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("planned", sa.Boolean, nullable=False),
        sa.Column("plan_version", sa.String, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("planned_makespan_s", sa.Float),
        sa.Column("actual_makespan_s", sa.Float),
        sa.Column("planned_cost_usd", sa.Float),
        sa.Column("actual_cost_usd", sa.Float, nullable=False),
        sa.Column("notes", sa.Text, nullable=False),  # a JSON list of strings
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("agora_runs_by_start", "started_at"),
        *([sa.Column(ADDED_IN_4, sa.Float)] if version >= 4 else []),  # None: no spot figures in the plan
    )
    tasks = sa.Table(
        "agora_run_tasks",
        metadata,
        *_run_key(),
        sa.Column("task_id", sa.String, primary_key=True),
        sa.Column("map_index", sa.Integer, primary_key=True),
        sa.Column("try_number", sa.Integer, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("planned_resource", sa.String, nullable=False),
        sa.Column("planned_machine", sa.String, nullable=False),
        sa.Column("planned_start_s", sa.Float),
        sa.Column("planned_end_s", sa.Float),
        sa.Column("actual_resource", sa.String, nullable=False),
        sa.Column("actual_machine", sa.String, nullable=False),
        sa.Column("actual_start_s", sa.Float),
        sa.Column("actual_end_s", sa.Float),
    )
    leases = sa.Table(
        "agora_run_leases",
        metadata,
        *_run_key(),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("machine", sa.String, nullable=False),
        sa.Column("resource", sa.String, nullable=False),
        sa.Column("start_s", sa.Float, nullable=False),
        sa.Column("end_s", sa.Float, nullable=False),
        sa.Column("cost_usd", sa.Float, nullable=False),
        sa.Column("source", sa.String, nullable=False),
        sa.Column("external_id", sa.String, nullable=False),
    )
    lease_records = sa.Table(
        "agora_lease_records",
        metadata,
        *_run_key(),
        sa.Column("backend", sa.String, primary_key=True),
        sa.Column("machine", sa.String, primary_key=True),
        sa.Column("external_id", sa.String, primary_key=True),
        sa.Column("started_at", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("resource", sa.String, nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.String, nullable=False),
    )
    repairs = sa.Table(
        "agora_run_repairs",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("dag_id", sa.String, nullable=False),
        sa.Column("run_id", sa.String, nullable=False),
        sa.Column("at_s", sa.Float, nullable=False),
        sa.Column("reason", sa.String, nullable=False),
        sa.Column("tasks", sa.Text, nullable=False),  # a JSON list of task ids
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("agora_run_repairs_by_run", "dag_id", "run_id"),
        *(  # None: a repair that re-planned nothing, or one recorded before
            [
                sa.Column("forecast_end_s", sa.Float),
                sa.Column("forecast_cost_usd", sa.Float),
                sa.Column("forecast_end_at", sa.DateTime(timezone=True)),
            ]
            if version >= 5
            else []
        ),
    )
    return runs, tasks, leases, lease_records, repairs


metadata = sa.MetaData()
runs_table, run_tasks_table, run_leases_table, lease_records_table, repairs_table = _tables(metadata)


def create_tables_of_3(connection: sa.Connection) -> None:
    """Migration to schema version 3: the run tables (created if absent)."""
    frozen = sa.MetaData()
    _tables(frozen, version=3)
    frozen.create_all(connection, checkfirst=True)


def add_expected_cost_of_4(connection: sa.Connection) -> None:
    """Migration to schema version 4: each run record's planned expected cost (None for the runs before)."""
    present = {column["name"] for column in sa.inspect(connection).get_columns(runs_table.name)}
    if ADDED_IN_4 not in present:
        connection.exec_driver_sql(f"ALTER TABLE {runs_table.name} ADD COLUMN {ADDED_IN_4} FLOAT")


def add_forecast_of_5(connection: sa.Connection) -> None:
    """Migration to schema version 5: each repair's forecast of its run (None for the repairs before)."""
    present = {column["name"] for column in sa.inspect(connection).get_columns(repairs_table.name)}
    for name, kind in ADDED_IN_5.items():
        if name not in present:
            if kind == "TIMESTAMP" and connection.dialect.name == "postgresql":
                kind = "TIMESTAMP WITH TIME ZONE"
            connection.exec_driver_sql(f"ALTER TABLE {repairs_table.name} ADD COLUMN {name} {kind}")
