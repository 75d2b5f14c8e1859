"""AgoraExecutor: runs each Airflow task on the resource its plan chose.

Configure it beside Airflow's default executor::

    [core]
    executor = LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor
    [agora]
    catalog = /path/to/catalog.yaml

The cluster policy (:mod:`agora_optimizer.integration.policy`) sends the tasks of planned
DAGs here with ``executor_config["agora"]["placement"]``; each workload becomes a
:class:`~agora_optimizer.executor.jobs.spec.JobSpec` for the backend of its resource (local
pools, SLURM, AWS Batch). The job runs the agora worker, which runs Airflow's own
``execute_workload`` under the placement's memory, CPU and time limits.

Task state belongs to Airflow: the task process reports success or failure through the
Execution API, and ``execute_workload`` exits 0 either way. The executor reports a job
that exited 0 as success, and a job that died (OOM kill, signal, timeout, lost) as
failed with the reason, which Airflow then applies (retry or fail); a job of a spot type whose
machine the provider took back re-runs its try on the type's fallback instead, unreported
(:mod:`~agora_optimizer.executor.runs.interruptions`). ``sync()`` never
raises: a backend error is retried with capped exponential backoff, and only after
``[agora] submit_retries`` attempts (or ``backend_outage_s`` of failed status polls) does
the task fail, with the backend's message.

Each job's life is the pure state machine of :mod:`~agora_optimizer.executor.lifecycle`: the
executor feeds it events (a submit came back, a poll answered, Airflow revoked the task) and
carries out the actions it returns in one place (:meth:`AgoraExecutor._carry_out`); a job leaves
the executor's table only there (the ``Forget`` action). Its settings are read once, when it
starts (:class:`~agora_optimizer.executor.executor_base.ExecutorConfig`).

The executor is this module (Airflow's calls, the state machine's actions, polling) and its parts,
one module each: :mod:`~agora_optimizer.executor.jobs.building` (placement lookup, job directory,
worker command), :mod:`~agora_optimizer.executor.planned_runs` (planned machines: held jobs, leases,
repairs), :mod:`~agora_optimizer.executor.jobs.adoption` (a restarted scheduler takes over running jobs,
by the ``agora|<backend>|<resource>|<id>`` external id Airflow stores),
:mod:`~agora_optimizer.executor.jobs.directories` (tracing jobs that ended while no scheduler watched, and
expiring old job directories), :mod:`~agora_optimizer.executor.jobs.tracing` (the trace rows) and
:mod:`~agora_optimizer.executor.runs.interruptions` (a spot job interrupted re-runs on its fallback);
:mod:`~agora_optimizer.executor.executor_base` holds the tables they share.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.registry import check_backend_settings, make_backend
from agora_optimizer.executor.executor_base import EXPIRE_INTERVAL_S, SWEEP_INTERVAL_S, ExecutorConfig, clock_now
from agora_optimizer.executor.jobs.adoption import Adoption
from agora_optimizer.executor.jobs.building import JobBuilding, unwritable, worker_command
from agora_optimizer.executor.jobs.directories import JobDirectories
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import BackendError, JobStatus
from agora_optimizer.executor.jobs.tracing import Tracing
from agora_optimizer.executor.lifecycle import (
    ID_PREFIX,
    Accepted,
    Action,
    Cancel,
    Event,
    Forget,
    Heartbeat,
    Job,
    JobState,
    Log,
    PollFailed,
    RefuseRevoke,
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
from agora_optimizer.executor.planned_runs import PlannedRuns
from agora_optimizer.executor.resources import load_resources
from agora_optimizer.executor.runs.interruptions import Interruptions
from agora_optimizer.executor.runs.repair import Repairer
from agora_optimizer.executor.state_files import check_state_dir, write_private
from agora_optimizer.integration.airflow_pools import ensure_pools

if TYPE_CHECKING:
    from airflow.executors import workloads
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey


__all__ = [
    "ID_PREFIX",
    "AgoraExecutor",
    "ExecutorConfig",
    "format_external_id",
    "make_backend",
    "parse_external_id",
    "worker_command",
]


_LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class AgoraExecutor(Adoption, PlannedRuns, JobBuilding, JobDirectories, Tracing, Interruptions):
    """Routes each task to a local pool, a SLURM partition or an AWS Batch queue."""

    is_local = False
    serve_logs = False

    def start(self) -> None:
        self.config = ExecutorConfig.from_settings(self._task_queued_timeout_s())
        # Capacity is the backends' to enforce (a local pool queues what does not fit, SLURM and
        # Batch queue too); Airflow hands over up to this many so that no slot waits for a round trip.
        self.parallelism = self.config.parallelism
        self._resources = load_resources(self.config.catalog)
        self._check_backend_settings()
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

    def _check_backend_settings(self) -> None:
        """Read the settings of the catalog's backends now: a bad one fails the start, naming its option
        (the backends themselves are still made at their first job)."""
        backends = {resource.backend for resource in self._resources.values()}
        check_backend_settings(backends)
        if "aws" in backends and not self.config.aws_s3_prefix:
            self.log.warning(
                "The catalog has AWS Batch resources but [agora] aws_s3_prefix is not set: "
                "every task on them will fail until it is (s3://bucket/path/)"
            )

    def _start_local_pools(self) -> None:
        """Make the local pools, and start their fork server with the executor as the LocalExecutor starts its
        workers. A pool the catalog gets wrong (bad ``gpu_ids``, more GPUs than the scheduler's
        ``CUDA_VISIBLE_DEVICES`` holds) fails the start with the backend's BackendError, naming the resource."""
        if not any(resource.backend == "local" for resource in self._resources.values()):
            return
        backend = self._backend("local")
        try:
            backend.start()
        except Exception:  # the first local task starts it instead
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
                self._finish_unsubmitted(key, workload, unwritable(workload, self._state_dir, exc))
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

    def _finish_unsubmitted(self, key: TaskInstanceKey, workload: workloads.ExecuteTask, reason: str) -> None:
        self.log.error("%s", reason)
        ti = workload.ti
        record = JobRecord(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index, "", "", 0, 0)
        self._write_trace(record, JobStatus("finished", exit_code=1, reason=reason))
        self.fail(key, reason)

    def _feed(self, job: Job, event: Event) -> list[Action]:
        """Move ``job`` by ``event`` (:func:`~agora_optimizer.executor.lifecycle.transition`), keep its
        next version in the table, and carry out what the transition says; returns those actions."""
        job, actions = transition(job, event, clock_now(), self.config.lifecycle)
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
        if status.interrupted and self._rerun_after_interruption(job, status):
            return  # the same try runs again on the spot type's fallback: Airflow hears of its end only
        self._write_trace(job.record, status)
        self._fallback_ended(job.record, status)
        if status.succeeded:
            self.success(job.key, job.full_external_id)  # type: ignore[arg-type]
            return
        reason = status.reason or f"exit code {status.exit_code}"
        what = "out of memory" if status.oom_killed else ("lost" if status.phase == "lost" else "failed")
        what = "interrupted (its capacity was taken back)" if status.interrupted else what
        message = f"agora: {job.record.label} on {job.record.resource or '?'} {what}: {reason}"
        self.log.error("%s", message)
        self.fail(job.key, message)  # type: ignore[arg-type]


def _queued_state() -> Any:
    from airflow.utils.state import TaskInstanceState

    return TaskInstanceState.QUEUED
