"""Run-record fixtures: the trace store's databases (SQLite and a real PostgreSQL) from tests/traces, a plan
store holding one DAG's plan (also used by tests/cli/test_runs.py), and Airflow's own metadata tables in a
SQLite file as this process's database (``airflow_db``: the run listener reads runs and tries there)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore, plan_version
from tests.traces.conftest import fresh_postgres_url, postgres_server, postgres_url, store_url

__all__ = ["fresh_postgres_url", "postgres_server", "postgres_url", "store_url"]

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GIB = 2**30


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def planned_etl(tmp_path: Path) -> tuple[str, PlanStore, str]:
    """A store URL, a plan store with the DAG's plan, and that plan's version."""
    plans = PlanStore(tmp_path / "plans")
    plan = Plan(
        "etl", "local.yaml", Objective(), 60.0, 0.0,
        (Assignment("extract", "local-small", "local-small#0", 0.0, 20.0, 1, GIB),
         Assignment("load", "local-large", "local-large#0", 20.0, 60.0, 1, GIB)),
        SolverInfo("test", "heuristic", None, 0.0), "2026-03-01T00:00:00Z",
    )  # fmt: skip
    stored = plans.save("etl", plan)
    return f"sqlite:///{tmp_path / 'traces.db'}", plans, plan_version(stored.path.read_bytes())


def placement(version: str, resource: str) -> dict[str, str]:
    return {"resource": resource, "machine": f"{resource}#0", "plan_version": version}


@dataclass
class AirflowDatabase:
    """Airflow's own metadata tables in a SQLite file, as this process's database (``airflow_db``)."""

    engine: sa.Engine

    def add_run(self, dag_id: str, run_id: str, state: str, tries: list[dict[str, Any]]) -> None:
        """A DAG run (started at ``T0``, ended at its last try's end) and its task instances' last tries."""
        from airflow.models.dagrun import DagRun
        from airflow.models.taskinstance import TaskInstance

        ended = max(t["end_date"] for t in tries)
        run = {"dag_id": dag_id, "run_id": run_id, "run_type": "manual", "state": state, "start_date": T0,
               "end_date": ended if state in ("success", "failed") else None, "run_after": T0}  # fmt: skip
        with self.engine.begin() as connection:
            connection.execute(sa.insert(DagRun.__table__).values(**run))
            for ti in tries:
                row = {"id": uuid.uuid4(), "dag_id": dag_id, "run_id": run_id, "map_index": -1, "pool": "default_pool",
                       "pool_slots": 1, "queue": "default", "priority_weight": 1, "max_tries": 0,
                       "dag_version_id": uuid.uuid4(), **ti}  # fmt: skip
                connection.execute(sa.insert(TaskInstance.__table__).values(**row))

    def run_end(self, dag_id: str, run_id: str) -> datetime | None:
        """The run's end as committed (aware, UTC)."""
        from airflow.models.dagrun import DagRun

        table = DagRun.__table__
        with self.engine.connect() as connection:
            query = sa.select(table.c.end_date).where(table.c.dag_id == dag_id, table.c.run_id == run_id)
            ended = connection.execute(query).scalar_one()
        return None if ended is None else ended.replace(tzinfo=UTC) if ended.tzinfo is None else ended


@pytest.fixture
def airflow_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AirflowDatabase]:
    """Airflow's metadata tables (all of them, empty) in ``tmp_path/airflow.db``, set as Airflow's sessions."""
    from airflow import settings as airflow_settings
    from airflow.models import import_all_models
    from airflow.models.base import Base
    from sqlalchemy.orm import scoped_session, sessionmaker

    import_all_models()
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'airflow.db'}", connect_args={"check_same_thread": False})
    Base.metadata.create_all(engine)
    unscoped = sessionmaker(bind=engine, expire_on_commit=False)
    monkeypatch.setattr(airflow_settings, "NonScopedSession", unscoped)
    monkeypatch.setattr(airflow_settings, "Session", scoped_session(unscoped))
    try:
        yield AirflowDatabase(engine)
    finally:
        engine.dispose()
