"""Which backend runs the resources of each kind: a registry of factories, by backend name.

The catalog names a backend per resource (``local``, ``slurm``, ``aws``; ``celery`` pools are run by
Airflow's CeleryExecutor, never by the AgoraExecutor). When the executor starts, :func:`make_backends`
makes each backend its catalog names, once, with its resources: a built-in backend by its
:meth:`~agora_optimizer.executor.backends.base.Backend.from_settings`, which reads and checks its
``[agora]`` settings then, so that a bad value fails the scheduler's start naming its option, not the
first task on that backend. A test (or a site) registers its own factory under a name with
:func:`register_backend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.model.catalog import CELERY_BACKEND, Resource

BackendFactory = Callable[[Mapping[str, Resource]], Backend]
"""Makes a backend for the catalog's resources of its kind (by name)."""

# The built-in backends, imported when first made (AWS's imports boto3, which a catalog without AWS never needs).
_BUILT_IN: dict[str, str] = {
    "local": "agora_optimizer.executor.backends.local.backend:LocalBackend",
    "slurm": "agora_optimizer.executor.backends.slurm.backend:SlurmBackend",
    "aws": "agora_optimizer.executor.backends.aws.backend:AwsBatchBackend",
}
_FACTORIES: dict[str, BackendFactory] = {}  # registered by name; they replace a built-in of that name


def register_backend(name: str, factory: BackendFactory) -> BackendFactory | None:
    """Make the backend ``name`` with ``factory`` from now on; returns the factory it replaces (to restore)."""
    if not name:
        raise AgoraError("register_backend: a backend needs a name")
    previous = _FACTORIES.get(name)
    _FACTORIES[name] = factory
    return previous


def unregister_backend(name: str, previous: BackendFactory | None = None) -> None:
    """Undo :func:`register_backend`: restore ``previous``, or forget the name (a built-in is made again)."""
    if previous is None:
        _FACTORIES.pop(name, None)
    else:
        _FACTORIES[name] = previous


def registered_backends() -> tuple[str, ...]:
    return tuple(sorted({*_BUILT_IN, *_FACTORIES}))


def backend_factory(name: str) -> BackendFactory:
    """The factory of backend ``name``: the one registered, else the built-in backend's ``from_settings``."""
    factory = _FACTORIES.get(name)
    if factory is not None:
        return factory
    if name not in _BUILT_IN:
        raise AgoraError(f"unknown backend {name!r} (registered: {', '.join(registered_backends())})")
    module, _, cls = _BUILT_IN[name].partition(":")
    backend: type[Backend] = getattr(importlib.import_module(module), cls)
    return backend.from_settings


def make_backend(name: str, resources: Mapping[str, Resource]) -> Backend:
    """The backend ``name`` for the catalog's resources of that kind (the others are not passed)."""
    factory = backend_factory(name)
    return factory({key: resource for key, resource in resources.items() if resource.backend == name})


def make_backends(resources: Mapping[str, Resource]) -> dict[str, Backend]:
    """Each backend the catalog's ``resources`` name, by name, made now from its settings (AgoraError naming
    the option of the first bad value, or the backend's BackendError naming a resource it cannot run).
    A Celery pool has none: the CeleryExecutor runs its tasks
    (:func:`~agora_optimizer.executor.jobs.building.refuse_celery_pool`)."""
    names = sorted({resource.backend for resource in resources.values()} - {CELERY_BACKEND})
    return {name: make_backend(name, resources) for name in names}
