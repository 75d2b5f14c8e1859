"""A warm start for the MILP: a valid schedule read into the model's variables (slots, lanes, orders, leases)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agora_optimizer.engines.exact.milp.data import EPS_S, MilpData, Slot
from agora_optimizer.engines.exact.milp.model import MilpModel
from agora_optimizer.engines.exact.repair import lift_pruned
from agora_optimizer.engines.exact.shared import colour_lanes
from agora_optimizer.model.plan import Assignment

ROUNDING = 1e-9  # relative: how far a warm value may miss a bound it meets (float rounding, never a real miss)


@dataclass(frozen=True)
class WarmSchedule:
    """A complete schedule in the model's terms: slot, lanes, start and end of every task."""

    place: list[Slot]
    lanes: list[frozenset[int]]
    start: list[float]
    end: list[float]


def _canonical_slots(assignments: Sequence[Assignment], data: MilpData) -> dict[str, Slot] | None:
    """Each task's slot in the model's symmetry-broken numbering, or None if the plan does not fit the model."""
    index = {t.id: n for n, t in enumerate(data.tasks)}
    type_index = {kind.resource.name: k for k, kind in enumerate(data.types)}
    machines: dict[str, list[Assignment]] = defaultdict(list)
    for a in assignments:
        machines[a.machine].append(a)
    per_type: dict[int, list[tuple[tuple[float, int], str]]] = defaultdict(list)
    for machine, items in sorted(machines.items()):
        k = type_index.get(items[0].resource)
        if k is None:
            return None
        first_rank = min(data.rank[index[a.task], k] for a in items)
        lease_start = min(a.start_s for a in items) - data.types[k].resource.boot_s
        per_type[k].append(((lease_start if data.types[k].by_lease else 0.0, first_rank), machine))
    result: dict[str, Slot] = {}
    for k, keyed in per_type.items():
        if len(keyed) > data.types[k].slots:
            return None
        for m, (_, machine) in enumerate(sorted(keyed)):
            result.update({a.task: (k, m) for a in machines[machine]})
    return result


def _as_schedule(assignments: Sequence[Assignment], data: MilpData) -> WarmSchedule | None:
    lifted = lift_pruned(assignments, data.replacement, data.problem.workflow)
    slots = _canonical_slots(lifted, data)
    if slots is None:
        return None
    by_task = {a.task: a for a in lifted}
    place = [slots[t.id] for t in data.tasks]
    start = [by_task[t.id].start_s for t in data.tasks]
    end = [by_task[t.id].end_s for t in data.tasks]
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, (k, m) in enumerate(place):
        if i in data.types[k].lane_tasks:
            on_slot[k, m].append(i)
    lanes_of_type = [kind.lanes for kind in data.types]
    found = colour_lanes(on_slot, lanes_of_type, [t.cores for t in data.tasks], data.rank, start, end, EPS_S)
    if found is None:
        return None
    return WarmSchedule(place, [found.get(i, frozenset()) for i in range(len(data.tasks))], start, end)


class _OutOfBounds(Exception):
    """A warm value outside its variable's bounds by more than rounding: the schedule does not fit the model."""


def _initial(var: Any, value: float) -> None:
    """Set ``var``'s initial value, moved onto a bound it misses by rounding only.

    A schedule and the model compute the same time in different orders (the makespan's lower bound,
    a lease's end), so a value can sit an ulp outside a bound it meets; PuLP would refuse it.
    """
    low, high = var.lowBound, var.upBound
    if low is not None and value < low:
        if low - value > ROUNDING * max(1.0, abs(low)):
            raise _OutOfBounds(f"{var.name} = {value} < {low}")
        value = low
    if high is not None and value > high:
        if value - high > ROUNDING * max(1.0, abs(high)):
            raise _OutOfBounds(f"{var.name} = {value} > {high}")
        value = high
    var.setInitialValue(value)


def set_warm_start(model: MilpModel, data: MilpData, assignments: Sequence[Assignment]) -> bool:
    """Read a valid schedule into the model's variables; False (no warm start) if it does not fit the model."""
    schedule = _as_schedule(assignments, data)
    if schedule is None:
        return False
    try:
        return _set_values(model, data, schedule)
    except _OutOfBounds:
        return False


def _set_values(model: MilpModel, data: MilpData, schedule: WarmSchedule) -> bool:
    place, lanes, start, end = schedule.place, schedule.lanes, schedule.start, schedule.end
    if any((i, *slot) not in model.x for i, slot in enumerate(place)):
        return False
    if any((i, *place[i], lane) not in model.lane for i in range(len(place)) for lane in lanes[i]):
        return False
    for key, var in model.x.items():
        var.setInitialValue(1 if place[key[0]] == key[1:] else 0)
    for (i, k, m, lane), var in model.lane.items():
        var.setInitialValue(1 if place[i] == (k, m) and lane in lanes[i] else 0)
    for i, var in enumerate(model.start):
        _initial(var, start[i])
    _initial(model.makespan, max(end, default=0.0))
    for (i, j), var in model.same.items():
        var.setInitialValue(1 if place[i] == place[j] else 0)
    for (i, j), var in model.share_lane.items():
        var.setInitialValue(1 if place[i] == place[j] and lanes[i] & lanes[j] else 0)
    for (i, j), var in model.first.items():
        var.setInitialValue(1 if (start[i], i) <= (start[j], j) else 0)
    for (i, j), var in model.running_at.items():
        running = place[i] == place[j] and (start[i], i) <= (start[j], j) and start[j] < end[i] - EPS_S
        var.setInitialValue(1 if running else 0)
    _set_lease_values(model, data, schedule)
    return True


def _set_lease_values(model: MilpModel, data: MilpData, schedule: WarmSchedule) -> None:
    spans: dict[Slot, tuple[float, float]] = {}
    for i, slot in enumerate(schedule.place):
        boot = data.types[slot[0]].resource.boot_s
        first, last = spans.get(slot, (math.inf, -math.inf))
        spans[slot] = (min(first, schedule.start[i] - boot), max(last, schedule.end[i]))
    for slot, var in model.used.items():
        var.setInitialValue(1 if slot in spans else 0)
        first, last = spans.get(slot, (0.0, 0.0))
        billing = data.types[slot[0]].resource.billing
        steps = math.ceil(max(last - first, 0.0) / billing.granularity_s - 1e-9)
        _initial(model.lease_start[slot], first)
        _initial(model.lease_end[slot], last)
        _initial(model.steps[slot], steps)
        minimum = billing.minimum_s if slot in spans else 0.0
        _initial(model.billed[slot], max(minimum, steps * billing.granularity_s))
    for (k, earlier, m), var in model.overlap.items():
        before, after = spans.get((k, earlier)), spans.get((k, m))
        var.setInitialValue(1 if before is not None and after is not None and before[1] > after[0] else 0)
