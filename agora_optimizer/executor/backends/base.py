"""The one interface of a backend: three calls each must make, the worker's command, and hooks every backend has.

A backend (local pools, SLURM, AWS Batch) runs a :class:`~agora_optimizer.executor.jobs.spec.JobSpec`
and reports :class:`~agora_optimizer.executor.jobs.spec.JobStatus` by the external id ``submit``
returned. It is made once, when the executor starts (:func:`~agora_optimizer.executor.backends.registry.make_backends`),
by its :meth:`Backend.from_settings`, which reads and checks its ``[agora]`` settings then: a bad
value fails the scheduler's start naming its option, not the first task. Making a backend opens
nothing that could fail for a while (an AWS session opens at its first call).

The executor calls every hook below on every backend, and knows none by name: a backend that has
nothing to do for one keeps the default. The hooks:

- :meth:`Backend.worker_command`, the agora worker's command line as the backend's machines run it;
- :meth:`Backend.start` when the executor starts, :meth:`Backend.tick` on every heartbeat (and
  with ``force`` as the scheduler stops), :meth:`Backend.close` last;
- :meth:`Backend.adopt` for a job an earlier scheduler submitted, :meth:`Backend.publish_workload`
  when a job's ``workload.json`` was rewritten (a renewed token);
- planned machines: :meth:`Backend.open_lease`, :meth:`Backend.lease_lead_s`,
  :meth:`Backend.close_lease`, :meth:`Backend.finished_leases`.

The words of planned machines, the same in every backend: a *lease*
(:class:`~agora_optimizer.executor.jobs.spec.MachineLease`) is the executor's request for one planned
machine; the *allocation* is what a backend holds for it (a slice of a local pool, a SLURM job run
by the pilot driver, a Batch queue of exactly its type); a *lease record*
(:class:`~agora_optimizer.runs.lease_record.LeaseRecord`) is how an allocation really ran,
reported once it has ended.
"""

from __future__ import annotations

import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus, MachineLease
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord

WORKER_MODULE = "agora_optimizer.executor.worker"  # python -m WORKER_MODULE: the worker package's __main__


class Backend(ABC):
    """The calls the executor makes. Only ``submit`` and ``status`` may raise BackendError."""

    name: ClassVar[str] = ""

    @classmethod
    def from_settings(cls, resources: Mapping[str, Resource]) -> Backend:
        """The backend for the catalog's ``resources`` of its kind, its ``[agora]`` settings read and
        checked now (AgoraError naming the option of a bad value). A backend made otherwise (a test's,
        a site's) is registered with a factory instead
        (:func:`~agora_optimizer.executor.backends.registry.register_backend`)."""
        raise AgoraError(f"backend {cls.name or cls.__name__!r} is not made from settings: register a factory for it")

    @abstractmethod
    def submit(self, job: JobSpec) -> str:
        """Start (or queue) the job; return its external id, unique within this backend."""

    @abstractmethod
    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """The status of each id; an id the backend no longer knows maps to phase ``lost``."""

    @abstractmethod
    def cancel(self, external_id: str) -> None:
        """Stop the job if it still runs; never raises."""

    def worker_command(
        self, job_dir: Path, resource: str, *, memory_bytes: int, time_limit_s: float | None, label: str
    ) -> list[str]:
        """The agora worker's command line for a job of ``resource`` (the task ``label``) in ``job_dir``,
        with its memory and time limits: this interpreter, working in the job directory, which the
        backend's machines share with the scheduler. AgoraError naming the task when the backend
        cannot run it as configured."""
        return worker_argv(sys.executable, str(job_dir), memory_bytes=memory_bytes, time_limit_s=time_limit_s)

    # -- the executor's life: no-ops unless a backend has something to do -------------------------

    def start(self) -> None:
        """Get ready ahead of the first job (the local pools start their fork server)."""

    def tick(self, *, force: bool = False) -> None:
        """Do what is due, on every heartbeat, whether or not any job was polled (a SLURM pilot whose window
        has passed is submitted, the queue waits seen are stored); ``force``: all of it now, not when due
        (the scheduler stops). Never raises."""

    def close(self) -> None:
        """The scheduler stops: finish what is pending and release what the backend holds open (a database
        connection); its jobs keep running. Never raises."""

    def adopt(self, external_id: str, job_dir: Path, resource: str) -> bool:
        """Take over a job an earlier scheduler submitted; False if it cannot be watched from here."""
        return True

    def publish_workload(self, job: JobSpec) -> None:
        """``job.workload_path`` was rewritten (a renewed token): pass it on where the job reads it, if not
        from its job directory (AWS Batch: S3). BackendError when that fails (the executor tries again)."""

    # -- planned machines -------------------------------------------------------------------------

    def open_lease(self, lease: MachineLease) -> None:
        """Get the planned machine's allocation ahead of its first task (a SLURM allocation sized as its type).

        Raises BackendError when the machine cannot be had (node down, queue disabled, count
        exhausted): the executor then re-places its tasks. Jobs whose ``JobSpec.lease`` is this
        lease run in its allocation; the default runs them as any other job."""

    def lease_lead_s(self, resource: str) -> float:
        """How long before a machine's planned start its lease should be asked for: the predicted wait
        between asking and holding it (a SLURM allocation's queue wait). 0: when its first task arrives."""
        return 0.0

    def close_lease(self, lease: MachineLease) -> None:
        """Release the planned machine's allocation: its last task has ended (or will never come). Never raises."""

    def finished_leases(self) -> list[LeaseRecord]:
        """The allocations that ended since the last call, with their real start and end (each once)."""
        return []


def worker_argv(
    python: str,
    worker_dir: str,
    *,
    memory_bytes: int,
    time_limit_s: float | None,
    workload_url: str = "",
    result_url: str = "",
    cpu_set: Sequence[int] = (),
) -> list[str]:
    """The agora worker run by ``python`` in ``worker_dir``: where it fetches its workload and returns its
    result when it cannot read the job directory (S3 URLs), its memory limit, the CPUs it pins itself and
    every task process to (none: unpinned) and its time limit."""
    command = [python, "-m", WORKER_MODULE, "--job-dir", worker_dir]
    if workload_url:
        command += ["--workload-url", workload_url, "--result-url", result_url]
    command += ["--memory-bytes", str(memory_bytes)]
    if cpu_set:
        command += ["--cpu-set", ",".join(str(cpu) for cpu in cpu_set)]
    if time_limit_s is not None:
        command += ["--time-limit-s", f"{time_limit_s:g}"]
    return command
