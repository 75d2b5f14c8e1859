"""The AgoraExecutor's tables and settings (:class:`ExecutorConfig`, read once when it starts), shared by its parts."""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import BaseExecutor

from agora_optimizer import settings
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.backends.registry import make_backend
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.placement import Placement
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus, MachineLease, job_key
from agora_optimizer.executor.lifecycle import Action, Event, Job, LifecycleConfig, Now
from agora_optimizer.executor.runs.leases import Leases
from agora_optimizer.executor.runs.machine_order import MachineOrder, ReplacedMachine, RunBook
from agora_optimizer.executor.runs.plans import RunPlans, airflow_run_times
from agora_optimizer.executor.runs.repair import Repairer, RunReports
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.instances import instance_id
from agora_optimizer.plans.store import default_plan_store
from agora_optimizer.runs.lease_record import LeaseRecord

if TYPE_CHECKING:
    from airflow.executors import workloads

    from agora_optimizer.runs.store import RunStore


SWEEP_INTERVAL_S = 20.0  # how often finished jobs nobody watched are traced (and not before the first adoption)
EXPIRE_INTERVAL_S = 3600.0  # how often job directories older than [agora] job_retention_days are deleted
OOM_RETRY_GROWTH = 1.5  # a retry after an OOM kill reserves this much more than the attempt that died
REPLAY_INTERVAL_S = 5.0  # how often rows spooled while the trace store was down are written again
PLANS_MAX = 256  # (dag_id, plan_version) orders kept; a plan is read once per pair
RUNS_MAX = 1024  # DAG runs whose machine book is kept
FALLBACKS_MAX = 4096  # task instances an interruption moved off spot, kept until their fallback's job ends


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


def clock_now() -> Now:
    """This moment on the executor's monotonic clock and on the wall clock."""
    return Now(time.monotonic(), datetime.now(UTC))


def plan_task(ti: Any) -> str:
    """The task instance's name in its plan: ``task[i]`` for a mapped task's instance."""
    return instance_id(ti.task_id, ti.map_index)


class ExecutorBase(BaseExecutor):
    """The executor's tables and settings, and the calls its parts make on each other.

    :class:`~agora_optimizer.executor.agora_executor.AgoraExecutor` is this and its parts (adoption,
    planned runs, building jobs, job directories, traces); the calls below are defined by the part
    that owns them, and declared here so that every part may make them."""

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
        # task instances (dag_id, task_id, run_id, map_index) an interruption moved off spot: their fallback
        self._on_fallback: BoundedDict[tuple[str, str, str, int], str] = BoundedDict(FALLBACKS_MAX)
        self._run_plans = RunPlans(
            default_plan_store, airflow_run_times, self.log
        )  # a run's own plan, where it has one

    @property
    def replaced_machines(self) -> list[ReplacedMachine]:
        """The planned machines whose backend refused them, whose tasks ran on their pool instead."""
        return self._leases.replaced

    @property
    def lease_records(self) -> list[LeaseRecord]:
        """The leases the backends released (real start and end), kept for the run record."""
        return self._leases.records

    def _feed(self, job: Job, event: Event) -> list[Action]:
        """Move ``job`` by ``event`` and carry out what the state machine says (the executor's own)."""
        raise NotImplementedError

    def _job_for(self, workload: workloads.ExecuteTask, *, write: bool = True) -> Job:
        """The job of ``workload`` at its placement (:mod:`~agora_optimizer.executor.jobs.building`)."""
        raise NotImplementedError

    def _lease_for(self, ti: Any, placement: Placement, resource: Resource) -> MachineLease | None:
        """The planned machine a task runs on (:mod:`~agora_optimizer.executor.planned_runs`)."""
        raise NotImplementedError

    def _repaired_placement(self, ti: Any, placement: Placement) -> Placement:
        """The placement a repair of the task's run gave it (:mod:`~agora_optimizer.executor.planned_runs`)."""
        raise NotImplementedError

    def _off_spot(self, ti: Any, placement: Placement) -> Placement:
        """The fallback's placement of a task an interruption moved off spot
        (:mod:`~agora_optimizer.executor.runs.interruptions`)."""
        raise NotImplementedError

    def _write_trace(self, record: JobRecord, status: JobStatus) -> None:
        """Write the job's row to the trace store (:mod:`~agora_optimizer.executor.jobs.tracing`)."""
        raise NotImplementedError

    def _backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = make_backend(name, self._resources)
        return self._backends[name]

    def _job_dir(self, dag_id: str, task_id: str, run_id: str, try_number: int, map_index: int) -> Path:
        """The one place an attempt's job directory is named: ``STATE_DIR/<job_key>`` (the key is also
        the job's name on every backend, and a pure function of the attempt, so a restart finds it)."""
        return self._state_dir / job_key(dag_id, task_id, run_id, try_number, map_index)
