"""Load a catalog file (YAML or JSON, section 2 of the spec) into a :class:`Catalog`."""

from __future__ import annotations

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
    MAX_MACHINE_MEMORY_GIB,
    MAX_PRICE_PER_HOUR_USD,
    MAX_SPEED,
    MIN_BANDWIDTH_BYTES_PER_S,
    MIN_GRANULARITY_S,
    MIN_SPEED,
)

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
    for item in root.get("resources").items():
        resource = _resource(item)
        if any(r.name == resource.name for r in resources):
            raise item.get("name").fail(f"duplicate resource name '{resource.name}'")
        resources.append(resource)
    if not resources:
        raise root.get("resources").fail("lists no resource")
    return Catalog(resources=tuple(resources), bandwidth_bytes_per_s=bandwidth, source=source)


def _resource(item: Node) -> Resource:
    name = item.get("name").string()
    if "#" in name:
        raise item.get("name").fail(f"'{name}' contains '#', which separates type and number in machine ids")
    backend = item.get("backend").string()
    if backend not in BACKENDS:
        raise item.get("backend").fail(f"expected one of {', '.join(BACKENDS)}, got {backend!r}")
    count = item.get("count", None).optional()
    billing = item.get("billing", {})
    billing.mapping()
    gpu_model = item.get("gpu_model", None).optional()
    gpu_memory = item.get("gpu_memory_gib", None).optional()
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
        extra=MappingProxyType({k: v for k, v in item.mapping().items() if k not in _KNOWN_KEYS}),
    )
