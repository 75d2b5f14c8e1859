"""The MILP model itself: its variables and constraints (see :mod:`agora_optimizer.engines.exact.milp.engine`)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from agora_optimizer.engines.exact.milp.data import MilpData, Pair, Slot, memory_gib, pair
from agora_optimizer.engines.exact.milp.pulp_api import LpMinimize, LpProblem, lpSum
from agora_optimizer.engines.exact.shared import chain_cover
from agora_optimizer.model.catalog import GIB
from agora_optimizer.planning.time_budget import TimeBudget


@dataclass
class MilpModel:
    """The PuLP problem and its variables, each named in the solver as its field here, then its indices
    (``x_{i}_{k}_{m}``, ``start_{i}``, ``lease_end_{k}_{m}``): i, j tasks in topological order, (k, m)
    the m-th slot of kept type k, l a lane. The module docstring of
    :mod:`agora_optimizer.engines.exact.milp.engine` gives the formulation."""

    lp: Any
    x: dict[tuple[int, int, int], Any] = field(default_factory=dict)  # binary: i runs on slot (k, m)
    lane: dict[tuple[int, int, int, int], Any] = field(default_factory=dict)  # binary: i takes lane l of (k, m)
    used: dict[Slot, Any] = field(default_factory=dict)  # binary: slot (k, m) is leased
    start: list[Any] = field(default_factory=list)  # per task, its start in seconds
    makespan: Any = None
    cost: Any = None  # an expression: the billed seconds at each type's price
    same: dict[Pair, Any] = field(default_factory=dict)  # in [0, 1], i < j: i and j run on one machine
    share_lane: dict[Pair, Any] = field(default_factory=dict)  # in [0, 1], i < j: i and j take a common lane
    first: dict[Pair, Any] = field(default_factory=dict)  # binary, i < j: i starts no later than j
    running_at: dict[Pair, Any] = field(default_factory=dict)  # binary: i still runs at j's start (memory)
    lease_start: dict[Slot, Any] = field(default_factory=dict)
    lease_end: dict[Slot, Any] = field(default_factory=dict)
    billed: dict[Slot, Any] = field(default_factory=dict)  # billed seconds
    steps: dict[Slot, Any] = field(default_factory=dict)  # integer: billing steps
    # binary, for a type ordered by lease start: the leases of slots (k, m') and (k, m), m' < m, overlap
    overlap: dict[tuple[int, int, int], Any] = field(default_factory=dict)
    deadline: TimeBudget = field(default_factory=TimeBudget)  # checked while building

    def var(self, name: str, low: float | None = None, up: float | None = None, cat: str = "Continuous") -> Any:
        return self.lp.add_variable(name, low, up, cat=cat)

    def add(self, expression: Any, name: str) -> None:
        self.lp.addConstraint(expression, name)

    def end(self, data: MilpData, i: int) -> Any:
        return self.start[i] + lpSum(data.duration[i, k] * self.x[i, k, m] for k, m in data.slots_of(i))

    def starts_first(self, i: int, j: int) -> Any:
        """``first`` as seen from (i, j) in either order: 1 when i starts no later than j."""
        return self.first[i, j] if i < j else 1 - self.first[j, i]

    def solved(self) -> bool:
        return all(v.value() is not None for v in self.x.values())


def _add_variables(model: MilpModel, data: MilpData) -> None:
    for i in range(len(data.tasks)):
        for k, m in data.slots_of(i):
            model.x[i, k, m] = model.var(f"x_{i}_{k}_{m}", cat="Binary")
            for lane in data.lanes_of(i, k):
                model.lane[i, k, m, lane] = model.var(f"lane_{i}_{k}_{m}_{lane}", cat="Binary")
    for k, kind in enumerate(data.types):
        for m in range(kind.slots):
            model.used[k, m] = model.var(f"used_{k}_{m}", cat="Binary")
    for i in range(len(data.tasks)):
        model.start.append(model.var(f"start_{i}", data.head[i], data.latest_start(i)))
    lowest = max((data.head[i] + data.tail[i] for i in range(len(data.tasks))), default=0.0)
    model.makespan = model.var("makespan", min(lowest, data.horizon), data.horizon)
    for i, j in sorted(set(data.transfer_pairs()) | set(data.pairs("memory_tasks"))):
        model.same[i, j] = model.var(f"same_{i}_{j}", 0, 1)
    for i, j in data.pairs("lane_tasks"):
        model.share_lane[i, j] = model.var(f"share_lane_{i}_{j}", 0, 1)
    for i, j in sorted(set(data.pairs("lane_tasks")) | set(data.pairs("memory_tasks"))):
        model.first[i, j] = model.var(f"first_{i}_{j}", cat="Binary")
    for i, j in data.pairs("memory_tasks"):
        model.running_at[i, j] = model.var(f"running_at_{i}_{j}", cat="Binary")
        model.running_at[j, i] = model.var(f"running_at_{j}_{i}", cat="Binary")
    _add_lease_variables(model, data)


def _add_lease_variables(model: MilpModel, data: MilpData) -> None:
    h = data.horizon
    for k, kind in enumerate(data.types):
        granularity = kind.resource.billing.granularity_s
        for m in range(kind.slots):
            model.lease_start[k, m] = model.var(f"lease_start_{k}_{m}", 0, h)
            model.lease_end[k, m] = model.var(f"lease_end_{k}_{m}", 0, h)
            model.billed[k, m] = model.var(f"billed_{k}_{m}", 0)
            model.steps[k, m] = model.var(f"steps_{k}_{m}", 0, math.ceil(h / granularity) + 1, cat="Integer")
            count = kind.resource.count
            if kind.by_lease and count is not None and m >= count:
                for earlier in range(m):
                    model.overlap[k, earlier, m] = model.var(f"overlap_{k}_{earlier}_{m}", cat="Binary")


def _add_assignment(model: MilpModel, data: MilpData) -> None:
    on_slot: dict[Slot, list[Any]] = defaultdict(list)
    for i, task in enumerate(data.tasks):
        model.add(lpSum(model.x[i, k, m] for k, m in data.slots_of(i)) == 1, f"assign_{i}")
        for k, m in data.slots_of(i):
            on_slot[k, m].append(model.x[i, k, m])
            model.add(model.x[i, k, m] <= model.used[k, m], f"used_by_{i}_{k}_{m}")
            lanes = [model.lane[i, k, m, lane] for lane in data.lanes_of(i, k)]
            if lanes:
                model.add(lpSum(lanes) == task.cores * model.x[i, k, m], f"cores_{i}_{k}_{m}")
    for k, kind in enumerate(data.types):
        for m in range(kind.slots):
            model.add(model.used[k, m] <= lpSum(on_slot[k, m]), f"empty_{k}_{m}")
            if m > 0:
                model.add(model.used[k, m] <= model.used[k, m - 1], f"symmetry_{k}_{m}")


def _add_timing(model: MilpModel, data: MilpData) -> None:
    for i in range(len(data.tasks)):
        task = data.tasks[i]
        boots = [(data.types[k].resource.earliest_start_of(task), model.x[i, k, m]) for k, m in data.slots_of(i)]
        if any(b > 0 for b, _ in boots):  # the type released, then booted; the task's own release
            model.add(model.start[i] >= lpSum(b * x for b, x in boots), f"boot_{i}")
        model.add(model.makespan >= model.end(data, i), f"makespan_{i}")
    for p, c, tr in data.edges:
        if tr > 0 and pair(p, c) in model.same:
            same = model.same[pair(p, c)]
            model.add(model.start[c] >= model.end(data, p) + tr - tr * same, f"edge_{p}_{c}")
            for k, m in data.slots_of(p):
                other = model.x.get((c, k, m), 0)
                model.add(same <= 1 - model.x[p, k, m] + other, f"apart_{p}_{c}_{k}_{m}")
        else:
            model.add(model.start[c] >= model.end(data, p) + tr, f"edge_{p}_{c}")


def _add_order(model: MilpModel, data: MilpData) -> None:
    """For memory pairs, first_ij = 1 => start_i <= start_j and first_ij = 0 => start_j <= start_i, a linear order.

    For pairs that only share lanes, ``first`` just picks which of the two goes first when they share one.
    """
    memory = data.pairs("memory_tasks")
    for i, j in memory:
        late_i, late_j = data.latest_start(i) - data.head[j], data.latest_start(j) - data.head[i]
        model.add(model.start[j] - model.start[i] >= -max(late_i, 0.0) * (1 - model.first[i, j]), f"before_{i}_{j}")
        model.add(model.start[i] - model.start[j] >= -max(late_j, 0.0) * model.first[i, j], f"after_{i}_{j}")
    linked = set(memory)
    for i, j in memory:
        for k in sorted(data.incomparable[i] & data.incomparable[j]):
            if k > j and (i, k) in linked and (j, k) in linked:
                ij, jk, ik = model.first[i, j], model.first[j, k], model.first[i, k]
                model.add(ij + jk - ik <= 1, f"triangle_{i}_{j}_{k}")
                model.add(ik - ij - jk <= 0, f"triangle2_{i}_{j}_{k}")


def _add_lanes(model: MilpModel, data: MilpData) -> None:
    """Tasks that share a lane never overlap (in the order ``first`` gives them)."""
    places: dict[int, set[tuple[int, int, int]]] = defaultdict(set)
    for key in model.lane:
        places[key[0]].add(key[1:])
    for i, j in model.share_lane:
        model.deadline.check()
        shared = model.share_lane[i, j]
        for k, m, lane in sorted(places[i] & places[j]):
            both = model.lane[i, k, m, lane] + model.lane[j, k, m, lane]
            model.add(shared >= both - 1, f"lane_shared_{i}_{j}_{k}_{m}_{lane}")
        big_i = max(data.latest_end(i) - data.head[j], 0.0)
        big_j = max(data.latest_end(j) - data.head[i], 0.0)
        order = model.first[i, j]
        model.add(model.start[j] >= model.end(data, i) - big_i * (2 - order - shared), f"lanefirst_{i}_{j}")
        model.add(model.start[i] >= model.end(data, j) - big_j * (1 + order - shared), f"lanesecond_{i}_{j}")


def _add_memory(model: MilpModel, data: MilpData) -> None:
    for i, j in data.pairs("memory_tasks"):
        for k, m in sorted(set(data.slots_of(i)) & set(data.slots_of(j))):
            model.add(model.same[i, j] >= model.x[i, k, m] + model.x[j, k, m] - 1, f"together_{i}_{j}_{k}_{m}")
    for (i, j), running in model.running_at.items():
        big = max(data.latest_end(i) - data.head[j], 0.0)
        slack = 2 + running - model.same[pair(i, j)] - model.starts_first(i, j)
        model.add(model.start[j] >= model.end(data, i) - big * slack, f"active_{i}_{j}")
    beside: dict[int, list[int]] = defaultdict(list)
    for i, j in model.running_at:
        beside[j].append(i)
    for j, others in sorted(beside.items()):
        load = memory_gib(data.tasks[j]) + lpSum(memory_gib(data.tasks[i]) * model.running_at[i, j] for i in others)
        most = memory_gib(data.tasks[j]) + sum(memory_gib(data.tasks[i]) for i in others)
        room = []
        for k, m in data.slots_of(j):
            kind = data.types[k]
            limit = kind.resource.memory_bytes / GIB if j in kind.memory_tasks else most
            room.append(limit * model.x[j, k, m])
        model.add(load <= lpSum(room), f"memory_{j}")


def _add_leases(model: MilpModel, data: MilpData) -> None:
    for i in range(len(data.tasks)):
        for k, m in data.slots_of(i):
            boot, x, duration = data.types[k].resource.boot_s, model.x[i, k, m], data.duration[i, k]
            begin, finish = model.lease_start[k, m], model.lease_end[k, m]
            model.add(begin <= model.start[i] - boot + (data.horizon + boot) * (1 - x), f"lstart_{i}_{k}_{m}")
            model.add(finish >= model.start[i] + duration - data.latest_end(i) * (1 - x), f"lend_{i}_{k}_{m}")
            model.add(finish - begin >= (boot + duration) * x, f"lspan_{i}_{k}_{m}")
    for (k, m), billed in model.billed.items():
        billing = data.types[k].resource.billing
        span = model.lease_end[k, m] - model.lease_start[k, m]
        model.add(billing.granularity_s * model.steps[k, m] >= span, f"steps_cover_{k}_{m}")
        model.add(model.lease_end[k, m] <= model.makespan, f"within_{k}_{m}")
        model.add(span <= data.horizon * model.used[k, m], f"leased_{k}_{m}")
        model.add(billed >= billing.granularity_s * model.steps[k, m], f"billed_steps_{k}_{m}")
        if billing.minimum_s > 0:
            model.add(billed >= billing.minimum_s * model.used[k, m], f"minimum_{k}_{m}")
    model.cost = lpSum(
        data.types[k].resource.price_per_hour_usd / 3600.0 * billed for (k, _), billed in model.billed.items()
    )


def _add_energy(model: MilpModel, data: MilpData) -> None:
    """The work on each lane, the memory-seconds on each slot and each chain's work fit in its usable lease."""
    on_lane: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for i, k, m, lane in model.lane:
        on_lane[k, m, lane].append(i)
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, k, m in model.x:
        on_slot[k, m].append(i)
    weight = [min(data.duration[i, k] for k in data.options[i]) for i in range(len(data.tasks))]
    chains = chain_cover(data.ancestors, weight)
    for k, m in model.billed:
        resource = data.types[k].resource
        usable = model.lease_end[k, m] - model.lease_start[k, m] - resource.boot_s * model.used[k, m]
        for lane in range(data.types[k].lanes):
            if on_lane[k, m, lane]:
                work = lpSum(data.duration[i, k] * model.lane[i, k, m, lane] for i in on_lane[k, m, lane])
                model.add(work <= usable, f"energy_{k}_{m}_{lane}")
        memory = lpSum(memory_gib(data.tasks[i]) * data.duration[i, k] * model.x[i, k, m] for i in on_slot[k, m])
        model.add(memory <= resource.memory_bytes / GIB * usable, f"energy_memory_{k}_{m}")
        for c, chain in enumerate(chains):
            hosted = [i for i in chain if (i, k, m) in model.x]
            if len(hosted) > 1:
                work = lpSum(data.duration[i, k] * model.x[i, k, m] for i in hosted)
                model.add(work <= usable, f"energy_chain_{c}_{k}_{m}")


def _add_counts(model: MilpModel, data: MilpData) -> None:
    h = data.horizon
    for k, kind in enumerate(data.types):
        count = kind.resource.count
        if not kind.by_lease or count is None:
            continue
        for m in range(1, kind.slots):
            later = model.lease_start[k, m] + h * (1 - model.used[k, m])
            model.add(model.lease_start[k, m - 1] <= later, f"lorder_{k}_{m}")
        for m in range(count, kind.slots):
            free = 1 - model.used[k, m]
            for earlier in range(m):
                overlaps = model.overlap[k, earlier, m]
                model.add(
                    model.lease_end[k, earlier] <= model.lease_start[k, m] + h * overlaps + h * free,
                    f"leaseapart_{k}_{earlier}_{m}",
                )
            overlapping = lpSum(model.overlap[k, e, m] for e in range(m))
            model.add(overlapping <= count - 1 + m * free, f"count_{k}_{m}")


def _add_limits_and_objective(model: MilpModel, data: MilpData) -> None:
    objective, bounds = data.problem.objective, data.problem.bounds
    if objective.deadline_s is not None:
        model.add(model.makespan <= objective.deadline_s, "deadline")
    if math.isfinite(data.cost_cap):
        model.add(model.cost <= data.cost_cap, "cost_cap")  # the budget, or what the warm start allows
    time_ratio = model.makespan * (1.0 / max(bounds.makespan_s, 1e-9))
    cost_ratio = model.cost * (1.0 / max(bounds.cost_usd, 1e-12))
    weights = {"time": (1.0, 0.0), "cost": (0.0, 1.0), "balanced": (objective.alpha, 1 - objective.alpha)}
    w_time, w_cost = weights[objective.kind]
    model.lp.setObjective(w_time * time_ratio + w_cost * cost_ratio)


def build_model(data: MilpData, deadline: TimeBudget | None = None) -> MilpModel:
    """The whole model; raises :class:`OutOfTime` (between steps and in the long ones) past ``deadline``."""
    model = MilpModel(LpProblem("agora_milp", LpMinimize), deadline=deadline or TimeBudget())
    steps = (
        _add_variables,
        _add_assignment,
        _add_timing,
        _add_order,
        _add_lanes,
        _add_memory,
        _add_leases,
        _add_energy,
        _add_counts,
        _add_limits_and_objective,
    )
    for step in steps:
        step(model, data)
        model.deadline.check()
    return model
