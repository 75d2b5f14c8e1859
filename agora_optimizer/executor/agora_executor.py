"""AgoraExecutor: runs each Airflow task on the resource its plan chose.

Configure it beside Airflow's default executor::

    [core]
    executor = LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor
    [agora]
    catalog = /path/to/catalog.yaml

The cluster policy (:mod:`agora_optimizer.integration.policy`) sends the tasks of planned
DAGs here with ``executor_config["agora"]["placement"]``; each workload becomes a
:class:`~agora_optimizer.executor.jobs.JobSpec` for the backend of its resource (local
pools, SLURM, AWS Batch). The job runs the agora worker, which runs Airflow's own
``execute_workload`` under the placement's memory, CPU and time limits.

Task state belongs to Airflow: the task process reports success or failure through the
Execution API, and ``execute_workload`` exits 0 either way. The executor reports a job
that exited 0 as success, and a job that died (OOM kill, signal, timeout, lost) as
failed with the reason, which Airflow then applies (retry or fail). ``sync()`` never
raises: a backend error is retried with capped exponential backoff, and only after
``[agora] submit_retries`` attempts (or ``backend_outage_s`` of failed status polls) does
the task fail, with the backend's message.

Each job's life is the pure state machine of :mod:`~agora_optimizer.executor.lifecycle`: the
executor feeds it events (a submit came back, a poll answered, Airflow revoked the task) and
carries out the actions it returns in one place (:meth:`AgoraExecutor._carry_out`). Its
settings are read once, when it starts (:class:`ExecutorConfig`).

A task the plan put on a machine (``placement.machine``, ``TYPE#N``) runs as planned: its job
carries a :class:`~agora_optimizer.executor.jobs.MachineLease` sized as the machine's type, the
lease is opened with the backend when the machine's first task arrives (or ahead of it by the
backend's predicted wait) and closed when its last planned task has ended (or will never come)
(:mod:`~agora_optimizer.executor.leases`), and the job is ``held`` until the machine's order
lets it start (:mod:`~agora_optimizer.executor.machine_order`; docs/running-plans.md). A machine
the backend cannot give (``open_lease`` raises) has its tasks run without it, on their
resource's pool, with one log line and a :class:`~agora_optimizer.executor.machine_order.ReplacedMachine`
in :attr:`AgoraExecutor.replaced_machines`.

The job's external id, ``agora|<backend>|<resource>|<id>``, is stored in Airflow as the
task's ``external_executor_id``; a restarted scheduler adopts running jobs from it
(:meth:`AgoraExecutor.try_adopt_task_instances`) instead of losing or duplicating them.
A job that ended while no scheduler watched it, its task already closed by the task itself,
is never adopted: every :data:`SWEEP_INTERVAL_S` the executor traces the finished jobs in its
state directory (a ``result.json``, no ``traced`` mark, not its own) so that their rows still
get the executor's part (backend, host, exit code, peak memory). Every :data:`EXPIRE_INTERVAL_S`
it deletes the job directories done longer than ``[agora] job_retention_days`` ago.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import logging
import math
import os
import shutil
import stat
import sys
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor, get_execution_api_server_url

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.backends.registry import make_backend
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.environment import job_environment
from agora_optimizer.executor.job_record import JobRecord, executor_attempt
from agora_optimizer.executor.jobs import (
    BackendError,
    JobSpec,
    JobStatus,
    MachineLease,
    job_key,
    read_result,
)
from agora_optimizer.executor.leases import Leases
from agora_optimizer.executor.lifecycle import (
    ID_PREFIX,
    Accepted,
    Action,
    Adopted,
    Cancel,
    Event,
    Forget,
    Heartbeat,
    Job,
    JobState,
    LifecycleConfig,
    Log,
    Moved,
    Now,
    PollFailed,
    RefuseRevoke,
    Released,
    RenewToken,
    Report,
    ReportQueued,
    Revoked,
    StatusPolled,
    Submit,
    SubmitFailed,
    Submitted,
    TokenRenewed,
    WriteRecord,
    format_external_id,
    parse_external_id,
    transition,
)
from agora_optimizer.executor.machine_order import MachineOrder, ReplacedMachine, RunBook, may_start
from agora_optimizer.executor.placement import Placement, placement_from_config
from agora_optimizer.executor.remote_files import CONTAINER_JOB_ROOT, job_urls, split_s3_url
from agora_optimizer.executor.repair import Repaired, Repairer, RunRepair, RunReports, clock_at
from agora_optimizer.executor.resources import load_resources
from agora_optimizer.executor.state_files import check_state_dir, write_private
from agora_optimizer.integration.airflow_pools import ensure_pools
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.instances import instance_id
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.traces.spool import SPOOL_NAME, spool
from agora_optimizer.traces.spool import pending as spool_pending
from agora_optimizer.traces.spool import replay as replay_spool

if TYPE_CHECKING:
    from airflow.executors import workloads
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey

    from agora_optimizer.runs.store import RunStore

__all__ = ["ID_PREFIX", "AgoraExecutor", "ExecutorConfig", "format_external_id", "make_backend", "parse_external_id"]


SWEEP_INTERVAL_S = 20.0  # how often finished jobs nobody watched are traced (and not before the first adoption)
SWEEP_MAX_AGE_S = 86400.0  # results older than this were traced by an earlier version or are not ours to redo
SWEEP_BATCH = 200  # at most this many traced per sweep: the scheduler's loop must stay short
EXPIRE_INTERVAL_S = 3600.0  # how often job directories older than [agora] job_retention_days are deleted
TRACED_MARK = "traced"
SET_ASIDE = "~"  # KEY~N: the N-th earlier job of a try Airflow queued again (kept until it expires)
OOM_RETRY_GROWTH = 1.5  # a retry after an OOM kill reserves this much more than the attempt that died
REPLAY_INTERVAL_S = 5.0  # how often rows spooled while the trace store was down are written again
STATES_INTERVAL_S = 5.0  # how often, per DAG run with held tasks or open leases, Airflow's task states are read
PLANS_MAX = 256  # (dag_id, plan_version) orders kept; a plan is read once per pair
RUNS_MAX = 1024  # DAG runs whose machine book is kept
NO_STATE = "none"  # a task instance Airflow has not scheduled yet (its state is NULL)
_LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


@dataclass(frozen=True)
class ExecutorConfig:
    """The executor's ``[agora]`` settings (and Airflow's ``task_queued_timeout``), read once when it starts."""

    parallelism: int = 256
    catalog: str = ""
    default_resource: str = ""
    aws_s3_prefix: str = ""
    airflow_pools: bool = True
    job_retention_days: float = 7.0
    replan_slack: float = 0.2
    replan_min_late_s: float = 5.0
    task_environment: tuple[str, ...] = ()  # names (shell patterns) of variables passed on to every task
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)

    @classmethod
    def from_settings(cls, task_queued_timeout_s: float) -> ExecutorConfig:
        return cls(
            parallelism=max(1, int(settings.get_float("parallelism"))),
            catalog=settings.get("catalog"),
            default_resource=settings.get("default_resource"),
            aws_s3_prefix=settings.get("aws_s3_prefix"),
            airflow_pools=settings.get_bool("airflow_pools"),
            job_retention_days=settings.get_float("job_retention_days"),
            replan_slack=settings.get_float("replan_slack"),
            replan_min_late_s=settings.get_float("replan_min_late_s"),
            task_environment=tuple(n.strip() for n in settings.get("task_environment").split(",") if n.strip()),
            lifecycle=LifecycleConfig(
                submit_retries=int(settings.get_float("submit_retries")),
                backoff_max_s=settings.get_float("backoff_max_s"),
                backend_outage_s=settings.get_float("backend_outage_s"),
                backend_queue_timeout_s=settings.get_float("backend_queue_timeout_s"),
                token_refresh_s=settings.get_float("token_refresh_s"),
                task_queued_timeout_s=task_queued_timeout_s,
                machine_hold_s=settings.get_float("machine_hold_s"),
            ),
        )


def _now() -> Now:
    return Now(time.monotonic(), datetime.now(UTC))


class AgoraExecutor(BaseExecutor):
    """Routes each task to a local pool, a SLURM partition or an AWS Batch queue."""

    is_local = False
    serve_logs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config = ExecutorConfig()  # read from [agora] by start()
        self._jobs: dict[Hashable, Job] = {}  # by TaskInstanceKey; a job leaves it only by a Forget action
        self._backends: dict[str, Backend] = {}
        self._resources: dict[str, Resource] = {}
        self._outage_since: dict[str, float] = {}
        self._state_dir = Path()
        self._trace_store: RunStore | None = None
        self._last_sweep = time.monotonic()  # the first sweep waits an interval: adoption comes first
        self._last_expiry = self._last_sweep - EXPIRE_INTERVAL_S  # the first expiry comes with the first sweep
        self._swept: set[str] = set()  # job directories the sweep is done with (traced, unreadable or too old)
        self._last_replay = 0.0
        # planned machines: the order of each plan, the book of each run, the leases open now
        self._orders: BoundedDict[tuple[str, str], MachineOrder | None] = BoundedDict(PLANS_MAX)
        self._books: BoundedDict[tuple[str, str], RunBook] = BoundedDict(RUNS_MAX)
        self._states_at: dict[tuple[str, str], float] = {}  # when each run's Airflow task states were last read
        self._repairer = Repairer()  # off until start() reads [agora] replan_slack
        self._reports = RunReports()  # released leases and repairs on their way to the run store
        self._leases = Leases(self._backend, self._reports)

    @property
    def replaced_machines(self) -> list[ReplacedMachine]:
        """The planned machines whose backend refused them, whose tasks ran on their pool instead."""
        return self._leases.replaced

    @property
    def lease_records(self) -> list[LeaseRecord]:
        """The leases the backends released (real start and end), kept for the run record."""
        return self._leases.records

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.config = ExecutorConfig.from_settings(self._task_queued_timeout_s())
        # Capacity is the backends' to enforce (a local pool queues what does not fit, SLURM and
        # Batch queue too); Airflow hands over up to this many so that no slot waits for a round trip.
        self.parallelism = self.config.parallelism
        self._resources = load_resources(self.config.catalog)
        self._repairer = Repairer(
            self.config.replan_slack, self.config.catalog, self._resources, self.config.replan_min_late_s
        )
        self._state_dir = settings.directory("state_dir", "jobs", mode=0o700)  # private whatever the umask
        check_state_dir(self._state_dir)  # others able to write there could plant symlinks where jobs' files go
        self._start_local_pools()
        if self.config.airflow_pools:
            try:
                ensure_pools(self._resources.values())
            except Exception:  # tasks then wait in Airflow for a pool that is missing, which its UI shows
                self.log.exception("Could not create the Airflow pools agora_<resource> ([agora] airflow_pools)")
        self.log.info(
            "AgoraExecutor started: %d resources (%s), jobs in %s",
            len(self._resources),
            ", ".join(f"{r.name}:{r.backend}" for r in self._resources.values()),
            self._state_dir,
        )

    def _start_local_pools(self) -> None:
        """Start the local pools' fork server with the executor, as the LocalExecutor starts its workers."""
        if not any(resource.backend == "local" for resource in self._resources.values()):
            return
        try:
            self._backend("local").start()
        except Exception:  # the first local task starts it (or reports what is wrong) instead
            self.log.exception("Could not start the local pools' fork server ahead of the first task")

    def end(self) -> None:
        """Stop tracking. Submitted jobs keep running; the next scheduler adopts them."""
        for backend in self._backends.values():
            with contextlib.suppress(Exception):
                backend.flush(force=True)  # a SLURM pilot still gathering tasks is submitted now
        self.sync()
        self._poll_queue_waits(force=True, close=True)
        if self._trace_store is not None:
            self._trace_store.close()
            self._trace_store = None
        if self._jobs:
            self.log.info(
                "AgoraExecutor ends with %d jobs still running; a restarted scheduler adopts them", len(self._jobs)
            )

    def terminate(self) -> None:
        self.end()

    # -- Airflow's calls -----------------------------------------------------------------------

    def _process_workloads(self, workload_items: Sequence[workloads.All]) -> None:
        from airflow.executors import workloads as wl

        for workload in workload_items:
            if not isinstance(workload, wl.ExecuteTask):
                raise AgoraError(f"AgoraExecutor runs tasks only, got {type(workload).__name__}")
            key = workload.ti.key
            self.queued_tasks.pop(key, None)
            self.running.add(key)
            try:
                job = self._job_for(workload)
            except AgoraError as exc:
                self._finish_unsubmitted(key, workload, str(exc))
                continue
            except OSError as exc:  # e.g. ENOSPC: raised here it would stop the scheduler's loop
                self._finish_unsubmitted(key, workload, _unwritable(workload, self._state_dir, exc))
                continue
            self._feed(job, Accepted())

    def sync(self) -> None:
        """Submit what is due, poll every backend, report what ended. Never raises."""
        try:
            self._sync()
            if time.monotonic() - self._last_sweep >= SWEEP_INTERVAL_S:
                self._last_sweep = time.monotonic()
                self.sweep_finished_jobs()
                if time.monotonic() - self._last_expiry >= EXPIRE_INTERVAL_S:
                    self._last_expiry = time.monotonic()
                    self.expire_job_dirs()
            self._poll_queue_waits()
            self._replay_traces()
            self._reports.flush(self._store, time.monotonic(), self.log)
        except Exception:  # the scheduler's loop must survive anything a backend does
            self.log.exception("AgoraExecutor sync failed; will try again on the next heartbeat")

    def _poll_queue_waits(self, *, force: bool = False, close: bool = False) -> None:
        """SLURM: store the recorded jobs' waits when due, also while no job is polled (it costs nothing when not)."""
        for backend in self._backends.values():
            backend.poll_queue_waits(force=force)
            if close:
                backend.close()

    def sweep_finished_jobs(self, max_age_s: float = SWEEP_MAX_AGE_S) -> int:
        """Trace the jobs that ended while no executor watched them; returns how many.

        A task that finishes while the scheduler is down closes itself through the Execution
        API, so no restarted scheduler hands it over for adoption and no poll ever sees its job
        end. Its ``result.json`` is still in the job's directory: that is traced here, once.
        """
        if not self._state_dir.is_dir():
            return 0
        ours = {job.spec.job_dir.name for job in self._jobs.values()}
        now = time.time()
        traced = 0
        job_dirs = sorted(self._state_dir.iterdir())
        self._swept &= {job_dir.name for job_dir in job_dirs}  # no bigger than the state dir (which expiry bounds)
        for job_dir in job_dirs:
            if traced >= SWEEP_BATCH:
                break
            if job_dir.name in self._swept or job_dir.name in ours:
                continue
            if SET_ASIDE in job_dir.name:  # an earlier job of a try queued again: the try's row is its last job's
                self._swept.add(job_dir.name)
                continue
            if not _own_directory(job_dir):  # a symlink, a file, another user's: nothing the executor made
                self._swept.add(job_dir.name)
                continue
            result_path = job_dir / "result.json"
            if (job_dir / TRACED_MARK).exists() or (
                result_path.is_file() and now - result_path.stat().st_mtime > max_age_s
            ):
                self._swept.add(job_dir.name)
                continue
            if not result_path.is_file():
                continue  # still running, or its result not yet back
            record = JobRecord.read(job_dir)
            try:
                result = read_result(result_path)
            except BackendError as exc:
                self.log.warning("Not tracing %s: %s", job_dir.name, exc)
                _mark_traced(job_dir)
                self._swept.add(job_dir.name)
                continue
            if record is None or result is None:
                continue
            if job_dir.name != record.key:  # not a directory the executor made for the attempt its job.json names
                self.log.warning("Not tracing %s: its job.json names another attempt (%s)", job_dir, record.label)
                self._swept.add(job_dir.name)
                continue
            self._write_trace(record, result.status())
            self._swept.add(job_dir.name)
            self.log.info("Traced %s, which ended while no scheduler watched it", record.label)
            traced += 1
        return traced

    def expire_job_dirs(self, retention_days: float | None = None) -> int:
        """Delete the job directories done more than ``[agora] job_retention_days`` ago; returns how many.

        Only directories the executor made and no job of it uses: a job's whose ``job.json``
        names the attempt its name is the key of, that was traced (or whose result is older than
        the sweep looks), and a SLURM pilot's whose tasks are all done or gone; nothing in either
        changed within the retention. 0 days keeps everything.
        """
        days = self.config.job_retention_days if retention_days is None else retention_days
        if days <= 0 or not self._state_dir.is_dir():
            return 0
        cutoff = time.time() - days * 86400.0
        ours = {job.spec.job_dir.name for job in self._jobs.values()}
        deleted = 0
        for job_dir in sorted(self._state_dir.iterdir()):
            if job_dir.name in ours or not _own_directory(job_dir) or not _done_before(job_dir, cutoff):
                continue
            try:
                shutil.rmtree(job_dir)  # never follows a symlink inside it
            except OSError as exc:
                self.log.warning("Cannot delete the expired job directory %s: %s", job_dir, exc)
                continue
            self._swept.discard(job_dir.name)
            deleted += 1
        if deleted:
            self.log.info(
                "Deleted %d job directories in %s done more than %g days ago ([agora] job_retention_days)",
                deleted,
                self._state_dir,
                days,
            )
        return deleted

    def revoke_task(self, *, ti: TaskInstance) -> None:
        """Cancel the task's job, except one that waits in its backend's queue or has just started.

        Airflow revokes a task that stays QUEUED longer than ``[scheduler] task_queued_timeout``
        (and requeues it, twice, then fails it). A job pending in a SLURM partition, a Batch
        queue or a full local pool is not stuck: it would lose its place in the queue and fail
        after three timeouts. So such a job is kept, and ``[agora] backend_queue_timeout_s``
        bounds its wait instead (:meth:`_poll`); so is a job that started less than
        ``task_queued_timeout`` ago (its task has not told Airflow yet). ``NotImplementedError``
        is how an executor tells the scheduler that it does not revoke (the scheduler skips its
        stuck tasks for this round); a waiting job's token is renewed (``[agora] token_refresh_s``).
        """
        job = self._jobs.get(ti.key)
        if job is not None:
            status = None
            if job.external_id:
                with contextlib.suppress(Exception):  # no answer: judge by the last poll
                    status = self._backend(job.record.backend).status([job.external_id]).get(job.external_id)
            refused = [action for action in self._feed(job, Revoked(status)) if isinstance(action, RefuseRevoke)]
            if refused:
                raise NotImplementedError(refused[0].reason)
        self.queued_tasks.pop(ti.key, None)
        self.running.discard(ti.key)

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        not_adopted: list[TaskInstance] = []
        for ti in tis:
            parsed = parse_external_id(ti.external_executor_id or "")
            if parsed is None:
                not_adopted.append(ti)
                continue
            backend_name, resource, external_id = parsed
            job_dir = self._job_dir(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index)
            record = JobRecord.read(job_dir)
            if record is None or not self._adopt(backend_name, resource, external_id, job_dir):
                not_adopted.append(ti)
                continue
            lease = self._adopted_lease(ti, record)
            spec = JobSpec(
                key=job_dir.name,
                label=record.label,
                resource=resource,
                cores=record.cores,
                memory_bytes=record.memory_bytes,
                time_limit_s=None,
                command=(),
                job_dir=job_dir,
                lease=lease,
            )
            self.running.add(ti.key)
            self._feed(Job(ti.key, spec, record), Adopted(external_id))
        return not_adopted

    def _adopted_lease(self, ti: Any, record: JobRecord) -> MachineLease | None:
        """The planned machine an adopted job runs on, its lease taken over (the backend finds the allocation
        an earlier scheduler opened) and its run's book started, so that the lease is released once the
        machine's tasks are over (not left to its idle limit). None for a job on no planned machine."""
        resource = self._resources.get(record.resource)
        if not record.machine or not record.plan_version or resource is None:
            return None
        placement = Placement(
            record.resource, record.cores, record.memory_bytes, machine=record.machine, plan_version=record.plan_version
        )
        new_book = (ti.dag_id, ti.run_id) not in self._books
        lease = self._lease_for(ti, placement, resource)
        book = self._books.get((ti.dag_id, ti.run_id))
        if lease is None or book is None:
            return None
        planned = book.order.by_task.get(_plan_task(ti))
        started = getattr(ti, "start_date", None)
        started = started if isinstance(started, datetime) else None
        now = _now()
        if new_book and planned is not None and started is not None:
            # The run's plan clock as the earlier scheduler had it, near enough: the task began at its planned start.
            book.origin_s = now.monotonic_s - (now.wall - started).total_seconds() - planned.start_s
        book.start(_plan_task(ti), clock_at(book, now.monotonic_s, now.wall, started))
        return lease

    # -- inside: building and submitting jobs --------------------------------------------------

    def _job_for(self, workload: workloads.ExecuteTask, *, write: bool = True) -> Job:
        """The job of ``workload`` at its placement (a repair's for its run, else its ``executor_config``'s);
        ``write``: its workload and ``job.json`` are written (a moved held job's are written by its ``Moved``)."""
        ti = workload.ti
        label = f"{ti.dag_id}.{_plan_task(ti)}"
        placement = placement_from_config(ti.executor_config, label, ti.map_index) or self._default_placement(label)
        placement = self._repaired_placement(ti, placement)
        resource = self._resources.get(placement.resource)
        if resource is None:
            raise AgoraError(
                f"task {label}: resource {placement.resource!r} is not in [agora] catalog "
                f"(known: {', '.join(sorted(self._resources)) or 'none'})"
            )
        placement = self._grown_after_oom_kill(placement, resource, ti)
        job_dir = self._job_dir(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index)
        key = job_dir.name
        if write and (aside := _set_aside(job_dir)) is not None:
            self.log.info("agora: %s try %d is queued again; its earlier job is in %s", label, ti.try_number, aside)
        job_dir.mkdir(parents=True, exist_ok=True)
        record = JobRecord(
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            try_number=ti.try_number,
            map_index=ti.map_index,
            resource=resource.name,
            backend=resource.backend,
            cores=placement.cores,
            memory_bytes=placement.memory_bytes,
            machine=placement.machine,
            plan_version=placement.plan_version,
        )
        s3_prefix = _s3_prefix(resource, label, self.config.aws_s3_prefix)
        lease = self._lease_for(ti, placement, resource)
        spec = JobSpec(
            key=key,
            label=record.label,
            resource=resource.name,
            cores=placement.cores,
            memory_bytes=placement.memory_bytes,
            time_limit_s=placement.time_limit_s,
            command=tuple(worker_command(resource, placement, job_dir, s3_prefix=s3_prefix)),
            job_dir=job_dir,
            options=dict(resource.extra),
            environment=self._worker_environment(),
            lease=lease,
        )
        if write:
            write_private(spec.workload_path, workload.model_dump_json())
            record.write(job_dir)
        return Job(workload.ti.key, spec, record, workload)

    # -- inside: planned machines --------------------------------------------------------------

    def _order(self, dag_id: str, version: str) -> MachineOrder | None:
        """The machine order of the DAG's plan of ``version``, read once per (dag_id, version)."""
        if (dag_id, version) not in self._orders:
            order: MachineOrder | None = None
            try:
                from agora_optimizer.plans.store import default_plan_store

                stored = default_plan_store().find(dag_id, version)
                if stored is None:
                    self.log.warning("agora: plan %s of DAG %s not found; its tasks run unordered", version, dag_id)
                else:
                    order = MachineOrder.from_plan(stored.plan, self._resources)
            except AgoraError as exc:
                self.log.warning(
                    "agora: plan %s of DAG %s unreadable (%s); its tasks run unordered", version, dag_id, exc
                )
            self._orders[(dag_id, version)] = order
        return self._orders[(dag_id, version)]

    def _lease_for(self, ti: Any, placement: Placement, resource: Resource) -> MachineLease | None:
        """The planned machine a task runs on (its lease open with the backend), or None: it runs as any task."""
        if not placement.machine or placement.source != "plan":
            return None
        run = (ti.dag_id, ti.run_id)
        book = self._books.get(run)
        if book is not None and book.plan_version == placement.plan_version:
            order: MachineOrder | None = book.order  # the plan's, or the run's since its last repair
        else:
            book, order = None, self._order(ti.dag_id, placement.plan_version)
        machine = None if order is None else order.machines.get(placement.machine)
        if order is None or machine is None or _plan_task(ti) not in order.by_task:
            return None
        if placement.cores > machine.cores or placement.memory_bytes > machine.memory_bytes:
            self.log.warning(
                "agora: %s.%s reserves %d cores and %d bytes, more than its machine %s has; it runs beside it",
                ti.dag_id, _plan_task(ti), placement.cores, placement.memory_bytes, machine.machine,
            )  # fmt: skip
            return None
        backend = self._resources[machine.resource].backend if machine.resource in self._resources else resource.backend
        lease = self._leases.lease_for(run, machine, backend, book)
        if lease is not None and book is None:
            self._books[run] = RunBook(order, origin_s=time.monotonic(), plan_version=placement.plan_version)
        return lease

    def _repaired_placement(self, ti: Any, placement: Placement) -> Placement:
        """The placement a repair of the task's run gave it (same plan version), else ``placement``."""
        if placement.source != "plan":
            return placement
        assignment = self._repairer.override(ti.dag_id, ti.run_id, _plan_task(ti))
        book = self._books.get((ti.dag_id, ti.run_id))
        if assignment is None or book is None or book.plan_version != placement.plan_version:
            return placement
        return replace(
            placement,
            resource=assignment.resource,
            machine=assignment.machine,
            cores=assignment.cores,
            memory_bytes=assignment.memory_bytes,
            planned_start_s=assignment.start_s,
        )

    def _book(self, job: Job) -> RunBook | None:
        return self._books.get((job.record.dag_id, job.record.run_id)) if job.spec.lease is not None else None

    def _release_held(self) -> None:
        """Let go each held job whose machine's order allows it (earliest planned first), heartbeat the rest."""
        now = time.monotonic()
        held = [job for job in self._jobs.values() if job.state == JobState.HELD]
        self._settle_runs({(job.record.dag_id, job.record.run_id) for job in held}, now)

        def planned_start(job: Job) -> float:
            book = self._book(job)
            task = None if book is None else book.order.by_task.get(job.record.plan_task)
            return (book.origin_s if book else 0.0) + (task.start_s if task else 0.0)

        for job in sorted(held, key=planned_start):
            book = self._book(job)
            held_s = now - (job.held_since_s if job.held_since_s is not None else now)
            if book is None:
                decision_start, reason = True, "its run's plan is no longer known"
            else:
                decision = may_start(book, job.record.plan_task, now, held_s, self.config.lifecycle.machine_hold_s)
                decision_start, reason = decision.start, decision.reason
            if decision_start:
                if book is not None:
                    book.start(job.record.plan_task, book.clock_s(now))
                    self._repairer.run(job.record.dag_id, job.record.run_id).started(job.record.plan_task)
                self._feed(job, Released(reason))
            else:
                self._feed(job, Heartbeat())

    def _settle_runs(self, runs: set[tuple[str, str]], now: float) -> None:
        """Read Airflow's task states of the runs with held jobs or open leases (each at most every
        :data:`STATES_INTERVAL_S`, or at each sync while a lease waits to hear that no retry will come): a
        task that will never come no longer holds its machine, nor a task that ended for good its lease."""
        runs |= self._leases.runs()
        for run in runs:
            book = self._books.get(run)
            if book is None:
                continue
            due = now - self._states_at.get(run, -math.inf) >= STATES_INTERVAL_S
            if not due and not book.awaits_word():  # a machine whose lease waits for the word is asked at once
                continue
            self._states_at[run] = now
            try:
                states = _airflow_states(*run)
            except Exception as exc:  # the metadata database is the scheduler's; a hiccup only delays the order
                self.log.warning("agora: cannot read the task states of %s run %s: %s", run[0], run[1], exc)
                continue
            book.settle(states)
            self._repairer.settled(book, *run, states)

    def _machine_ended(self, job: Job, status: JobStatus | None = None) -> None:
        """The job's task process ended (its worker's mark, or the job's end): its machine has room again.
        With the job's status, a late end or a failure is a drift its run's next repair answers."""
        book = self._book(job)
        if book is None or not (
            status is None or status.task_ended_at is not None or status.phase in ("finished", "lost")
        ):
            return
        now = _now()
        task_id, dag_id, run_id = job.record.plan_task, job.record.dag_id, job.record.run_id
        ended_at = None if status is None else status.task_ended_at or status.ended_at
        end_s = clock_at(book, now.monotonic_s, now.wall, ended_at)
        if book.end(task_id, end_s) and status is not None:
            self._repairer.ended(book, dag_id, run_id, task_id, end_s)
        if status is not None and status.phase in ("finished", "lost") and not status.succeeded:
            retry_bytes = math.ceil(job.record.memory_bytes * OOM_RETRY_GROWTH)
            self._repairer.failed(book, dag_id, run_id, task_id, status, retry_bytes)

    def _repair_runs(self) -> None:
        """Re-plan each run with drifts waiting (at most once per run per few seconds) and apply the answer.
        Any error leaves the run as planned, with one log line: a plan never stops a DAG."""
        if not self._repairer.on:
            return
        now = time.monotonic()
        for key, run in list(self._repairer.runs.items()):
            if not run.due(now):
                continue
            drifts, run.drifts, run.last_s = run.drifts, [], now
            book = self._books.get(key)
            if book is None:
                continue
            try:
                self._apply_repair(book, run, self._repairer.replan(book, run, now, drifts))
            except Exception as exc:
                reasons = "; ".join(drift.reason for drift in drifts)
                self.log.warning(
                    "agora: cannot repair %s run %s after %s (%s); it goes on as planned", *key, reasons, exc
                )

    def _apply_repair(self, book: RunBook, run: RunRepair, fixed: Repaired) -> None:
        """The run's new order and overrides; each held job whose task moved goes to its new machine."""
        book.order = fixed.order
        run.overrides.update(fixed.overrides)
        run.repairs += 1
        for job in list(self._jobs.values()):
            record = job.record
            if job.state != JobState.HELD or (record.dag_id, record.run_id) != (run.dag_id, run.run_id):
                continue
            new = fixed.overrides.get(record.plan_task)
            lease = job.spec.lease
            if new is None or job.workload is None or (lease is not None and lease.machine == new.machine):
                continue
            moved = self._job_for(job.workload, write=False)
            self._feed(job, Moved(moved.spec, moved.record, f"repair at {fixed.repair.at_s:.1f} s"))
        self._reports.add_repair(run.dag_id, run.run_id, fixed.repair)
        self.log.warning(
            "agora: repaired %s run %s at %.1f s: %s; %s",
            run.dag_id, run.run_id, fixed.repair.at_s, fixed.repair.reason, fixed.repair.detail,
        )  # fmt: skip

    def _grown_after_oom_kill(self, placement: Placement, resource: Resource, ti: Any) -> Placement:
        """A retry after an OOM kill asks for more memory than the attempt that died.

        The same reservation would be killed again: :data:`OOM_RETRY_GROWTH` times what the killed try
        reserved (its ``job.json``), at most the resource's memory. Any other retry keeps its placement.
        """
        if ti.try_number <= 1:
            return placement
        before = self._job_dir(ti.dag_id, ti.task_id, ti.run_id, ti.try_number - 1, ti.map_index)
        result, killed = read_result(before / "result.json"), JobRecord.read(before)
        if result is None or not result.oom_killed or killed is None:
            return placement
        grown = min(resource.memory_bytes, math.ceil(killed.memory_bytes * OOM_RETRY_GROWTH))
        if grown <= placement.memory_bytes:
            return placement
        self.log.warning(
            "agora: %s try %d reserves %d bytes of memory, not %d: try %d was killed for memory at %d",
            f"{ti.dag_id}.{ti.task_id}", ti.try_number, grown, placement.memory_bytes, ti.try_number - 1,
            killed.memory_bytes,
        )  # fmt: skip
        return replace(placement, memory_bytes=grown)

    def _job_dir(self, dag_id: str, task_id: str, run_id: str, try_number: int, map_index: int) -> Path:
        """The one place an attempt's job directory is named: ``STATE_DIR/<job_key>`` (the key is also
        the job's name on every backend, and a pure function of the attempt, so a restart finds it)."""
        return self._state_dir / job_key(dag_id, task_id, run_id, try_number, map_index)

    def _default_placement(self, label: str) -> Placement:
        name = self.config.default_resource
        resource = self._resources.get(name)
        if resource is None:
            raise AgoraError(
                f"task {label} has no agora placement and [agora] default_resource "
                f"({name!r}) is not a resource of [agora] catalog"
            )
        return Placement(resource.name, 1, min(resource.memory_bytes, 2**30), source="default")

    def _worker_environment(self) -> dict[str, str]:
        """What a worker needs to reach Airflow: its config and the Execution API's URL, and the variables
        ``[agora] task_environment`` names (what the DAG files read when they are parsed).

        Not the scheduler's secrets under any name Airflow reads them by
        (:func:`~agora_optimizer.executor.environment.job_environment`): a task talks to Airflow
        through the Execution API with its own token, and a SLURM job's environment is kept by
        the cluster, so the metadata database's URL or the key that signs every task's token
        must not travel with it.
        """
        wanted = self.config.task_environment
        passed = job_environment(
            {
                k: v
                for k, v in os.environ.items()
                if k.startswith(("AIRFLOW", "PYTHON"))
                or k in {"PATH", "HOME"}
                or any(fnmatch.fnmatchcase(k, pattern) for pattern in wanted)
            }
        )
        passed["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = get_execution_api_server_url(self.conf)
        return passed

    def _finish_unsubmitted(self, key: TaskInstanceKey, workload: workloads.ExecuteTask, reason: str) -> None:
        self.log.error("%s", reason)
        ti = workload.ti
        record = JobRecord(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index, "", "", 0, 0)
        self._write_trace(record, JobStatus("finished", exit_code=1, reason=reason))
        self.fail(key, reason)

    # -- inside: the state machine -------------------------------------------------------------

    def _feed(self, job: Job, event: Event) -> list[Action]:
        """Move ``job`` by ``event`` (:func:`~agora_optimizer.executor.lifecycle.transition`), keep its
        next version in the table, and carry out what the transition says; returns those actions."""
        job, actions = transition(job, event, _now(), self.config.lifecycle)
        if job.state != JobState.DONE:
            self._jobs[job.key] = job
        self._carry_out(actions)
        return actions

    def _carry_out(self, actions: Sequence[Action]) -> None:
        """The one place the executor acts on what the state machine decided."""
        for action in actions:
            if isinstance(action, Submit):
                self._submit(self._jobs[action.key])
            elif isinstance(action, WriteRecord):
                action.record.write(action.spec.job_dir)
            elif isinstance(action, ReportQueued):
                self.change_state(action.key, _queued_state(), action.full_external_id, remove_running=False)  # type: ignore[arg-type]
            elif isinstance(action, Cancel):
                with contextlib.suppress(Exception):
                    self._backend(action.backend).cancel(action.external_id)
            elif isinstance(action, RenewToken):
                self._renew_token(self._jobs[action.key])
            elif isinstance(action, Report):
                self._report(action.job, action.status)
            elif isinstance(action, Log):
                self.log.log(_LOG_LEVELS[action.level], "%s", action.message)
            elif isinstance(action, Forget):
                forgotten = self._jobs.pop(action.key, None)
                if forgotten is not None and forgotten.state != JobState.HELD:
                    self._machine_ended(forgotten)
            elif isinstance(action, RefuseRevoke):
                pass  # revoke_task raises it to the scheduler
            else:  # pragma: no cover - every action of the lifecycle is handled above
                raise AgoraError(f"AgoraExecutor cannot carry out {action!r}")

    def _submit(self, job: Job) -> None:
        try:
            external_id = self._backend(job.record.backend).submit(job.spec)
        except BackendError as exc:
            self._feed(job, SubmitFailed(str(exc), exc.reason, exc.transient))
            return
        except AgoraError as exc:
            refused = BackendError(job.record.backend, str(exc), transient=False)
            self._feed(job, SubmitFailed(str(refused), refused.reason, transient=False))
            return
        self._feed(job, Submitted(external_id))

    # -- inside: polling -----------------------------------------------------------------------

    def _sync(self) -> None:
        for job in list(self._jobs.values()):
            if job.state == JobState.PENDING_SUBMIT:
                self._feed(job, Heartbeat())
        by_backend: dict[str, list[Job]] = {}
        for job in self._jobs.values():
            if job.external_id:
                by_backend.setdefault(job.record.backend, []).append(job)
        for backend_name, jobs in by_backend.items():
            self._poll(backend_name, jobs)
        self._repair_runs()  # after the polls (a late end, a failure), before the held jobs' turn
        self._release_held()  # after the polls: a machine a task has just left has room now
        self._leases.open_due(list(self._books.items()), self._resources)
        in_use = {job.spec.lease.key for job in self._jobs.values() if job.spec.lease is not None}
        self._leases.close_ended(self._books, in_use, self._backends.values())

    def _poll(self, backend_name: str, jobs: list[Job]) -> None:
        try:
            statuses = self._backend(backend_name).status([job.external_id for job in jobs])
        except (BackendError, AgoraError) as exc:
            since = self._outage_since.setdefault(backend_name, time.monotonic())
            down_s = time.monotonic() - since
            self.log.warning("Cannot poll %s for %d jobs (%s); down for %.0f s", backend_name, len(jobs), exc, down_s)
            for job in jobs:
                self._feed(job, PollFailed(str(exc), down_s))
            if down_s > self.config.lifecycle.backend_outage_s:  # its jobs are lost: the next outage starts anew
                self._outage_since.pop(backend_name, None)
            return
        self._outage_since.pop(backend_name, None)
        for job in jobs:
            status = statuses.get(job.external_id) or JobStatus(
                "lost", reason=f"{backend_name} did not report job {job.external_id}"
            )
            self._machine_ended(job, status)
            self._feed(job, StatusPolled(status))

    def _renew_token(self, job: Job) -> None:
        """Give a job that still waits in a queue a fresh token, so that it outlives the wait."""
        if job.workload is None:
            return
        token = job.workload.generate_token(str(job.workload.ti.id), self.jwt_generator)
        workload = job.workload.model_copy(update={"token": token})
        write_private(job.spec.workload_path, workload.model_dump_json())
        try:  # a backend whose jobs cannot read the job dir (AWS) passes it on
            self._backend(job.record.backend).publish_workload(job.spec)
        except AgoraError as exc:
            self.log.warning(
                "Cannot pass %s its renewed token (%s); trying again at the next poll", job.record.label, exc
            )
            self._feed(job, TokenRenewed(workload, published=False))
            return
        self._feed(job, TokenRenewed(workload, published=True))

    def _task_queued_timeout_s(self) -> float:
        return float(self.conf.get("scheduler", "task_queued_timeout", fallback="600") or 600)

    def _report(self, job: Job, status: JobStatus) -> None:
        self._write_trace(job.record, status)
        if status.succeeded:
            self.success(job.key, job.full_external_id)  # type: ignore[arg-type]
            return
        reason = status.reason or f"exit code {status.exit_code}"
        what = "out of memory" if status.oom_killed else ("lost" if status.phase == "lost" else "failed")
        message = f"agora: {job.record.label} on {job.record.resource or '?'} {what}: {reason}"
        self.log.error("%s", message)
        self.fail(job.key, message)  # type: ignore[arg-type]

    def _write_trace(self, record: JobRecord, status: JobStatus) -> None:
        try:
            store = self._store()
            existing = store.attempt(record.dag_id, record.task_id, record.run_id, record.try_number, record.map_index)
            store.add([executor_attempt(record, status, existing)])
        except Exception as exc:  # traces must never fail a task: the row waits in the spool for the store
            try:
                kept = spool(executor_attempt(record, status, None), "executor", self._state_dir / SPOOL_NAME)
            except Exception:
                self.log.exception("Could not write the trace of %s, nor keep it for later (%s)", record.label, exc)
                return
            self.log.warning("Trace store unreachable (%s); the row of %s waits in %s", exc, record.label, kept)
        job_dir = self._state_dir / record.key
        with contextlib.suppress(OSError):
            if job_dir.is_dir():
                _mark_traced(job_dir)  # the sweep leaves it alone

    def _store(self) -> RunStore:
        """The trace store (with its run records), opened once: a finished job must not pay for an engine."""
        if self._trace_store is None:
            from agora_optimizer.runs.store import RunStore
            from agora_optimizer.traces.store import default_store_url

            self._trace_store = RunStore(default_store_url())
        return self._trace_store

    def _replay_traces(self) -> None:
        """Write the rows that waited in the trace spool while the store was down (at most every few seconds)."""
        if time.monotonic() - self._last_replay < REPLAY_INTERVAL_S:
            return
        self._last_replay = time.monotonic()
        spool_dir = self._state_dir / SPOOL_NAME
        try:
            if not spool_pending(spool_dir):
                return
            written = replay_spool(self._store(), spool_dir)
        except Exception as exc:  # still down: the rows keep waiting
            waiting = spool_pending(spool_dir)
            self.log.warning("Trace store still unreachable (%s); %d rows wait in the spool", exc, waiting)
            return
        if written:
            self.log.info("Wrote %d trace rows that waited in the spool while the trace store was down", written)

    # -- inside: backends ----------------------------------------------------------------------

    def _backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = make_backend(name, self._resources)
        return self._backends[name]

    def _adopt(self, backend_name: str, resource: str, external_id: str, job_dir: Path) -> bool:
        try:
            backend = self._backend(backend_name)
        except AgoraError:
            return False
        try:
            return bool(backend.adopt(external_id, job_dir, resource))
        except Exception:
            self.log.exception("Adopting %s job %s failed", backend_name, external_id)
            return False


def _airflow_states(dag_id: str, run_id: str) -> dict[str, str]:
    """The state of each task instance of a DAG run, from Airflow's metadata database, by its plan
    name (``task[i]`` for a mapped task's instance; a mapped task not expanded yet is its one instance
    of map index -1, by its task id).

    A task with no state yet (its upstream tasks still run) is in it too, as :data:`NO_STATE`: the run
    has it, and it is still to come (left out, the machine order took it for a task the run lacks).

    A session of its own, read only and never committed: the scheduler's thread-local session
    (``create_session``) commits on exit, which Airflow forbids inside the scheduler's loop (its
    HA locks), and sharing it would mix this read into the scheduler's transaction.
    """
    from airflow import settings as airflow_settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    if airflow_settings.Session is None:
        return {}
    with airflow_settings.Session.session_factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        ).all()
    return {
        instance_id(str(task_id), int(index)): str(state) if state is not None else NO_STATE
        for task_id, index, state in rows
    }


def _unwritable(workload: workloads.ExecuteTask, state_dir: Path, exc: OSError) -> str:
    """Why a task could not get its job directory, naming the task, the directory and the errno (ENOSPC...)."""
    ti = workload.ti
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    return (
        f"task {ti.dag_id}.{ti.task_id} run {ti.run_id} try {ti.try_number}: agora cannot write its job "
        f"directory under [agora] state_dir {state_dir}: {code}: {exc.strerror or exc}"
    )


def _own_directory(path: Path) -> bool:
    """A real directory (not a symlink to one) of this scheduler's user."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def _done_before(job_dir: Path, cutoff: float) -> bool:
    """A job's or a SLURM pilot's directory that the executor made, done, and unchanged since ``cutoff``."""
    try:
        if _latest_change(job_dir) >= cutoff:
            return False
    except OSError:  # gone meanwhile, or unreadable: not for deleting
        return False
    record = JobRecord.read(job_dir)
    if record is not None:
        if job_dir.name.partition(SET_ASIDE)[0] != record.key:
            return False
        result = job_dir / "result.json"
        return (job_dir / TRACED_MARK).exists() or (result.is_file() and result.stat().st_mtime < cutoff)
    return job_dir.name.startswith("pilot-") and _pilot_done(job_dir)


def _pilot_done(directory: Path) -> bool:
    """A SLURM pilot whose every task exited, was skipped, or whose job directory is gone or traced."""
    try:
        manifest = json.loads((directory / "pilot.json").read_text())
        if not str(manifest.get("format", "")).startswith("agora-slurm-pilot/"):
            return False
        tasks = [(int(task["index"]), Path(task["job_dir"])) for task in manifest["tasks"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return all(
        (directory / f"exit.{index}").exists()
        or (directory / f"skipped.{index}").exists()
        or not job_dir.exists()
        or (job_dir / TRACED_MARK).exists()
        for index, job_dir in tasks
    )


def _latest_change(directory: Path) -> float:
    """The newest modification time of the directory and of what it holds (not following symlinks)."""
    latest = os.lstat(directory).st_mtime
    with os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
    return latest


def _set_aside(job_dir: Path) -> Path | None:
    """Move an earlier job of the same try out of ``job_dir`` (to ``KEY~1``, ``KEY~2`` ...); returns where.

    Airflow queues a try again without a new try number (a sensor in ``reschedule`` mode, a task
    that asked for a reschedule): the new job must not find the old one's result or task-ended
    mark, which every backend would read as its own. None when the directory holds no job yet.
    """
    if not (job_dir / "job.json").exists():
        return None
    earlier = 1
    while (aside := job_dir.with_name(f"{job_dir.name}{SET_ASIDE}{earlier}")).exists():
        earlier += 1
    job_dir.rename(aside)
    return aside


def _mark_traced(job_dir: Path) -> None:
    write_private(job_dir / TRACED_MARK, "")


def _queued_state() -> Any:
    from airflow.utils.state import TaskInstanceState

    return TaskInstanceState.QUEUED


def worker_command(resource: Resource, placement: Placement, job_dir: Path, *, s3_prefix: str = "") -> list[str]:
    """The agora worker with the placement's limits.

    On AWS it runs in a container's ``python`` that cannot see ``job_dir``: it works in a
    directory of the container and fetches its workload from, and returns its result to,
    S3 under ``s3_prefix`` (:mod:`~agora_optimizer.executor.remote_files`).
    """
    python = "python" if resource.backend == "aws" else sys.executable
    worker_dir = f"{CONTAINER_JOB_ROOT}/{job_dir.name}" if resource.backend == "aws" else str(job_dir)
    command = [python, "-m", "agora_optimizer.executor.worker", "--job-dir", worker_dir]
    if resource.backend == "aws":
        urls = job_urls(s3_prefix, job_dir.name)
        command += ["--workload-url", urls.workload, "--result-url", urls.result]
    command += ["--memory-bytes", str(placement.memory_bytes)]
    cpu_set = resource.extra.get("cpu_set")
    if resource.backend == "local" and isinstance(cpu_set, list | tuple) and cpu_set:
        command += ["--cpu-set", ",".join(str(cpu) for cpu in cpu_set)]
    if placement.time_limit_s is not None:
        command += ["--time-limit-s", f"{placement.time_limit_s:g}"]
    return command


def _s3_prefix(resource: Resource, label: str, prefix: str) -> str:
    """``[agora] aws_s3_prefix`` for a task on an AWS resource (required there); '' elsewhere."""
    if resource.backend != "aws":
        return ""
    if not prefix:
        raise AgoraError(
            f"task {label}: resource {resource.name} runs on AWS Batch, whose jobs get their workload and return "
            "their result through S3: set [agora] aws_s3_prefix (s3://bucket/path/)"
        )
    split_s3_url(prefix, what=f"task {label}: [agora] aws_s3_prefix")
    return prefix


def _plan_task(ti: Any) -> str:
    """The task instance's name in its plan: ``task[i]`` for a mapped task's instance."""
    return instance_id(ti.task_id, ti.map_index)
