"""Adoption after a restart: a restarted scheduler takes over the jobs an earlier one submitted.

The job's external id, ``agora|<backend>|<resource>|<id>``, is stored in Airflow as the task's
``external_executor_id``; :meth:`Adoption.try_adopt_task_instances` parses it, asks the backend to
watch the job again, and feeds the state machine an ``Adopted`` event. A job on a planned machine
takes its lease over too, and its run's book is started on the plan clock the earlier scheduler had.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.executor_base import ExecutorBase, clock_now, plan_task
from agora_optimizer.executor.jobs.placement import Placement
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobSpec, MachineLease
from agora_optimizer.executor.lifecycle import Adopted, Job, parse_external_id
from agora_optimizer.executor.runs.repair import clock_at

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance


class Adoption(ExecutorBase):
    """Takes over the jobs an earlier scheduler submitted."""

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
            lease = self._adopted_lease(ti, record)
            spec = JobSpec(
                key=job_dir.name,
                label=record.label,
                resource=resource,
                cores=record.cores,
                memory_bytes=record.memory_bytes,
                time_limit_s=None,
                command=(),
                job_dir=job_dir,
                lease=lease,
            )
            self.running.add(ti.key)
            self._feed(Job(ti.key, spec, record), Adopted(external_id))
        return not_adopted

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
        new_book = (ti.dag_id, ti.run_id) not in self._books
        lease = self._lease_for(ti, placement, resource)
        book = self._books.get((ti.dag_id, ti.run_id))
        if lease is None or book is None:
            return None
        planned = book.order.by_task.get(plan_task(ti))
        started = getattr(ti, "start_date", None)
        started = started if isinstance(started, datetime) else None
        now = clock_now()
        if new_book and planned is not None and started is not None:
            # The run's plan clock as the earlier scheduler had it, near enough: the task began at its planned start.
            book.origin_s = now.monotonic_s - (now.wall - started).total_seconds() - planned.start_s
        book.start(plan_task(ti), clock_at(book, now.monotonic_s, now.wall, started))
        return lease

    def _adopt(self, backend_name: str, resource: str, external_id: str, job_dir: Path) -> bool:
        try:
            backend = self._backend(backend_name)
        except AgoraError:
            return False
        try:
            return bool(backend.adopt(external_id, job_dir, resource))
        except Exception:
            self.log.exception("Adopting %s job %s failed", backend_name, external_id)
            return False
