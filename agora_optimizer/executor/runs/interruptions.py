"""Spot capacity at run time: a job whose machine the provider took back re-runs on its type's fallback.

A backend says a job was *interrupted* (``JobStatus.interrupted``: a Spot Instance reclaimed under a
Batch job, a SLURM preemption) when the task did not fail: its capacity vanished. For a job on a spot
type (``spot: true`` in the catalog) the executor then re-runs the same try on the type's ``fallback``
(on-demand capacity, never interrupted) without reporting anything to Airflow
(:class:`Interruptions`): Airflow sees one try, and its one success or failure on the fallback.

Re-running the same try needs its task instance QUEUED again in Airflow's metadata database: the
interrupted task process had set it RUNNING, and the Execution API refuses to start a RUNNING try
from another host (HTTP 409, ``invalid_state``). :func:`requeue_task_instance` does that, only for
that try and only from RUNNING or QUEUED. Where it cannot (the scheduler has already failed the try as
a zombie, an adopted job whose workload is gone, no database), the interruption is reported to Airflow
as the try's failure, and Airflow's next try of the task runs on the fallback instead.

At most :data:`MAX_RERUNS_ON_FALLBACK` re-run per task instance and DAG run: the fallback is on
demand, and a job interrupted there (a backend that says so of on-demand capacity) fails as any job.
Each interruption is recorded in the run's repairs (:class:`~agora_optimizer.runs.record.Repair`,
the reason naming the spot type and the backend's words, the detail the fallback); the re-run's trace
row names the fallback type. The interrupted job held its spot machine and was billed for it: where no
planned machine's lease covers it (a backend reports those itself), it is reported as a lease of its
own (:data:`INTERRUPTED_SOURCE`), so that the run record's actual cost counts it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.executor_base import ExecutorBase, clock_now
from agora_optimizer.executor.jobs.placement import Placement
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.executor.lifecycle import Accepted, Job
from agora_optimizer.executor.runs.repair import clock_at
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair

MAX_RERUNS_ON_FALLBACK = 1  # per task instance of a run: the fallback is on demand
INTERRUPTED_SOURCE = "interrupted job"  # the lease source of a same-try re-run's interrupted spot job


def fallback_for(resource: Resource | None, resources: Mapping[str, Resource]) -> Resource | None:
    """The on-demand type a task interrupted on ``resource`` re-runs on; None if it is not spot capacity."""
    if resource is None or not resource.spot or not resource.fallback:
        return None
    return resources.get(resource.fallback)


def interruption_repair(record: JobRecord, status: JobStatus, fallback: str, at_s: float, rerun: bool) -> Repair:
    """The run record's entry for one interruption: which task left which spot type, why, and for what."""
    ran = ""
    if status.started_at is not None and status.ended_at is not None:
        ran = f", ran {status.started_at.isoformat()} to {status.ended_at.isoformat()}"
    where = f" on host {status.host}" if status.host else ""
    machine = f" (planned machine {record.machine})" if record.machine else ""
    then = (
        f"re-run on {fallback} (on demand), the same try {record.try_number}"
        if rerun
        else f"reported to Airflow as try {record.try_number}'s failure; its next try runs on {fallback} (on demand)"
    )
    return Repair(
        round(at_s, 3),
        f"task {record.plan_task} interrupted on spot {record.resource}: {status.reason or 'capacity taken back'}",
        (record.plan_task,),
        f"{record.backend} job {record.external_id}{where}{machine}{ran}; {then}",
    )


def interrupted_lease(record: JobRecord, status: JobStatus) -> LeaseRecord | None:
    """The spot time an interrupted job of no planned machine held, as a lease of the run (None: the backend
    gave no times, or the job ran on a planned machine, whose lease the backend reports whole)."""
    if record.machine or status.started_at is None or status.ended_at is None:
        return None
    return LeaseRecord(
        dag_id=record.dag_id,
        run_id=record.run_id,
        machine="",
        resource=record.resource,
        backend=record.backend,
        external_id=record.external_id,
        started_at=status.started_at,
        ended_at=max(status.ended_at, status.started_at),
        source=INTERRUPTED_SOURCE,
    )


def requeue_task_instance(ti_id: Any, try_number: int) -> str:
    """Put try ``try_number`` of the task instance ``ti_id`` back to QUEUED in Airflow's metadata database,
    from RUNNING or QUEUED only; '' when done, else why not (for the log).

    ``queued_dttm`` becomes now, as the scheduler sets it when it queues a try: Airflow revokes a try QUEUED
    since before ``[scheduler] task_queued_timeout`` by that column, and the re-run's wait for the fallback
    starts here, not when the try was first queued (maybe hours ago, before its spot job ran). The other
    columns stay: ``queued_by_job_id`` is already this scheduler's (the executor holds the try's workload),
    and the Execution API's start of the re-run writes ``hostname``, ``pid``, ``start_date`` and
    ``last_heartbeat_at`` anew.

    A session of its own, committed at once (as :func:`~agora_optimizer.executor.planned_runs._airflow_states`
    reads: never the scheduler's thread-local session, whose transaction this must not join)."""
    from airflow import settings as airflow_settings
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import update

    if airflow_settings.Session is None:
        return "no Airflow metadata database in this process"
    with airflow_settings.Session.session_factory() as session:
        changed = session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.id == ti_id,
                TaskInstance.try_number == try_number,
                TaskInstance.state.in_([TaskInstanceState.RUNNING, TaskInstanceState.QUEUED]),
            )
            .values(state=TaskInstanceState.QUEUED, queued_dttm=datetime.now(UTC))
            .execution_options(synchronize_session=False)
        )
        session.commit()
    if changed.rowcount != 1:
        return f"Airflow no longer has try {try_number} running or queued (it may have failed it already)"
    return ""


def instance_of(record: JobRecord) -> tuple[str, str, str, int]:
    """A task instance of a run, whatever the try: the key of its move off spot."""
    return (record.dag_id, record.task_id, record.run_id, record.map_index)


class Interruptions(ExecutorBase):
    """Re-runs an interrupted spot job on its type's fallback; the executor's other parts ask it where to run."""

    def _off_spot(self, ti: Any, placement: Placement) -> Placement:
        """The fallback's placement for a task instance that an interruption moved off spot, else ``placement``."""
        fallback = self._on_fallback.get((ti.dag_id, ti.task_id, ti.run_id, ti.map_index))
        if fallback is None or fallback == placement.resource:
            return placement
        return Placement(
            fallback,
            placement.cores,
            placement.memory_bytes,
            time_limit_s=placement.time_limit_s,
            source="fallback",  # no planned machine: the fallback's machine is leased for the re-run alone
            plan_version=placement.plan_version,
            gpus=placement.gpus,
        )

    def _rerun_after_interruption(self, job: Job, status: JobStatus) -> bool:
        """Re-run an interrupted spot job's try on its fallback; False: report the interruption to Airflow."""
        record = job.record
        fallback = fallback_for(self._resources.get(record.resource), self._resources)
        instance = instance_of(record)
        if fallback is None or instance in self._on_fallback:
            return False  # not spot capacity, or already its re-run: a failure as any other
        self._on_fallback[instance] = fallback.name  # this try's re-run, or Airflow's next try, runs there
        why_not = "it was adopted, and its workload is no longer the executor's" if job.workload is None else ""
        if not why_not:
            try:
                why_not = requeue_task_instance(job.workload.ti.id, record.try_number)
            except Exception as exc:  # the metadata database is the scheduler's: a hiccup costs Airflow's retry
                why_not = f"cannot put the try back in Airflow's queue: {exc}"
        self._reports.add_repair(
            record.dag_id,
            record.run_id,
            interruption_repair(record, status, fallback.name, self._at_s(job), not why_not),
        )
        if not why_not and (lease := interrupted_lease(record, status)) is not None:
            self._reports.add_leases([lease])  # the re-run's row replaces the try's: the spot time is counted here
        if why_not:
            self.log.warning(
                "agora: %s was interrupted on spot %s (%s); not re-run on %s now (%s): Airflow's next try runs there",
                record.label, record.resource, status.reason or "capacity taken back", fallback.name, why_not,
            )  # fmt: skip
            return False
        try:
            rerun = self._job_for(self._fresh_token(job.workload))
        except (AgoraError, OSError) as exc:
            self.log.error("agora: cannot re-run %s on %s after its interruption: %s", record.label, fallback.name, exc)
            return False
        self.log.warning(
            "agora: %s was interrupted on spot %s (%s); re-running it on %s (on demand), same try",
            record.label, record.resource, status.reason or "capacity taken back", fallback.name,
        )  # fmt: skip
        self._feed(rerun, Accepted())
        return True

    def _fallback_ended(self, record: JobRecord, status: JobStatus) -> None:
        """A job of the task instance ended for good; if it was the fallback's, later runs of the task follow
        their plan again, and a planned run's book and repair state learn when the re-run ended (the re-run
        has no planned machine, whose end would tell them)."""
        instance = instance_of(record)
        if record.resource != self._on_fallback.get(instance):
            return
        del self._on_fallback[instance]
        run = self._repairer.runs.get((record.dag_id, record.run_id))
        if run is not None:
            run.started(record.plan_task)  # no longer a retry to come for the re-planner
        book = self._books.get((record.dag_id, record.run_id))
        if book is not None and record.plan_task in book.ended_s:
            now = clock_now()
            book.ended_s[record.plan_task] = clock_at(book, now.monotonic_s, now.wall, status.ended_at)

    def _fresh_token(self, workload: Any) -> Any:
        """The workload with a new Execution API token (the try's may be near its end after a long run)."""
        with contextlib.suppress(Exception):  # no signer: the queued job's renewal gives it one later
            token = workload.generate_token(str(workload.ti.id), self.jwt_generator)
            return workload.model_copy(update={"token": token})
        return workload

    def _at_s(self, job: Job) -> float:
        """When the interruption was seen, on the run's plan clock (0 for a run without a machine book)."""
        book = self._books.get((job.record.dag_id, job.record.run_id))
        return 0.0 if book is None else book.clock_s(time.monotonic())
