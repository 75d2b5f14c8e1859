"""Building blocks shared by the partition-based engines (Kulagina, Meyerhenke and Benoit, ICPP 2024).

The two engines of :mod:`agora_optimizer.engines.partition.icpp24` (the paper's four-step
heuristic) and :mod:`agora_optimizer.engines.partition.homogeneous` (the paper's
baseline that ignores heterogeneity) both

1. cut the workflow into an *acyclic* partition: blocks of tasks whose quotient graph
   (one vertex per block, an edge where a task edge crosses two blocks) has no cycle;
2. map every block onto one *processor*, a machine slot ``TYPE#N`` (``N < count``);
3. list-schedule every task on its block's machine and recompute the makespan from
   the tasks (never from the block-level estimate).

What lives here: :class:`TaskGraph` (the workflow as integer arrays, fast enough for
30,000 tasks), :func:`acyclic_partition` (our replacement for dagP), :class:`Partition`
(split and merge that keep the quotient acyclic), :func:`machine_slots` (the
processors), :func:`place_blocks` (the skeleton of the mapping step, with the paper's
"split a block that fits no free processor"), :func:`simulate` (the machine-local list
schedule) and :class:`BlockPlan` (a mapped partition and its schedule).

Memory model. In the paper a block's memory requirement is the peak memory of its best
sequential traversal, files included. In agora's model (``shared/spec/agora-model.md``)
files do not occupy machine memory and a machine runs several tasks at once while their
summed cores and memory fit. Every machine runs a list schedule that starts a task only
when its cores and memory fit beside the running ones, so the memory a block needs over
time (the maximum of the summed memory of its concurrently running tasks) never exceeds
the machine, and a block *fits* a machine type iff each of its tasks fits it (cores and
memory): the block's requirement is its largest task.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.problem import Problem

UNLIMITED_SLOTS = 64
"""Processors offered for a type with ``count: null`` (a partition never needs more blocks than that)."""

BALANCE_TOLERANCE = 0.05
"""Refinement may overfill a block by this fraction of its target weight (dagP's epsilon)."""

REFINEMENT_PASSES = 4
BACKFILL_DEPTH = 4
"""How many higher-priority ready tasks that do not fit a machine yet a list schedule may skip."""


# --------------------------------------------------------------------------------------------
# The workflow as arrays


class TaskGraph:
    """A workflow as integer-indexed arrays, with a depth-first topological order.

    ``parents[v]`` and ``children[v]`` hold ``(task, bytes)`` pairs; ``order`` is a
    topological order that follows chains depth-first (Kahn's algorithm with a stack), so
    that cutting it into contiguous pieces keeps chains together, as dagP's
    topological-order-based initial partitioning does.
    """

    __slots__ = (
        "children",
        "cores",
        "ids",
        "memory",
        "order",
        "parents",
        "position",
        "release",
        "runtime",
        "scratch",
        "weight",
    )

    def __init__(
        self,
        ids: Sequence[str],
        runtime: Sequence[float],
        cores: Sequence[int],
        memory: Sequence[int],
        edges: Iterable[tuple[int, int, int]],
        release: Sequence[float] | None = None,
    ) -> None:
        n = len(ids)
        self.ids = list(ids)
        self.release = [float(r) for r in release] if release is not None else [0.0] * n  # each task's release_s
        self.runtime = [float(r) for r in runtime]
        self.cores = list(cores)
        self.memory = list(memory)
        self.parents: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.children: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for parent, child, nbytes in edges:
            self.parents[child].append((parent, nbytes))
            self.children[parent].append((child, nbytes))
        self.order = depth_first_order(self.parents, self.children)
        self.position = [0] * n
        for index, v in enumerate(self.order):
            self.position[v] = index
        work = [r * c for r, c in zip(self.runtime, self.cores, strict=True)]
        floor = (sum(work) / n if n else 0.0) * 0.01 or 1.0
        self.weight = [w + floor for w in work]  # a zero-runtime task still weighs a little
        self.scratch = [-1] * n  # per-task working space; whoever sets entries resets them to -1

    @classmethod
    def from_workflow(cls, workflow: Workflow) -> TaskGraph:
        index = {task.id: i for i, task in enumerate(workflow.tasks)}
        return cls(
            [t.id for t in workflow.tasks],
            [t.runtime_s for t in workflow.tasks],
            [t.cores for t in workflow.tasks],
            [t.memory_bytes for t in workflow.tasks],
            ((index[e.parent], index[e.child], e.bytes) for e in workflow.edges),
            [t.release_s for t in workflow.tasks],
        )

    @property
    def n(self) -> int:
        return len(self.ids)


def depth_first_order(parents: list[list[tuple[int, int]]], children: list[list[tuple[int, int]]]) -> list[int]:
    """A topological order that finishes a chain before it starts the next (ready tasks on a stack)."""
    indegree = [len(p) for p in parents]
    stack = [v for v in reversed(range(len(parents))) if indegree[v] == 0]
    order: list[int] = []
    while stack:
        v = stack.pop()
        order.append(v)
        for child, _ in reversed(children[v]):
            indegree[child] -= 1
            if indegree[child] == 0:
                stack.append(child)
    if len(order) != len(parents):
        raise ValueError("the task graph has a cycle")
    return order


def grouped_order(graph: TaskGraph, labels: Sequence[int]) -> list[int]:
    """A depth-first topological order that stays on one label while a task of it is ready.

    With ``labels`` = the set of processor types a task fits, contiguous pieces of this order
    mostly hold tasks that fit the same processors (the heterogeneity-aware partition).
    """
    n = graph.n
    indegree = [len(p) for p in graph.parents]
    emitted = [False] * n
    per_label: dict[int, list[int]] = {}
    recent: list[int] = []

    def push(v: int) -> None:
        per_label.setdefault(labels[v], []).append(v)
        recent.append(v)

    for v in reversed(range(n)):
        if indegree[v] == 0:
            push(v)
    order: list[int] = []
    current = -1
    while len(order) < n:
        same = per_label.get(current, [])
        while same and emitted[same[-1]]:
            same.pop()
        if same:
            v = same.pop()
        else:
            while emitted[recent[-1]]:
                recent.pop()
            v = recent.pop()
            current = labels[v]
        emitted[v] = True
        order.append(v)
        for child, _ in reversed(graph.children[v]):
            indegree[child] -= 1
            if indegree[child] == 0:
                push(child)
    return order


# --------------------------------------------------------------------------------------------
# Step 1: the acyclic partition (our replacement for dagP)


def acyclic_partition(
    graph: TaskGraph,
    k: int,
    shares: Sequence[float] | None = None,
    order: Sequence[int] | None = None,
    labels: Sequence[int] | None = None,
) -> list[int]:
    """Cut the DAG into ``k`` non-empty blocks ``0..k-1`` whose numbering is topological.

    Every edge ``u -> v`` gets ``block[u] <= block[v]``, so the quotient graph is acyclic.
    Blocks are contiguous pieces of a topological ``order`` (the depth-first one by
    default), weighted by work (runtime times cores) in proportion to ``shares`` (equal by
    default), then refined to cut fewer bytes (Herrmann et al.'s dagP refines the same way:
    moves that keep a topological block numbering). Edge weights are ``bytes + 1`` so that,
    where files are empty, fewer dependencies are cut. With ``labels`` (bit sets), no move
    takes a task into a block whose tasks share a label bit it lacks.
    """
    n = graph.n
    k = max(1, min(k, n))
    if n == 0:
        return []
    fractions = _normalised(shares, k)
    total = sum(graph.weight)
    block_of = _segment(graph, graph.order if order is None else order, k, [f * total for f in fractions])
    caps = [f * total * (1 + BALANCE_TOLERANCE) for f in fractions]
    refine(graph, graph.order, block_of, k, caps, labels)
    return block_of


def _normalised(shares: Sequence[float] | None, k: int) -> list[float]:
    if shares is None or len(shares) != k or sum(shares) <= 0:
        return [1.0 / k] * k
    total = float(sum(shares))
    return [s / total for s in shares]


def _segment(graph: TaskGraph, order: Sequence[int], k: int, targets: list[float]) -> list[int]:
    """Contiguous pieces of a topological order, each close to its target weight, none empty."""
    n = graph.n
    block_of = [0] * n
    block, filled, bound, count = 0, 0.0, targets[0], 0
    for index, v in enumerate(order):
        w = graph.weight[v]
        must_advance = k - 1 - block >= n - index
        if block < k - 1 and count > 0 and (filled + w / 2 > bound or must_advance):
            block += 1
            bound += targets[block]
            count = 0
        block_of[v] = block
        filled += w
        count += 1
    return block_of


def refine(
    graph: TaskGraph,
    tasks: Sequence[int],
    block_of: list[int],
    k: int,
    caps: Sequence[float],
    labels: Sequence[int] | None = None,
) -> None:
    """Greedy passes that move a task to a neighbour's block when that cuts fewer bytes.

    ``block_of`` numbers blocks topologically (``-1`` marks tasks outside ``tasks``, which
    are ignored). A task may move to any block between its parents' largest and its
    children's smallest block, so the numbering stays topological; a move must keep its
    source block non-empty, its target block under ``caps`` and, with ``labels``, the
    target's common label bits.
    """
    load = [0.0] * k
    count = [0] * k
    for v in tasks:
        load[block_of[v]] += graph.weight[v]
        count[block_of[v]] += 1
    for _ in range(REFINEMENT_PASSES):
        common = _common_labels(tasks, block_of, k, labels)
        moved = 0
        for v in tasks:
            target = _best_move(graph, v, block_of, k, load, caps, None if labels is None else (labels[v], common))
            if target is None or count[block_of[v]] == 1:
                continue
            source = block_of[v]
            load[source] -= graph.weight[v]
            count[source] -= 1
            load[target] += graph.weight[v]
            count[target] += 1
            block_of[v] = target
            moved += 1
        if not moved:
            return


def _common_labels(tasks: Sequence[int], block_of: list[int], k: int, labels: Sequence[int] | None) -> list[int]:
    """The label bits that every task of each block has (all bits where there are no labels)."""
    common = [-1] * k
    if labels is not None:
        for v in tasks:
            common[block_of[v]] &= labels[v]
    return common


def _best_move(
    graph: TaskGraph,
    v: int,
    block_of: list[int],
    k: int,
    load: list[float],
    caps: Sequence[float],
    label: tuple[int, list[int]] | None,
) -> int | None:
    """The block (other than ``v``'s) that gains the most cut bytes, if any gains at all.

    ``label`` is ``v``'s label and every block's common label: a block whose common label
    has a bit that ``v`` lacks is not a target.
    """
    lo, hi = 0, k - 1
    links: dict[int, int] = {}
    for parent, nbytes in graph.parents[v]:
        b = block_of[parent]
        if b >= 0:
            lo = max(lo, b)
            links[b] = links.get(b, 0) + nbytes + 1
    for child, nbytes in graph.children[v]:
        b = block_of[child]
        if b >= 0:
            hi = min(hi, b)
            links[b] = links.get(b, 0) + nbytes + 1
    source = block_of[v]
    if lo == hi:
        return None
    inside = links.get(source, 0)
    best, best_gain = None, 0
    for b, weight in links.items():
        gain = weight - inside
        allowed = label is None or label[0] & label[1][b] == label[1][b]
        if allowed and b != source and lo <= b <= hi and gain > best_gain and load[b] + graph.weight[v] <= caps[b]:
            best, best_gain = b, gain
    return best


# --------------------------------------------------------------------------------------------
# Blocks: statistics, split and merge


@dataclass(frozen=True)
class BlockStats:
    """What the mapping needs to know of a block (work in reference core-seconds)."""

    tasks: int
    work: float
    critical_path_s: float
    memory_work: float
    cores: int
    memory_bytes: int

    def fits(self, resource: Resource) -> bool:
        """The block's requirement (its largest task) fits the machine type."""
        return self.cores <= resource.vcpus and self.memory_bytes <= resource.memory_bytes

    def exec_estimate_s(self, resource: Resource) -> float:
        """A block-level estimate of its time on one machine: the largest of three lower bounds."""
        return (
            max(
                self.work / resource.vcpus,
                self.critical_path_s,
                self.memory_work / max(resource.memory_bytes, 1),
            )
            / resource.speed
        )


class Partition:
    """Blocks of tasks whose quotient graph stays acyclic through :meth:`split` and :meth:`merge`.

    Block ids are arbitrary integers; ``members[b]`` lists a block's tasks in topological order.
    """

    def __init__(
        self,
        graph: TaskGraph,
        block_of: Sequence[int],
        labels: Sequence[int] | None = None,
        order: Sequence[int] | None = None,
    ) -> None:
        self.graph = graph
        self.labels = labels
        self.split_position: Sequence[int] = graph.position
        if order is not None:
            position = [0] * graph.n
            for index, v in enumerate(order):
                position[v] = index
            self.split_position = position
        self.block_of = list(block_of)
        self.members: dict[int, list[int]] = {}
        for v in graph.order:
            self.members.setdefault(self.block_of[v], []).append(v)
        self.next_id = max(self.members, default=-1) + 1
        self._stats: dict[int, BlockStats] = {}
        self._quotient: tuple[dict[int, dict[int, int]], dict[int, dict[int, int]]] | None = None

    def copy(self) -> Partition:
        other = Partition.__new__(Partition)
        other.graph = self.graph
        other.labels = self.labels
        other.split_position = self.split_position
        other.block_of = list(self.block_of)
        other.members = {b: list(tasks) for b, tasks in self.members.items()}
        other.next_id = self.next_id
        other._stats = dict(self._stats)
        other._quotient = None
        return other

    def blocks(self) -> list[int]:
        return list(self.members)

    def stats(self, block: int) -> BlockStats:
        found = self._stats.get(block)
        if found is None:
            found = self._stats[block] = self._compute_stats(block)
        return found

    def _compute_stats(self, block: int) -> BlockStats:
        g = self.graph
        tasks = self.members[block]
        longest: dict[int, float] = {}
        for v in tasks:
            before = max((longest[p] for p, _ in g.parents[v] if p in longest), default=0.0)
            longest[v] = before + g.runtime[v]
        return BlockStats(
            tasks=len(tasks),
            work=sum(g.runtime[v] * g.cores[v] for v in tasks),
            critical_path_s=max(longest.values(), default=0.0),
            memory_work=sum(g.runtime[v] * g.memory[v] for v in tasks),
            cores=max(g.cores[v] for v in tasks),
            memory_bytes=max(g.memory[v] for v in tasks),
        )

    def in_edges(self, block: int) -> dict[int, int]:
        """Bytes that enter ``block`` from each other block (a scan of the block's tasks only)."""
        return self._crossing(block, self.graph.parents)

    def out_edges(self, block: int) -> dict[int, int]:
        """Bytes that leave ``block`` for each other block (a scan of the block's tasks only)."""
        return self._crossing(block, self.graph.children)

    def _crossing(self, block: int, neighbours: list[list[tuple[int, int]]]) -> dict[int, int]:
        block_of = self.block_of
        found: dict[int, int] = {}
        for v in self.members[block]:
            for w, nbytes in neighbours[v]:
                other = block_of[w]
                if other != block:
                    found[other] = found.get(other, 0) + nbytes
        return found

    def quotient(self) -> tuple[dict[int, dict[int, int]], dict[int, dict[int, int]]]:
        """(successors, predecessors) of every block, with the bytes that cross each block edge."""
        if self._quotient is None:
            succ: dict[int, dict[int, int]] = {b: {} for b in self.members}
            pred: dict[int, dict[int, int]] = {b: {} for b in self.members}
            block_of = self.block_of
            for v, kids in enumerate(self.graph.children):
                a = block_of[v]
                for child, nbytes in kids:
                    b = block_of[child]
                    if a != b:
                        succ[a][b] = succ[a].get(b, 0) + nbytes
                        pred[b][a] = pred[b].get(a, 0) + nbytes
            self._quotient = (succ, pred)
        return self._quotient

    def is_acyclic(self) -> bool:
        succ, pred = self.quotient()
        indegree = {b: len(p) for b, p in pred.items()}
        ready = [b for b, d in indegree.items() if d == 0]
        seen = 0
        while ready:
            b = ready.pop()
            seen += 1
            for s in succ[b]:
                indegree[s] -= 1
                if indegree[s] == 0:
                    ready.append(s)
        return seen == len(succ)

    def topological_blocks(self) -> list[int]:
        """Blocks in a topological order of the quotient graph (ties by their first task)."""
        succ, pred = self.quotient()
        first = {b: self.graph.position[tasks[0]] for b, tasks in self.members.items()}
        indegree = {b: len(p) for b, p in pred.items()}
        ready = [(first[b], b) for b, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            _, b = heapq.heappop(ready)
            order.append(b)
            for s in succ[b]:
                indegree[s] -= 1
                if indegree[s] == 0:
                    heapq.heappush(ready, (first[s], s))
        return order

    def is_mixed(self, block: int) -> bool:
        """Whether the block's tasks carry different labels (fit different processor types)."""
        labels = self.labels
        if labels is None:
            return False
        tasks = self.members[block]
        first = labels[tasks[0]]
        return any(labels[v] != first for v in tasks)

    def split(self, block: int, first_share: float = 0.5, at_label_change: bool = False) -> tuple[int, int] | None:
        """Bisect ``block`` into a down-set (keeps the id) and the rest (a new id); None for one task.

        The first part is a prefix of the block in the partition's topological order, taking
        about ``first_share`` of the work (or, ``at_label_change``, ending where the label
        changes closest to that point), then refined like :func:`refine`. It is closed under
        the block's internal predecessors, so no new cycle can appear: a path from the second
        part back to the first would have been a cycle through ``block`` before.
        """
        if len(self.members[block]) < 2:
            return None
        g = self.graph
        tasks = sorted(self.members[block], key=self.split_position.__getitem__)
        cut = self._cut(tasks, min(max(first_share, 0.0), 1.0), at_label_change)
        local = g.scratch  # all -1 between uses: a split costs its block, not n
        for index, v in enumerate(tasks):
            local[v] = 0 if index < cut else 1
        first_weight = sum(g.weight[v] for v in tasks[:cut])
        rest_weight = sum(g.weight[v] for v in tasks[cut:])
        caps = [first_weight * (1 + BALANCE_TOLERANCE), rest_weight * (1 + BALANCE_TOLERANCE)]
        refine(g, tasks, local, 2, caps, self.labels)
        new = self.next_id
        self.next_id += 1
        position = g.position
        first = sorted((v for v in tasks if local[v] == 0), key=position.__getitem__)
        second = sorted((v for v in tasks if local[v] == 1), key=position.__getitem__)
        for v in tasks:
            local[v] = -1
        for v in second:
            self.block_of[v] = new
        self.members[block] = first
        self.members[new] = second
        self._changed(block, new)
        return block, new

    def _cut(self, tasks: list[int], share: float, at_label_change: bool) -> int:
        """Where the prefix ends (1 .. len - 1): the work midpoint, or the nearest label change."""
        weight = self.graph.weight
        total = sum(weight[v] for v in tasks)
        bound, filled, cut = total * share, 0.0, len(tasks) - 1
        for index, v in enumerate(tasks):
            if index > 0 and filled + weight[v] / 2 > bound:
                cut = index
                break
            filled += weight[v]
        labels = self.labels
        if at_label_change and labels is not None:
            changes = [i for i in range(1, len(tasks)) if labels[tasks[i]] != labels[tasks[i - 1]]]
            if changes:
                cut = min(changes, key=lambda i: (abs(i - cut), i))
        return max(1, min(cut, len(tasks) - 1))

    def can_merge(self, a: int, b: int) -> bool:
        """Merging keeps the quotient acyclic iff no path joins ``a`` and ``b`` through a third block."""
        succ, _ = self.quotient()
        return not (_reaches_around(succ, a, b) or _reaches_around(succ, b, a))

    def merge(self, a: int, b: int) -> int:
        """Put ``b``'s tasks into ``a`` (check :meth:`can_merge` first); returns ``a``."""
        for v in self.members[b]:
            self.block_of[v] = a
        position = self.graph.position
        self.members[a] = sorted(self.members[a] + self.members.pop(b), key=position.__getitem__)
        self._stats.pop(b, None)
        self._changed(a)
        return a

    def _changed(self, *blocks: int) -> None:
        for b in blocks:
            self._stats.pop(b, None)
        self._quotient = None


def _reaches_around(succ: dict[int, dict[int, int]], source: int, target: int) -> bool:
    """Whether ``target`` is reachable from ``source`` by a path of two or more block edges."""
    stack = [s for s in succ[source] if s != target]
    seen = set(stack)
    while stack:
        b = stack.pop()
        for s in succ[b]:
            if s == target:
                return True
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return False


# --------------------------------------------------------------------------------------------
# Processors


@dataclass(frozen=True)
class Slot:
    """A processor: machine ``number`` of type ``resource`` (the plan names it ``TYPE#N``)."""

    index: int
    resource: Resource
    number: int


def machine_slots(problem: Problem) -> list[Slot]:
    """Every machine the catalog allows at once: ``count`` per type (a bound for unlimited types)."""
    slots: list[Slot] = []
    bound = max(1, min(len(problem.workflow.tasks), UNLIMITED_SLOTS))
    for resource in problem.catalog.resources:
        count = bound if resource.count is None else resource.count
        for number in range(count):
            slots.append(Slot(len(slots), resource, number))
    return slots


@dataclass(frozen=True)
class Platform:
    """A problem as the partition engines see it: the task graph, the processors, the network."""

    problem: Problem
    graph: TaskGraph
    slots: tuple[Slot, ...]
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


# --------------------------------------------------------------------------------------------
# Step 2 skeleton: place blocks, splitting those that fit no free processor


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

    def choose(self, partition: Partition, block: int, fitting: list[Slot], mapping: Mapping) -> Slot:
        """One of the free processors that can hold ``block``."""
        raise NotImplementedError

    def share(self, partition: Partition, block: int, fitting: list[Slot], mapping: Mapping) -> Slot:
        """An already used processor for ``block`` when no free one can hold it (``fitting`` is not empty)."""
        raise NotImplementedError

    def placed(self, partition: Partition, block: int, slot: Slot, mapping: Mapping) -> None:
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


# --------------------------------------------------------------------------------------------
# The machine-local list schedule


@dataclass(frozen=True)
class Schedule:
    """Start and end of every task, its machine (slot index), and its critical predecessor."""

    start: list[float]
    end: list[float]
    machine: list[int]
    critical_pred: list[int]
    makespan_s: float

    def critical_path(self) -> list[int]:
        """Tasks from a first one to the last to finish, each waiting for the one before it."""
        if not self.end:
            return []
        v = max(range(len(self.end)), key=self.end.__getitem__)
        path = [v]
        while self.critical_pred[v] >= 0:
            v = self.critical_pred[v]
            path.append(v)
        path.reverse()
        return path


def simulate(graph: TaskGraph, machine: list[int], slots: Sequence[Slot], bandwidth_bytes_per_s: float) -> Schedule:
    """List-schedule every task on its machine, sharing the machine's cores and memory.

    An event-driven list schedule: a task is released when its last input arrives (its
    parents' ends, plus ``bytes / bandwidth`` from another machine, and not before the
    machine's release and ``boot_s``, nor its own ``release_s``); whenever a machine frees
    capacity or receives a task, it starts its released tasks in decreasing upward rank while
    their cores and memory fit beside the running ones (skipping at most :data:`BACKFILL_DEPTH`
    that do not fit yet). Each task records what it waited for last (a parent's data or its
    machine) for the critical path. ``O((n + e) log n)``.
    """
    n = graph.n
    runtime, cores, memory = graph.runtime, graph.cores, graph.memory
    children, position = graph.children, graph.position
    inverse_bw = 1.0 / bandwidth_bytes_per_s
    speed = [s.resource.speed for s in slots]
    latency = [s.resource.added_latency_s for s in slots]  # the platform's, when the planner adds it
    duration = [runtime[v] / speed[machine[v]] + latency[machine[v]] for v in range(n)]
    rank = _upward_ranks(graph, machine, duration, inverse_bw)
    free_cores = [s.resource.vcpus for s in slots]
    free_memory = [s.resource.memory_bytes for s in slots]
    ready: list[list[tuple[float, int, int]]] = [[] for _ in slots]
    last_finished = [-1] * len(slots)
    release = [max(slots[machine[v]].resource.earliest_start_s, graph.release[v]) for v in range(n)]
    released_by = [-1] * n
    missing = [len(p) for p in graph.parents]
    start, end, critical = [0.0] * n, [0.0] * n, [-1] * n
    events = [(release[v], 1, v) for v in range(n) if missing[v] == 0]
    heapq.heapify(events)
    while events:
        now = events[0][0]
        touched: set[int] = set()
        while events and events[0][0] <= now:
            _, kind, v = heapq.heappop(events)
            m = machine[v]
            touched.add(m)
            if kind == 1:
                heapq.heappush(ready[m], (-rank[v], position[v], v))
                continue
            free_cores[m] += cores[v]
            free_memory[m] += memory[v]
            last_finished[m] = v
            finished = end[v]
            for child, nbytes in children[v]:
                arrival = finished if machine[child] == m else finished + nbytes * inverse_bw
                if arrival >= release[child]:
                    release[child] = arrival
                    released_by[child] = v
                missing[child] -= 1
                if missing[child] == 0:
                    heapq.heappush(events, (release[child], 1, child))
        for m in touched:
            queue = ready[m]
            fc, fm = free_cores[m], free_memory[m]
            skipped: list[tuple[float, int, int]] = []
            while queue:
                v = queue[0][2]
                if cores[v] <= fc and memory[v] <= fm:
                    heapq.heappop(queue)
                    fc -= cores[v]
                    fm -= memory[v]
                    start[v] = now
                    end[v] = now + duration[v]
                    critical[v] = released_by[v] if now <= release[v] else last_finished[m]
                    heapq.heappush(events, (end[v], 0, v))
                elif fc == 0 or len(skipped) >= BACKFILL_DEPTH:
                    break
                else:
                    skipped.append(heapq.heappop(queue))
            for item in skipped:
                heapq.heappush(queue, item)
            free_cores[m], free_memory[m] = fc, fm
    return Schedule(start, end, list(machine), critical, max(end, default=0.0))


def _upward_ranks(graph: TaskGraph, machine: list[int], duration: list[float], inverse_bw: float) -> list[float]:
    """Longest path to an exit on the mapped machines, transfers only across machines (HEFT's rank)."""
    rank = [0.0] * graph.n
    children = graph.children
    for v in reversed(graph.order):
        m = machine[v]
        tail = 0.0
        for child, nbytes in children[v]:
            reach = rank[child] if machine[child] == m else rank[child] + nbytes * inverse_bw
            if reach > tail:
                tail = reach
        rank[v] = duration[v] + tail
    return rank


# --------------------------------------------------------------------------------------------
# A mapped partition and its schedule


@dataclass(frozen=True)
class BlockPlan:
    """An acyclic partition, each block on a processor, and the list schedule of its tasks."""

    platform: Platform
    partition: Partition
    mapping: Mapping
    schedule: Schedule

    @property
    def makespan_s(self) -> float:
        return self.schedule.makespan_s

    def free_slots(self) -> list[Slot]:
        used = set(self.mapping.values())
        return [s for s in self.platform.slots if s.index not in used]

    def assignments(self) -> tuple[Assignment, ...]:
        """One assignment per task; the used processors of each type are numbered ``#0, #1, ...``."""
        g, schedule, slots = self.platform.graph, self.schedule, self.platform.slots
        names: dict[int, str] = {}
        per_type: Counter[str] = Counter()
        for index in sorted(set(schedule.machine)):
            resource = slots[index].resource
            names[index] = f"{resource.name}#{per_type[resource.name]}"
            per_type[resource.name] += 1
        return tuple(
            Assignment(
                task=g.ids[v],
                resource=slots[schedule.machine[v]].resource.name,
                machine=names[schedule.machine[v]],
                start_s=schedule.start[v],
                end_s=schedule.end[v],
                cores=g.cores[v],
                memory_bytes=g.memory[v],
            )
            for v in range(g.n)
        )

    def result(self, method: str) -> EngineResult:
        return EngineResult(assignments=self.assignments(), method=method, status="heuristic")


def evaluate(platform: Platform, partition: Partition, mapping: Mapping) -> BlockPlan:
    """List-schedule the tasks of a mapped partition (the exact makespan of agora's model)."""
    block_of = partition.block_of
    machine = [mapping[block_of[v]] for v in range(platform.graph.n)]
    schedule = simulate(platform.graph, machine, platform.slots, platform.bandwidth_bytes_per_s)
    return BlockPlan(platform, partition, mapping, schedule)


class Deadline:
    """Wall-clock budget of an engine: ``expired()`` once ``fraction`` of the time limit is spent."""

    def __init__(
        self, time_limit_s: float, fraction: float = 0.9, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._clock = clock
        self._end = clock() + max(time_limit_s, 0.0) * fraction

    def expired(self) -> bool:
        return self._clock() >= self._end

    def remaining_s(self) -> float:
        return max(self._end - self._clock(), 0.0)

    def share(self, parts: int) -> Deadline:
        """A deadline for one of ``parts`` pieces of work that split the remaining time."""
        return Deadline(self.remaining_s() / max(parts, 1), 1.0, self._clock)
