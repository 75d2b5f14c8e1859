"""What the model sees of a queue when a job is submitted: the jobs ahead of it and its own request.

Partitions of one cluster often share nodes, so the jobs of the *other* partitions count too
(``other_*``). An unlimited time limit counts as :data:`UNLIMITED_TIME_LIMIT_S`. Pending jobs
that wait for a reason that does not clear by itself (held, over a partition limit) are not
ahead of anyone and are left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agora_optimizer.model.catalog import GIB
from agora_optimizer.slurm.queue import QueuedJob, QueueSnapshot

UNLIMITED_TIME_LIMIT_S = 7 * 86400.0
HOUR_S = 3600.0

NUMERIC_COLUMNS = (
    "pending_jobs",
    "pending_cores",
    "pending_memory_gib",
    "pending_time_limit_h",
    "pending_core_hours",
    "running_jobs",
    "running_cores",
    "running_remaining_h",
    "other_pending_jobs",
    "other_pending_cores",
    "other_running_cores",
    "cores",
    "memory_gib",
    "time_limit_h",
)
CATEGORICAL_COLUMNS = ("partition",)
FEATURE_COLUMNS = CATEGORICAL_COLUMNS + NUMERIC_COLUMNS


@dataclass(frozen=True)
class QueueFeatures:
    """The queue of ``partition`` as a job asking for ``cores``, ``memory_gib`` and ``time_limit_h`` found it."""

    partition: str
    pending_jobs: int
    pending_cores: int
    pending_memory_gib: float
    pending_time_limit_h: float
    pending_core_hours: float
    running_jobs: int
    running_cores: int
    running_remaining_h: float
    other_pending_jobs: int
    other_pending_cores: int
    other_running_cores: int
    cores: int
    memory_gib: float
    time_limit_h: float

    @classmethod
    def from_snapshot(
        cls,
        snapshot: QueueSnapshot,
        partition: str,
        cores: int,
        memory_bytes: int,
        time_limit_s: float | None,
        exclude_job_id: str | None = None,
    ) -> QueueFeatures:
        """Features of a job about to be (or just) submitted; ``exclude_job_id`` leaves the job itself out."""
        jobs = [job for job in snapshot.jobs if job.job_id != exclude_job_id and not job.blocked]
        mine = [job for job in jobs if job.in_partition(partition)]
        others = [job for job in jobs if not job.in_partition(partition)]
        pending = [job for job in mine if job.state == "pending"]
        running = [job for job in mine if job.state == "running"]
        now = snapshot.taken_at
        remaining_s = 0.0
        for job in running:
            elapsed_s = (now - job.started_at).total_seconds() if job.started_at else 0.0
            remaining_s += max(_limit_s(job) - elapsed_s, 0.0)
        return cls(
            partition=partition,
            pending_jobs=len(pending),
            pending_cores=sum(job.cores for job in pending),
            pending_memory_gib=sum(job.memory_bytes for job in pending) / GIB,
            pending_time_limit_h=sum(_limit_s(job) for job in pending) / HOUR_S,
            pending_core_hours=sum(job.cores * _limit_s(job) for job in pending) / HOUR_S,
            running_jobs=len(running),
            running_cores=sum(job.cores for job in running),
            running_remaining_h=remaining_s / HOUR_S,
            other_pending_jobs=sum(1 for job in others if job.state == "pending"),
            other_pending_cores=sum(job.cores for job in others if job.state == "pending"),
            other_running_cores=sum(job.cores for job in others if job.state == "running"),
            cores=cores,
            memory_gib=memory_bytes / GIB,
            time_limit_h=(UNLIMITED_TIME_LIMIT_S if time_limit_s is None else time_limit_s) / HOUR_S,
        )

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def _limit_s(job: QueuedJob) -> float:
    return UNLIMITED_TIME_LIMIT_S if job.time_limit_s is None else job.time_limit_s
