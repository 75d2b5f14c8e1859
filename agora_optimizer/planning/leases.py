"""Machine leases and what they cost: section 3 of the spec, shared by planners and the checker."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment, Objective


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


ALLOCATION_BACKENDS = frozenset({"slurm"})
"""Backends whose lease is an allocation asked for when the machine's first job arrives (or ahead by its wait),
not when its first task starts: holding that task back would not shorten the lease."""


def opens_on_time(resource: Resource, objective: Objective) -> bool:
    """Whether a run of a plan with ``objective`` opens a machine of ``resource`` no earlier than its planned start
    (docs/running-plans.md): the plan weighs cost, the type is priced, and its lease starts with its first task.
    Elsewhere a machine opens as soon as its first task may start."""
    return objective.kind != "time" and resource.price_per_hour_usd > 0 and resource.backend not in ALLOCATION_BACKENDS


def planned_openings(assignments: Iterable[Assignment], catalog: Catalog, objective: Objective) -> dict[str, float]:
    """The planned start of each machine that opens on time (:func:`opens_on_time`); other machines are absent."""
    openings: dict[str, float] = {}
    for a in assignments:
        resource = catalog.by_name.get(a.resource)
        if resource is not None and opens_on_time(resource, objective):
            openings[a.machine] = min(openings.get(a.machine, a.start_s), a.start_s)
    return openings


def outside_parents(tasks: Collection[str], parents: Mapping[str, Iterable[str]]) -> set[str]:
    """The tasks on other machines that a machine's ``tasks`` depend on (``parents``: each task's). While one may
    still run, it can hold the machine's lease open past its plan: a machine that opens on time opens early only
    once all have ended (docs/running-plans.md)."""
    return {parent for task in tasks for parent in parents.get(task, ())} - set(tasks)


def opening_before(machine: str, openings: Mapping[str, tuple[str, float]]) -> list[str]:
    """The machines of ``machine``'s type planned to open before it (``openings``: each machine's type and planned
    opening). A machine that opens early takes no other's turn once these have opened."""
    resource, at_s = openings[machine]
    return [other for other, (kind, other_s) in openings.items() if kind == resource and other_s < at_s]
