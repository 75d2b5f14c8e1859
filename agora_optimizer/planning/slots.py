"""Machine slots for list-scheduling engines (HEFT, PEFT): a fixed set of machines per type.

A list scheduler in the HEFT family works on a fixed set of processors. Here a
processor is a machine slot ``TYPE#N`` with ``N < count`` (a bounded number for a
type without a count), so a schedule never leases more machines of a type than the
catalog allows: each slot is one lease, from its first task's start to its last
task's end. Tasks share a slot when their cores, memory and GPUs fit at every instant
(:class:`~agora_optimizer.planning.timeline.MachineTimeline`, with insertion into idle
capacity). A slot that has no task yet is interchangeable with every other unused slot
of its type, so a scheduler only ever needs to look at the first unused one. :class:`SlotSchedule`
places tasks one at a time in the order a scheduler picks.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.arrivals import Arrivals
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.timeline import SkippingTimeline

TIME_CHECK_EVERY = 256  # tasks placed between two looks at the clock


@dataclass(eq=False)
class MachineSlot:
    """One machine ``TYPE#N`` and its usage over time."""

    id: str
    resource: Resource
    timeline: SkippingTimeline


@dataclass(frozen=True)
class SlotChoice:
    """Task runs on ``slot`` over [start_s, end_s)."""

    slot: MachineSlot
    start_s: float
    end_s: float


def widest_level(workflow: Workflow, by_cores: bool = False) -> int:
    """The largest number of tasks (or of their cores) at the same depth (longest path from an entry task)."""
    depth: dict[str, int] = {}
    for task_id in workflow.topological_order:
        depth[task_id] = 1 + max((depth[e.parent] for e in workflow.parents[task_id]), default=-1)
    counts: dict[int, int] = defaultdict(int)
    for task_id, value in depth.items():
        counts[value] += workflow.by_id[task_id].cores if by_cores else 1
    return max(counts.values(), default=1)


def pool_for(workflow: Workflow, catalog: Catalog, unlimited_slots: int | None = None) -> SlotPool:
    """The slots a list scheduler may use for ``workflow``; ``unlimited_slots`` defaults to its widest level."""
    min_memory = min((t.memory_bytes for t in workflow.tasks), default=0)
    return SlotPool(catalog, unlimited_slots or widest_level(workflow), min_memory)


class SlotPool:
    """The machine slots of every type: ``count`` of them, or ``unlimited_slots`` where count is null."""

    def __init__(self, catalog: Catalog, unlimited_slots: int, min_task_memory_bytes: int = 0) -> None:
        self._min_memory = min_task_memory_bytes
        self.type_rank = {r.name: i for i, r in enumerate(catalog.resources)}
        self._limit = {r.name: r.count if r.count is not None else max(unlimited_slots, 1) for r in catalog.resources}
        self._used: dict[str, list[MachineSlot]] = {r.name: [] for r in catalog.resources}
        self._fresh: dict[str, MachineSlot] = {}

    def candidates(self, resource: Resource) -> list[MachineSlot]:
        """The used slots of ``resource`` and, while the limit allows, its first unused one."""
        used = self._used[resource.name]
        if len(used) >= self._limit[resource.name]:
            return used
        fresh = self._fresh.get(resource.name)
        if fresh is None:
            timeline = SkippingTimeline(resource.vcpus, resource.memory_bytes, self._min_memory, gpus=resource.gpus)
            fresh = MachineSlot(f"{resource.name}#{len(used)}", resource, timeline)
            self._fresh[resource.name] = fresh
        return [*used, fresh]

    def occupy(self, task: Task, placement: SlotChoice) -> None:
        """Reserve the task's cores, memory and GPUs on its slot."""
        slot = placement.slot
        if self._fresh.get(slot.resource.name) is slot:
            del self._fresh[slot.resource.name]
            self._used[slot.resource.name].append(slot)
        slot.timeline.add(placement.start_s, placement.end_s, task.cores, task.memory_bytes, task.gpus)


def arrivals_for(workflow: Workflow, catalog: Catalog, task_id: str, placements: dict[str, SlotChoice]) -> Arrivals:
    """The arrival times of ``task_id``'s inputs, from its placed parents."""
    return Arrivals(
        [
            (placements[e.parent].slot, placements[e.parent].end_s, catalog.transfer_s(e.bytes))
            for e in workflow.parents[task_id]
        ]
    )


def best_placement(
    task: Task,
    options: list[Resource],
    pool: SlotPool,
    arrivals: Arrivals,
    bias_s: Mapping[str, float] | None = None,
) -> SlotChoice:
    """The slot that minimises the task's finish time (plus ``bias_s[type name]`` where given).

    Insertion-based: the task may start in any idle capacity of a slot's timeline from
    its inputs' arrival on; it never starts before its type's ``earliest_start_s`` (release
    and ``boot_s``), so a lease never begins before time 0 nor before the type's release, nor
    before the task's own ``release_s``.
    Ties go to the earlier type in the catalog, then the lower slot number.
    """
    keyed = []
    for resource in options:
        extra = bias_s[resource.name] if bias_s is not None else 0.0
        keyed.append((resource.runtime_s(task) + extra, pool.type_rank[resource.name], resource, extra))
    keyed.sort(key=lambda item: item[:2])  # most promising first, so the bound below prunes more
    best: tuple[tuple[float, int, int], SlotChoice] | None = None
    for _, type_rank, resource, extra in keyed:
        duration = resource.runtime_s(task)
        for number, slot in enumerate(pool.candidates(resource)):
            ready = max(arrivals.on(slot), resource.earliest_start_of(task))
            if best is not None and (ready + duration + extra, type_rank, number) >= best[0]:
                continue  # cannot beat the best even without waiting for capacity
            start = slot.timeline.earliest_start(ready, duration, task.cores, task.memory_bytes, task.gpus)
            key = (start + duration + extra, type_rank, number)
            if best is None or key < best[0]:
                best = (key, SlotChoice(slot, start, start + duration))
    if best is None:
        raise ValueError(f"task '{task.id}' has no feasible resource type")
    return best[1]


def assignment(task: Task, placement: SlotChoice) -> Assignment:
    return Assignment(
        task=task.id,
        resource=placement.slot.resource.name,
        machine=placement.slot.id,
        start_s=placement.start_s,
        end_s=placement.end_s,
        cores=task.cores,
        memory_bytes=task.memory_bytes,
        gpus=task.gpus,
    )


class SlotSchedule:
    """A schedule built on the machine slots of ``problem`` one task at a time, in the order a list
    scheduler picks (HEFT's, PEFT's); ``unlimited_slots`` as in :func:`pool_for`."""

    def __init__(self, problem: Problem, unlimited_slots: int | None = None) -> None:
        self.problem = problem
        self.pool = pool_for(problem.workflow, problem.catalog, unlimited_slots)
        self.placements: dict[str, SlotChoice] = {}
        self.assignments: list[Assignment] = []

    def out_of_time(self, deadline: float | None) -> bool:
        """Whether ``time.perf_counter()`` has passed ``deadline`` (looked at every :data:`TIME_CHECK_EVERY` tasks)."""
        return deadline is not None and len(self.assignments) % TIME_CHECK_EVERY == 0 and time.perf_counter() > deadline

    def place(self, task_id: str, bias_s: Mapping[str, float] | None = None) -> None:
        """Put the task, whose parents are placed, on the slot of :func:`best_placement`."""
        workflow = self.problem.workflow
        task = workflow.by_id[task_id]
        arrivals = arrivals_for(workflow, self.problem.catalog, task_id, self.placements)
        placement = best_placement(task, self.problem.options[task_id], self.pool, arrivals, bias_s)
        self.pool.occupy(task, placement)
        self.placements[task_id] = placement
        self.assignments.append(assignment(task, placement))
