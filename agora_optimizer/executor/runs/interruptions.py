"""Spot capacity at run time: a job whose machine the provider took back re-runs on its type's fallback.

A backend says a job was *interrupted* (``JobStatus.interrupted``: a Spot Instance reclaimed under a
Batch job, a SLURM preemption) when the task did not fail: its capacity vanished. For a job on a spot
type (``spot: true`` in the catalog) the executor then re-runs the same try on the type's ``fallback``
(on-demand capacity, never interrupted) without reporting anything to Airflow: Airflow sees one try,
and its one success or failure on the fallback. The run machine decides
(:class:`~agora_optimizer.executor.runs.machine.RunMachine`, on an ``Interrupted`` event), with the
pieces below; the executor carries its decision out.

Re-running the same try needs its task instance QUEUED again in Airflow's metadata database: the
interrupted task process had set it RUNNING, and the Execution API refuses to start a RUNNING try
from another host (HTTP 409, ``invalid_state``).
:func:`~agora_optimizer.executor.airflow_db.requeue_task_instance` does that, only for
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

from collections.abc import Mapping

from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.placement import Placement
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


def instance_of(record: JobRecord) -> tuple[str, str, str, int]:
    """A task instance of a run, whatever the try: the key of its move off spot."""
    return (record.dag_id, record.task_id, record.run_id, record.map_index)


def on_fallback(placement: Placement, fallback: str) -> Placement:
    """``placement`` moved to the on-demand type ``fallback``: the same reservation, on no planned machine
    (the fallback's machine is leased for the re-run alone)."""
    return Placement(
        fallback,
        placement.cores,
        placement.memory_bytes,
        time_limit_s=placement.time_limit_s,
        source="fallback",
        plan_version=placement.plan_version,
        gpus=placement.gpus,
    )
