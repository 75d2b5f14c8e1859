"""The baseline of Kulagina, Meyerhenke and Benoit (ICPP 2024) that ignores heterogeneity.

S. Kulagina, H. Meyerhenke, A. Benoit, "Mapping large memory-constrained workflows onto
heterogeneous platforms", ICPP 2024, arXiv:2407.09077. In the absence of memory-aware
solutions the paper first builds a baseline that partitions the workflow as if all
processors were identical and then maps the blocks; its four-step heuristic
(:mod:`agora_optimizer.engines.partition.icpp24`) is measured against it. We use it the same
way, as a benchmark peer.

Our version:

1. the same acyclic partitioner as the heuristic
   (:func:`~agora_optimizer.engines.partition.blocks.acyclic_partition`), on the plain
   depth-first order and without the heuristic's grouping by fitting types, into as many
   blocks of equal work as there are processors (capped by the number of tasks), as for
   identical processors;
2. memory-only mapping (:class:`MemoryOrderPlacement`): blocks by decreasing memory
   requirement (then work), each on the free processor with the most memory that holds it
   (largest block on the largest memory); speeds are never looked at. A block that fits no
   free processor is bisected, as in the heuristic's step 2 (the model would otherwise reject
   the plan); a single task that still fits no free processor shares the fitting processor
   with the least work.

No split/merge or swap follows. Tasks are list-scheduled on their block's machine exactly
as for the heuristic, so the two engines differ only in how they use heterogeneity.
"""

from __future__ import annotations

from collections import Counter

from agora_optimizer.engines.partition.blocks import Partition, acyclic_partition
from agora_optimizer.engines.partition.placement import (
    Mapping,
    PlacementKey,
    PlacementPolicy,
    Platform,
    Processor,
    place_blocks,
)
from agora_optimizer.engines.partition.plan import BlockPlan, BlockPlanEngine, evaluate
from agora_optimizer.planning.problem import Problem


class HomogeneousPartitionEngine(BlockPlanEngine):
    """Partition as for identical processors, then map blocks by memory alone."""

    name = "partition-homogeneous"

    def plan(self, problem: Problem, time_limit_s: float) -> BlockPlan | None:
        """One partition, one mapping, one schedule (the time limit is not needed)."""
        platform = Platform.of(problem)
        if platform.graph.n == 0:
            return None
        k = min(len(platform.slots), platform.graph.n)
        partition = Partition(platform.graph, acyclic_partition(platform.graph, k))
        mapping = place_blocks(platform, partition, MemoryOrderPlacement())
        return evaluate(platform, partition, mapping)


class MemoryOrderPlacement(PlacementPolicy):
    """Largest memory requirement first, onto the free processor with the most memory."""

    def __init__(self) -> None:
        self.load: Counter[int] = Counter()

    def keys(self, partition: Partition, blocks: list[int]) -> dict[int, PlacementKey]:
        keys: dict[int, PlacementKey] = {}
        for block in blocks:
            stats = partition.stats(block)
            keys[block] = (-float(stats.memory_bytes), -float(stats.cores), -stats.work, float(block))
        return keys

    def choose(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        return min(fitting, key=lambda s: (-s.resource.memory_bytes, -s.resource.vcpus, s.index))

    def share(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        return min(fitting, key=lambda s: (self.load[s.index], s.index))

    def placed(self, partition: Partition, block: int, slot: Processor, mapping: Mapping) -> None:
        self.load[slot.index] += int(partition.stats(block).work)
