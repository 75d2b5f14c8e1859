"""The MILP's solution read back and repaired: starts recomputed from the decisions it made (Bellman-Ford on
difference constraints), so durations are exactly runtime / speed."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from agora_optimizer.engines.exact.milp.data import MilpData, Pair, Slot
from agora_optimizer.engines.exact.milp.model import MilpModel
from agora_optimizer.engines.exact.milp.warm import WarmSchedule
from agora_optimizer.engines.exact.repair import DifferenceEdge, to_assignments
from agora_optimizer.engines.exact.repair import least_starts as _least_starts
from agora_optimizer.model.plan import Assignment


@dataclass(frozen=True)
class _Solution:
    schedule: WarmSchedule  # the solver's values (noisy)
    first: dict[Pair, bool]  # (i, j) -> i starts no later than j
    active: dict[Pair, bool]  # (i, j) -> i still runs at j's start (memory pairs)
    longest: dict[Slot, float]  # the longest lease billed no more than the solution's (whole steps)


def _is_set(var: Any) -> bool:
    return bool((var.value() or 0.0) > 0.5)


def read_solution(model: MilpModel, data: MilpData) -> _Solution:
    n = len(data.tasks)
    place = [max(data.slots_of(i), key=lambda slot: model.x[(i, *slot)].value() or 0.0) for i in range(n)]
    lanes = [
        frozenset(key[3] for key, var in model.lane.items() if key[0] == i and key[1:3] == place[i] and _is_set(var))
        for i in range(n)
    ]
    start = [v.value() or 0.0 for v in model.start]
    end = [start[i] + data.duration[i, place[i][0]] for i in range(n)]
    first: dict[Pair, bool] = {}
    for (i, j), var in model.first.items():
        first[i, j] = _is_set(var)
        first[j, i] = not first[i, j]
    longest = {}
    for slot in set(place):  # billed(lease) = max(min, g ceil(lease / g)) <= max(min, g n) while lease <= g n'
        billing = data.types[slot[0]].resource.billing
        steps = max(
            round(model.steps[slot].value() or 0.0), math.floor(billing.minimum_s / billing.granularity_s + 1e-9)
        )
        longest[slot] = steps * billing.granularity_s
    active = {key: _is_set(var) for key, var in model.running_at.items()}
    return _Solution(WarmSchedule(place, lanes, start, end), first, active, longest)


def _repair_edges(data: MilpData, solution: _Solution, with_leases: bool) -> list[DifferenceEdge]:
    place, lanes = solution.schedule.place, solution.schedule.lanes
    run = [data.duration[i, place[i][0]] for i in range(len(data.tasks))]
    edges = [(p, c, run[p] + (tr if place[p] != place[c] else 0.0)) for p, c, tr in data.edges]
    for i, j in data.pairs("lane_tasks"):
        if place[i] == place[j] and lanes[i] & lanes[j]:
            edges.append((i, j, run[i]) if solution.first[i, j] else (j, i, run[j]))
    for (i, j), active in solution.active.items():
        if place[i] == place[j] and solution.first[i, j]:
            edges.append((i, j, 0.0 if active else run[i]))
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, slot in enumerate(place):
        on_slot[slot].append(i)
    if with_leases:
        for slot, items in on_slot.items():
            boot = data.types[slot[0]].resource.boot_s
            edges += [(a, b, run[a] + boot - solution.longest[slot]) for a in items for b in items]
    return edges + _count_edges(data, solution, on_slot, run)


def _count_edges(
    data: MilpData, solution: _Solution, on_slot: dict[Slot, list[int]], run: list[float]
) -> list[DifferenceEdge]:
    """Keep apart the leases of a count-limited type that the solution keeps apart."""
    tolerance = 1e-5 * max(1.0, data.horizon)
    start = solution.schedule.start
    spans = {
        slot: (
            min(start[i] for i in items) - data.types[slot[0]].resource.boot_s,
            max(start[i] + run[i] for i in items),
        )
        for slot, items in on_slot.items()
    }
    edges: list[DifferenceEdge] = []
    for before in spans:
        for after in spans:
            kind = data.types[before[0]]
            if before[0] != after[0] or before == after or not kind.by_lease:
                continue
            if spans[before][1] > spans[after][0] + tolerance:
                continue
            if spans[after][1] <= spans[before][0] + tolerance and before > after:
                continue  # each fits before the other: keep one direction
            boot = kind.resource.boot_s
            edges += [(a, b, run[a] + boot) for a in on_slot[before] for b in on_slot[after]]
    return edges


def repair(data: MilpData, solution: _Solution) -> list[Assignment] | None:
    lower = [
        float(data.types[k].resource.earliest_start_of(task))
        for task, (k, _) in zip(data.tasks, solution.schedule.place, strict=True)
    ]
    for with_leases in (True, False):
        starts = _least_starts(lower, _repair_edges(data, solution, with_leases))
        if starts is not None:
            return to_assignments(data.tasks, [t.resource for t in data.types], solution.schedule.place, starts)
    return None
