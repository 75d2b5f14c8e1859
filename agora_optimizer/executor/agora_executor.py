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
import json
import os
import shutil
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor, get_execution_api_server_url

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.environment import job_environment
from agora_optimizer.executor.job_record import JobRecord, executor_attempt
from agora_optimizer.executor.jobs import Backend, BackendError, JobSpec, JobStatus, job_key, read_result
from agora_optimizer.executor.placement import Placement, placement_from_config
from agora_optimizer.executor.remote_files import CONTAINER_JOB_ROOT, job_urls, split_s3_url
from agora_optimizer.executor.resources import load_resources
from agora_optimizer.executor.state_files import check_state_dir, write_private
from agora_optimizer.integration.airflow_pools import ensure_pools
from agora_optimizer.model.catalog import Resource
from agora_optimizer.traces.spool import pending as spool_pending
from agora_optimizer.traces.spool import replay as replay_spool
from agora_optimizer.traces.spool import spool

if TYPE_CHECKING:
    from airflow.executors import workloads
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey

    from agora_optimizer.traces.store import TraceStore

ID_PREFIX = "agora"


SWEEP_INTERVAL_S = 20.0  # how often finished jobs nobody watched are traced (and not before the first adoption)
SWEEP_MAX_AGE_S = 86400.0  # results older than this were traced by an earlier version or are not ours to redo
SWEEP_BATCH = 200  # at most this many traced per sweep: the scheduler's loop must stay short
EXPIRE_INTERVAL_S = 3600.0  # how often job directories older than [agora] job_retention_days are deleted
TRACED_MARK = "traced"
REPLAY_INTERVAL_S = 5.0  # how often rows spooled while the trace store was down are written again


@dataclass
class _Job:
    """A workload the executor is responsible for: waiting to be submitted, or submitted."""

    key: TaskInstanceKey
    spec: JobSpec
    record: JobRecord
    workload: workloads.ExecuteTask | None  # None once adopted (the token is no longer ours to renew)
    external_id: str = ""
    attempts: int = 0
    next_try_at: float = 0.0
    token_at: float = field(default_factory=time.monotonic)
    last_reason: str = ""
    phase: str = ""  # the backend's last answer: pending (in its queue), running, or "" (not polled yet)
    submitted_at: float = field(default_factory=time.monotonic)
    queued_at: datetime | None = None  # when the backend says the job entered its queue
    running_since: float | None = None  # monotonic time of the first poll that saw it running

    def queue_wait_s(self) -> float:
        """How long the job has waited in its backend's queue (by the backend's clock where it says)."""
        if self.queued_at is not None:
            queued_at = self.queued_at if self.queued_at.tzinfo else self.queued_at.replace(tzinfo=UTC)
            return max(0.0, (datetime.now(UTC) - queued_at).total_seconds())
        return time.monotonic() - self.submitted_at


class AgoraExecutor(BaseExecutor):
    """Routes each task to a local pool, a SLURM partition or an AWS Batch queue."""

    is_local = False
    serve_logs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._jobs: dict[TaskInstanceKey, _Job] = {}
        self._backends: dict[str, Backend] = {}
        self._resources: dict[str, Resource] = {}
        self._outage_since: dict[str, float] = {}
        self._state_dir = Path()
        self._trace_store: TraceStore | None = None
        self._last_sweep = time.monotonic()  # the first sweep waits an interval: adoption comes first
        self._last_expiry = self._last_sweep - EXPIRE_INTERVAL_S  # the first expiry comes with the first sweep
        self._swept: set[str] = set()  # job directories the sweep is done with (traced, unreadable or too old)
        self._last_replay = 0.0

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        # Capacity is the backends' to enforce (a local pool queues what does not fit, SLURM and
        # Batch queue too); Airflow hands over up to this many so that no slot waits for a round trip.
        self.parallelism = max(1, int(settings.get_float("parallelism")))
        self._resources = load_resources(settings.get("catalog"))
        self._state_dir = settings.directory("state_dir", "jobs", mode=0o700)  # private whatever the umask
        check_state_dir(self._state_dir)  # others able to write there could plant symlinks where jobs' files go
        self._start_local_pools()
        if settings.get_bool("airflow_pools"):
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
            start = getattr(self._backend("local"), "start_fork_server", None)
            if start is not None:
                start()
        except Exception:  # the first local task starts it (or reports what is wrong) instead
            self.log.exception("Could not start the local pools' fork server ahead of the first task")

    def end(self) -> None:
        """Stop tracking. Submitted jobs keep running; the next scheduler adopts them."""
        for backend in self._backends.values():
            flush = getattr(backend, "flush", None)  # a SLURM pilot still gathering tasks is submitted now
            if flush is not None:
                with contextlib.suppress(Exception):
                    flush(force=True)
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
            self._jobs[key] = job
            self._submit(job)

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
        except Exception:  # the scheduler's loop must survive anything a backend does
            self.log.exception("AgoraExecutor sync failed; will try again on the next heartbeat")

    def _poll_queue_waits(self, *, force: bool = False, close: bool = False) -> None:
        """SLURM: store the recorded jobs' waits when due, also while no job is polled (it costs nothing when not)."""
        for backend in self._backends.values():
            submissions = getattr(backend, "submissions", None)
            if submissions is not None:
                submissions.poll(force=force)
                if close:
                    submissions.close()

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
            if job_dir.name != job_key(
                record.dag_id, record.task_id, record.run_id, record.try_number, record.map_index
            ):  # not a directory the executor made for the attempt its job.json names
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
        days = settings.get_float("job_retention_days") if retention_days is None else retention_days
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
        kept = self._jobs.get(ti.key)
        why = self._why_not_stuck(kept) if kept is not None and kept.external_id else ""
        if kept is not None and why:
            self.log.info(
                "Not revoking %s: %s job %s %s", kept.record.label, kept.record.backend, kept.external_id, why
            )
            raise NotImplementedError(f"{kept.record.label} {why}")
        job = self._jobs.pop(ti.key, None)
        self.queued_tasks.pop(ti.key, None)
        self.running.discard(ti.key)
        if job is not None and job.external_id:
            with contextlib.suppress(Exception):
                self._backend(job.record.backend).cancel(job.external_id)
            self.log.warning(
                "Revoked %s (%s job %s, last seen %s): Airflow found its task QUEUED longer than "
                "[scheduler] task_queued_timeout, and the job was neither waiting in %s's queue (within "
                "[agora] backend_queue_timeout_s) nor just started",
                job.record.label,
                job.record.backend,
                job.external_id,
                job.phase or "not yet polled",
                job.record.resource,
            )

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
            spec = JobSpec(
                key=job_dir.name,
                label=record.label,
                resource=resource,
                cores=record.cores,
                memory_bytes=record.memory_bytes,
                time_limit_s=None,
                command=(),
                job_dir=job_dir,
            )
            self._jobs[ti.key] = _Job(ti.key, spec, record, None, external_id=external_id, attempts=1)
            self.running.add(ti.key)
            self.log.info("Adopted %s: %s job %s", record.label, backend_name, external_id)
        return not_adopted

    # -- inside: building and submitting jobs --------------------------------------------------

    def _job_for(self, workload: workloads.ExecuteTask) -> _Job:
        ti = workload.ti
        label = f"{ti.dag_id}.{ti.task_id}"
        placement = placement_from_config(ti.executor_config, label) or self._default_placement(label)
        resource = self._resources.get(placement.resource)
        if resource is None:
            raise AgoraError(
                f"task {label}: resource {placement.resource!r} is not in [agora] catalog "
                f"(known: {', '.join(sorted(self._resources)) or 'none'})"
            )
        job_dir = self._job_dir(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index)
        key = job_dir.name
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
        )
        spec = JobSpec(
            key=key,
            label=record.label,
            resource=resource.name,
            cores=placement.cores,
            memory_bytes=placement.memory_bytes,
            time_limit_s=placement.time_limit_s,
            command=tuple(worker_command(resource, placement, job_dir, s3_prefix=_s3_prefix(resource, label))),
            job_dir=job_dir,
            options=dict(resource.extra),
            environment=self._worker_environment(),
        )
        write_private(spec.workload_path, workload.model_dump_json())
        record.write(job_dir)
        return _Job(workload.ti.key, spec, record, workload)

    def _job_dir(self, dag_id: str, task_id: str, run_id: str, try_number: int, map_index: int) -> Path:
        """The one place an attempt's job directory is named: ``STATE_DIR/<job_key>`` (the key is also
        the job's name on every backend, and a pure function of the attempt, so a restart finds it)."""
        return self._state_dir / job_key(dag_id, task_id, run_id, try_number, map_index)

    def _default_placement(self, label: str) -> Placement:
        name = settings.get("default_resource")
        resource = self._resources.get(name)
        if resource is None:
            raise AgoraError(
                f"task {label} has no agora placement and [agora] default_resource "
                f"({name!r}) is not a resource of [agora] catalog"
            )
        return Placement(resource.name, 1, min(resource.memory_bytes, 2**30), source="default")

    def _worker_environment(self) -> dict[str, str]:
        """What a worker needs to reach Airflow: its config and the Execution API's URL.

        Not the scheduler's secrets under any name Airflow reads them by
        (:func:`~agora_optimizer.executor.environment.job_environment`): a task talks to Airflow
        through the Execution API with its own token, and a SLURM job's environment is kept by
        the cluster, so the metadata database's URL or the key that signs every task's token
        must not travel with it.
        """
        passed = job_environment(
            {k: v for k, v in os.environ.items() if k.startswith(("AIRFLOW", "PYTHON")) or k in {"PATH", "HOME"}}
        )
        passed["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = get_execution_api_server_url(self.conf)
        return passed

    def _submit(self, job: _Job) -> None:
        job.attempts += 1
        try:
            external_id = self._backend(job.record.backend).submit(job.spec)
        except BackendError as exc:
            self._submit_failed(job, exc)
            return
        except AgoraError as exc:
            self._submit_failed(job, BackendError(job.record.backend, str(exc), transient=False))
            return
        job.external_id = external_id
        job.submitted_at = time.monotonic()
        job.record = replace(job.record, external_id=external_id)
        job.record.write(job.spec.job_dir)
        full_id = format_external_id(job.record.backend, job.record.resource, external_id)
        self.change_state(job.key, _queued_state(), full_id, remove_running=False)
        self.log.info("Submitted %s to %s as %s", job.record.label, job.record.resource, full_id)

    def _submit_failed(self, job: _Job, exc: BackendError) -> None:
        retries = int(settings.get_float("submit_retries"))
        job.last_reason = exc.reason
        if exc.transient and job.attempts < retries:
            delay = min(settings.get_float("backoff_max_s"), 2.0 ** (job.attempts - 1))
            job.next_try_at = time.monotonic() + delay
            self.log.warning(
                "Submitting %s failed (%s); retry %d/%d in %.0f s", job.record.label, exc, job.attempts, retries, delay
            )
            return
        why = f"{exc} (after {job.attempts} attempts)" if exc.transient else str(exc)
        self._jobs.pop(job.key, None)
        self._report(job, JobStatus("finished", exit_code=1, reason=f"agora could not submit: {why}"))

    def _finish_unsubmitted(self, key: TaskInstanceKey, workload: workloads.ExecuteTask, reason: str) -> None:
        self.log.error("%s", reason)
        ti = workload.ti
        record = JobRecord(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index, "", "", 0, 0)
        self._write_trace(record, JobStatus("finished", exit_code=1, reason=reason))
        self.fail(key, reason)

    # -- inside: polling -----------------------------------------------------------------------

    def _sync(self) -> None:
        now = time.monotonic()
        for job in list(self._jobs.values()):
            if not job.external_id and now >= job.next_try_at:
                self._submit(job)
        by_backend: dict[str, list[_Job]] = {}
        for job in self._jobs.values():
            if job.external_id:
                by_backend.setdefault(job.record.backend, []).append(job)
        for backend_name, jobs in by_backend.items():
            self._poll(backend_name, jobs)

    def _poll(self, backend_name: str, jobs: list[_Job]) -> None:
        try:
            statuses = self._backend(backend_name).status([job.external_id for job in jobs])
        except (BackendError, AgoraError) as exc:
            since = self._outage_since.setdefault(backend_name, time.monotonic())
            down_s = time.monotonic() - since
            self.log.warning("Cannot poll %s for %d jobs (%s); down for %.0f s", backend_name, len(jobs), exc, down_s)
            if down_s > settings.get_float("backend_outage_s"):
                for job in jobs:
                    self._jobs.pop(job.key, None)
                    self._report(job, JobStatus("lost", reason=f"{backend_name} unreachable for {down_s:.0f} s: {exc}"))
                self._outage_since.pop(backend_name, None)
            return
        self._outage_since.pop(backend_name, None)
        for job in jobs:
            status = statuses.get(job.external_id) or JobStatus(
                "lost", reason=f"{backend_name} did not report job {job.external_id}"
            )
            self._note(job, status)
            if status.phase in ("finished", "lost"):
                self._jobs.pop(job.key, None)
                self._report(job, status)
            elif status.phase == "pending" and not self._cancel_if_waited_too_long(job, status):
                self._renew_token(job)

    def _why_not_stuck(self, job: _Job) -> str:
        """Why a job whose task Airflow sees QUEUED too long is not stuck, from the backend's answer now."""
        with contextlib.suppress(Exception):  # no answer: judge by the last poll
            status = self._backend(job.record.backend).status([job.external_id]).get(job.external_id)
            if status is not None:
                self._note(job, status)
        if job.phase == "pending":
            waited_s, limit_s = job.queue_wait_s(), settings.get_float("backend_queue_timeout_s")
            if waited_s <= limit_s:  # the wait _cancel_if_waited_too_long allows
                return (
                    f"waits in {job.record.resource}'s queue ({job.last_reason or 'pending'}) for {waited_s:.0f} s; "
                    f"[agora] backend_queue_timeout_s ({limit_s:.0f} s) bounds that wait, not task_queued_timeout"
                )
        if job.phase == "running" and job.running_since is not None:
            grace_s = self._task_queued_timeout_s()
            running_s = time.monotonic() - job.running_since
            if running_s < grace_s:
                return f"started on {job.record.resource} {running_s:.0f} s ago; its task has yet to report to Airflow"
        return ""

    def _note(self, job: _Job, status: JobStatus) -> None:
        """Keep what a poll said about a job that is still on its backend."""
        job.phase = status.phase
        job.last_reason = status.reason or job.last_reason
        job.queued_at = status.queued_at or job.queued_at
        if status.phase == "running" and job.running_since is None:
            job.running_since = time.monotonic()

    def _cancel_if_waited_too_long(self, job: _Job, status: JobStatus) -> bool:
        """Cancel a job pending longer than ``[agora] backend_queue_timeout_s`` and fail its task with why."""
        limit_s = settings.get_float("backend_queue_timeout_s")
        waited_s = job.queue_wait_s()
        if waited_s <= limit_s:
            return False
        with contextlib.suppress(Exception):
            self._backend(job.record.backend).cancel(job.external_id)
        self._jobs.pop(job.key, None)
        reason = (
            f"cancelled by agora after waiting {waited_s:.0f} s in {job.record.resource}'s queue "
            f"({status.reason or 'pending'}), over [agora] backend_queue_timeout_s = {limit_s:.0f} s"
        )
        self._report(job, replace(status, phase="finished", exit_code=143, reason=reason))
        return True

    def _renew_token(self, job: _Job) -> None:
        """Give a job that still waits in a queue a fresh token, so that it outlives the wait."""
        if job.workload is None or time.monotonic() - job.token_at < self._token_refresh_s():
            return
        token = job.workload.generate_token(str(job.workload.ti.id), self.jwt_generator)
        job.workload = job.workload.model_copy(update={"token": token})
        write_private(job.spec.workload_path, job.workload.model_dump_json())
        publish = getattr(self._backend(job.record.backend), "publish_workload", None)
        if publish is not None:  # a backend whose jobs cannot read the job dir (AWS) passes it on
            try:
                publish(job.spec)
            except AgoraError as exc:
                self.log.warning(
                    "Cannot pass %s its renewed token (%s); trying again at the next poll", job.record.label, exc
                )
                return
        job.token_at = time.monotonic()

    def _token_refresh_s(self) -> float:
        """``[agora] token_refresh_s``, but well within a token's life (``[scheduler] task_queued_timeout``)."""
        return min(settings.get_float("token_refresh_s"), self._task_queued_timeout_s() / 3)

    def _task_queued_timeout_s(self) -> float:
        return float(self.conf.get("scheduler", "task_queued_timeout", fallback="600") or 600)

    def _report(self, job: _Job, status: JobStatus) -> None:
        self._write_trace(job.record, status)
        if status.succeeded:
            self.success(job.key, format_external_id(job.record.backend, job.record.resource, job.external_id))
            return
        reason = status.reason or f"exit code {status.exit_code}"
        what = "out of memory" if status.oom_killed else ("lost" if status.phase == "lost" else "failed")
        message = f"agora: {job.record.label} on {job.record.resource or '?'} {what}: {reason}"
        self.log.error("%s", message)
        self.fail(job.key, message)

    def _write_trace(self, record: JobRecord, status: JobStatus) -> None:
        try:
            from agora_optimizer.traces.store import TraceStore, default_store_url

            if self._trace_store is None:  # opened once: a finished job must not pay for an engine
                self._trace_store = TraceStore(default_store_url())
            store = self._trace_store
            existing = [
                a
                for a in store.attempts(dag_id=record.dag_id, task_id=record.task_id, run_id=record.run_id)
                if (a.try_number, a.map_index) == (record.try_number, record.map_index)
            ]
            store.add([executor_attempt(record, status, existing[0] if existing else None)])
        except Exception as exc:  # traces must never fail a task: the row waits in the spool for the store
            try:
                kept = spool(executor_attempt(record, status, None), "executor")
            except Exception:
                self.log.exception("Could not write the trace of %s, nor keep it for later (%s)", record.label, exc)
                return
            self.log.warning("Trace store unreachable (%s); the row of %s waits in %s", exc, record.label, kept)
        job_dir = self._job_dir(record.dag_id, record.task_id, record.run_id, record.try_number, record.map_index)
        with contextlib.suppress(OSError):
            if job_dir.is_dir():
                _mark_traced(job_dir)  # the sweep leaves it alone

    def _replay_traces(self) -> None:
        """Write the rows that waited in the trace spool while the store was down (at most every few seconds)."""
        if time.monotonic() - self._last_replay < REPLAY_INTERVAL_S:
            return
        self._last_replay = time.monotonic()
        try:
            if not spool_pending():
                return
            from agora_optimizer.traces.store import TraceStore, default_store_url

            if self._trace_store is None:
                self._trace_store = TraceStore(default_store_url())
            written = replay_spool(self._trace_store)
        except Exception as exc:  # still down: the rows keep waiting
            self.log.warning("Trace store still unreachable (%s); %d rows wait in the spool", exc, spool_pending())
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
        adopt = getattr(backend, "adopt", None)
        if adopt is None:
            return True
        try:
            return bool(adopt(external_id, job_dir, resource))
        except Exception:
            self.log.exception("Adopting %s job %s failed", backend_name, external_id)
            return False


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
        if job_dir.name != job_key(record.dag_id, record.task_id, record.run_id, record.try_number, record.map_index):
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


def _mark_traced(job_dir: Path) -> None:
    write_private(job_dir / TRACED_MARK, "")


def _queued_state() -> Any:
    from airflow.utils.state import TaskInstanceState

    return TaskInstanceState.QUEUED


def format_external_id(backend: str, resource: str, external_id: str) -> str:
    return f"{ID_PREFIX}|{backend}|{resource}|{external_id}"


def parse_external_id(value: str) -> tuple[str, str, str] | None:
    """``(backend, resource, id)`` of an id this executor wrote, None for anything else."""
    parts = value.split("|", 3)
    if len(parts) != 4 or parts[0] != ID_PREFIX or not all(parts[1:]):
        return None
    return parts[1], parts[2], parts[3]


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


def _s3_prefix(resource: Resource, label: str) -> str:
    """``[agora] aws_s3_prefix`` for a task on an AWS resource (required there); '' elsewhere."""
    if resource.backend != "aws":
        return ""
    prefix = settings.get("aws_s3_prefix")
    if not prefix:
        raise AgoraError(
            f"task {label}: resource {resource.name} runs on AWS Batch, whose jobs get their workload and return "
            "their result through S3: set [agora] aws_s3_prefix (s3://bucket/path/)"
        )
    split_s3_url(prefix, what=f"task {label}: [agora] aws_s3_prefix")
    return prefix


def make_backend(name: str, resources: Mapping[str, Resource]) -> Backend:
    """The backend for one kind, configured from the catalog and ``[agora]``."""
    mine = [resource for resource in resources.values() if resource.backend == name]
    if name == "local":
        from agora_optimizer.executor.backends.local import LocalBackend, LocalPool

        return LocalBackend({resource.name: LocalPool.from_resource(resource) for resource in mine})
    if name == "slurm":
        from agora_optimizer.executor.backends.slurm import SlurmBackend
        from agora_optimizer.queue_wait.submissions import SubmissionLog

        record = settings.get_bool("slurm_record_queue_waits")
        return SlurmBackend(
            pilot_max_tasks=int(settings.get_float("slurm_pilot_max_tasks")),
            pilot_window_s=settings.get_float("slurm_pilot_window_s"),
            submissions=SubmissionLog(settings.get("queue_wait_store_url") or None) if record else None,
        )
    if name == "aws":
        from agora_optimizer.executor.backends.aws_batch import AwsBatchBackend

        return AwsBatchBackend.from_airflow(
            settings.get("aws_conn_id"), settings.get("aws_job_definition"), s3_prefix=settings.get("aws_s3_prefix")
        )
    raise AgoraError(f"unknown backend {name!r}")
