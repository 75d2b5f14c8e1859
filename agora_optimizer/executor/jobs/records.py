"""What the executor knows about one job, on disk, and the trace row it writes when the job ends.

``JOB_DIR/job.json`` is written before submission: the attempt's identity, the resource,
and (after submission) the backend's external id. A scheduler that restarts reads it to
adopt the job. When the job ends the executor writes its trace row: the listener in the
task process may already have written one for the same attempt (runtime, operator); the
executor's row adds what only it knows (resource, backend, host, queue time, and the peak
memory and CPU time the worker measured, which the listener leaves to the worker) and,
for a backend-level failure the task process could not report (an OOM kill, a signal, a
lost job), the state and the reason.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from agora_optimizer.executor.jobs.spec import JobStatus, job_key
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.model.instances import instance_id
from agora_optimizer.traces.records import AttemptState, TaskAttempt
from agora_optimizer.traces.spool import BACKEND_FAILURES


@dataclass(frozen=True)
class JobRecord:
    dag_id: str
    task_id: str
    run_id: str
    try_number: int
    map_index: int
    resource: str
    backend: str
    cores: int
    memory_bytes: int
    external_id: str = ""
    machine: str = ""  # the planned machine (TYPE#N) it runs on, "" when no plan placed it
    plan_version: str = ""  # the version of the plan that placed it

    @property
    def key(self) -> str:
        """The attempt's job key: the name of its job directory (and of its job on every backend)."""
        return job_key(self.dag_id, self.task_id, self.run_id, self.try_number, self.map_index)

    @property
    def plan_task(self) -> str:
        """The task's name in its plan: ``task[i]`` for a mapped task's instance."""
        return instance_id(self.task_id, self.map_index)

    @property
    def label(self) -> str:
        mapped = f"[{self.map_index}]" if self.map_index >= 0 else ""
        return f"{self.dag_id}.{self.task_id}{mapped} run {self.run_id} try {self.try_number}"

    def write(self, job_dir: Path) -> None:
        job_dir.mkdir(parents=True, exist_ok=True)
        write_private(job_dir / "job.json", json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, job_dir: Path) -> JobRecord | None:
        try:
            raw = json.loads((job_dir / "job.json").read_text())
            optional = {name for name, spec in cls.__dataclass_fields__.items() if spec.default is not MISSING}
            return cls(**{name: raw[name] for name in cls.__dataclass_fields__ if name in raw or name not in optional})
        except (OSError, ValueError, KeyError, TypeError):
            return None


def plan_task(ti: Any) -> str:
    """A task instance's name in its plan (Airflow's ``TaskInstance``, or its workload's): ``task[i]`` for a
    mapped task's instance."""
    return instance_id(ti.task_id, ti.map_index)


def attempt_state(status: JobStatus) -> AttemptState:
    """The trace state of a job that ended (``success`` here means the process exited 0)."""
    if status.phase == "lost":
        return "lost"
    if status.interrupted:  # the provider took the machine back (spot, preemption): not the task's failure
        return "interrupted"
    if status.oom_killed:
        return "oom_killed"
    if status.exit_code in (130, 143) and "cancel" in status.reason.lower():
        return "cancelled"
    return "success" if status.exit_code == 0 else "failed"


def executor_attempt(record: JobRecord, status: JobStatus, existing: TaskAttempt | None) -> TaskAttempt:
    """The row to write: the listener's row (if any) completed with the executor's view."""
    runtime = _seconds(status.started_at, status.ended_at)
    state = attempt_state(status)
    base = existing or TaskAttempt(
        dag_id=record.dag_id,
        task_id=record.task_id,
        run_id=record.run_id,
        try_number=record.try_number,
        map_index=record.map_index,
        started_at=status.started_at,
        ended_at=status.ended_at,
        runtime_s=runtime,
        peak_rss_bytes=status.peak_rss_bytes or None,
        cpu_time_s=status.cpu_time_s,
        state=state,
    )
    backend_failure = state in BACKEND_FAILURES or (state == "failed" and existing is None)
    return replace(
        base,
        resource_type=record.resource,
        backend=record.backend,
        host=status.host or base.host,
        requested_cores=record.cores,
        requested_memory_bytes=record.memory_bytes,
        queued_at=status.queued_at or base.queued_at,
        peak_rss_bytes=base.peak_rss_bytes or status.peak_rss_bytes or None,
        cpu_time_s=base.cpu_time_s if base.cpu_time_s is not None else status.cpu_time_s,
        state=state if backend_failure else base.state,
        error_text=status.reason if backend_failure else base.error_text,
        machine=record.machine or base.machine,
        plan_version=record.plan_version or base.plan_version,
    )


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end - start).total_seconds())
