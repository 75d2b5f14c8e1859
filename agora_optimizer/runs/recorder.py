"""Record each DAG run that ends: Airflow's own record of it, the trace rows, the plan, the leases.

Two ways in, one function (:func:`record_run`):

- :data:`run_listener`, registered by the agora plugin: Airflow calls ``on_dag_run_success`` and
  ``on_dag_run_failed`` when a DAG run ends (in the scheduler, or the API server when a user marks
  a run). It records the run there and then, and never raises: a listener's exception is caught
  by Airflow, but a record is not worth a traceback in the scheduler's log (one line instead).
- ``agora runs record`` (:func:`record_finished_runs`), which (re)records the finished runs of
  Airflow's metadata database. The executor's trace rows and the backends' lease reports may land
  a few seconds after a run ends; recording again replaces the record with the fuller one.

Times and states come from Airflow's task instances (the last try of each; earlier tries from the
trace store); where each attempt ran from the trace row when there is one, else from the placement
the cluster policy wrote into ``executor_config`` (so a run is recorded in full even before the
executor's rows arrive). The plan is the one whose version the placements name, looked up in the
plan store; the catalog is ``[agora] catalog``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from airflow.listeners import hookimpl

from agora_optimizer.executor.jobs.placement import placement_node
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.instances import instance_id
from agora_optimizer.model.plan import Plan
from agora_optimizer.plans.store import PlanStore, PlanStoreError
from agora_optimizer.runs.build import build_run_record, run_plan_version
from agora_optimizer.runs.record import RunRecord
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.records import ATTEMPT_STATES, TaskAttempt, TraceRecordError

log = logging.getLogger(__name__)
FINISHED_RUN_STATES = ("success", "failed")


@dataclass(frozen=True)
class AirflowTry:
    """The last try of one task instance, as Airflow's metadata database has it."""

    task_id: str
    map_index: int
    try_number: int
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    queue: str
    placement: Mapping[str, Any]


def merged_attempts(
    dag_id: str, run_id: str, tries: Iterable[AirflowTry], rows: Iterable[TaskAttempt]
) -> list[TaskAttempt]:
    """Every attempt of the run: Airflow's last tries (its times and state, where they ran from the trace
    row or the placement) and the earlier tries the trace store holds. Tries that never started are left out."""
    stored = {(a.task_id, a.map_index, a.try_number): a for a in rows if (a.dag_id, a.run_id) == (dag_id, run_id)}
    attempts: list[TaskAttempt] = []
    last: dict[tuple[str, int], int] = {}
    for ti in tries:
        last[(ti.task_id, ti.map_index)] = ti.try_number
        if ti.started_at is None or ti.state not in ("success", "failed"):
            continue  # skipped, upstream failed, removed: no attempt ran
        row = stored.get((ti.task_id, ti.map_index, ti.try_number))
        state = "success" if ti.state == "success" else (row.state if row and row.state != "success" else "failed")
        queue_resource = ti.queue if ti.queue and ti.queue != "default" else ""
        base = row or TaskAttempt(dag_id=dag_id, task_id=ti.task_id, run_id=run_id)
        # A row that names where the try ran names its machine too: "" is no machine (a spot task's re-run on
        # its fallback, a task no plan placed), not a gap for the placement to fill.
        planned_machine = "" if row is not None and row.resource_type else str(ti.placement.get("machine") or "")
        try:
            attempts.append(
                replace(
                    base,
                    try_number=max(ti.try_number, 1),
                    map_index=ti.map_index,
                    state=state if state in ATTEMPT_STATES else "failed",
                    started_at=ti.started_at,
                    ended_at=ti.ended_at if ti.ended_at and ti.ended_at >= ti.started_at else ti.started_at,
                    runtime_s=None,
                    resource_type=base.resource_type or str(ti.placement.get("resource") or "") or queue_resource,
                    machine=base.machine or planned_machine,
                    plan_version=base.plan_version or str(ti.placement.get("plan_version") or ""),
                ).checked()
            )
        except TraceRecordError as exc:
            log.warning("agora: run record of %s/%s: try left out: %s", dag_id, run_id, exc)
    for (task_id, map_index, try_number), row in sorted(stored.items()):
        if try_number < last.get((task_id, map_index), 0):
            attempts.append(row)
    return attempts


def record_run(
    store: RunStore,
    dag_id: str,
    run_id: str,
    state: str,
    started_at: datetime | None,
    ended_at: datetime | None,
    tries: Iterable[AirflowTry],
    plans: PlanStore,
    resources: Mapping[str, Resource],
) -> RunRecord:
    """Build the run's record from Airflow's tries and what ``store`` holds, store it, and return it."""
    tries = list(tries)
    attempts = merged_attempts(dag_id, run_id, tries, store.attempts(dag_id=dag_id, run_id=run_id))
    never_ran = {instance_id(t.task_id, t.map_index): t.state or "none" for t in tries if t.started_at is None}
    version, _ = run_plan_version(attempts)
    plan: Plan | None = None
    try:
        found = plans.find(dag_id, version) if version else None
        plan = found.plan if found is not None else None
    except PlanStoreError as exc:
        log.warning("agora: run record of %s/%s: %s", dag_id, run_id, exc)
    record = build_run_record(
        dag_id,
        run_id,
        state,
        _aware(started_at),
        _aware(ended_at),
        attempts,
        plan,
        resources,
        lease_records=store.leases(dag_id, run_id),
        repairs=store.repairs(dag_id, run_id),
        never_ran=never_ran,
    )
    store.put(record)
    return record


# -- Airflow's side ------------------------------------------------------------------------------


def airflow_tries(session: Any, dag_id: str, run_id: str) -> list[AirflowTry]:
    """The run's task instances (their current, i.e. last, try) from Airflow's metadata database."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    query = select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
    tries = []
    for ti in session.scalars(query):
        map_index = -1 if ti.map_index is None else int(ti.map_index)
        placement = _dict(placement_node(_dict(_dict(ti.executor_config).get("agora")), map_index))
        tries.append(
            AirflowTry(
                task_id=ti.task_id,
                map_index=map_index,
                try_number=int(ti.try_number or 0),
                state=str(ti.state or ""),
                started_at=_aware(ti.start_date),
                ended_at=_aware(ti.end_date),
                queue=str(ti.queue or ""),
                placement=placement,
            )
        )
    return tries


def record_dag_run(
    dag_run: Any, session: Any, store: RunStore, plans: PlanStore, resources: Mapping[str, Resource]
) -> RunRecord:
    """Record one (ORM) DagRun, reading its task instances through ``session``."""
    return record_run(
        store,
        str(dag_run.dag_id),
        str(dag_run.run_id),
        str(getattr(dag_run.state, "value", dag_run.state)),
        dag_run.start_date,
        dag_run.end_date,
        airflow_tries(session, str(dag_run.dag_id), str(dag_run.run_id)),
        plans,
        resources,
    )


def record_finished_runs(
    store: RunStore, plans: PlanStore, resources: Mapping[str, Resource], dag_id: str | None = None
) -> list[RunRecord]:
    """(Re)record every finished DAG run in Airflow's metadata database, or those of ``dag_id``."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    records = []
    with create_session(scoped=False) as session:  # never a caller's scoped session (see RunListener._record)
        query = select(DagRun).where(DagRun.state.in_(FINISHED_RUN_STATES))
        if dag_id is not None:
            query = query.where(DagRun.dag_id == dag_id)
        for dag_run in session.scalars(query.order_by(DagRun.start_date)).all():
            records.append(record_dag_run(dag_run, session, store, plans, resources))
    return records


def configured_resources() -> dict[str, Resource]:
    """Every resource of ``[agora] catalog`` (none when it is empty)."""
    from agora_optimizer import settings
    from agora_optimizer.executor.resources import load_resources

    catalogs = settings.get("catalog")
    return load_resources(catalogs) if catalogs else {}


class RunListener:
    """Records each DAG run when it ends (see the module's docstring)."""

    def __init__(self, store_url: str | None = None) -> None:
        self.store_url = store_url

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        self._record(dag_run)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        self._record(dag_run)

    def _record(self, dag_run: Any) -> None:
        try:
            from airflow.utils.session import create_session

            from agora_optimizer.plans.store import default_plan_store
            from agora_optimizer.traces.store import default_store_url

            # A session of its own (not scoped: the scoped one is the scheduler's, which closing would detach),
            # so that a failed read cannot abort the scheduler's transaction either.
            with RunStore(self.store_url or default_store_url()) as store, create_session(scoped=False) as session:
                record = record_dag_run(dag_run, session, store, default_plan_store(), configured_resources())
            log.info("agora: recorded run %s/%s (%s)", record.dag_id, record.run_id, _summary(record))
        except Exception as exc:
            log.warning(
                "agora: cannot record DAG run %s: %s: %s", _describe(dag_run), type(exc).__name__, _first_line(exc)
            )


def _summary(record: RunRecord) -> str:
    makespan = "-" if record.actual_makespan_s is None else f"{record.actual_makespan_s:.1f} s"
    planned = f"plan {record.plan_version}" if record.planned else "unplanned"
    return f"{record.state}, {planned}, makespan {makespan}, cost {record.actual_cost_usd:.4f} USD"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _aware(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def _describe(dag_run: Any) -> str:
    try:
        return f"{dag_run.dag_id}/{dag_run.run_id}"
    except Exception:
        return repr(dag_run)[:200]


run_listener = RunListener()
