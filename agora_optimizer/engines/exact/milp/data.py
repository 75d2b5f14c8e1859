"""The MILP's data: the tasks, the types kept, their slots and lanes, durations, heads and tails, and the caps
(see :mod:`agora_optimizer.engines.exact.milp.engine` for the reductions that make them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agora_optimizer.engines.exact.repair import Slot
from agora_optimizer.engines.exact.shared import (
    Caps,
    ancestor_sets,
    fits_count,
    head_tail,
    indexed_tasks,
    prune_types,
    slot_count,
)
from agora_optimizer.engines.exact.shared import caps as shared_caps
from agora_optimizer.model.catalog import GIB, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.problem import Problem

EPS_S = 1e-9

Pair = tuple[int, int]
Need = Callable[[Task], float]


def _cores(task: Task) -> float:
    return float(task.cores)


def memory_gib(task: Task) -> float:
    return task.memory_bytes / GIB


@dataclass(frozen=True)
class MilpType:
    resource: Resource
    slots: int
    by_lease: bool  # slots ordered by lease start, with the count-concurrency rows
    lane_tasks: frozenset[int]  # tasks that take lanes on this type
    memory_tasks: frozenset[int]  # tasks with a memory row on this type

    @property
    def lanes(self) -> int:
        return self.resource.vcpus if self.lane_tasks else 0


@dataclass
class MilpData:
    problem: Problem
    tasks: tuple[Task, ...]  # topological order
    types: tuple[MilpType, ...]
    options: tuple[tuple[int, ...], ...]  # type indices per task
    rank: dict[Pair, int]  # (task, type) -> rank among the tasks that fit the type
    lane_limit: dict[Pair, int]  # (task, type) -> lanes it may use (symmetry)
    duration: dict[Pair, float]
    edges: tuple[tuple[int, int, float], ...]  # (parent, child, transfer_s)
    ancestors: tuple[frozenset[int], ...]
    incomparable: tuple[frozenset[int], ...]  # per task, the tasks that may run beside it
    head: tuple[float, ...]  # earliest start
    tail: tuple[float, ...]  # shortest time from a task's start to the workflow's end
    horizon: float
    cost_cap: float  # math.inf when nothing bounds the cost
    replacement: dict[str, Resource] = field(default_factory=dict)  # pruned type -> kept type

    def slots_of(self, i: int) -> list[Slot]:
        result = []
        for k in self.options[i]:
            kind = self.types[k]
            last = kind.slots if kind.by_lease else min(kind.slots, self.rank[i, k] + 1)
            result += [(k, m) for m in range(last)]
        return result

    def lanes_of(self, i: int, k: int) -> range:
        return range(self.lane_limit.get((i, k), 0))

    def latest_start(self, i: int) -> float:
        return max(self.head[i], self.horizon - self.tail[i])

    def latest_end(self, i: int) -> float:
        return self.latest_start(i) + max(self.duration[i, k] for k in self.options[i])

    def pairs(self, attribute: str) -> list[Pair]:
        """Incomparable pairs i < j that both need lanes (or memory rows) on some type."""
        found = set()
        for kind in self.types:
            members = sorted(getattr(kind, attribute))
            found |= {(i, j) for n, i in enumerate(members) for j in members[n + 1 :] if j in self.incomparable[i]}
        return sorted(found)

    def transfer_pairs(self) -> list[Pair]:
        shared = [(p, c) for p, c, tr in self.edges if tr > 0 and set(self.options[p]) & set(self.options[c])]
        return sorted({pair(p, c) for p, c in shared})


def pair(i: int, j: int) -> Pair:
    return (i, j) if i < j else (j, i)


def _binding(
    tasks: Sequence[Task], members: set[int], incomparable: Sequence[frozenset[int]], need: Need, capacity: float
) -> frozenset[int]:
    """The tasks left after dropping, in turn, those that fit with every remaining neighbour."""
    active = {i for i in members if tasks[i].runtime_s > 0}
    changed = True
    while changed:
        changed = False
        for j in sorted(active):
            if need(tasks[j]) + sum(need(tasks[i]) for i in incomparable[j] & active) <= capacity:
                active.discard(j)
                changed = True
    return frozenset(active)


def _types(
    problem: Problem,
    kinds: Sequence[Resource],
    tasks: Sequence[Task],
    incomparable: Sequence[frozenset[int]],
    caps: Caps,
) -> tuple[MilpType, ...]:
    result = []
    for r in kinds:
        members = {i for i, t in enumerate(tasks) if r.fits(t)}
        slots = slot_count(problem, r, tasks, caps.cost_usd)
        by_lease = not fits_count(r, slots)  # count_k < S_k: slots ordered by lease start, with the count rows
        lanes = _binding(tasks, members, incomparable, _cores, float(r.vcpus))
        memory = _binding(tasks, members, incomparable, memory_gib, r.memory_bytes / GIB)
        result.append(MilpType(r, slots, by_lease, lanes, memory))
    return tuple(result)


def _lane_limits(tasks: Sequence[Task], types: Sequence[MilpType], rank: dict[Pair, int]) -> dict[Pair, int]:
    """Lanes sorted by their lowest-ranked task: a task uses lanes < the cores of tasks ranked up to it."""
    limits: dict[Pair, int] = {}
    for k, kind in enumerate(types):
        total = 0
        for i in sorted(kind.lane_tasks, key=lambda i: rank[i, k]):
            total += tasks[i].cores
            limits[i, k] = min(total, kind.lanes)
    return limits


def _incomparable(ancestors: Sequence[frozenset[int]]) -> tuple[frozenset[int], ...]:
    """Per task, the tasks neither its ancestors nor its descendants (they may run beside it)."""
    n = len(ancestors)
    return tuple(
        frozenset(i for i in range(n) if i != j and i not in ancestors[j] and j not in ancestors[i]) for j in range(n)
    )


def build_data(problem: Problem, warm: Sequence[Assignment]) -> MilpData:
    workflow, catalog = problem.workflow, problem.catalog
    kinds, replacement = prune_types(problem)
    tasks, index, options, rank = indexed_tasks(problem, kinds)
    duration = {(i, k): kinds[k].runtime_s(t) for i, t in enumerate(tasks) for k in options[i]}
    edges = tuple((index[e.parent], index[e.child], catalog.transfer_s(e.bytes)) for e in workflow.edges)
    parents: dict[int, list[int]] = defaultdict(list)
    for p, c, _ in edges:
        parents[c].append(p)
    ancestors = ancestor_sets(parents, len(tasks))
    incomparable = _incomparable(ancestors)
    shortest = [min(duration[i, k] for k in options[i]) for i in range(len(tasks))]
    earliest = [max(min(kinds[k].earliest_start_s for k in options[i]), t.release_s) for i, t in enumerate(tasks)]
    head, tail = head_tail(earliest, shortest, parents)
    caps = shared_caps(problem, kinds, warm)
    types = _types(problem, kinds, tasks, incomparable, caps)
    return MilpData(
        problem=problem,
        tasks=tasks,
        types=types,
        options=options,
        rank=rank,
        lane_limit=_lane_limits(tasks, types, rank),
        duration=duration,
        edges=edges,
        ancestors=ancestors,
        incomparable=incomparable,
        head=tuple(head),
        tail=tuple(tail),
        horizon=caps.makespan_s,
        cost_cap=caps.cost_usd,
        replacement=replacement,
    )


def estimated_rows(data: MilpData) -> int:
    """About how many constraints the model will have (its largest families), before building it."""
    n = len(data.tasks)
    slots = {i: set(data.slots_of(i)) for i in range(n)}
    places: dict[int, set[tuple[int, int, int]]] = {}  # (type, slot, lane) a task may take
    for i in range(n):
        places[i] = {(k, m, lane) for k, m in slots[i] for lane in data.lanes_of(i, k)}
    rows = sum(5 * len(slots[i]) + len(places[i]) for i in range(n))
    rows += sum(len(places[i] & places[j]) + 2 for i, j in data.pairs("lane_tasks"))
    rows += sum(len(slots[i] & slots[j]) + 4 for i, j in data.pairs("memory_tasks"))
    return rows + sum(len(slots[p]) for p, _ in data.transfer_pairs())
