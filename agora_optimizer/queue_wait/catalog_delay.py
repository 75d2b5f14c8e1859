"""The predicted queue wait as a release time: a catalog whose SLURM types become available later.

A job waiting in a SLURM queue holds no node and is not charged: its allocation (the lease) begins
when the wait ends. So the wait is not boot time (``boot_s`` is leased and billed) but a release:
no lease of the type begins before it. :func:`with_queue_wait` returns a new catalog whose SLURM
types carry the wait as ``release_s`` (``boot_s``, and so every lease's cost, unchanged), and
leaves AWS and local types alone. A plan made with it names, and is checked against, the catalog
file as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.queue_wait.features import QueueFeatures
from agora_optimizer.queue_wait.model import QueueWaitRegressor, features_frame
from agora_optimizer.slurm.queue import QueueSnapshot


class QueueWaitCatalogError(AgoraError):
    """Predicted waits that do not fit the catalog (unknown partition, a negative wait...)."""


def with_queue_wait(catalog: Catalog, predictions: Mapping[str, float]) -> Catalog:
    """``catalog`` with ``predictions[key]`` seconds as the ``release_s`` of its SLURM types.

    A key names a SLURM resource type or, failing that, a partition (then every SLURM type of
    that partition gets the wait). A key that names neither, or a non-SLURM type, is an error:
    a typo must not silently plan without the wait.
    """
    slurm = [r for r in catalog.resources if r.backend == "slurm"]
    delays: dict[str, float] = {}
    for key, wait_s in predictions.items():
        if not isinstance(wait_s, int | float) or isinstance(wait_s, bool) or not math.isfinite(wait_s) or wait_s < 0:
            raise QueueWaitCatalogError(
                f"{catalog.source}: queue wait for '{key}' must be >= 0 seconds, got {wait_s!r}"
            )
        by_name = [r for r in slurm if r.name == key]
        targets = by_name or [r for r in slurm if (r.slurm_partition or r.name) == key]
        if not targets:
            other = catalog.by_name.get(key)
            reason = f"is a {other.backend} type, not SLURM" if other else "names no SLURM type or partition"
            raise QueueWaitCatalogError(f"{catalog.source}: queue wait for '{key}': {reason}")
        for resource in targets:
            delays[resource.name] = max(delays.get(resource.name, 0.0), float(wait_s))
    resources = tuple(
        replace(r, release_s=max(r.release_s, delays[r.name])) if r.name in delays else r for r in catalog.resources
    )
    return Catalog(resources=resources, bandwidth_bytes_per_s=catalog.bandwidth_bytes_per_s, source=catalog.source)


def predict_catalog_waits(
    model: QueueWaitRegressor, catalog: Catalog, snapshot: QueueSnapshot, time_limit_s: float | None
) -> dict[str, float]:
    """The model's wait for one whole machine (all its cores and memory) of each SLURM type,
    for a job of ``time_limit_s``, in the queue of ``snapshot``: the ``predictions`` of
    :func:`with_queue_wait`, keyed by type name."""
    slurm = [r for r in catalog.resources if r.backend == "slurm"]
    if not slurm:
        return {}
    rows = [
        QueueFeatures.from_snapshot(snapshot, r.slurm_partition or r.name, r.vcpus, r.memory_bytes, time_limit_s)
        for r in slurm
    ]
    waits = model.predict(features_frame(rows))
    return {r.name: float(w) for r, w in zip(slurm, waits, strict=True)}
