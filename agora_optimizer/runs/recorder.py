"""Record each DAG run that ends: Airflow's own record of it, the trace rows, the plan, the leases.

Two ways in, one function (:func:`record_run`):

- :data:`run_listener`, registered by the agora plugin: Airflow calls ``on_dag_run_success`` and
  ``on_dag_run_failed`` when a DAG run ends (in the scheduler's loop, before it commits the end, or
  in the API server when a user marks a run). The listener only hands the run's key to the run
  recorder's thread (:mod:`agora_optimizer.runs.record_worker`) and returns: the scheduler never
  waits on agora. The thread reads the run from Airflow's database once the end is committed
  (:func:`record_ended_run`) and records it through one store kept open, with a short busy timeout;
  a run it cannot record now waits on disk (:mod:`agora_optimizer.runs.pending`) and is tried again.
  Nothing here raises into Airflow: a problem is one line in the log.
- ``agora runs record`` (:func:`record_finished_runs`), which (re)records the finished runs of
  Airflow's metadata database (also those a killed scheduler held in memory). The executor's trace
  rows and the backends' lease reports may land a few seconds after a run ends; recording again
  replaces the record with the fuller one.

Times and states come from Airflow's task instances (the last try of each; earlier tries from the
trace store); where each attempt ran from the trace row when there is one, else from the placement
the cluster policy wrote into ``executor_config`` (so a run is recorded in full even before the
executor's rows arrive). The plan is the one whose version the placements name, looked up in the
plan store; the catalog is ``[agora] catalog``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from airflow.listeners import hookimpl

from agora_optimizer.errors import first_line
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.instances import instance_id
from agora_optimizer.model.placement import placement_node
from agora_optimizer.model.plan import Plan
from agora_optimizer.model.task_hints import agora_config
from agora_optimizer.plans.store import PlanStore, PlanStoreError
from agora_optimizer.runs.build import build_run_record, run_plan_version
from agora_optimizer.runs.pending import EndedRun
from agora_optimizer.runs.record import RunRecord
from agora_optimizer.runs.record_worker import Outcome, RecordWorker
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
        placement = _dict(placement_node(agora_config(ti.executor_config), map_index))
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
        _run_state(dag_run),
        dag_run.start_date,
        dag_run.end_date,
        airflow_tries(session, str(dag_run.dag_id), str(dag_run.run_id)),
        plans,
        resources,
    )


def record_ended_run(
    store: RunStore, dag_id: str, run_id: str, plans: PlanStore, resources: Mapping[str, Resource]
) -> RunRecord | Literal["unfinished", "gone"]:
    """Record the run as Airflow's metadata database has it: "unfinished" while the database does not show
    it ended (the scheduler commits a run's end after its listeners return), "gone" if it is not there.

    Airflow's database is read in a short session of its own, closed before the trace store is: a
    reader held open on a SQLite metadata database would hold up the scheduler's next commit.
    """
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session(scoped=False) as session:  # not the scoped one: the scheduler's, in its process
        query = select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
        dag_run = session.scalars(query).one_or_none()
        if dag_run is None:
            return "gone"
        state = _run_state(dag_run)
        if state not in FINISHED_RUN_STATES:
            return "unfinished"
        started_at, ended_at = dag_run.start_date, dag_run.end_date
        tries = airflow_tries(session, dag_id, run_id)
    return record_run(store, dag_id, run_id, state, started_at, ended_at, tries, plans, resources)


def record_finished_runs(
    store: RunStore, plans: PlanStore, resources: Mapping[str, Resource], dag_id: str | None = None
) -> list[RunRecord]:
    """(Re)record every finished DAG run in Airflow's metadata database, or those of ``dag_id``."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    records = []
    with create_session(scoped=False) as session:  # never a caller's scoped session (closing it would detach theirs)
        query = select(DagRun).where(DagRun.state.in_(FINISHED_RUN_STATES))
        if dag_id is not None:
            query = query.where(DagRun.dag_id == dag_id)
        for dag_run in session.scalars(query.order_by(DagRun.start_date)).all():
            records.append(record_dag_run(dag_run, session, store, plans, resources))
    return records


class RunListener:
    """Hands each DAG run that ends to the run recorder's thread (see the module's docstring).

    The thread (:class:`~agora_optimizer.runs.record_worker.RecordWorker`) starts with the first run
    that ends in this process, and stops when the scheduler does (``before_stopping``) or the process
    exits; a forked child starts its own.
    """

    def __init__(self, store_url: str | None = None) -> None:
        self.store_url = store_url
        self._worker: RecordWorker | None = None
        self._worker_pid = 0
        self._lock = threading.Lock()  # the API server calls listeners from several threads

    @hookimpl
    def on_dag_run_success(self, dag_run: Any, msg: str) -> None:
        self._submit(dag_run)

    @hookimpl
    def on_dag_run_failed(self, dag_run: Any, msg: str) -> None:
        self._submit(dag_run)

    @hookimpl
    def before_stopping(self, component: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the recorder's thread (runs not recorded yet wait on disk for the next one)."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None and self._worker_pid == os.getpid():
            worker.stop()

    def _submit(self, dag_run: Any) -> None:
        try:  # reads two attributes the scheduler has loaded: no I/O in the scheduler's loop
            run = EndedRun(str(dag_run.dag_id), str(dag_run.run_id))
            self._running_worker().submit(run)
        except Exception as exc:
            log.warning(
                "agora: cannot record DAG run %s: %s: %s", _describe(dag_run), type(exc).__name__, first_line(exc)
            )

    def _running_worker(self) -> RecordWorker:
        with self._lock:
            if self._worker is None or self._worker_pid != os.getpid():
                recording = _Recording(self.store_url)
                self._worker = RecordWorker(recording.record, recording.close)
                self._worker_pid = os.getpid()
                atexit.register(self._worker.stop)
            return self._worker


class _Recording:
    """What the recorder's thread does with each run: records it through one store, opened at the first
    run and kept open (with :data:`~agora_optimizer.traces.store.HOOK_BUSY_TIMEOUT_S`)."""

    def __init__(self, store_url: str | None) -> None:
        self.store_url = store_url
        self._store: RunStore | None = None

    def record(self, run: EndedRun) -> Outcome:
        from agora_optimizer import settings
        from agora_optimizer.plans.store import default_plan_store
        from agora_optimizer.traces.store import HOOK_BUSY_TIMEOUT_S, default_store_url

        if self._store is None:
            self._store = RunStore(self.store_url or default_store_url(), busy_timeout_s=HOOK_BUSY_TIMEOUT_S)
        resources = settings.configured_catalog().by_name
        found = record_ended_run(self._store, run.dag_id, run.run_id, default_plan_store(), resources)
        if isinstance(found, RunRecord):
            log.info("agora: recorded run %s/%s (%s)", found.dag_id, found.run_id, _summary(found))
            return "recorded"
        return found

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def _summary(record: RunRecord) -> str:
    makespan = "-" if record.actual_makespan_s is None else f"{record.actual_makespan_s:.1f} s"
    planned = f"plan {record.plan_version}" if record.planned else "unplanned"
    return f"{record.state}, {planned}, makespan {makespan}, cost {record.actual_cost_usd:.4f} USD"


def _run_state(dag_run: Any) -> str:
    return str(getattr(dag_run.state, "value", dag_run.state))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _aware(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _describe(dag_run: Any) -> str:
    try:
        return f"{dag_run.dag_id}/{dag_run.run_id}"
    except Exception:
        return repr(dag_run)[:200]


run_listener = RunListener()
