"""Catalogs: the resource types a plan may lease, and the network between machines.

Section 2 of ``docs/spec/agora-model.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Literal

from agora_optimizer.model.workflow import Task, shown

BackendName = Literal["aws", "slurm", "local", "celery"]  # which backend runs a resource (not the Backend class)
BACKENDS: tuple[BackendName, ...] = ("aws", "slurm", "local", "celery")
CELERY_BACKEND: BackendName = "celery"  # a Celery pool: Airflow's CeleryExecutor runs its tasks, not the AgoraExecutor
GIB = 2**30
_CEIL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Billing:
    """How a lease is billed: in steps of ``granularity_s``, at least ``minimum_s``."""

    granularity_s: float = 1.0
    minimum_s: float = 0.0

    def billed_s(self, lease_s: float) -> float:
        steps = math.ceil(max(lease_s, 0.0) / self.granularity_s - _CEIL_TOLERANCE)
        return max(self.minimum_s, steps * self.granularity_s)


@dataclass(frozen=True)
class Resource:
    """A machine type: every machine of it has these cores, memory, speed and price.

    ``release_s`` is not a catalog field (the catalog file neither reads nor writes it): it is a
    planning input, the time before which no lease of this type may begin (a SLURM partition's
    predicted queue wait). A lease still runs from its first task's start minus ``boot_s`` and is
    billed for that; the wait before it is not paid.

    ``added_latency_s`` is a planning input too (never in a catalog file): the time the platform
    adds to each task on this type (Airflow's scheduling and task start, the worker's exit), learned
    by :mod:`agora_optimizer.predict.latency`. The optimizer plans each task to hold its machine
    for ``runtime_s(task)``, which includes it, and writes the plan with the task's own
    ``runtime_s / speed`` at the end of that hold (:func:`agora_optimizer.planning.problem.written_assignments`),
    so that the plan file keeps the spec's durations.

    ``gpus`` are the accelerators of one machine (section 5 of the spec): a task fits only where its
    ``gpus`` are no more, and the tasks sharing a machine hold no more at any instant. ``gpu_model``
    and ``gpu_memory_gib`` are for people (no rule reads them yet).

    ``spot`` capacity (``docs/spot.md``, not in the spec): a machine of the type may be taken back
    at any time, interruptions arriving as a Poisson process at ``interruption_rate_per_hour``; its
    ``price_per_hour_usd`` is the spot price. A task interrupted on it re-runs on a new machine of
    ``fallback``, an on-demand type of the same catalog that fits every task the spot type fits.
    For a plan's schedule (the spec's rules) a spot type is a type like any other.
    """

    name: str
    backend: BackendName
    vcpus: int
    memory_gib: float
    speed: float
    price_per_hour_usd: float
    count: int | None = None
    billing: Billing = Billing()
    boot_s: float = 0.0
    release_s: float = 0.0
    added_latency_s: float = 0.0
    gpus: int = 0
    gpu_model: str | None = None
    gpu_memory_gib: float | None = None
    spot: bool = False
    interruption_rate_per_hour: float | None = None
    fallback: str | None = None
    extra: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}), compare=False)

    # The two below are cached_property, not property: the list scheduler asks them millions of times
    # at 30,000 tasks (the fields they derive from are frozen; a replace() makes a new instance).
    @cached_property
    def earliest_start_s(self) -> float:
        """The earliest a task can start on a machine of this type: released, then booted."""
        return self.release_s + self.boot_s

    def earliest_start_of(self, task: Task) -> float:
        """The earliest ``task`` can start on a machine of this type: the type's earliest start, and
        not before the task's own release (a wait before it, e.g. an Airflow sensor's)."""
        return max(self.earliest_start_s, task.release_s)

    @cached_property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * GIB)

    def fits(self, task: Task) -> bool:
        return task.cores <= self.vcpus and task.memory_bytes <= self.memory_bytes and task.gpus <= self.gpus

    def runtime_s(self, task: Task) -> float:
        """How long ``task`` holds a machine of this type: ``runtime_s / speed`` (the spec's duration),
        plus ``added_latency_s`` (0 unless the planner added the platform's latency)."""
        return task.runtime_s / self.speed + self.added_latency_s

    def lease_cost_usd(self, lease_s: float) -> float:
        return self.price_per_hour_usd / 3600.0 * self.billing.billed_s(lease_s)

    @property
    def slurm_partition(self) -> str | None:
        """The partition a SLURM type submits to: its catalog's ``partition`` key; None without one
        (the SLURM backend refuses such a type, naming it; a queue-wait key may then be its name)."""
        partition = self.extra.get("partition")
        return partition if isinstance(partition, str) and partition else None


@dataclass(frozen=True)
class Catalog:
    """The resource types of a platform and the bandwidth between two machines.

    ``fallbacks``: the on-demand types that spot types re-run on where this catalog is a part of
    another that left them out (a pool of some types), by name."""

    resources: tuple[Resource, ...]
    bandwidth_bytes_per_s: float
    source: str = field(default="<memory>", compare=False)
    fallbacks: Mapping[str, Resource] = field(default_factory=lambda: MappingProxyType({}), compare=False)

    @cached_property
    def by_name(self) -> dict[str, Resource]:
        return {resource.name: resource for resource in self.resources}

    def feasible(self, task: Task) -> list[Resource]:
        """The types that can run ``task`` at all (cores, memory and GPUs)."""
        # Kept per (cores, memory, GPUs): a workflow's tasks have few such shapes, and the bounds and the
        # schedulers ask again for every task (30,000 tasks x 27 types, several times over).
        shape = (task.cores, task.memory_bytes, task.gpus)
        found = self._feasible_by_shape.get(shape)
        if found is None:
            found = self._feasible_by_shape[shape] = tuple(r for r in self.resources if r.fits(task))
        return list(found)

    @cached_property
    def _feasible_by_shape(self) -> dict[tuple[int, int, int], tuple[Resource, ...]]:
        return {}

    def transfer_s(self, nbytes: int) -> float:
        return nbytes / self.bandwidth_bytes_per_s

    def largest(self) -> Resource:
        return max(self.resources, key=lambda r: (r.memory_bytes, r.vcpus))

    def most_gpus(self) -> Resource:
        """The type with the most GPUs (the first in the catalog on a tie)."""
        return max(self.resources, key=lambda r: r.gpus)

    @cached_property
    def has_spot(self) -> bool:
        """Whether some type is spot capacity (its interruptions then count in expected costs)."""
        return any(r.spot for r in self.resources)

    def fallback_of(self, resource: Resource) -> Resource:
        """The on-demand type an interrupted task of spot type ``resource`` re-runs on."""
        if resource.fallback is None:
            raise ValueError(f"resource type {shown(resource.name)} is not spot capacity: it has no fallback")
        found = self.by_name.get(resource.fallback) or self.fallbacks.get(resource.fallback)
        if found is None:
            raise ValueError(
                f"spot type {shown(resource.name)}: its fallback {shown(resource.fallback)} is not in the catalog"
            )
        return found

    def part(self, resources: tuple[Resource, ...]) -> Catalog:
        """A catalog of ``resources`` (some of this one's, perhaps changed) that keeps their spot fallbacks."""
        fallbacks = {r.fallback: self.fallback_of(r) for r in resources if r.spot and r.fallback is not None}
        return Catalog(
            resources=resources,
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
            source=self.source,
            fallbacks=MappingProxyType(fallbacks),
        )

    def without_spot(self) -> Catalog:
        """The catalog without its spot types (what the same platform offers on demand)."""
        return Catalog(
            resources=tuple(r for r in self.resources if not r.spot),
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
            source=self.source,
        )

    def restricted_to(self, names: list[str]) -> Catalog:
        return self.part(tuple(r for r in self.resources if r.name in names))
