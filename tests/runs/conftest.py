"""Run-record fixtures: the trace store's databases (SQLite and a real PostgreSQL) from tests/traces, and
a plan store holding one DAG's plan (also used by tests/cli/test_runs.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

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
