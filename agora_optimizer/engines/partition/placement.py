"""The processors (machine slots ``TYPE#N``) and step 2's skeleton: blocks placed on processors, a
block that fits no free processor split."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agora_optimizer.engines.partition.blocks import BlockStats, Partition
from agora_optimizer.engines.partition.graph import TaskGraph
from agora_optimizer.model.catalog import Resource
from agora_optimizer.planning.problem import Problem

UNLIMITED_SLOTS = 64
"""Processors offered for a type with ``count: null`` (a partition never needs more blocks than that)."""


@dataclass(frozen=True)
class Processor:
    """A processor: machine ``number`` of type ``resource`` (the plan names it ``TYPE#N``)."""

    index: int
    resource: Resource
    number: int


def machine_slots(problem: Problem) -> list[Processor]:
    """Every machine the catalog allows at once: ``count`` per type (a bound for unlimited types)."""
    slots: list[Processor] = []
    bound = max(1, min(len(problem.workflow.tasks), UNLIMITED_SLOTS))
    for resource in problem.catalog.resources:
        count = bound if resource.count is None else resource.count
        for number in range(count):
            slots.append(Processor(len(slots), resource, number))
    return slots


@dataclass(frozen=True)
class Platform:
    """A problem as the partition engines see it: the task graph, the processors, the network."""

    problem: Problem
    graph: TaskGraph
    slots: tuple[Processor, ...]
    bandwidth_bytes_per_s: float
    labels: tuple[int, ...]
    """Per task, the bit set of the catalog's types that can run it."""

    @classmethod
    def of(cls, problem: Problem) -> Platform:
        graph = TaskGraph.from_workflow(problem.workflow)
        resources = problem.catalog.resources
        labels = tuple(
            sum(1 << i for i, r in enumerate(resources) if c <= r.vcpus and m <= r.memory_bytes)
            for c, m in zip(graph.cores, graph.memory, strict=True)
        )
        return cls(problem, graph, tuple(machine_slots(problem)), problem.catalog.bandwidth_bytes_per_s, labels)

    def transfer_s(self, nbytes: int) -> float:
        return nbytes / self.bandwidth_bytes_per_s


Mapping = dict[int, int]
"""Block id -> slot index."""


PlacementKey = tuple[float, ...]


class PlacementPolicy:
    """How a mapping step orders blocks and picks processors; :func:`place_blocks` does the rest.

    With ``split_mixed``, a block that fits no free processor is also split (at a change of
    label) when its tasks fit different processor types, so its parts can share processors
    of their own types.
    """

    split_mixed = False

    def keys(self, partition: Partition, blocks: list[int]) -> dict[int, PlacementKey]:
        """Sort keys (smallest placed first): of every block first, then of each split's two parts.

        The parts of a split come as ``[first, second]``; ``first`` keeps the split block's id.
        """
        raise NotImplementedError

    def choose(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        """One of the free processors that can hold ``block``."""
        raise NotImplementedError

    def share(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        """An already used processor for ``block`` when no free one can hold it (``fitting`` is not empty)."""
        raise NotImplementedError

    def placed(self, partition: Partition, block: int, slot: Processor, mapping: Mapping) -> None:
        """Called once ``block`` is on ``slot``."""


def place_blocks(
    platform: Platform, partition: Partition, policy: PlacementPolicy, preferred: Mapping | None = None
) -> Mapping:
    """Map every block onto a processor; mutates ``partition`` where it splits blocks.

    The paper's step 2: a block that no free processor can hold is bisected and its parts
    are placed in turn (a part that still holds a task too large for every free processor
    is bisected again; see also :attr:`PlacementPolicy.split_mixed`). A single task that
    fits no free processor, or a block when every processor is taken, shares the processor
    the policy picks among those that fit it: the machine-local list schedule keeps that
    valid. A block keeps its ``preferred`` processor where that one can hold it.
    """
    mapping: Mapping = {}
    free = {slot.index for slot in platform.slots}
    queue = [(key, block) for block, key in policy.keys(partition, partition.blocks()).items()]
    heapq.heapify(queue)
    while queue:
        _, block = heapq.heappop(queue)
        stats = partition.stats(block)
        fitting = [s for s in platform.slots if s.index in free and stats.fits(s.resource)]
        wanted = None if preferred is None else preferred.get(block)
        if wanted is not None and stats.fits(platform.slots[wanted].resource):
            slot = platform.slots[wanted]
        elif fitting:
            slot = policy.choose(partition, block, fitting, mapping)
        elif (free and _splitting_can_help(platform, partition, block, free)) or (
            policy.split_mixed and partition.is_mixed(block)
        ):
            parts = partition.split(block, at_label_change=policy.split_mixed)
            assert parts is not None
            for part, key in policy.keys(partition, list(parts)).items():
                heapq.heappush(queue, (key, part))
            continue
        else:
            slot = policy.share(partition, block, [s for s in platform.slots if stats.fits(s.resource)], mapping)
        mapping[block] = slot.index
        free.discard(slot.index)
        policy.placed(partition, block, slot, mapping)
    return mapping


def _splitting_can_help(platform: Platform, partition: Partition, block: int, free: set[int]) -> bool:
    """A split helps if the block has several tasks and some free processor holds one of them."""
    tasks = partition.members[block]
    if len(tasks) < 2:
        return False
    g = partition.graph
    kinds = {platform.slots[i].resource for i in free}
    return any(g.cores[v] <= r.vcpus and g.memory[v] <= r.memory_bytes for r in kinds for v in tasks)


def type_mask(stats: BlockStats, resources: Sequence[Resource]) -> int:
    """Bit ``i`` is set when the block fits ``resources[i]``."""
    mask = 0
    for i, resource in enumerate(resources):
        if stats.fits(resource):
            mask |= 1 << i
    return mask


def matchable(demand: Counter[int], supply: Counter[int], resources: Sequence[Resource]) -> int:
    """How many blocks (counted by fitting-type mask) still get a free processor of their own.

    Most constrained blocks first, each on the smallest type that fits (exact when the
    types form a chain by memory, a greedy bound otherwise).
    """
    left = Counter(supply)
    smallest_first = sorted(range(len(resources)), key=lambda i: (resources[i].memory_bytes, resources[i].vcpus))
    total = 0
    for mask, count in sorted(demand.items(), key=lambda item: bin(item[0]).count("1")):
        if count <= 0:
            continue
        for i in smallest_first:
            if count == 0:
                break
            if mask >> i & 1 and left[i] > 0:
                take = min(count, left[i])
                left[i] -= take
                count -= take
                total += take
    return total
