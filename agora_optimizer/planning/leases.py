"""Machine leases and what they cost: section 3 of the spec, shared by planners and the checker."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment


@dataclass(frozen=True)
class Lease:
    """Machine ``machine`` of type ``resource`` is leased over [start_s, end_s)."""

    machine: str
    resource: Resource
    start_s: float
    end_s: float

    @property
    def cost_usd(self) -> float:
        return self.resource.lease_cost_usd(self.end_s - self.start_s)


def leases(assignments: Iterable[Assignment], catalog: Catalog) -> list[Lease]:
    """One lease per machine: from its first task's start minus ``boot_s`` to its last task's end.

    Assignments whose resource is not in the catalog are skipped (the checker reports them).
    """
    spans: dict[str, tuple[str, float, float]] = {}
    for a in assignments:
        if a.resource not in catalog.by_name:
            continue
        if a.machine in spans:
            name, first, last = spans[a.machine]
            spans[a.machine] = (name, min(first, a.start_s), max(last, a.end_s))
        else:
            spans[a.machine] = (a.resource, a.start_s, a.end_s)
    result = []
    for machine, (name, first, last) in sorted(spans.items()):
        resource = catalog.by_name[name]
        result.append(Lease(machine, resource, first - resource.boot_s, last))
    return result


def makespan_s(assignments: Iterable[Assignment]) -> float:
    return max((a.end_s for a in assignments), default=0.0)


def cost_usd(assignments: Iterable[Assignment], catalog: Catalog) -> float:
    return sum(lease.cost_usd for lease in leases(assignments, catalog))
