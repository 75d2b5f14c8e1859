"""The CP-SAT model over :class:`~agora_optimizer.engines.exact.cpsat.data.TickData`: variables, constraints, objective.

For slot (k, m), the m-th machine of kept type k:

- x[i,k,m]: task i runs there, an optional interval [s_i, s_i + d_ik); exactly one per task.
  Slots of a type are interchangeable, so ordered by their lowest-ranked task (Sherali &
  Smith 2001): task of rank r (among those that fit k) only on slots m <= r, and on slot
  m > 0 only if a lower-ranked task is on slot m - 1;
- cores: unit lanes y[i,k,m,l] with no overlap on each lane; a task of c cores takes c
  lanes (exact: colouring intervals in start order finds free lanes whenever the cores in
  use fit); lanes ordered by lowest-ranked task too. Memory: a cumulative, where the
  largest tasks that could run at once overflow it;
- lease: u[k,m] = OR x; [L, E) with L <= s_i - boot_k and E >= e_i for its tasks, L >= 0,
  L >= release_k when used,
  E <= T, size E - L (0 when unused); billing steps n * step >= size; billed
  B >= n * step_units and B >= minimum_units * u, in units of gcd(step, minimum) ticks;
- a count-limited type with count < S_k: cumulative of its lease intervals within count;
- edge p -> c: s_c >= e_p, and s_c >= e_p + transfer unless same[p,c], which requires p and
  c on one slot;
- makespan T >= e_i; T <= deadline; cost = sum price_k / 3600 * B within the budget and the
  warm start's cap (integer rows, rounded the model's way);
- redundant rows, valid for every schedule of the model: what must fit in a slot's usable
  lease (size - boot u): its work on vcpus cores, on each lane, its memory-time, each chain
  of dependent tasks, and each task with its ancestors before and descendants after it;
  and the makespan is at least :func:`makespan_with_cores` of the cores leased in all.

Objective: the first element of :func:`agora_optimizer.planning.problem.score`, a T + sum b_k B. A
single variable (time) keeps coefficient 1, exactly. Otherwise the real coefficients are
scaled so that the smallest is about 2^24 (within int64) and rounded down for "down" (so
the integer optimum over the scale is below the real one: rounding costs at most 6e-8 of
the value) and to the nearest for "up".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agora_optimizer.engines.exact.cpsat.data import INT_LIMIT, TickData
from agora_optimizer.engines.exact.repair import Slot
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.time_budget import TimeBudget

if TYPE_CHECKING:
    from ortools.sat.python import cp_model

_PRECISION = 2**24  # the smallest objective coefficient after scaling


@dataclass
class TickModel:
    """The CP-SAT model and its variables; ``scale`` turns the integer objective into the score."""

    cp: cp_model.CpModel
    x: dict[tuple[int, int, int], Any] = field(default_factory=dict)
    start: list[Any] = field(default_factory=list)
    end: list[Any] = field(default_factory=list)
    makespan: Any = None
    used: dict[Slot, Any] = field(default_factory=dict)
    lease_start: dict[Slot, Any] = field(default_factory=dict)
    lease_end: dict[Slot, Any] = field(default_factory=dict)
    size: dict[Slot, Any] = field(default_factory=dict)
    steps: dict[Slot, Any] = field(default_factory=dict)
    billed: dict[Slot, Any] = field(default_factory=dict)
    same: dict[tuple[int, int], Any] = field(default_factory=dict)
    intervals: dict[tuple[int, int, int], Any] = field(default_factory=dict)
    lanes: dict[tuple[int, int, int, int], Any] = field(default_factory=dict)
    lane_intervals: dict[tuple[int, int, int, int], Any] = field(default_factory=dict)
    cores_leased: Any = None
    cores_at_most: dict[int, Any] = field(default_factory=dict)  # cores -> cores_leased <= cores
    scale: float = 1.0  # integer objective = scale * score (rounded as the direction says)
    deadline: TimeBudget = field(default_factory=TimeBudget)  # checked while building


def _add_variables(model: TickModel, data: TickData) -> None:
    cp, h = model.cp, data.horizon
    for i in range(len(data.tasks)):
        model.start.append(cp.new_int_var(data.head[i], max(data.head[i], h - data.tail[i]), f"s_{i}"))
        model.end.append(cp.new_int_var(0, h, f"e_{i}"))
        for k, m in data.slots_of(i):
            x = model.x[i, k, m] = cp.new_bool_var(f"x_{i}_{k}_{m}")
            model.intervals[i, k, m] = cp.new_optional_fixed_size_interval_var(
                model.start[i], data.duration[i, k], x, f"run_{i}_{k}_{m}"
            )
    lowest = max((data.head[i] + data.tail[i] for i in range(len(data.tasks))), default=0)
    model.makespan = cp.new_int_var(min(lowest, h), h, "T")
    for k, kind in enumerate(data.types):
        most_steps = h // kind.step + 1
        most_units = max(most_steps * kind.step_units, kind.minimum_units)
        for m in range(kind.slots):
            model.used[k, m] = cp.new_bool_var(f"u_{k}_{m}")
            model.lease_start[k, m] = cp.new_int_var(0, h, f"L_{k}_{m}")
            model.lease_end[k, m] = cp.new_int_var(0, h, f"E_{k}_{m}")
            model.size[k, m] = cp.new_int_var(0, h, f"size_{k}_{m}")
            model.steps[k, m] = cp.new_int_var(0, most_steps, f"n_{k}_{m}")
            model.billed[k, m] = cp.new_int_var(0, most_units, f"B_{k}_{m}")


def _add_assignment(model: TickModel, data: TickData) -> None:
    cp = model.cp
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i in range(len(data.tasks)):
        slots = data.slots_of(i)
        cp.add_exactly_one(model.x[i, k, m] for k, m in slots).with_name(f"assign_{i}")
        cp.add(
            model.end[i] == model.start[i] + sum(data.duration[i, k] * model.x[i, k, m] for k, m in slots)
        ).with_name(f"end_{i}")
        for k, m in slots:
            on_slot[k, m].append(i)
    for (k, m), used in model.used.items():
        members = on_slot[k, m]
        for i in members:
            cp.add_implication(model.x[i, k, m], used)
        cp.add_bool_or([~used, *(model.x[i, k, m] for i in members)]).with_name(f"empty_{k}_{m}")
        if m == 0:
            continue
        cp.add_implication(used, model.used[k, m - 1]).with_name(f"symmetry_{k}_{m}")
        for i in members:  # slot m's lowest-ranked task ranks above slot m - 1's
            lower = [model.x[j, k, m - 1] for j in on_slot[k, m - 1] if data.rank[j, k] < data.rank[i, k]]
            cp.add_bool_or([~model.x[i, k, m], *lower]).with_name(f"first_{i}_{k}_{m}")


def _add_timing(model: TickModel, data: TickData) -> None:
    cp = model.cp
    for i in range(len(data.tasks)):
        cp.add(model.makespan >= model.end[i]).with_name(f"makespan_{i}")
    for p, c, tr in data.edges:
        cp.add(model.start[c] >= model.end[p]).with_name(f"edge_{p}_{c}")
        if tr <= 0:
            continue
        shared = set(data.slots_of(p)) & set(data.slots_of(c))
        if not shared:
            cp.add(model.start[c] >= model.end[p] + tr).with_name(f"transfer_{p}_{c}")
            continue
        same = model.same[p, c] = cp.new_bool_var(f"same_{p}_{c}")
        cp.add(model.start[c] >= model.end[p] + tr).only_enforce_if(~same).with_name(f"transfer_{p}_{c}")
        for k, m in data.slots_of(p):
            child = model.x.get((c, k, m))
            literals = [~same, ~model.x[p, k, m]] + ([child] if child is not None else [])
            cp.add_bool_or(literals).with_name(f"together_{p}_{c}_{k}_{m}")


def _add_capacity(model: TickModel, data: TickData) -> None:
    """Cores as lanes (no overlap on each) where they can run short; memory as a cumulative where it can."""
    cp = model.cp
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, k, m in model.x:
        on_slot[k, m].append(i)
    for (k, m), members in sorted(on_slot.items()):
        model.deadline.check()
        kind, running = data.types[k], [i for i in members if data.duration[i, k] > 0]
        if sum(data.tasks[i].cores for i in running) > kind.resource.vcpus:
            _add_lanes(model, data, (k, m), running)
        # at most vcpus tasks run at once (each takes a core): memory binds only if the largest ones overflow
        largest = sorted((data.memory[i] for i in running), reverse=True)[: kind.resource.vcpus]
        if sum(largest) > data.capacity[k]:
            intervals = [model.intervals[i, k, m] for i in running]
            memory = [data.memory[i] for i in running]
            cp.add_cumulative(intervals, memory, data.capacity[k]).with_name(f"memory_{k}_{m}")


def _add_lanes(model: TickModel, data: TickData, slot: Slot, running: list[int]) -> None:
    """A task of c cores takes c of the slot's unit lanes, where no two tasks overlap.

    Exact (interval graphs are perfect: colouring in start order finds free lanes whenever the
    cores in use fit). Lanes are interchangeable, so sorted by their lowest-ranked task: a task
    uses a lane only if a task ranked no higher uses the one before, and none of rank r uses a
    lane beyond the cores of the tasks ranked up to r.
    """
    cp, (k, m) = model.cp, slot
    vcpus = data.types[k].resource.vcpus
    ordered = sorted(running, key=lambda i: data.rank[i, k])
    limit, total = {}, 0
    for i in ordered:
        total += data.tasks[i].cores
        limit[i] = min(total, vcpus)
    for i in ordered:
        lanes = [cp.new_bool_var(f"y_{i}_{k}_{m}_{lane}") for lane in range(limit[i])]
        for lane, y in enumerate(lanes):
            model.lanes[i, k, m, lane] = y
            model.lane_intervals[i, k, m, lane] = cp.new_optional_fixed_size_interval_var(
                model.start[i], data.duration[i, k], y, f"lane_{i}_{k}_{m}_{lane}"
            )
        cp.add(sum(lanes) == data.tasks[i].cores * model.x[i, k, m]).with_name(f"cores_{i}_{k}_{m}")
    for lane in range(vcpus):
        model.deadline.check()
        on_lane = [i for i in ordered if (i, k, m, lane) in model.lanes]
        if len(on_lane) > 1:
            intervals = [model.lane_intervals[i, k, m, lane] for i in on_lane]
            cp.add_no_overlap(intervals).with_name(f"lane_{k}_{m}_{lane}")
        if lane == 0:
            continue
        for i in on_lane:
            before = [
                model.lanes[j, k, m, lane - 1]
                for j in ordered
                if data.rank[j, k] <= data.rank[i, k] and (j, k, m, lane - 1) in model.lanes
            ]
            cp.add_bool_or([~model.lanes[i, k, m, lane], *before]).with_name(f"lane_order_{i}_{k}_{m}_{lane}")


def _spread(tasks: Sequence[Task], shortest: Sequence[int], members: Sequence[int], cores: int) -> int:
    """A lower bound on the time ``members`` take on ``cores`` cores in all: their work over the
    cores, and the q shortest of them run one after another on some core, q = ceil(their cores / cores)."""
    if not members:
        return 0
    demand = sum(tasks[i].cores for i in members)
    work = sum(tasks[i].cores * shortest[i] for i in members)
    queue = sorted(shortest[i] for i in members)[: -(-demand // cores)]
    return max(-(-work // cores), sum(queue))


def makespan_with_cores(data: TickData, cores: int) -> int:
    """A lower bound on the makespan when the machines leased have ``cores`` cores in all.

    Every task starts after the least release plus boot; for each task j, its ancestors run before it and its
    descendants after it, each group spread over at most ``cores`` cores (:func:`_spread`).
    """
    n = len(data.tasks)
    shortest = [min(data.duration[i, k] for k in data.options[i]) for i in range(n)]
    boot = min((kind.release + kind.boot for kind in data.types), default=0)
    best = boot + _spread(data.tasks, shortest, range(n), cores)
    for j in range(n):
        before = sorted(data.ancestors[j])
        after = sorted(data.related[j] - data.ancestors[j])
        best = max(
            best,
            boot
            + _spread(data.tasks, shortest, before, cores)
            + shortest[j]
            + _spread(data.tasks, shortest, after, cores),
        )
    return best


def _add_parallelism(model: TickModel, data: TickData) -> None:
    """Link the makespan to how many cores are leased: with at most c cores, T >= makespan_with_cores(c)."""
    cp = model.cp
    most = sum(kind.resource.vcpus * kind.slots for kind in data.types)
    leased = model.cores_leased = cp.new_int_var(0, most, "cores_leased")
    cp.add(leased == sum(data.types[k].resource.vcpus * used for (k, _), used in model.used.items()))
    floor = max((data.head[i] + data.tail[i] for i in range(len(data.tasks))), default=0)
    for cores in range(1, most):
        least = makespan_with_cores(data, cores)
        if least <= floor:
            break  # more cores only lower it
        at_most = model.cores_at_most[cores] = cp.new_bool_var(f"cores_at_most_{cores}")
        cp.add(leased <= cores).only_enforce_if(at_most)
        cp.add(leased >= cores + 1).only_enforce_if(~at_most)
        cp.add(model.makespan >= least).only_enforce_if(at_most).with_name(f"parallel_{cores}")


def _add_leases(model: TickModel, data: TickData) -> None:
    cp = model.cp
    for (i, k, m), x in model.x.items():
        boot = data.types[k].boot
        cp.add(model.lease_start[k, m] <= model.start[i] - boot).only_enforce_if(x).with_name(f"lstart_{i}_{k}_{m}")
        cp.add(model.lease_end[k, m] >= model.end[i]).only_enforce_if(x).with_name(f"lend_{i}_{k}_{m}")
    leases: dict[int, list[Any]] = defaultdict(list)
    for (k, m), used in model.used.items():
        kind = data.types[k]
        size, begin, finish = model.size[k, m], model.lease_start[k, m], model.lease_end[k, m]
        leases[k].append(cp.new_optional_interval_var(begin, size, finish, used, f"lease_{k}_{m}"))
        cp.add(size == finish - begin).with_name(f"size_{k}_{m}")
        cp.add(size == 0).only_enforce_if(~used).with_name(f"unused_{k}_{m}")
        if kind.release > 0:
            cp.add(begin >= kind.release).only_enforce_if(used).with_name(f"release_{k}_{m}")
        cp.add(finish <= model.makespan).with_name(f"within_{k}_{m}")
        cp.add(kind.step * model.steps[k, m] >= size).with_name(f"steps_{k}_{m}")
        cp.add(model.billed[k, m] >= kind.step_units * model.steps[k, m]).with_name(f"billed_{k}_{m}")
        if kind.minimum_units > 0:
            cp.add(model.billed[k, m] >= kind.minimum_units * used).with_name(f"minimum_{k}_{m}")
    for k, kind in enumerate(data.types):
        count = kind.resource.count
        if count is not None and count < kind.slots:
            cp.add_cumulative(leases[k], [1] * len(leases[k]), count).with_name(f"count_{k}")


def _add_energy(model: TickModel, data: TickData) -> None:
    """Redundant rows: what must fit in a slot's usable lease (size - boot).

    Its work on vcpus cores, on each lane, its memory-time, each chain's work, and for each task
    j: the work of j's ancestors (done before j starts) and descendants (after j ends) on vcpus
    cores plus j's whole run.
    """
    cp = model.cp
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, k, m in model.x:
        on_slot[k, m].append(i)
    for (k, m), members in sorted(on_slot.items()):
        kind = data.types[k]
        usable = model.size[k, m] - kind.boot * model.used[k, m]
        work = sum(data.tasks[i].cores * data.duration[i, k] * model.x[i, k, m] for i in members)
        cp.add(kind.resource.vcpus * usable >= work).with_name(f"energy_{k}_{m}")
        for lane in range(kind.resource.vcpus):
            hosted = [i for i in members if (i, k, m, lane) in model.lanes]
            if hosted:
                lane_work = sum(data.duration[i, k] * model.lanes[i, k, m, lane] for i in hosted)
                cp.add(usable >= lane_work).with_name(f"energy_lane_{k}_{m}_{lane}")
        held = sum(data.memory[i] * data.duration[i, k] * model.x[i, k, m] for i in members)
        cp.add(data.capacity[k] * usable >= held).with_name(f"energy_memory_{k}_{m}")
        vcpus = kind.resource.vcpus
        for j in members:  # ancestors run before j, descendants after it: their work and j's whole run
            around = [i for i in members if i in data.related[j]]
            if around:
                load = sum(data.tasks[i].cores * data.duration[i, k] * model.x[i, k, m] for i in around)
                own = vcpus * data.duration[j, k] * model.x[j, k, m]
                cp.add(vcpus * usable >= load + own).with_name(f"energy_around_{j}_{k}_{m}")
        for n, chain in enumerate(data.chains):
            hosted = [i for i in chain if i in members]
            if len(hosted) > 1:
                chain_work = sum(data.duration[i, k] * model.x[i, k, m] for i in hosted)
                cp.add(usable >= chain_work).with_name(f"energy_chain_{n}_{k}_{m}")


def _integer_cost(data: TickData, scale: float) -> dict[int, int]:
    """Per type, what one billed unit costs times ``scale``, rounded the model's way."""
    rounding = math.floor if data.direction == "down" else math.ceil
    return {k: int(rounding(scale * data.unit_usd(k))) for k in range(len(data.types))}


def _add_limits(model: TickModel, data: TickData) -> None:
    cp = model.cp
    if data.deadline is not None:
        cp.add(model.makespan <= data.deadline).with_name("deadline")
    limits = [(data.cost_cap_usd, "cost_cap")] if math.isfinite(data.cost_cap_usd) else []
    if data.budget_usd is not None:  # the cap includes it (relaxed); the "up" model keeps it exactly
        limits.append((data.budget_usd, "budget"))
    units = {k: sum(b for (kk, _), b in model.billed.items() if kk == k) for k in range(len(data.types))}
    cheapest = min((data.unit_usd(k) for k in range(len(data.types)) if data.unit_usd(k) > 0), default=0.0)
    most = {k: (data.horizon // kind.step + 1) * kind.step_units * kind.slots for k, kind in enumerate(data.types)}
    for limit, name in limits:
        if cheapest <= 0 or (data.direction == "down" and name == "budget"):
            continue
        scale = min(_PRECISION / cheapest, INT_LIMIT / max(sum(data.unit_usd(k) * most[k] for k in most), 1e-300))
        coefficient = _integer_cost(data, scale)
        room = math.floor(scale * limit)
        cp.add(sum(coefficient[k] * units[k] for k in units) <= room).with_name(name)


def _set_objective(model: TickModel, data: TickData) -> None:
    objective, bounds = data.problem.objective, data.problem.bounds
    weights = {"time": (1.0, 0.0), "cost": (0.0, 1.0), "balanced": (objective.alpha, 1 - objective.alpha)}
    w_time, w_cost = weights[objective.kind]
    terms: list[tuple[float, Any, int]] = []  # (real coefficient, variable, its upper bound)
    if w_time > 0:
        terms.append((w_time / (max(bounds.makespan_s, 1e-9) * data.ticks_per_s), model.makespan, data.horizon))
    if w_cost > 0:
        for (k, _), billed in model.billed.items():
            usd = data.unit_usd(k)
            if usd > 0:
                most = (data.horizon // data.types[k].step + 1) * data.types[k].step_units
                terms.append((w_cost * usd / max(bounds.cost_usd, 1e-12), billed, max(most, 1)))
    if not terms:
        model.cp.minimize(model.makespan)
        model.scale = 0.0
        return
    if len(terms) == 1:  # one variable: coefficient 1, exact
        model.cp.minimize(terms[0][1])
        model.scale = 1.0 / terms[0][0]
        return
    scale = _PRECISION / min(c for c, _, _ in terms)
    scale = min(scale, INT_LIMIT / sum(c * most for c, _, most in terms))
    rounding = (lambda v: math.floor(v * (1 - 1e-12))) if data.direction == "down" else round
    model.cp.minimize(sum(int(rounding(scale * c)) * var for c, var, _ in terms))
    model.scale = scale


def build_model(data: TickData, deadline: TimeBudget | None = None) -> TickModel:
    """The whole model; raises :class:`~agora_optimizer.planning.time_budget.OutOfTime` past ``deadline``."""
    from ortools.sat.python import cp_model  # here, not at import: OR-Tools (and pandas) take 0.5 s to load

    model = TickModel(cp_model.CpModel(), deadline=deadline or TimeBudget())
    steps = (
        _add_variables,
        _add_assignment,
        _add_timing,
        _add_capacity,
        _add_parallelism,
        _add_leases,
        _add_energy,
        _add_limits,
        _set_objective,
    )
    for step in steps:
        step(model, data)
        model.deadline.check()
    return model
