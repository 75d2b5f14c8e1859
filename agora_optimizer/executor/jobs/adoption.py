"""Adoption after a restart: a restarted scheduler takes over the jobs an earlier one submitted.

The job's external id, ``agora|<backend>|<resource>|<id>``, is stored in Airflow as the task's
``external_executor_id``; :meth:`Adoption.take_over` parses it, reads the job's ``job.json`` and asks the
backend to watch the job again. The executor then feeds the job's state machine an ``Adopted`` event; a
job on a planned machine takes its lease over too, and its run's book is started on the plan clock the
earlier scheduler had (the run machine's ``AdoptedOnMachine``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backend_set import BackendSet
from agora_optimizer.executor.jobs.directories import JobDirectories
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobSpec, MachineLease
from agora_optimizer.executor.lifecycle import Job, parse_external_id


@dataclass(frozen=True)
class TakenOver:
    """A job an earlier scheduler submitted, which its backend watches again from here."""

    backend: str
    resource: str
    external_id: str
    job_dir: Path
    record: JobRecord

    def job(self, key: Hashable, lease: MachineLease | None) -> Job:
        """The job as the executor's table holds it (its command and limits are the backend's already)."""
        spec = JobSpec(
            key=self.job_dir.name,
            label=self.record.label,
            resource=self.resource,
            cores=self.record.cores,
            memory_bytes=self.record.memory_bytes,
            time_limit_s=None,
            command=(),
            job_dir=self.job_dir,
            lease=lease,
        )
        return Job(key, spec, self.record)


class Adoption:
    """Takes over the jobs an earlier scheduler submitted (``directories`` finds their ``job.json``, ``backends``
    watch them again)."""

    def __init__(self, directories: JobDirectories, backends: BackendSet, log: Any) -> None:
        self._directories = directories
        self._backends = backends
        self._log = log

    def take_over(self, ti: Any) -> TakenOver | None:
        """The job of Airflow's task instance ``ti``, watched again; None when it is not this executor's, its
        ``job.json`` is gone, or its backend cannot watch it from here."""
        parsed = parse_external_id(ti.external_executor_id or "")
        if parsed is None:
            return None
        backend_name, resource, external_id = parsed
        job_dir = self._directories.job_dir(ti.dag_id, ti.task_id, ti.run_id, ti.try_number, ti.map_index)
        record = JobRecord.read(job_dir)
        if record is None or not self._adopt(backend_name, resource, external_id, job_dir):
            return None
        return TakenOver(backend_name, resource, external_id, job_dir, record)

    def _adopt(self, backend_name: str, resource: str, external_id: str, job_dir: Path) -> bool:
        try:
            backend = self._backends.get(backend_name)
        except AgoraError:
            return False
        try:
            return bool(backend.adopt(external_id, job_dir, resource))
        except Exception:
            self._log.exception("Adopting %s job %s failed", backend_name, external_id)
            return False
