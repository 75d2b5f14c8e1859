"""Celery pools: catalog resources with ``backend: celery``, run by Airflow's CeleryExecutor.

A Celery pool is a Celery queue served by Celery workers on machines of the resource's type
(``airflow celery worker --queues <resource>``, one worker per machine, as many worker
processes as the type has cores). The AgoraExecutor does not run its tasks (it has no backend for
them): the cluster policy (:mod:`agora_optimizer.integration.policy`) hands each task planned on one
to the CeleryExecutor, with :func:`routed`:

- ``executor``: ``[agora] celery_executor`` (``CeleryExecutor``), which must be one of
  ``[core] executor``; when it is not, :class:`CeleryExecutorNotConfigured` is raised and the
  policy leaves the task as written, with its one log line for the DAG's parse;
- ``queue``: the resource's name, the queue its workers serve;
- ``executor_config["agora"]``: the placement, as for every planned task, plus the hints
  ``backend`` (``celery``) and ``resource_type`` (the resource) from which the trace listener
  records where the attempt ran (no agora worker sets ``$AGORA_RESOURCE_TYPE`` there).

A task that reaches the AgoraExecutor placed on a Celery pool all the same (its DAG file sets
``executor="agora"`` itself, or the Celery executor was added to ``[core] executor`` after the DAG
was parsed, or a run's own plan places it there) is refused where the executor decides its placement
(:func:`~agora_optimizer.executor.jobs.building.refuse_celery_pool`), naming the task, the pool and what
to change: it fails at once instead of waiting forever.

The trace listener names the Celery worker that ran each attempt in its ``host`` field
(:func:`worker_name`): the worker's node name (``pool_small@node1``), or ``$AGORA_WORKER_NAME``
where a deployment sets it on the worker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Mapping
from typing import Any

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import CELERY_BACKEND, Resource
from agora_optimizer.model.workflow import shown

WORKER_NAME_ENV = "AGORA_WORKER_NAME"


class CeleryExecutorNotConfigured(AgoraError):
    """A task is planned on a Celery pool, but ``[agora] celery_executor`` is not in ``[core] executor``."""


def routed(changes: Mapping[str, Any], resource: Resource | None, executors: Collection[str]) -> dict[str, Any]:
    """The policy's ``changes`` for a task placed on ``resource``: as they are unless it is a Celery pool.

    ``changes`` holds ``executor``, ``queue`` and ``executor_config`` (with its ``agora`` placement);
    ``executors`` are the names ``[core] executor`` lists. Raises CeleryExecutorNotConfigured,
    naming the pool and the setting, when the Celery executor is not among them.
    """
    if resource is None or resource.backend != CELERY_BACKEND:
        return dict(changes)
    executor = settings.get("celery_executor")
    if executor not in executors:
        raise CeleryExecutorNotConfigured(
            f"it is planned on Celery pool {shown(resource.name)}, but [agora] celery_executor {executor!r} "
            f"is not in [core] executor ({', '.join(sorted(executors)) or 'empty'})"
        )
    config = dict(changes.get("executor_config") or {})
    config["agora"] = dict(config.get("agora") or {}) | {"backend": CELERY_BACKEND, "resource_type": resource.name}
    return dict(changes) | {"executor": executor, "queue": resource.name, "executor_config": config}


def worker_name() -> str:
    """The Celery worker this task process runs under: ``$AGORA_WORKER_NAME``, else the node name of the
    worker whose task forked this process (``pool_small@node1``), else "" (not under Celery).

    Celery is never imported here: outside a Celery worker it is not in ``sys.modules``.
    """
    named = os.environ.get(WORKER_NAME_ENV, "").strip()
    if named:
        return named
    celery = sys.modules.get("celery")
    if celery is None:
        return ""
    try:
        request = getattr(celery.current_task, "request", None)  # the worker's task that runs this workload
        hostname = getattr(request, "hostname", None)
    except Exception:  # no current task, or a Celery without it: not a name to guess
        return ""
    return hostname if isinstance(hostname, str) else ""
