"""AgoraExecutor: runs each Airflow task on the resource its plan chose.

Why one module of some 650 lines: it decides nothing (the two state machines below do) and holds
every bit of I/O they leave to it, Airflow's calls and the carrying out of each machine's actions,
a few lines each; split, one action's effect would be looked for in several files.

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

**Two state machines decide; this class acts.** Each job's life is the pure state machine of
:mod:`~agora_optimizer.executor.lifecycle` (a submit came back, a poll answered, Airflow revoked the
task); what spans jobs (each planned run's book, repairs, leases, spot fallbacks, backends' outages) is
the run machine of :mod:`~agora_optimizer.executor.runs.machine`. The executor feeds both events and
carries out the actions they return, each machine's in one place (:meth:`AgoraExecutor._carry_out`,
:meth:`AgoraExecutor._carry_out_runs`): every bit of I/O with Airflow (events, its metadata database:
:mod:`~agora_optimizer.executor.airflow_db`), the backends and the run store is here. A job leaves the
executor's table only by the lifecycle's ``Forget`` action. Its settings are read once, when it starts
(:class:`~agora_optimizer.executor.config.ExecutorConfig`).

The parts it is made of, plain classes each given what it needs: the job table
(:class:`~agora_optimizer.executor.jobs.table.JobTable`), the backends in use
(:class:`~agora_optimizer.executor.backend_set.BackendSet`), the plan reader
(:class:`~agora_optimizer.executor.runs.plans.PlanReader`), the run machine, the re-planner
(:class:`~agora_optimizer.executor.runs.replanner.Replanner`), the job builder
(:class:`~agora_optimizer.executor.jobs.building.JobBuilder`: placement, job directory, worker command),
the job directories (:class:`~agora_optimizer.executor.jobs.directories.JobDirectories`: the sweep of jobs
that ended while no scheduler watched, expiry), the trace writer
(:class:`~agora_optimizer.executor.jobs.tracing.TraceWriter`), the token renewal
(:class:`~agora_optimizer.executor.jobs.tokens.TokenRenewal`), the run reports
(:class:`~agora_optimizer.executor.runs.reports.RunReports`) and adoption
(:class:`~agora_optimizer.executor.jobs.adoption.Adoption`: a restarted scheduler takes over running jobs,
by the ``agora|<backend>|<resource>|<id>`` external id Airflow stores).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor import airflow_db
from agora_optimizer.executor.airflow_pools import ensure_pools
from agora_optimizer.executor.backend_set import BackendSet
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.backends.registry import make_backends
from agora_optimizer.executor.config import ExecutorConfig, clock_now
from agora_optimizer.executor.jobs.adoption import Adoption
from agora_optimizer.executor.jobs.building import JobBuilder, unwritable
from agora_optimizer.executor.jobs.directories import JobDirectories
from agora_optimizer.executor.jobs.records import JobRecord, plan_task
from agora_optimizer.executor.jobs.spec import BackendError, JobStatus, MachineLease
from agora_optimizer.executor.jobs.table import JobTable
from agora_optimizer.executor.jobs.tokens import TokenRenewal
from agora_optimizer.executor.jobs.tracing import TraceWriter
from agora_optimizer.executor.lifecycle import (
    Accepted,
    Action,
    Adopted,
    Cancel,
    Event,
    Forget,
    Heartbeat,
    Job,
    JobState,
    Log,
    Moved,
    Now,
    RefuseRevoke,
    RenewToken,
    Report,
    ReportQueued,
    Revoked,
    StatusPolled,
    Submit,
    SubmitFailed,
    Submitted,
    WriteRecord,
    transition,
)
from agora_optimizer.executor.runs.events import (
    AdoptedOnMachine,
    AskAheadDue,
    CloseLease,
    FeedJob,
    HeldJob,
    HeldWaiting,
    Interrupted,
    JobLeft,
    LeaseGranted,
    LeaseOpened,
    LeaseRefused,
    LeasesDue,
    LeaseWanted,
    MoveHeld,
    OpenLease,
    PollAnswered,
    PollUnanswered,
    ReadStates,
    RecordLeases,
    RecordRepair,
    RepairsDue,
    Replan,
    ReplanFailed,
    Replanned,
    Reprioritize,
    Requeue,
    Requeued,
    RerunOnFallback,
    RunAction,
    RunEvent,
    StatesDue,
    StatesRead,
    StatusRead,
    TryEnded,
)
from agora_optimizer.executor.runs.machine import RunMachine
from agora_optimizer.executor.runs.machine_order import ReplacedMachine
from agora_optimizer.executor.runs.plans import PlanReader
from agora_optimizer.executor.runs.replanner import Replanner
from agora_optimizer.executor.runs.reports import RunReports
from agora_optimizer.executor.state_files import check_state_dir
from agora_optimizer.io.catalog_file import merged_catalog
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.placement import Placement
from agora_optimizer.plans.store import default_plan_store
from agora_optimizer.runs.lease_record import LeaseRecord

if TYPE_CHECKING:
    from airflow.executors import workloads
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey


_LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class AgoraExecutor(BaseExecutor):
    """Routes each task to a local pool, a SLURM partition or an AWS Batch queue."""

    is_local = False
    serve_logs = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._assemble(ExecutorConfig(), {}, Path(), {})  # start() assembles them again from [agora]

    def _assemble(
        self,
        config: ExecutorConfig,
        resources: Mapping[str, Resource],
        state_dir: Path,
        backends: Mapping[str, Backend],
    ) -> None:
        """Make the executor's parts, each given what it needs (``backends``: those of the catalog, made at start)."""
        self._config = config
        self._resources = resources
        self._jobs = JobTable()
        self._backends = BackendSet(resources, backends)
        self._trace = TraceWriter(state_dir, self.log)
        self._directories = JobDirectories(state_dir, self._jobs, self._trace, config.job_retention_days, self.log)
        self._plans = PlanReader(default_plan_store, airflow_db.run_times, resources, self.log)
        self._runs = RunMachine(config, resources)
        self._replanner = Replanner(config.catalog, resources)
        self._reports = RunReports()  # released leases and repairs on their way to the run store
        self._builder = JobBuilder(
            config,
            resources,
            self._directories,
            self._backends,
            self._plans,
            self._runs,
            self._lease_for,
            self.conf,
            self.log,
        )
        self._adoption = Adoption(self._directories, self._backends, self.log)
        self._tokens = TokenRenewal(self._backends, lambda: self.jwt_generator, self.log)

    # -- what the executor shows -------------------------------------------------------------

    @property
    def config(self) -> ExecutorConfig:
        """The settings, read once at start; a new value reaches every part (as a restart with it would)."""
        return self._config

    @config.setter
    def config(self, config: ExecutorConfig) -> None:
        self._config = config
        self._runs.config = config
        self._builder.config = config
        self._directories.retention_days = config.job_retention_days

    @property
    def jobs(self) -> Mapping[Hashable, Job]:
        """The jobs the executor is responsible for, by Airflow's task instance key (read only)."""
        return self._jobs.view()

    @property
    def backends(self) -> BackendSet:
        return self._backends

    @property
    def runs(self) -> RunMachine:
        return self._runs

    @property
    def builder(self) -> JobBuilder:
        return self._builder

    @property
    def job_dirs(self) -> JobDirectories:
        return self._directories

    @property
    def tokens(self) -> TokenRenewal:
        return self._tokens

    @property
    def trace(self) -> TraceWriter:
        return self._trace

    @property
    def replaced_machines(self) -> list[ReplacedMachine]:
        """The planned machines whose backend refused them, whose tasks ran on their pool instead."""
        return self._runs.replaced

    @property
    def lease_records(self) -> list[LeaseRecord]:
        """The leases the backends released (real start and end), kept for the run record."""
        return list(self._reports.released)

    # -- Airflow's calls ---------------------------------------------------------------------

    def start(self) -> None:
        config = ExecutorConfig.from_settings(self._task_queued_timeout_s())
        # Capacity is the backends' to enforce (a local pool queues what does not fit, SLURM and
        # Batch queue too); Airflow hands over up to this many so that no slot waits for a round trip.
        self.parallelism = config.parallelism
        resources = merged_catalog(config.catalog).by_name
        # Each backend of the catalog, its settings read and checked now: a bad one fails the start, naming its option.
        backends = make_backends(resources)
        state_dir = settings.directory("state_dir", "jobs", mode=0o700)  # private whatever the umask
        check_state_dir(state_dir)  # others able to write there could plant symlinks where jobs' files go
        self._assemble(config, resources, state_dir, backends)
        self._start_backends()
        if config.airflow_pools:
            try:
                ensure_pools(resources.values())
            except Exception:  # tasks then wait in Airflow for a pool that is missing, which its UI shows
                self.log.exception("Could not create the Airflow pools agora_<resource> ([agora] airflow_pools)")
        self.log.info(
            "AgoraExecutor started: %d resources (%s), jobs in %s",
            len(resources),
            ", ".join(f"{r.name}:{r.backend}" for r in resources.values()),
            state_dir,
        )

    def _start_backends(self) -> None:
        """Get each backend ready ahead of its first job (the local pools start their fork server with the
        executor, as the LocalExecutor starts its workers)."""
        for name, backend in self._backends.made().items():
            try:
                backend.start()
            except Exception:  # its first job gets it ready instead
                self.log.exception("Could not start backend %s ahead of its first task", name)

    def end(self) -> None:
        """Stop tracking. Submitted jobs keep running; the next scheduler adopts them."""
        self._tick_backends(force=True)  # what a backend still gathers (a SLURM pilot) is submitted now
        self.sync()
        for backend in self._backends.made().values():
            with contextlib.suppress(Exception):
                backend.close()
        self._trace.close()
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
                job = self._builder.job(workload)
            except AgoraError as exc:
                self._finish_unsubmitted(key, workload, str(exc))
                continue
            except OSError as exc:  # e.g. ENOSPC: raised here it would stop the scheduler's loop
                self._finish_unsubmitted(key, workload, unwritable(workload, self._directories.state_dir, exc))
                continue
            self._feed(job, Accepted())

    def sync(self) -> None:
        """Submit what is due, poll every backend, report what ended. Never raises."""
        try:
            self._sync()
            self._directories.maintain()
            self._tick_backends()
            self._trace.replay()
            self._reports.flush(self._trace.store, time.monotonic(), self.log)
        except Exception:  # the scheduler's loop must survive anything a backend does
            self.log.exception("AgoraExecutor sync failed; will try again on the next heartbeat")

    def _tick_backends(self, *, force: bool = False) -> None:
        """Let each backend do what is due (``force``: now), whether or not any of its jobs was polled."""
        for backend in self._backends.made().values():
            with contextlib.suppress(Exception):  # tick never raises; a backend that does must not stop sync
                backend.tick(force=force)

    def revoke_task(self, *, ti: TaskInstance) -> None:
        """Cancel the task's job, except one that waits in its backend's queue or has just started.

        Airflow revokes a task that stays QUEUED longer than ``[scheduler] task_queued_timeout``
        (and requeues it, twice, then fails it). A job pending in a SLURM partition, a Batch
        queue or a full local pool is not stuck: it would lose its place in the queue and fail
        after three timeouts. So such a job is kept, and ``[agora] backend_queue_timeout_s``
        bounds its wait instead (the lifecycle's poll); so is a job that started less than
        ``task_queued_timeout`` ago (its task has not told Airflow yet). ``NotImplementedError``
        is how an executor tells the scheduler that it does not revoke (the scheduler skips its
        stuck tasks for this round); a waiting job's token is renewed (``[agora] token_refresh_s``).
        """
        job = self._jobs.get(ti.key)
        if job is not None:
            status = None
            if job.external_id:
                with contextlib.suppress(Exception):  # no answer: judge by the last poll
                    status = self._backends.get(job.record.backend).status([job.external_id]).get(job.external_id)
            refused = [action for action in self._feed(job, Revoked(status)) if isinstance(action, RefuseRevoke)]
            if refused:
                raise NotImplementedError(refused[0].reason)
        self.queued_tasks.pop(ti.key, None)
        self.running.discard(ti.key)

    def try_adopt_task_instances(self, tis: Sequence[TaskInstance]) -> Sequence[TaskInstance]:
        not_adopted: list[TaskInstance] = []
        for ti in tis:
            taken = self._adoption.take_over(ti)
            if taken is None:
                not_adopted.append(ti)
                continue
            lease = self._adopted_lease(ti, taken.record)
            self.running.add(ti.key)
            self._feed(taken.job(ti.key, lease), Adopted(taken.external_id))
        return not_adopted

    def _task_queued_timeout_s(self) -> float:
        return float(self.conf.get("scheduler", "task_queued_timeout", fallback="600") or 600)

    # -- the jobs' lifecycle -----------------------------------------------------------------

    def _feed(self, job: Job, event: Event) -> list[Action]:
        """Move ``job`` by ``event`` (:func:`~agora_optimizer.executor.lifecycle.transition`), keep its
        next version in the table, and carry out what the transition says; returns those actions."""
        job, actions = transition(job, event, clock_now(), self._config.lifecycle)
        self._jobs.keep(job)
        self._carry_out(actions)
        return actions

    def _carry_out(self, actions: Sequence[Action]) -> None:
        """The one place the executor acts on what a job's state machine decided."""
        for action in actions:
            if isinstance(action, Submit):
                self._submit(self._jobs_key(action.key))
            elif isinstance(action, WriteRecord):
                action.record.write(action.spec.job_dir)
            elif isinstance(action, ReportQueued):
                self.change_state(action.key, _queued_state(), action.full_external_id, remove_running=False)  # type: ignore[arg-type]
            elif isinstance(action, Cancel):
                with contextlib.suppress(Exception):
                    self._backends.get(action.backend).cancel(action.external_id)
            elif isinstance(action, RenewToken):
                job = self._jobs_key(action.key)
                renewed = self._tokens.renew(job)
                if renewed is not None:
                    self._feed(job, renewed)
            elif isinstance(action, Report):
                self._report(action.job, action.status)
            elif isinstance(action, Log):
                self.log.log(_LOG_LEVELS[action.level], "%s", action.message)
            elif isinstance(action, Forget):
                forgotten = self._jobs.forget(action.key)
                if forgotten is not None and forgotten.state != JobState.HELD:
                    self._run_event(JobLeft(forgotten.record, forgotten.spec.lease is not None))
            elif isinstance(action, RefuseRevoke):
                pass  # revoke_task raises it to the scheduler
            else:  # pragma: no cover - every action of the lifecycle is handled above
                raise AgoraError(f"AgoraExecutor cannot carry out {action!r}")

    def _jobs_key(self, key: Hashable) -> Job:
        job = self._jobs.get(key)
        if job is None:  # pragma: no cover - the lifecycle asks only for the job it has just kept
            raise AgoraError(f"AgoraExecutor has no job {key!r}")
        return job

    def _submit(self, job: Job) -> None:
        try:
            external_id = self._backends.get(job.record.backend).submit(job.spec)
        except BackendError as exc:
            self._feed(job, SubmitFailed(str(exc), exc.reason, exc.transient))
            return
        except AgoraError as exc:
            refused = BackendError(job.record.backend, str(exc), transient=False)
            self._feed(job, SubmitFailed(str(refused), refused.reason, transient=False))
            return
        self._feed(job, Submitted(external_id))

    def _report(self, job: Job, status: JobStatus) -> None:
        if status.interrupted and self._rerun_on_fallback(job, status):
            return  # the same try runs again on the spot type's fallback: Airflow hears of its end only
        self._trace.write(job.record, status)
        self._run_event(TryEnded(job.record, status))
        if status.succeeded:
            self.success(job.key, job.full_external_id)  # type: ignore[arg-type]
            return
        reason = status.reason or f"exit code {status.exit_code}"
        what = "out of memory" if status.oom_killed else ("lost" if status.phase == "lost" else "failed")
        what = "interrupted (its capacity was taken back)" if status.interrupted else what
        message = f"agora: {job.record.label} on {job.record.resource or '?'} {what}: {reason}"
        self.log.error("%s", message)
        self.fail(job.key, message)  # type: ignore[arg-type]

    def _finish_unsubmitted(self, key: TaskInstanceKey, workload: workloads.ExecuteTask, reason: str) -> None:
        self.log.error("%s", reason)
        ti = workload.ti
        record = JobRecord(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index, "", "", 0, 0)
        self._trace.write(record, JobStatus("finished", exit_code=1, reason=reason))
        self.fail(key, reason)

    # -- the runs' machine -------------------------------------------------------------------

    def _sync(self) -> None:
        for job in self._jobs.in_state(JobState.PENDING_SUBMIT):
            self._feed(job, Heartbeat())
        for backend_name, jobs in self._jobs.on_backends().items():
            self._poll(backend_name, jobs)
        self._run_event(RepairsDue())  # after the polls (a late end, a failure), before the held jobs' turn
        self._release_held()  # after the polls: a machine a task has just left has room now
        self._ask_ahead()
        self._run_event(LeasesDue(self._jobs.lease_keys()))
        for backend in self._backends.made().values():
            with contextlib.suppress(Exception):
                self._reports.add_released(backend.finished_leases())

    def _poll(self, backend_name: str, jobs: list[Job]) -> None:
        try:
            statuses = self._backends.get(backend_name).status([job.external_id for job in jobs])
        except (BackendError, AgoraError) as exc:
            self._run_event(PollUnanswered(backend_name, tuple(job.key for job in jobs), str(exc)))
            return
        self._run_event(PollAnswered(backend_name))
        for job in jobs:
            status = statuses.get(job.external_id) or JobStatus(
                "lost", reason=f"{backend_name} did not report job {job.external_id}"
            )
            self._run_event(StatusRead(job.record, job.spec.lease is not None, status))
            self._feed(job, StatusPolled(status))

    def _release_held(self) -> None:
        """Let go each held job whose machine's order allows it (earliest planned first), heartbeat the rest."""
        now = clock_now()
        held = [
            HeldJob(job.key, job.record, job.spec.lease is not None, job.held_since_s)
            for job in self._jobs.in_state(JobState.HELD)
        ]
        self._run_event(StatesDue(frozenset((job.record.dag_id, job.record.run_id) for job in held)), now)
        for job in self._runs.release_order(held):
            self._run_event(HeldWaiting(job), now)

    def _ask_ahead(self) -> None:
        """Ask for the machines whose backend predicts a wait for them, that long before their planned start.
        Only machines of this executor's backends: a plan's Celery pool has none (the CeleryExecutor runs it)."""
        backends = self._backends.made()
        lead_s = {
            name: backends[backend].lease_lead_s(name)
            for name in self._runs.unused_machine_resources()
            if (backend := self._resources[name].backend) in backends
        }
        self._run_event(AskAheadDue(lead_s))

    def _lease_for(self, ti: Any, placement: Placement, resource: Resource) -> MachineLease | None:
        """The planned machine a task runs on (its lease open with the backend), or None: it runs as any task."""
        if not placement.machine or placement.source != "plan":
            return None
        run = (ti.dag_id, ti.run_id)
        order = self._runs.order_of(run, placement.plan_version) or self._plans.order(ti.dag_id, placement.plan_version)
        if order is None:
            return None
        done = self._run_event(LeaseWanted(run, plan_task(ti), placement, order, resource.backend))
        return next((action.lease for action in done if isinstance(action, LeaseGranted)), None)

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
        run = (ti.dag_id, ti.run_id)
        new_book = self._runs.book(run) is None
        lease = self._lease_for(ti, placement, resource)
        if lease is None or self._runs.book(run) is None:
            return None
        started = getattr(ti, "start_date", None)
        self._run_event(
            AdoptedOnMachine(run, plan_task(ti), started if isinstance(started, datetime) else None, new_book)
        )
        return lease

    def _rerun_on_fallback(self, job: Job, status: JobStatus) -> bool:
        """Re-run an interrupted spot job's try on its fallback; False: report the interruption to Airflow."""
        ti_id = None if job.workload is None else job.workload.ti.id
        done = self._run_event(Interrupted(job.record, status, ti_id))
        rerun = next((action for action in done if isinstance(action, RerunOnFallback)), None)
        if rerun is None or job.workload is None:
            return False
        record = job.record
        try:
            again = self._builder.job(self._tokens.fresh(job.workload))
        except (AgoraError, OSError) as exc:
            self.log.error(
                "agora: cannot re-run %s on %s after its interruption: %s", record.label, rerun.fallback, exc
            )
            return False
        self.log.warning(
            "agora: %s was interrupted on spot %s (%s); re-running it on %s (on demand), same try",
            record.label, record.resource, status.reason or "capacity taken back", rerun.fallback,
        )  # fmt: skip
        self._feed(again, Accepted())
        return True

    def _run_event(self, event: RunEvent, now: Now | None = None) -> list[RunAction]:
        """Feed the run machine ``event`` (at ``now``, else this moment) and carry out what it says; returns
        every action carried out, those of the events they fed back included."""
        return self._carry_out_runs(self._runs.handle(event, now or clock_now()))

    def _carry_out_runs(self, actions: Sequence[RunAction]) -> list[RunAction]:
        """The one place the executor acts on what the run machine decided."""
        done: list[RunAction] = []
        for action in actions:
            done.append(action)
            if isinstance(action, Log):
                self.log.log(_LOG_LEVELS[action.level], "%s", action.message)
            elif isinstance(action, FeedJob):
                job = self._jobs.get(action.key)
                if job is not None:
                    self._feed(job, action.event)
            elif isinstance(action, OpenLease):
                done += self._open_lease(action)
            elif isinstance(action, CloseLease):
                with contextlib.suppress(Exception):  # close_lease never raises; a backend that does must not stop sync
                    self._backends.get(action.backend).close_lease(action.lease)
            elif isinstance(action, ReadStates):
                try:
                    states = airflow_db.task_states(*action.run)
                except Exception as exc:  # the metadata database is the scheduler's; a hiccup only delays the order
                    self.log.warning("agora: cannot read the task states of %s run %s: %s", *action.run, exc)
                    continue
                done += self._run_event(StatesRead(action.run, states))
            elif isinstance(action, Replan):
                done += self._replan(action)
            elif isinstance(action, MoveHeld):
                self._move_held(action)
            elif isinstance(action, Reprioritize):
                try:
                    airflow_db.reprioritize(*action.run, action.weights)
                except Exception as exc:  # the order Airflow queues in only helps the plan: never stop the sync
                    self.log.warning("agora: cannot re-weight the tasks of %s run %s: %s", *action.run, exc)
            elif isinstance(action, RecordRepair):
                self._reports.add_repair(*action.run, action.repair)
            elif isinstance(action, RecordLeases):
                self._reports.add_leases(list(action.leases))
            elif isinstance(action, Requeue):
                done += self._requeue(action)
            elif isinstance(action, LeaseGranted | RerunOnFallback):
                pass  # the caller that fed the event reads it
            else:  # pragma: no cover - every action of the run machine is handled above
                raise AgoraError(f"AgoraExecutor cannot carry out {action!r}")
        return done

    def _open_lease(self, action: OpenLease) -> list[RunAction]:
        try:
            self._backends.get(action.backend).open_lease(action.lease)
        except AgoraError as exc:  # BackendError: the machine cannot be had; its tasks are re-placed
            reason = exc.reason if isinstance(exc, BackendError) else str(exc)
            return self._run_event(LeaseRefused(action.run, action.machine, action.plan_version, reason))
        opened = LeaseOpened(
            action.run, action.lease, action.backend, action.order, action.plan_version, action.ahead_s
        )
        return self._run_event(opened)

    def _replan(self, action: Replan) -> list[RunAction]:
        """Re-plan the run and apply the answer; any error leaves the run as planned: a plan never stops a DAG."""
        try:
            fixed = self._replanner.replan(
                action.book, action.repair, action.now_s, list(action.drifts), action.runtime_factors,
                action.memory_factors,
            )  # fmt: skip
            return self._run_event(Replanned(action.run, fixed))
        except Exception as exc:
            return self._run_event(ReplanFailed(action.run, action.drifts, str(exc)))

    def _move_held(self, action: MoveHeld) -> None:
        """Each held job of the run whose task a repair put on another machine goes there."""
        for job in self._jobs.jobs():
            record = job.record
            if job.state != JobState.HELD or (record.dag_id, record.run_id) != action.run:
                continue
            new = action.overrides.get(record.plan_task)
            lease = job.spec.lease
            if new is None or job.workload is None or (lease is not None and lease.machine == new.machine):
                continue
            moved = self._builder.job(job.workload, write=False)
            self._feed(job, Moved(moved.spec, moved.record, action.reason))

    def _requeue(self, action: Requeue) -> list[RunAction]:
        """Put an interrupted try back in Airflow's queue, for its re-run on the fallback."""
        try:
            why_not = airflow_db.requeue_task_instance(action.ti_id, action.record.try_number)
        except Exception as exc:  # the metadata database is the scheduler's: a hiccup costs Airflow's retry
            why_not = f"cannot put the try back in Airflow's queue: {exc}"
        return self._run_event(Requeued(action.record, action.status, action.fallback, why_not))


def _queued_state() -> Any:
    from airflow.utils.state import TaskInstanceState

    return TaskInstanceState.QUEUED
