"""Airflow pools that mirror the catalog's resources (``[agora] airflow_pools``).

With the setting on, the cluster policy puts each planned task in the pool
``agora_<resource>`` with ``pool_slots`` equal to its planned cores, and the executor creates
any such pool that is missing when it starts, with one slot per core of the resource
(``count x vcpus``; unlimited, -1, for a type without a count). Airflow then holds back a
task whose resource is full before it reaches the executor, and its UI shows each
resource's occupancy. A pool that exists already is left as it is: its slots are the
operator's to tune.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agora_optimizer.model.catalog import Resource

log = logging.getLogger(__name__)
UNLIMITED = -1  # Airflow's "infinite" pool


def pool_name(resource: str) -> str:
    return f"agora_{resource}"


def pool_slots(resource: Resource) -> int:
    """One slot per core of the resource, over all its machines; unlimited without a count."""
    return UNLIMITED if resource.count is None else resource.count * resource.vcpus


def ensure_pools(resources: Iterable[Resource]) -> list[str]:
    """Create the missing ``agora_<resource>`` pools in Airflow's database; returns their names."""
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session
    from sqlalchemy import select

    created: list[str] = []
    with create_session() as session:
        existing = set(session.scalars(select(Pool.pool)))
        for resource in resources:
            name = pool_name(resource.name)
            if name in existing:
                continue
            session.add(
                Pool(
                    pool=name,
                    slots=pool_slots(resource),
                    description=f"agora: {resource.backend} resource {resource.name} (one slot per core)",
                    include_deferred=False,
                )
            )
            created.append(name)
    if created:
        log.info("Created Airflow pools %s", ", ".join(created))
    return created
