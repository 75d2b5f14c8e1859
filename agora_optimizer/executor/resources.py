"""The resources the executor may run tasks on: every resource of ``[agora] catalog``."""

from __future__ import annotations

from agora_optimizer.errors import AgoraError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.workflow import shown


def merged_catalog(catalogs: str) -> Catalog:
    """One catalog of every resource of the comma-separated catalog files, each file read once.

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


def load_resources(catalogs: str) -> dict[str, Resource]:
    """Every resource of the comma-separated catalog files, by name."""
    return merged_catalog(catalogs).by_name
