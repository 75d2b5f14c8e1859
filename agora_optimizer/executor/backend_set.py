"""The backends one executor uses, by name: those its catalog names, made when it starts, then kept."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.backends.registry import make_backend
from agora_optimizer.model.catalog import Resource


class BackendSet:
    """The executor's backends: ``made``, each backend of the catalog made at start
    (:func:`~agora_optimizer.executor.backends.registry.make_backends`, its settings read and checked then);
    :meth:`get` makes one the catalog did not name the first time it is asked for
    (:func:`~agora_optimizer.executor.backends.registry.make_backend`, for the catalog's ``resources`` of
    its kind); :meth:`use` puts a backend made elsewhere in its place (a test's, wrapping the real one)."""

    def __init__(
        self,
        resources: Mapping[str, Resource],
        made: Mapping[str, Backend] | None = None,
        make: Callable[[str, Mapping[str, Resource]], Backend] = make_backend,
    ) -> None:
        self._resources = resources
        self._make = make
        self._made: dict[str, Backend] = dict(made or {})

    def get(self, name: str) -> Backend:
        """The backend ``name``, made now if it is not yet (AgoraError for a name the registry does not know)."""
        if name not in self._made:
            self._made[name] = self._make(name, self._resources)
        return self._made[name]

    def use(self, name: str, backend: Backend) -> None:
        """Run the jobs of backend ``name`` on ``backend`` from now on."""
        self._made[name] = backend

    def made(self) -> dict[str, Backend]:
        """The backends made so far, by name (the executor calls their hooks on each: start, tick, close, leases)."""
        return dict(self._made)
