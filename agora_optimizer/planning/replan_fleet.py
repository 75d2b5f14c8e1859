"""The machines of a re-planned run: what each is paid for, its lease as the spec reads it, and the type counts.

:class:`Fleet` holds the machines of one schedule (:mod:`agora_optimizer.planning.replan_schedule`):
the leased ones, the planned ones not leased yet and new ones, each a :class:`FleetMachine`. Only
what a machine's lease gains is checked against its type's ``count`` (:meth:`Fleet.count_allows`):
a run may have held more machines of a type at once than its plan did, and that past forbids
nothing to come.
"""

from __future__ import annotations

from dataclasses import dataclass

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import machine_type
from agora_optimizer.planning.list_schedule import GrowingLease
from agora_optimizer.planning.run_state import ReplanError
from agora_optimizer.planning.timeline import SkippingTimeline


@dataclass(eq=False)
class FleetMachine(GrowingLease):
    """One machine of the re-planned run.

    ``leased``: its lease began before now, so no new lease waits for it; ``floor_s`` is the
    earliest a task may start on it (now, or the end of its boot; a machine not leased yet boots
    after now, or after its type's release). ``lease_start_s`` and ``lease_end_s``: what is paid
    for it (a leased machine held for tasks to come up to now, one booting from its boot);
    ``span``: its lease as the spec reads it from the tasks on it, first start minus boot to last
    end (None with no task yet), which the type's ``count`` bounds.
    """

    id: str
    resource: Resource
    timeline: SkippingTimeline
    floor_s: float
    leased: bool
    lease_start_s: float | None = None
    lease_end_s: float = 0.0
    span: tuple[float, float] | None = None

    def take(self, start_s: float, end_s: float, cores: int, memory_bytes: int, gpus: int = 0) -> None:
        self.timeline.add(start_s, end_s, cores, memory_bytes, gpus)
        self.lease_start_s, self.lease_end_s = self.lease_after(start_s, end_s)
        self.span = self.span_after(start_s, end_s)

    def span_after(self, start_s: float, end_s: float) -> tuple[float, float]:
        """Its span once it also holds a task over [start_s, end_s)."""
        first = start_s - self.resource.boot_s
        return (first, end_s) if self.span is None else (min(self.span[0], first), max(self.span[1], end_s))

    @property
    def first_start_s(self) -> float:
        """The earliest a task may start on it without its span beginning sooner (its floor, with no task)."""
        return self.floor_s if self.span is None else self.span[0] + self.resource.boot_s


class Fleet:
    """The machines of one re-planned schedule: leased ones, planned ones not leased yet, new ones."""

    def __init__(self, catalog: Catalog, now_s: float, min_task_memory_bytes: int) -> None:
        self.catalog = catalog
        self.now_s = now_s
        self.min_task_memory_bytes = min_task_memory_bytes
        self.by_id: dict[str, FleetMachine] = {}
        self.active: dict[str, list[FleetMachine]] = {r.name: [] for r in catalog.resources}
        self.spare: dict[str, dict[str, None]] = {r.name: {} for r in catalog.resources}  # ordered sets of ids
        self.next_index: dict[str, int] = {r.name: 0 for r in catalog.resources}

    def machine(self, machine_id: str, leased: bool) -> FleetMachine:
        """The machine ``machine_id`` (``TYPE#N`` of a catalog type), made on first use."""
        found = self.by_id.get(machine_id)
        if found is not None:
            found.leased = found.leased or leased
            if leased:
                found.floor_s = self.now_s
            return found
        resource = self.catalog.by_name.get(machine_type(machine_id))
        head, _, index = machine_id.rpartition("#")
        if resource is None or not index.isdigit():
            raise ReplanError(
                f"machine '{machine_id}' is not TYPE#N of a resource type of catalog {self.catalog.source}"
            )
        floor = self.now_s if leased else self.boot_floor_s(resource)
        timeline = SkippingTimeline(
            resource.vcpus, resource.memory_bytes, self.min_task_memory_bytes, gpus=resource.gpus
        )
        made = self.by_id[machine_id] = FleetMachine(machine_id, resource, timeline, floor, leased)
        self.next_index[head] = max(self.next_index[head], int(index) + 1)
        return made

    def boot_floor_s(self, resource: Resource) -> float:
        """The earliest a task starts on a machine of ``resource`` not leased yet: booted from now (or its release)."""
        return max(self.now_s, resource.release_s) + resource.boot_s

    def unlease(self, machine: FleetMachine) -> None:
        """``machine``, held for leased with nothing on it yet, is not: it boots when its lease begins."""
        machine.leased, machine.floor_s = False, self.boot_floor_s(machine.resource)

    def empty(self, resource: Resource) -> FleetMachine:
        """A machine of ``resource`` with no lease: the first planned one not leased, else a new id."""
        for machine_id in self.spare[resource.name]:
            return self.by_id[machine_id]
        machine_id = f"{resource.name}#{self.next_index[resource.name]}"
        self.spare[resource.name][machine_id] = None
        return self.machine(machine_id, leased=False)

    def take(
        self, machine: FleetMachine, start_s: float, end_s: float, cores: int, memory_bytes: int, gpus: int = 0
    ) -> None:
        if machine.lease_start_s is None:
            self.active[machine.resource.name].append(machine)
            self.spare[machine.resource.name].pop(machine.id, None)
        machine.take(start_s, end_s, cores, memory_bytes, gpus)

    def count_allows(self, machine: FleetMachine, start_s: float, end_s: float) -> bool:
        """Whether ``machine``'s span, grown to hold [start_s, end_s), keeps its type within ``count``.

        Only what the span gains is checked, against the other spans of its type: its span as it is
        stays as it ran (a run may have held more machines of a type at once than the plan did: the
        executor holds a type to ``count x vcpus`` cores, whichever machines run them), so the machine
        whose span ends last may always grow past its end.
        """
        limit = machine.resource.count
        others = [m.span for m in self.active[machine.resource.name] if m is not machine and m.span is not None]
        if limit is None or len(others) < limit:
            return True
        first, last = machine.span_after(start_s, end_s)
        gained = [(first, last)] if machine.span is None else [(first, machine.span[0]), (machine.span[1], last)]
        return all(_most_at_once(others, a, b) < limit for a, b in gained if b - a > TIME_TOLERANCE_S)

    def cost_usd(self) -> float:
        return sum(
            m.resource.lease_cost_usd(m.lease_end_s - m.lease_start_s)
            for m in self.by_id.values()
            if m.lease_start_s is not None
        )


def _most_at_once(spans: list[tuple[float, float]], start_s: float, end_s: float) -> int:
    """The most of ``spans`` that hold one instant of [start_s, end_s)."""
    events: list[tuple[float, int]] = []
    for first, last in spans:
        if first < end_s - TIME_TOLERANCE_S and last > start_s + TIME_TOLERANCE_S:
            events += [(max(first, start_s), 1), (min(last, end_s), -1)]
    most = held = 0
    for _, step in sorted(events):  # an end sorts before a start at the same instant
        held += step
        most = max(most, held)
    return most
