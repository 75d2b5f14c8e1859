"""Step 1 of the partition engines: an acyclic partition of the workflow (our replacement for dagP),
refined, and its blocks with their statistics, split and merge that keep the quotient acyclic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agora_optimizer.engines.partition.graph import TaskGraph
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import parents_first

BALANCE_TOLERANCE = 0.05
"""Refinement may overfill a block by this fraction of its target weight (dagP's epsilon)."""

REFINEMENT_PASSES = 4


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
        return parents_first({b: len(p) for b, p in pred.items()}, succ.__getitem__, first.__getitem__)

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
