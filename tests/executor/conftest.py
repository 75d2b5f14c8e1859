"""Airflow in this process (the executor tests build AgoraExecutor itself): configured before its first import; and
Airflow's own metadata tables, in SQLite and PostgreSQL, for the statements the executor runs on them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.airflow_home import private_airflow_home
from tests.traces.conftest import fresh_postgres_url, postgres_server, postgres_url

private_airflow_home("agora-executor-tests-")
os.environ.setdefault(
    "AIRFLOW__API_AUTH__JWT_SECRET", "agora-executor-tests-secret-of-at-least-64-bytes-for-hs512-0123456789abcdef"
)

RUN_AFTER = datetime(2026, 12, 3, 7, 0, tzinfo=UTC)  # run r1 of DAG unit in the task_instances fixture

__all__ = ["fresh_postgres_url", "postgres_server", "postgres_url"]  # the task_instances fixture's PostgreSQL


@dataclass
class TaskInstanceTable:
    """Airflow's own ``task_instance`` table (and the ``dag_run`` it joins, with run ``r1`` of DAG ``unit`` after
    :data:`RUN_AFTER`) in an in-memory SQLite that Airflow's ``Session`` opens."""

    engine: Any
    table: Any

    def add(self, task_id: str, state: str | None, *, ti_id: Any = None, try_number: int = 1, **columns: Any) -> Any:
        """A try of task ``task_id`` of run r1 in ``state`` (scheduled from a spot node), with ``columns`` besides;
        returns its id (``ti_id``, or a new one)."""
        import uuid

        ti_id = ti_id or uuid.uuid4()
        row = {
            "id": ti_id, "task_id": task_id, "dag_id": "unit", "run_id": "r1", "map_index": -1,
            "try_number": try_number, "state": state, "pool": "default_pool", "pool_slots": 1, "queue": "default",
            "priority_weight": 1, "max_tries": 1, "hostname": "spot-node", "unixname": "",
            "dag_version_id": uuid.uuid4(), **columns,
        }  # fmt: skip
        with self.engine.begin() as connection:
            connection.execute(self.table.insert().values(**{k: v for k, v in row.items() if k in self.table.c}))
        return ti_id

    def column(self, name: str) -> dict[str, Any]:
        """``name`` of every row, by task id."""
        from sqlalchemy import select

        with self.engine.begin() as connection:
            return dict(connection.execute(select(self.table.c.task_id, self.table.c[name])).all())


@pytest.fixture
def task_instances(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[TaskInstanceTable]:
    """The statements the executor runs on the scheduler's metadata database meet Airflow's real tables, in
    SQLite, or in PostgreSQL (a production scheduler's database) where a test parametrizes this fixture
    indirectly with "postgresql". The tables are created without their foreign keys: the rows they name
    (DAG versions, log templates) do not matter here."""
    import sqlalchemy as sa
    from airflow import settings as airflow_settings
    from airflow.models import import_all_models
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy.orm import scoped_session, sessionmaker

    import_all_models()  # the table's foreign keys name the others
    if getattr(request, "param", "sqlite") == "sqlite":
        engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool)
    else:
        engine = sa.create_engine(request.getfixturevalue("fresh_postgres_url"))
    with engine.begin() as connection:
        for table in (TaskInstance.__table__, DagRun.__table__):
            connection.execute(sa.schema.CreateTable(table, include_foreign_key_constraints=[]))
        run = {"dag_id": "unit", "run_id": "r1", "run_type": "manual", "run_after": RUN_AFTER, "log_template_id": None}
        connection.execute(DagRun.__table__.insert().values(**run))
    monkeypatch.setattr(airflow_settings, "Session", scoped_session(sessionmaker(bind=engine)))
    yield TaskInstanceTable(engine, TaskInstance.__table__)
    airflow_settings.Session.remove()
    engine.dispose()


@contextmanager
def settings_session() -> Iterator[Any]:
    """A session of Airflow's ``Session`` factory (the table's database), closed after use."""
    from airflow import settings as airflow_settings

    with airflow_settings.Session.session_factory() as session:
        yield session
