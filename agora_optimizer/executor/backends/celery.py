"""The ``celery`` backend of the AgoraExecutor: it runs nothing, and says so.

A catalog resource with ``backend: celery`` is a Celery queue that Airflow's CeleryExecutor feeds
(:mod:`agora_optimizer.integration.celery_pools`): the cluster policy routes a task planned there to
that executor, never to the AgoraExecutor. A task that reaches the AgoraExecutor with such a
placement all the same (its DAG file sets ``executor="agora"`` itself, or the Celery executor was
added to ``[core] executor`` after the DAG was parsed) is refused at submission, naming the task,
the resource and what to change; the task fails with that reason instead of waiting forever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus
from agora_optimizer.integration.celery_pools import CELERY_BACKEND
from agora_optimizer.model.workflow import shown


class CeleryPoolRefusal(Backend):
    """Refuses every job: a Celery pool's tasks are the CeleryExecutor's to run."""

    name = CELERY_BACKEND

    def submit(self, job: JobSpec) -> str:
        raise BackendError(
            self.name,
            f"task {job.label}: resource {shown(job.resource)} is a Celery pool (backend celery); the AgoraExecutor "
            "does not run its tasks. Let the cluster policy route the task (list [agora] celery_executor in "
            "[core] executor and re-parse the DAG), or plan it on a resource of another backend",
            transient=False,
        )

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        return {
            external_id: JobStatus("lost", reason="the AgoraExecutor runs no Celery pool's job")
            for external_id in external_ids
        }

    def cancel(self, external_id: str) -> None:
        """Nothing of a Celery pool runs here: nothing to stop."""
