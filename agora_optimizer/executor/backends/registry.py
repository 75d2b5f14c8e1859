"""Which backend runs the resources of each kind: a registry of factories, by backend name.

The catalog names a backend per resource (``local``, ``slurm``, ``aws``, ``celery``); the executor
asks :func:`make_backend` for it the first time one of its jobs needs it. The built-in factories
read their ``[agora]`` settings when they make their backend (``celery``'s refuses every job: the
CeleryExecutor runs those); the executor reads and checks them once before, when it starts
(:func:`check_backend_settings`), so that a bad value fails the scheduler's start naming its option,
not the first task on that backend. A test (or a site) registers its own factory under a name with
:func:`register_backend`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.model.catalog import Resource

if TYPE_CHECKING:
    from agora_optimizer.executor.backends.aws_batch import ComputeNetwork

BackendFactory = Callable[[Mapping[str, Resource]], Backend]
"""Makes a backend for the catalog's resources of its kind (by name)."""


def _local(resources: Mapping[str, Resource]) -> Backend:
    from agora_optimizer.executor.backends.local import LocalBackend, LocalPool

    return LocalBackend({resource.name: LocalPool.from_resource(resource) for resource in resources.values()})


@dataclass(frozen=True)
class SlurmSettings:
    """The SLURM backend's ``[agora]`` settings, checked."""

    pilot_max_tasks: int
    pilot_window_s: float
    record_queue_waits: bool
    queue_wait_store_url: str


def slurm_settings() -> SlurmSettings:
    """``[agora] slurm_*`` and ``queue_wait_store_url``; AgoraError naming the option of a bad value."""
    pilot_max_tasks = settings.get_float("slurm_pilot_max_tasks")
    if not 0 <= pilot_max_tasks < math.inf:
        raise AgoraError(f"[agora] slurm_pilot_max_tasks must be >= 0, got {pilot_max_tasks!r}")
    pilot_window_s = settings.get_float("slurm_pilot_window_s")
    if not 0 <= pilot_window_s < math.inf:
        raise AgoraError(f"[agora] slurm_pilot_window_s must be >= 0 seconds, got {pilot_window_s!r}")
    return SlurmSettings(
        pilot_max_tasks=int(pilot_max_tasks),
        pilot_window_s=pilot_window_s,
        record_queue_waits=settings.get_bool("slurm_record_queue_waits"),
        queue_wait_store_url=settings.get("queue_wait_store_url"),
    )


def _slurm(resources: Mapping[str, Resource]) -> Backend:
    from agora_optimizer.executor.backends.slurm import SlurmBackend
    from agora_optimizer.queue_wait.submissions import SubmissionLog

    read = slurm_settings()
    return SlurmBackend(
        pilot_max_tasks=read.pilot_max_tasks,
        pilot_window_s=read.pilot_window_s,
        submissions=SubmissionLog(read.queue_wait_store_url or None) if read.record_queue_waits else None,
        resources=resources,
    )


@dataclass(frozen=True)
class AwsSettings:
    """The AWS Batch backend's ``[agora] aws_*`` settings, checked."""

    conn_id: str
    job_definition: str
    s3_prefix: str
    compute_network: ComputeNetwork | None


def aws_settings() -> AwsSettings:
    """``[agora] aws_*``; AgoraError (or BackendError) naming the option of a bad value. No AWS client is made."""
    from agora_optimizer.executor.worker.remote_files import split_s3_url

    s3_prefix = settings.get("aws_s3_prefix")
    if s3_prefix:
        split_s3_url(s3_prefix, what="[agora] aws_s3_prefix")
    return AwsSettings(
        conn_id=settings.get("aws_conn_id"),
        job_definition=settings.get("aws_job_definition"),
        s3_prefix=s3_prefix,
        compute_network=aws_compute_network(),
    )


def _aws(resources: Mapping[str, Resource]) -> Backend:
    from agora_optimizer.executor.backends.aws_batch import AwsBatchBackend

    read = aws_settings()
    return AwsBatchBackend.from_airflow(
        read.conn_id,
        read.job_definition,
        s3_prefix=read.s3_prefix,
        resources=resources,
        compute_network=read.compute_network,
    )


def aws_compute_network() -> ComputeNetwork | None:
    """The network of the compute environments agora may create (``[agora] aws_subnets`` ...), None when
    none of its settings is set; AgoraError naming what is missing when only some are."""
    from agora_optimizer.executor.backends.aws_batch import ComputeNetwork

    values = {
        "aws_subnets": _listed(settings.get("aws_subnets")),
        "aws_security_group_ids": _listed(settings.get("aws_security_group_ids")),
        "aws_instance_role": _listed(settings.get("aws_instance_role")),
    }
    if not any(values.values()):
        return None
    missing = [key for key in _NETWORK_KEYS if not values[key]]
    if missing:
        raise AgoraError(
            f"[agora] {', '.join(k for k in _NETWORK_KEYS if values[k])} set but not {', '.join(missing)}: "
            "agora creates a compute environment per planned instance type only with all three"
        )
    return ComputeNetwork(
        subnets=values["aws_subnets"],
        security_group_ids=values["aws_security_group_ids"],
        instance_role=values["aws_instance_role"][0],
        service_role=settings.get("aws_service_role") or None,
        spot_fleet_role=settings.get("aws_spot_fleet_role") or None,
    )


_NETWORK_KEYS = ("aws_subnets", "aws_security_group_ids", "aws_instance_role")


def _listed(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _celery(resources: Mapping[str, Resource]) -> Backend:
    from agora_optimizer.executor.backends.celery import CeleryPoolRefusal

    return CeleryPoolRefusal()


_FACTORIES: dict[str, BackendFactory] = {"local": _local, "slurm": _slurm, "aws": _aws, "celery": _celery}
_SETTINGS: dict[str, Callable[[], object]] = {"slurm": slurm_settings, "aws": aws_settings}


def check_backend_settings(names: Iterable[str]) -> None:
    """Read and check the ``[agora]`` settings of the built-in backends ``names`` (as the executor's start
    does for its catalog's); AgoraError naming the option of the first bad value. Makes no backend."""
    for name in sorted(set(names)):
        reader = _SETTINGS.get(name)
        if reader is not None:
            reader()


def register_backend(name: str, factory: BackendFactory) -> BackendFactory | None:
    """Make the backend ``name`` with ``factory`` from now on; returns the factory it replaces (to restore)."""
    if not name:
        raise AgoraError("register_backend: a backend needs a name")
    previous = _FACTORIES.get(name)
    _FACTORIES[name] = factory
    return previous


def unregister_backend(name: str, previous: BackendFactory | None = None) -> None:
    """Undo :func:`register_backend`: restore ``previous``, or forget the name."""
    if previous is None:
        _FACTORIES.pop(name, None)
    else:
        _FACTORIES[name] = previous


def registered_backends() -> tuple[str, ...]:
    return tuple(sorted(_FACTORIES))


def make_backend(name: str, resources: Mapping[str, Resource]) -> Backend:
    """The backend ``name`` for the catalog's resources of that kind (the others are not passed)."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise AgoraError(f"unknown backend {name!r} (registered: {', '.join(registered_backends())})")
    return factory({key: resource for key, resource in resources.items() if resource.backend == name})
