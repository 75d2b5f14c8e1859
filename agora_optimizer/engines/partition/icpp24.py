"""The partition-based four-step heuristic of Kulagina, Meyerhenke and Benoit (ICPP 2024).

Why one module of some 550 lines: the four steps are one algorithm, read top to bottom beside the
paper; the building blocks they share live in the package's other modules.

S. Kulagina, H. Meyerhenke, A. Benoit, "Mapping large memory-constrained workflows onto
heterogeneous platforms", ICPP 2024, arXiv:2407.09077. What is public of the paper (its
abstract) describes the heuristic as: (1) partition the DAG into blocks with an existing
acyclic DAG partitioner (dagP); (2)-(3) adapt the blocks to the processor memories and
optimise the makespan by further splitting and merging them; (4) local search by swapping
blocks. Each block runs wholly on one processor, processors differ in speed and memory,
and data crossing two processors pays ``bytes / bandwidth``; the goal is the makespan on
memory-tight heterogeneous platforms. The paper's own code and its exact rules were not
available to us: each step below is our reading of that outline.

What this module implements, step by step, and where it departs from the paper:

1. **Acyclic partition** (:func:`aware_partition`). The paper calls dagP (Herrmann et al.'s
   multilevel acyclic partitioner), which knows nothing of the platform. We use our own
   single-level partitioner
   (:func:`~agora_optimizer.engines.partition.blocks.acyclic_partition`): contiguous pieces of a
   topological order, balanced by work, then greedy refinement that cuts fewer bytes while
   keeping a topological block numbering (dagP's refinement rule, without its coarsening).
   Unlike dagP it is heterogeneity-aware: the order stays on tasks that fit the same
   processor types while it can (:func:`~agora_optimizer.engines.partition.graph.grouped_order`)
   and refinement never moves a task into a block whose tasks all fit a type it does not,
   so blocks rarely mix small tasks with tasks that only the big-memory processors hold.
   We also cut the plain depth-first order, blind to the platform as dagP is. The paper
   partitions into as many blocks as processors; we also try 1/2, 1/4, ... of that number.
2. **Fit the memories and map the blocks** (:func:`map_blocks` via
   :func:`~agora_optimizer.engines.partition.placement.place_blocks`). Two mappings, the one whose
   list schedule ends first is kept. :class:`HeftPlacement`: blocks in decreasing upward
   rank of the quotient graph, each on the free processor whose type finishes it first (a
   HEFT-like choice on the paper's block-level model: a block starts when all its input
   blocks have finished and their data has arrived), unless that processor is one a later
   block with fewer fitting types needs. :class:`CapacityMatching`: blocks matched to
   processors by memory and speed, the most constrained and heaviest blocks first, each on
   the fitting processor with the most capacity (no time estimate, which misleads where
   blocks overlap in time). In both, a block that fits no free processor is split
   acyclically and its parts placed in turn, as in the paper; ours also splits, at a change
   of fitting types, a block that mixes tasks of different types, so its parts can share
   processors of their own types (with more blocks than processors, a block shares the
   used processor that finishes it first). Then :func:`rebalance` (our addition)
   re-partitions with each block's work in proportion to its processor's speed and cores,
   keeping the mapping, while that improves the schedule.
3. **Split and merge to shorten the makespan** (:func:`split_merge_moves`). On the
   critical path of the actual schedule: merge two consecutive blocks (when the merge
   keeps the quotient acyclic and the merged block fits a processor); split a critical
   block and move one part to a free processor, its share of the work in proportion to the
   two processors' speeds; or split it and merge one half into a block on a processor that
   finishes early.
4. **Local search** (:func:`swap_moves`): move a critical block to a free processor of
   another type, or swap it with a block on a processor of another type when both fit.

Steps 1 and 2 may take half of the time limit (one plan is always built). Steps 3 and 4
accept a move only if the list schedule of all tasks (not the block-level estimate) gets a
shorter makespan; they alternate until neither improves, from every step-2 plan in turn
(the best first; those within :data:`PROMISING` of the best share the time left before the
others get any), and the best plan wins.

Adaptation to agora's model: a processor is a machine slot ``TYPE#N`` with ``N < count``
(at most :data:`~agora_optimizer.engines.partition.placement.UNLIMITED_SLOTS` for an unlimited
type), so the per-type ``count`` holds at every instant. A machine has ``vcpus`` cores and
runs its blocks' tasks with a list schedule that shares cores and memory, so a block fits
a machine iff each of its tasks does (see the memory model in
:mod:`agora_optimizer.engines.partition`); the paper's processors run one task at a
time and a block's memory is the peak of its best traversal, files included. Leases and
costs follow :mod:`agora_optimizer.planning.leases`; the engine minimises makespan only (no
cost-aware pass, the objective's kind and ``alpha`` are not used) and ignores warm starts.
The first initial plan is always built, so on a very large workflow a very short time
limit may be overrun by that one plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise, product

from agora_optimizer.engines.partition.blocks import Partition, acyclic_partition
from agora_optimizer.engines.partition.graph import grouped_order
from agora_optimizer.engines.partition.placement import (
    Mapping,
    PlacementKey,
    PlacementPolicy,
    Platform,
    Processor,
    matchable,
    place_blocks,
    type_mask,
)
from agora_optimizer.engines.partition.plan import BlockPlan, BlockPlanEngine, evaluate
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import TimeBudget

Candidate = tuple[Partition, Mapping]
SWAP_PARTNERS_PER_TYPE = 2
REBALANCE_ROUNDS = 3
PROMISING = 1.5
"""Local search starts from every initial plan at most this much slower than the best one."""
SPLIT_MERGE_BLOCKS = 3
SPLIT_MERGE_TARGETS = 2


class PartitionEngine(BlockPlanEngine):
    """The heterogeneity-aware four-step heuristic (partition, fit and map, split/merge, swaps).

    Declines a workflow with a task that needs GPUs (:class:`BlockPlanEngine`).
    """

    name = "partition"

    def plan(self, problem: Problem, time_limit_s: float) -> BlockPlan | None:
        """The best mapped partition found within ``time_limit_s`` (None for an empty workflow)."""
        deadline = TimeBudget(time_limit_s, fraction=0.9)
        platform = Platform.of(problem)
        if platform.graph.n == 0:
            return None
        return improve(initial_plans(platform, deadline), deadline)


def initial_plans(platform: Platform, deadline: TimeBudget) -> list[BlockPlan]:
    """Steps 1 and 2 (and the rebalancing) for each initial number of blocks and order, fastest first.

    They may use half of the time left; the first plan is always built, whatever the limit.
    """
    sweep = deadline.share(2)
    orders = (Order.grouped(platform), Order.plain(platform))
    plans: list[BlockPlan] = []
    for k, order in product(initial_block_counts(platform), orders):
        if plans and sweep.expired():
            break
        partition = aware_partition(platform, order, k)  # step 1
        plans.append(rebalance(map_blocks(platform, partition), order, sweep))  # step 2
    return sorted(plans, key=lambda plan: plan.makespan_s)


@dataclass(frozen=True)
class Order:
    """The topological order that step 1 cuts into blocks, and the labels its refinement keeps."""

    tasks: list[int]
    refine_labels: tuple[int, ...] | None

    @classmethod
    def grouped(cls, platform: Platform) -> Order:
        """Ours: tasks that fit the same processor types stay together."""
        return cls(grouped_order(platform.graph, platform.labels), platform.labels)

    @classmethod
    def plain(cls, platform: Platform) -> Order:
        """The depth-first order alone, blind to the platform as dagP is."""
        return cls(platform.graph.order, None)


def map_blocks(platform: Platform, partition: Partition) -> BlockPlan:
    """Step 2: the HEFT-like placement and the capacity matching; the one whose list schedule ends first."""
    plans = []
    for policy in (HeftPlacement(platform), CapacityMatching(platform)):
        trial = partition.copy()
        plans.append(evaluate(platform, trial, place_blocks(platform, trial, policy)))
    return min(plans, key=lambda plan: plan.makespan_s)


def improve(starts: list[BlockPlan], deadline: TimeBudget) -> BlockPlan:
    """Steps 3 and 4 from every start, the best first, and the best result.

    Starts within :data:`PROMISING` of the best share the time left; the others get what
    remains after them (on small workflows every search converges well within the limit).
    """
    best = starts[0]
    promising = [plan for plan in starts if plan.makespan_s <= PROMISING * best.makespan_s]
    others = starts[len(promising) :]
    for group in (promising, others):
        for index, start in enumerate(group):
            if deadline.expired():
                return best
            improved = local_search(start, deadline.share(len(group) - index))
            if improved.makespan_s < best.makespan_s:
                best = improved
    return best


def aware_partition(platform: Platform, order: Order, k: int, shares: list[float] | None = None) -> Partition:
    """Step 1: an acyclic partition of ``order`` into ``k`` blocks (work in proportion to ``shares``).

    The partition knows every task's fitting types, so that step 2 can split blocks that mix them.
    """
    block_of = acyclic_partition(platform.graph, k, shares, order.tasks, order.refine_labels)
    return Partition(platform.graph, block_of, platform.labels, order.tasks)


def initial_block_counts(platform: Platform) -> list[int]:
    """As many blocks as processors (the paper's choice, capped by the tasks), then halves of it."""
    k = max(1, min(len(platform.slots), platform.graph.n))
    counts = []
    while k >= 1:
        counts.append(k)
        k //= 2
    return counts


# --------------------------------------------------------------------------------------------
# Step 2: HEFT-like placement of blocks


class HeftPlacement(PlacementPolicy):
    """Blocks by decreasing quotient rank, each on the free processor type that finishes it first.

    Estimates are block-level (the paper's quotient-graph model): a block starts once every
    input block has finished and its bytes have crossed the network, and lasts
    :meth:`~agora_optimizer.engines.partition.blocks.BlockStats.exec_estimate_s`. A processor is
    skipped when taking it would leave fewer of the still unplaced blocks with a free
    processor that can hold them (memory first: the paper's point on heterogeneous memories).
    """

    split_mixed = True

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.resources = list(platform.problem.catalog.resources)
        self.type_of = {r.name: i for i, r in enumerate(self.resources)}
        self.rank: dict[int, float] = {}
        self.mask: dict[int, int] = {}
        self.demand: Counter[int] = Counter()  # fitting-type masks of the blocks not placed yet
        self.finish: dict[int, float] = {}
        self.available: dict[int, float] = {}
        self._inputs: dict[int, dict[int, int]] = {}

    def keys(self, partition: Partition, blocks: list[int]) -> dict[int, PlacementKey]:
        if not self.rank:
            self.rank = self._ranks(partition)
        else:  # the parts of a split, the later part first: its successors all have ranks
            for b in reversed(blocks):
                self.rank[b] = self._rank(partition, b, partition.out_edges(b))
        self._inputs.clear()
        for b in blocks:
            if b in self.mask:
                self.demand[self.mask[b]] -= 1
            self.mask[b] = type_mask(partition.stats(b), self.resources)
            self.demand[self.mask[b]] += 1
        position = partition.graph.position
        return {b: (-self.rank[b], float(position[partition.members[b][0]])) for b in blocks}

    def _ranks(self, partition: Partition) -> dict[int, float]:
        """Upward rank of every block in the quotient graph."""
        succ, _ = partition.quotient()
        rank: dict[int, float] = {}
        for b in reversed(partition.topological_blocks()):
            rank[b] = self._rank(partition, b, succ[b], rank)
        return rank

    def _rank(
        self, partition: Partition, block: int, succ: dict[int, int], rank: dict[int, float] | None = None
    ) -> float:
        """Mean estimate over the types the block fits, plus the longest transfer-and-rank tail."""
        known = self.rank if rank is None else rank
        stats = partition.stats(block)
        times = [stats.exec_estimate_s(r) for r in self.resources if stats.fits(r)]
        mean = sum(times) / len(times) if times else stats.work
        tail = max((self.platform.transfer_s(nbytes) + known[s] for s, nbytes in succ.items()), default=0.0)
        return mean + tail

    def finish_estimate(self, partition: Partition, block: int, slot: Processor, mapping: Mapping) -> float:
        """When ``block`` would end on ``slot``, given the blocks already placed."""
        inputs = self._inputs.get(block)
        if inputs is None:
            inputs = self._inputs[block] = partition.in_edges(block)
        ready = max(slot.resource.earliest_start_s, self.available.get(slot.index, 0.0))
        for source, nbytes in inputs.items():
            if source in self.finish:
                transfer = 0.0 if mapping[source] == slot.index else self.platform.transfer_s(nbytes)
                ready = max(ready, self.finish[source] + transfer)
        return ready + partition.stats(block).exec_estimate_s(slot.resource)

    def choose(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        per_type: dict[str, Processor] = {}
        for slot in fitting:
            per_type.setdefault(slot.resource.name, slot)
        ranked = sorted(per_type.values(), key=lambda s: (self.finish_estimate(partition, block, s, mapping), s.index))
        if len(ranked) == 1:
            return ranked[0]
        demand = Counter(self.demand)
        demand[self.mask[block]] -= 1
        used = set(mapping.values())
        supply = Counter(self.type_of[s.resource.name] for s in self.platform.slots if s.index not in used)
        enough = matchable(demand, supply, self.resources)
        for slot in ranked:
            supply[self.type_of[slot.resource.name]] -= 1
            keeps = matchable(demand, supply, self.resources) >= enough
            supply[self.type_of[slot.resource.name]] += 1
            if keeps:
                return slot
        return ranked[0]

    def share(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        return min(fitting, key=lambda s: (self.finish_estimate(partition, block, s, mapping), s.index))

    def placed(self, partition: Partition, block: int, slot: Processor, mapping: Mapping) -> None:
        end = self.finish_estimate(partition, block, slot, mapping)
        self.finish[block] = end
        self.available[slot.index] = max(self.available.get(slot.index, 0.0), end)
        self.demand[self.mask[block]] -= 1


class CapacityMatching(PlacementPolicy):
    """Blocks matched to processors by memory and speed: the most constrained and heaviest first.

    Blocks that fit the fewest processor types come first (then the heaviest), each on the
    free processor that fits it with the most capacity (speed times cores); with every
    processor taken, a block shares the fitting one with the least work per capacity. This
    needs no block-level time estimate, which misleads when blocks overlap in time.
    """

    split_mixed = True

    def __init__(self, platform: Platform) -> None:
        self.resources = list(platform.problem.catalog.resources)
        self.load: Counter[int] = Counter()

    def keys(self, partition: Partition, blocks: list[int]) -> dict[int, PlacementKey]:
        keys: dict[int, PlacementKey] = {}
        for block in blocks:
            stats = partition.stats(block)
            fitting_types = bin(type_mask(stats, self.resources)).count("1")
            keys[block] = (float(fitting_types), -stats.work, float(block))
        return keys

    def choose(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        return max(fitting, key=lambda s: (_capacity(s), -s.index))

    def share(self, partition: Partition, block: int, fitting: list[Processor], mapping: Mapping) -> Processor:
        return min(fitting, key=lambda s: (self.load[s.index] / _capacity(s), s.index))

    def placed(self, partition: Partition, block: int, slot: Processor, mapping: Mapping) -> None:
        self.load[slot.index] += int(partition.stats(block).work)


def rebalance(plan: BlockPlan, order: Order, deadline: TimeBudget) -> BlockPlan:
    """Re-partition with each block's work in proportion to its processor's capacity, keep the mapping.

    Capacity is speed times cores, divided among the blocks that share a processor. Blocks
    are taken in step 1's ``order`` (the order of the partition's pieces); block ``i`` of the
    new partition gets the processor of the old block ``i`` where it fits, and is placed as
    in step 2 otherwise. Repeated while the list schedule improves.
    """
    platform = plan.platform
    for _ in range(REBALANCE_ROUNDS):
        if deadline.expired():
            break
        position = plan.partition.split_position
        blocks = sorted(plan.partition.blocks(), key=lambda b: _mean(position[v] for v in plan.partition.members[b]))
        chosen = [plan.mapping[b] for b in blocks]
        sharing = Counter(chosen)
        shares = [_capacity(platform.slots[s]) / sharing[s] for s in chosen]
        partition = aware_partition(platform, order, len(blocks), shares)
        preferred = {b: chosen[b] for b in partition.blocks()}
        trial = evaluate(platform, partition, place_blocks(platform, partition, HeftPlacement(platform), preferred))
        if trial.makespan_s >= plan.makespan_s:
            break
        plan = trial
    return plan


def _capacity(slot: Processor) -> float:
    return slot.resource.speed * slot.resource.vcpus


def _mean(values: Iterable[int]) -> float:
    items = list(values)
    return sum(items) / len(items)


# --------------------------------------------------------------------------------------------
# Steps 3 and 4: split/merge and swaps, judged by the list schedule


def local_search(plan: BlockPlan, deadline: TimeBudget) -> BlockPlan:
    """Steps 3 and 4 until neither finds a move that shortens the makespan, or time runs out."""
    while not deadline.expired():
        better = first_improvement(plan, split_merge_moves(plan), deadline)
        if better is None:
            better = first_improvement(plan, swap_moves(plan), deadline)
        if better is None:
            return plan
        plan = better
    return plan


def first_improvement(plan: BlockPlan, moves: Iterator[Candidate], deadline: TimeBudget) -> BlockPlan | None:
    """The first candidate whose list schedule ends strictly earlier than ``plan``'s."""
    threshold = plan.makespan_s - 1e-9 * max(1.0, plan.makespan_s)
    for partition, mapping in moves:
        if deadline.expired():
            return None
        trial = evaluate(plan.platform, partition, mapping)
        if trial.makespan_s < threshold:
            return trial
    return None


def critical_blocks(plan: BlockPlan) -> list[tuple[int, float]]:
    """Blocks on the critical path in path order (consecutive repeats merged), with their time on it."""
    schedule, block_of = plan.schedule, plan.partition.block_of
    path: list[tuple[int, float]] = []
    for v in schedule.critical_path():
        spent = schedule.end[v] - schedule.start[v]
        if path and path[-1][0] == block_of[v]:
            path[-1] = (block_of[v], path[-1][1] + spent)
        else:
            path.append((block_of[v], spent))
    return path


def _by_time_on_path(path: list[tuple[int, float]]) -> list[int]:
    time_on_path: dict[int, float] = {}
    for block, spent in path:
        time_on_path[block] = time_on_path.get(block, 0.0) + spent
    return sorted(time_on_path, key=lambda b: -time_on_path[b])


def _free_per_type(plan: BlockPlan) -> list[Processor]:
    """One free processor of each type, fastest types first."""
    per_type: dict[str, Processor] = {}
    for slot in plan.free_slots():
        per_type.setdefault(slot.resource.name, slot)
    return sorted(per_type.values(), key=lambda s: (-s.resource.speed * s.resource.vcpus, s.index))


def split_merge_moves(plan: BlockPlan) -> Iterator[Candidate]:
    """Step 3: merge consecutive critical blocks; split a critical block onto a free processor,
    or split it and merge one part into a block on another processor."""
    path = critical_blocks(plan)
    yield from _merge_moves(plan, path)
    ranked = _by_time_on_path(path)
    yield from _split_moves(plan, ranked)
    yield from _split_and_merge_moves(plan, ranked[:SPLIT_MERGE_BLOCKS])


def _merge_moves(plan: BlockPlan, path: list[tuple[int, float]]) -> Iterator[Candidate]:
    slots, mapping = plan.platform.slots, plan.mapping
    pairs = list(dict.fromkeys((a, b) for (a, _), (b, _) in pairwise(path)))
    for a, b in pairs:
        if mapping[a] == mapping[b] or not plan.partition.can_merge(a, b):
            continue
        merged = plan.partition.copy()
        merged.merge(a, b)
        stats = merged.stats(a)
        targets = [slots[mapping[a]], slots[mapping[b]], *_free_per_type(plan)[:1]]
        for slot in dict.fromkeys(t for t in targets if stats.fits(t.resource)):
            new_mapping = {x: s for x, s in mapping.items() if x != b}
            new_mapping[a] = slot.index
            yield merged, new_mapping


def _split_moves(plan: BlockPlan, blocks: list[int]) -> Iterator[Candidate]:
    slots, mapping = plan.platform.slots, plan.mapping
    free = _free_per_type(plan)
    for block in blocks:
        if plan.partition.stats(block).tasks < 2:
            continue
        here = slots[mapping[block]].resource
        for dest in free:
            there = dest.resource
            stay = here.speed * here.vcpus / (here.speed * here.vcpus + there.speed * there.vcpus)
            for moving_part in (1, 0):
                trial = plan.partition.copy()
                parts = trial.split(block, stay if moving_part == 1 else 1.0 - stay)
                if parts is None:
                    break
                mover, stayer = parts[moving_part], parts[1 - moving_part]
                if not (trial.stats(mover).fits(there) and trial.stats(stayer).fits(here)):
                    continue
                new_mapping = dict(mapping)
                new_mapping[stayer] = mapping[block]
                new_mapping[mover] = dest.index
                yield trial, new_mapping


def _split_and_merge_moves(plan: BlockPlan, blocks: list[int]) -> Iterator[Candidate]:
    """Halve a critical block and merge one half into a block whose processor finishes early."""
    slots, mapping = plan.platform.slots, plan.mapping
    finish = _machine_finish(plan)
    for block in blocks:
        split = plan.partition.copy()
        parts = split.split(block)
        if parts is None:
            continue
        for mover in (parts[1], parts[0]):
            stayer = parts[0] if mover == parts[1] else parts[1]
            targets = [
                other
                for other in split.blocks()
                if other not in parts
                and mapping[other] != mapping[block]
                and split.stats(mover).fits(slots[mapping[other]].resource)
            ]
            targets.sort(key=lambda other: (finish[mapping[other]], other))
            tried = 0
            for other in targets:
                if tried == SPLIT_MERGE_TARGETS:
                    break
                if not split.can_merge(mover, other):
                    continue
                tried += 1
                merged = split.copy()
                merged.merge(other, mover)
                new_mapping = {b: s for b, s in mapping.items() if b != block}
                new_mapping[stayer] = mapping[block]
                yield merged, new_mapping


def _machine_finish(plan: BlockPlan) -> dict[int, float]:
    """When each used processor ends its last task."""
    finish: dict[int, float] = {}
    for machine, end in zip(plan.schedule.machine, plan.schedule.end, strict=True):
        finish[machine] = max(finish.get(machine, 0.0), end)
    return finish


def swap_moves(plan: BlockPlan) -> Iterator[Candidate]:
    """Step 4: move a critical block to a free processor of another type, or swap it with a block."""
    slots, mapping, partition = plan.platform.slots, plan.mapping, plan.partition
    sharing = Counter(mapping.values())
    for block in _by_time_on_path(critical_blocks(plan)):
        here = slots[mapping[block]]
        stats = partition.stats(block)
        for dest in _free_per_type(plan):
            if stats.fits(dest.resource) and (dest.resource != here.resource or sharing[here.index] > 1):
                yield partition, {**mapping, block: dest.index}
        for partner in _swap_partners(plan, block):
            yield partition, {**mapping, block: mapping[partner], partner: here.index}


def _swap_partners(plan: BlockPlan, block: int) -> list[int]:
    """Blocks on processors of other types that can trade places with ``block``, lightest first per type."""
    slots, mapping, partition = plan.platform.slots, plan.mapping, plan.partition
    here = slots[mapping[block]].resource
    stats = partition.stats(block)
    per_type: dict[str, list[int]] = {}
    for other, index in mapping.items():
        there = slots[index].resource
        if there == here or not stats.fits(there) or not partition.stats(other).fits(here):
            continue
        per_type.setdefault(there.name, []).append(other)
    chosen: list[int] = []
    for others in per_type.values():
        others.sort(key=lambda b: (partition.stats(b).work, b))
        chosen.extend(others[:SWAP_PARTNERS_PER_TYPE])
    return chosen
