"""Load a catalog file (YAML or JSON, section 2 of the spec) into a :class:`Catalog`.

Spot capacity (``docs/spot.md``): a resource with ``spot: true`` must give
``interruption_rate_per_hour`` (>= 0) and may name its ``fallback``, the on-demand type an
interrupted task re-runs on (default: the cheapest on-demand type of its backend with at least its
vCPUs, memory and GPUs, the faster on a tie). A rate or a fallback on a type that is not spot is
refused (a ``spot: true`` forgotten would otherwise plan it as on-demand capacity), and so is a
fallback that is missing, spot itself, or smaller than the spot type.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from agora_optimizer.errors import AgoraError
from agora_optimizer.io.documents import Node, read_document
from agora_optimizer.model.catalog import BACKENDS, Billing, Catalog, Resource
from agora_optimizer.model.limits import (  # lower limits too: below them durations overflow to infinity
    MAX_BANDWIDTH_BYTES_PER_S,
    MAX_BILLING_S,
    MAX_BOOT_S,
    MAX_CORES,
    MAX_COUNT,
    MAX_GPU_MEMORY_GIB,
    MAX_GPUS,
    MAX_INTERRUPTION_RATE_PER_HOUR,
    MAX_MACHINE_MEMORY_GIB,
    MAX_PRICE_PER_HOUR_USD,
    MAX_SPEED,
    MIN_BANDWIDTH_BYTES_PER_S,
    MIN_GRANULARITY_S,
    MIN_SPEED,
)
from agora_optimizer.model.workflow import shown

_KNOWN_KEYS = {
    "name",
    "backend",
    "vcpus",
    "memory_gib",
    "speed",
    "price_per_hour_usd",
    "count",
    "billing",
    "boot_s",
    "gpus",
    "gpu_model",
    "gpu_memory_gib",
    "spot",
    "interruption_rate_per_hour",
    "fallback",
}


def load_catalog(path: str | Path) -> Catalog:
    """Read a catalog. Raises an ``AgoraError`` that names the file and the field path."""
    source = str(path)
    if "," in source and not Path(path).exists():
        raise AgoraError(
            f"{source}: no such file; a catalog is one file (list the resources of several in one; "
            "only the executor's [agora] catalog setting takes a comma-separated list)"
        )
    root = Node(read_document(path), source)
    root.mapping()
    bandwidth = (
        root.get("network")
        .get("bandwidth_bytes_per_s")
        .number(minimum=MIN_BANDWIDTH_BYTES_PER_S, maximum=MAX_BANDWIDTH_BYTES_PER_S)
    )
    resources: list[Resource] = []
    items = list(root.get("resources").items())
    for item in items:
        resource = _resource(item)
        if any(r.name == resource.name for r in resources):
            raise item.get("name").fail(f"duplicate resource name {shown(resource.name)}")
        resources.append(resource)
    if not resources:
        raise root.get("resources").fail("lists no resource")
    resources = [_with_fallback(item, resource, resources) for item, resource in zip(items, resources, strict=True)]
    return Catalog(resources=tuple(resources), bandwidth_bytes_per_s=bandwidth, source=source)


def merged_catalog(catalogs: str) -> Catalog:
    """One catalog of every resource of the comma-separated catalog files (``[agora] catalog``), each file
    read once.

    Between machines it assumes the slowest network of the files. A resource name declared
    in two files is an error; no file at all gives an empty catalog.
    """
    resources: dict[str, Resource] = {}
    bandwidths: list[float] = []
    for path in (item.strip() for item in catalogs.split(",")):
        if not path:
            continue
        catalog = load_catalog(path)
        bandwidths.append(catalog.bandwidth_bytes_per_s)
        for resource in catalog.resources:
            if resource.name in resources:
                raise AgoraError(
                    f"[agora] catalog: resource {shown(resource.name)} is declared twice (again in {path})"
                )
            resources[resource.name] = resource
    return Catalog(tuple(resources.values()), min(bandwidths, default=0.0), source=catalogs)


def _resource(item: Node) -> Resource:
    name = item.get("name").string()
    if "#" in name:
        raise item.get("name").fail(f"{shown(name)} contains '#', which separates type and number in machine ids")
    backend = item.get("backend").string()
    if backend not in BACKENDS:
        raise item.get("backend").fail(f"expected one of {', '.join(BACKENDS)}, got {shown(backend)}")
    count = item.get("count", None).optional()
    billing = item.get("billing", {})
    billing.mapping()
    gpu_model = item.get("gpu_model", None).optional()
    gpu_memory = item.get("gpu_memory_gib", None).optional()
    spot = item.get("spot", False).boolean()
    rate_node = item.get("interruption_rate_per_hour", None)
    fallback_node = item.get("fallback", None)
    if spot and rate_node.optional() is None:
        raise rate_node.fail(
            "is required for a spot type (spot: true): the rate at which its machines are taken back, "
            "per hour of running (0 for none)"
        )
    if not spot:
        for node in (rate_node, fallback_node):
            if node.optional() is not None:
                raise node.fail(f"is only for a spot type, and {shown(name)} does not say spot: true")
    rate = None if rate_node.optional() is None else rate_node.number(maximum=MAX_INTERRUPTION_RATE_PER_HOUR)
    return Resource(
        name=name,
        backend=backend,
        vcpus=item.get("vcpus").integer(minimum=1, maximum=MAX_CORES),
        memory_gib=item.get("memory_gib").number(strictly_positive=True, maximum=MAX_MACHINE_MEMORY_GIB),
        speed=item.get("speed").number(minimum=MIN_SPEED, maximum=MAX_SPEED),
        price_per_hour_usd=item.get("price_per_hour_usd").number(maximum=MAX_PRICE_PER_HOUR_USD),
        count=None if count is None else count.integer(minimum=1, maximum=MAX_COUNT),
        billing=Billing(
            granularity_s=billing.get("granularity_s", 1).number(minimum=MIN_GRANULARITY_S, maximum=MAX_BILLING_S),
            minimum_s=billing.get("minimum_s", 0).number(maximum=MAX_BILLING_S),
        ),
        boot_s=item.get("boot_s", 0).number(maximum=MAX_BOOT_S),
        gpus=item.get("gpus", 0).integer(maximum=MAX_GPUS),
        gpu_model=None if gpu_model is None else gpu_model.string(),
        gpu_memory_gib=None
        if gpu_memory is None
        else gpu_memory.number(strictly_positive=True, maximum=MAX_GPU_MEMORY_GIB),
        spot=spot,
        interruption_rate_per_hour=rate,
        fallback=None if fallback_node.optional() is None else fallback_node.string(),
        extra=MappingProxyType({k: v for k, v in item.mapping().items() if k not in _KNOWN_KEYS}),
    )


def _with_fallback(item: Node, resource: Resource, resources: list[Resource]) -> Resource:
    """A spot type with its fallback checked, or chosen by the module's default rule."""
    if not resource.spot:
        return resource
    node = item.get("fallback", None)
    if resource.fallback is None:
        larger = [r for r in resources if not r.spot and r.backend == resource.backend and _holds(r, resource)]
        if not larger:
            raise node.fail(
                f"spot type {shown(resource.name)} names no fallback, and no on-demand type of backend "
                f"{shown(resource.backend)} has its vCPUs, memory and GPUs; "
                "name the type an interrupted task re-runs on"
            )
        chosen = min(larger, key=lambda r: (r.price_per_hour_usd, -r.speed))
        return replace(resource, fallback=chosen.name)
    fallback = next((r for r in resources if r.name == resource.fallback), None)
    if fallback is None:
        raise node.fail(f"names {shown(resource.fallback)}, which is not a resource of this catalog")
    if fallback.spot:
        raise node.fail(f"names {shown(fallback.name)}, a spot type: an interrupted task re-runs on on-demand capacity")
    if not _holds(fallback, resource):
        raise node.fail(
            f"names {shown(fallback.name)} ({fallback.vcpus} vCPUs, {fallback.memory_gib} GiB, {fallback.gpus} GPUs), "
            f"smaller than {shown(resource.name)} ({resource.vcpus} vCPUs, {resource.memory_gib} GiB, "
            f"{resource.gpus} GPUs): every task of the spot type must fit its fallback"
        )
    return resource


def _holds(larger: Resource, smaller: Resource) -> bool:
    """Whether every task that fits ``smaller`` fits ``larger``."""
    return larger.vcpus >= smaller.vcpus and larger.memory_bytes >= smaller.memory_bytes and larger.gpus >= smaller.gpus
