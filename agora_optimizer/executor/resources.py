"""The resources the executor may run tasks on: every resource of ``[agora] catalog``."""

from __future__ import annotations

from agora_optimizer.errors import AgoraError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import Resource


def load_resources(catalogs: str) -> dict[str, Resource]:
    """Every resource of the comma-separated catalog files; a name in two catalogs is an error."""
    resources: dict[str, Resource] = {}
    for path in (item.strip() for item in catalogs.split(",")):
        if not path:
            continue
        for resource in load_catalog(path).resources:
            if resource.name in resources:
                raise AgoraError(f"[agora] catalog: resource {resource.name!r} is declared twice (again in {path})")
            resources[resource.name] = resource
    return resources
