"""The executor's job table: each job it is responsible for, in its latest version, by Airflow's task instance key.

A job (:class:`~agora_optimizer.executor.lifecycle.Job`) enters when Airflow hands its workload over or a
restarted scheduler adopts it, changes only by its lifecycle's transitions (:meth:`JobTable.keep` stores
each next version), and leaves only by the lifecycle's ``Forget`` action (:meth:`JobTable.forget`).
Everything else reads it: :meth:`JobTable.view` is the read-only view the executor shows (``AgoraExecutor.jobs``).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from types import MappingProxyType

from agora_optimizer.executor.lifecycle import Job, JobState


class JobTable:
    """The jobs by key; a job leaves it only by :meth:`forget`."""

    def __init__(self) -> None:
        self._jobs: dict[Hashable, Job] = {}

    def view(self) -> Mapping[Hashable, Job]:
        """The table, read only (it follows the table as it changes)."""
        return MappingProxyType(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._jobs

    def get(self, key: Hashable) -> Job | None:
        return self._jobs.get(key)

    def keep(self, job: Job) -> None:
        """Store the job's latest version (a job its lifecycle has just made ``done`` is not stored again)."""
        if job.state != JobState.DONE:
            self._jobs[job.key] = job

    def forget(self, key: Hashable) -> Job | None:
        """Take the job out of the table (the lifecycle's ``Forget``); the job it was, or None."""
        return self._jobs.pop(key, None)

    def jobs(self) -> list[Job]:
        """Every job now (a list: feeding one may change the table)."""
        return list(self._jobs.values())

    def in_state(self, state: JobState) -> list[Job]:
        return [job for job in self._jobs.values() if job.state == state]

    def on_backends(self) -> dict[str, list[Job]]:
        """The jobs a backend has (an external id), by backend name."""
        by_backend: dict[str, list[Job]] = {}
        for job in self._jobs.values():
            if job.external_id:
                by_backend.setdefault(job.record.backend, []).append(job)
        return by_backend

    def job_dir_names(self) -> set[str]:
        """The names of the jobs' directories (none of which is the state directory's to sweep or expire)."""
        return {job.spec.job_dir.name for job in self._jobs.values()}

    def lease_keys(self) -> frozenset[str]:
        """The keys of the leases the jobs run in (a lease is not released while a job holds it)."""
        return frozenset(job.spec.lease.key for job in self._jobs.values() if job.spec.lease is not None)
