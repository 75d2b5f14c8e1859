"""From Airflow's workload to a job: the placement lookup (the plan's, the run's own plan's, a repair's, the
default), a Celery pool's task refused (:func:`refuse_celery_pool`), the job directory, the worker's command
and environment (:class:`JobBuilder`).

Each workload becomes a :class:`~agora_optimizer.executor.jobs.spec.JobSpec` for the backend of its
resource; the job runs the agora worker, which runs Airflow's own ``execute_workload`` under the
placement's memory, CPU and time limits.
"""

from __future__ import annotations

import errno
import fnmatch
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.executors.base_executor import get_execution_api_server_url

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.config import OOM_RETRY_GROWTH, ExecutorConfig
from agora_optimizer.executor.jobs.directories import JobDirectories, set_aside
from agora_optimizer.executor.jobs.records import JobRecord, plan_task
from agora_optimizer.executor.jobs.spec import JobSpec, MachineLease, read_result
from agora_optimizer.executor.lifecycle import Job
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.executor.worker.environment import job_environment
from agora_optimizer.executor.worker.preemption import SPOT_ENV
from agora_optimizer.model.catalog import CELERY_BACKEND, Resource
from agora_optimizer.model.placement import Placement, placement_environment, placement_from_config
from agora_optimizer.model.workflow import shown

if TYPE_CHECKING:
    from airflow.executors import workloads

    from agora_optimizer.executor.backend_set import BackendSet
    from agora_optimizer.executor.runs.machine import RunMachine
    from agora_optimizer.executor.runs.plans import PlanReader


LeaseFor = Callable[[Any, Placement, Resource], MachineLease | None]
"""The lease a task instance placed on a planned machine runs in (opened with its backend if need be), or None."""


class CeleryPoolRefused(AgoraError):
    """A task placed on a Celery pool reached the AgoraExecutor, which does not run a Celery pool's tasks."""


def refuse_celery_pool(resource: Resource, task: str) -> None:
    """CeleryPoolRefused, naming ``task``, the pool and what to change, when ``resource`` is a Celery pool:
    its tasks are the CeleryExecutor's to run, never the AgoraExecutor's
    (:mod:`~agora_optimizer.integration.celery_pools`)."""
    if resource.backend == CELERY_BACKEND:
        raise CeleryPoolRefused(
            f"task {task}: resource {shown(resource.name)} is a Celery pool (backend celery); the AgoraExecutor "
            "does not run its tasks. Let the cluster policy route the task (list [agora] celery_executor in "
            "[core] executor and re-parse the DAG), or plan it on a resource of another backend"
        )


class JobBuilder:
    """Builds each workload's job at its placement.

    ``plans`` reads the run plans, ``runs`` is the run machine (a repair's or a fallback's placement),
    ``lease_for`` gives a task on a planned machine its lease, ``directories`` names the job directories,
    ``backends`` give the worker's command as their machines run it; ``config`` is the executor's
    (``default_resource``, ``task_environment``), ``conf`` Airflow's (the Execution API's URL), ``log`` its logger.
    """

    def __init__(
        self,
        config: ExecutorConfig,
        resources: Mapping[str, Resource],
        directories: JobDirectories,
        backends: BackendSet,
        plans: PlanReader,
        runs: RunMachine,
        lease_for: LeaseFor,
        conf: Any,
        log: Any,
    ) -> None:
        self.config = config
        self._resources = resources
        self._directories = directories
        self._backends = backends
        self._plans = plans
        self._runs = runs
        self._lease_for = lease_for
        self._conf = conf
        self._log = log

    def job(self, workload: workloads.ExecuteTask, *, write: bool = True) -> Job:
        """The job of ``workload`` at its placement (a repair's for its run, else its run plan's, else its
        ``executor_config``'s: :mod:`~agora_optimizer.executor.runs.plans`), moved off spot after an interruption;
        ``write``: its workload and ``job.json`` are written (a moved held job's are written by its ``Moved``)."""
        ti = workload.ti
        label = f"{ti.dag_id}.{plan_task(ti)}"
        parsed = placement_from_config(ti.executor_config, label, ti.map_index)
        run_plan = self._plans.run_plan(ti.dag_id, ti.run_id)
        followed = run_plan.placement(plan_task(ti), parsed) if run_plan is not None else None
        placement = followed or parsed or self._default_placement(label)
        placement = self._runs.repaired_placement((ti.dag_id, ti.run_id), plan_task(ti), placement)
        instance = (ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
        placement = self._runs.fallback_placement(instance, placement)  # an interruption moved it off spot
        resource = self._resources.get(placement.resource)
        if resource is None:
            raise AgoraError(
                f"task {label}: resource {shown(placement.resource)} is not in [agora] catalog "
                f"(known: {', '.join(sorted(self._resources)) or 'none'})"
            )
        refuse_celery_pool(resource, label)  # the CeleryExecutor's to run (the cluster policy routes it there)
        placement = self._grown_after_oom_kill(placement, resource, ti)
        job_dir = self._directories.job_dir(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index)
        key = job_dir.name
        if write and (aside := set_aside(job_dir)) is not None:
            self._log.info("agora: %s try %d is queued again; its earlier job is in %s", label, ti.try_number, aside)
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
        command = self._backends.get(resource.backend).worker_command(
            job_dir,
            resource.name,
            memory_bytes=placement.memory_bytes,
            time_limit_s=placement.time_limit_s,
            label=label,
        )
        lease = self._lease_for(ti, placement, resource)
        spec = JobSpec(
            key=key,
            label=record.label,
            resource=resource.name,
            cores=placement.cores,
            memory_bytes=placement.memory_bytes,
            time_limit_s=placement.time_limit_s,
            command=tuple(command),
            job_dir=job_dir,
            options=dict(resource.extra),
            environment={
                **self.worker_environment(),
                **placement_environment(placement, resource.backend),
                **({SPOT_ENV: "1"} if resource.spot else {}),  # the worker tells a preemption from a cancel
            },
            lease=lease,
            gpus=placement.gpus,
        )
        if write:
            write_private(spec.workload_path, workload.model_dump_json())
            record.write(job_dir)
        return Job(workload.ti.key, spec, record, workload)

    def _grown_after_oom_kill(self, placement: Placement, resource: Resource, ti: Any) -> Placement:
        """A retry after an OOM kill asks for more memory than the attempt that died.

        The same reservation would be killed again: :data:`OOM_RETRY_GROWTH` times what the killed try
        reserved (its ``job.json``), at most the resource's memory. Any other retry keeps its placement.
        """
        if ti.try_number <= 1:
            return placement
        before = self._directories.job_dir(ti.dag_id, ti.task_id, ti.run_id, ti.try_number - 1, ti.map_index)
        result, killed = read_result(before / "result.json"), JobRecord.read(before)
        if result is None or not result.oom_killed or killed is None:
            return placement
        grown = min(resource.memory_bytes, math.ceil(killed.memory_bytes * OOM_RETRY_GROWTH))
        if grown <= placement.memory_bytes:
            return placement
        self._log.warning(
            "agora: %s try %d reserves %d bytes of memory, not %d: try %d was killed for memory at %d",
            f"{ti.dag_id}.{ti.task_id}", ti.try_number, grown, placement.memory_bytes, ti.try_number - 1,
            killed.memory_bytes,
        )  # fmt: skip
        return replace(placement, memory_bytes=grown)

    def _default_placement(self, label: str) -> Placement:
        name = self.config.default_resource
        resource = self._resources.get(name)
        if resource is None:
            raise AgoraError(
                f"task {label} has no agora placement and [agora] default_resource "
                f"({name!r}) is not a resource of [agora] catalog"
            )
        return Placement(resource.name, 1, min(resource.memory_bytes, 2**30), source="default")

    def worker_environment(self) -> dict[str, str]:
        """What a worker needs to reach Airflow: its config and the Execution API's URL, and the variables
        ``[agora] task_environment`` names (what the DAG files read when they are parsed).

        Not the scheduler's secrets under any name Airflow reads them by
        (:func:`~agora_optimizer.executor.worker.environment.job_environment`): a task talks to Airflow
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
        passed["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] = get_execution_api_server_url(self._conf)
        return passed


def unwritable(workload: workloads.ExecuteTask, state_dir: Path, exc: OSError) -> str:
    """Why a task could not get its job directory, naming the task, the directory and the errno (ENOSPC...)."""
    ti = workload.ti
    code = errno.errorcode.get(exc.errno or 0, "OSError")
    return (
        f"task {ti.dag_id}.{ti.task_id} run {ti.run_id} try {ti.try_number}: agora cannot write its job "
        f"directory under [agora] state_dir {state_dir}: {code}: {exc.strerror or exc}"
    )
