"""The base class every backend derives from: three calls it must make, and optional hooks.

A backend (local pools, SLURM, AWS Batch) runs a :class:`~agora_optimizer.executor.jobs.spec.JobSpec`
and reports :class:`~agora_optimizer.executor.jobs.spec.JobStatus` by the external id ``submit``
returned. The executor calls every hook below on every backend: a backend that has nothing to
do for one keeps the no-op default, so the executor never asks whether a backend "has" a call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus, MachineLease
from agora_optimizer.runs.lease_record import LeaseRecord


class Backend:
    """The calls the executor makes. Only ``submit`` and ``status`` may raise BackendError."""

    name: str = ""

    def submit(self, job: JobSpec) -> str:
        """Start (or queue) the job; return its external id, unique within this backend."""
        raise NotImplementedError(f"backend {self.name!r} does not implement submit")

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """The status of each id; an id the backend no longer knows maps to phase ``lost``."""
        raise NotImplementedError(f"backend {self.name!r} does not implement status")

    def cancel(self, external_id: str) -> None:
        """Stop the job if it still runs; never raises."""
        raise NotImplementedError(f"backend {self.name!r} does not implement cancel")

    # -- optional hooks: no-ops unless a backend has something to do -----------------------------

    def start(self) -> None:
        """Get ready ahead of the first job (the local pools start their fork server)."""

    def flush(self, *, force: bool = False) -> None:
        """Submit what is still being gathered (a SLURM pilot); ``force``: now, not when its window ends."""

    def poll_queue_waits(self, *, force: bool = False) -> None:
        """Record the queue waits of the jobs that started (SLURM's submission log), when due or ``force``."""

    def close(self) -> None:
        """Release what the backend holds open (a database connection); its jobs keep running."""

    def publish_workload(self, job: JobSpec) -> None:
        """Pass a rewritten ``workload.json`` (a renewed token) to a job that cannot read the job directory."""

    def adopt(self, external_id: str, job_dir: Path, resource: str) -> bool:
        """Take over a job an earlier scheduler submitted; False if it cannot be watched from here."""
        return True

    # -- planned machines: a backend that runs each planned machine as one allocation --------------

    def open_lease(self, lease: MachineLease) -> None:
        """Get the planned machine ahead of its first task (a SLURM allocation sized as its type).

        Raises BackendError when the machine cannot be had (node down, queue disabled, count
        exhausted): the executor then re-places its tasks. Jobs whose ``JobSpec.lease`` is this
        lease run inside it; the default runs them as any other job."""

    def lease_lead_s(self, resource: str) -> float:
        """How long before a machine's planned start its lease should be asked for: the predicted wait
        between asking and holding it (a SLURM allocation's queue wait). 0: when its first task arrives."""
        return 0.0

    def close_lease(self, lease: MachineLease) -> None:
        """Release the planned machine: its last task has ended (or will never come). Never raises."""

    def finished_leases(self) -> list[LeaseRecord]:
        """The allocations released since the last call, with their real start and end (each once)."""
        return []
