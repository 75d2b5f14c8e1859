"""The data of the CP-SAT model: section 3 of the spec in whole ticks, rounded down or up.

CP-SAT works in integers, so time is counted in ticks of ``1 / per_s`` seconds
(:func:`choose_ticks`). Every duration, transfer, boot, billing step and minimum is
rounded to ticks exactly (as a fraction of the float's own value, never through a float
product), one way or the other:

- ``"up"`` (ceil): a tick schedule of this model, re-timed with the real durations by
  :func:`agora_optimizer.engines.exact.repair.retime`, is a valid plan no longer and no
  dearer than the model says: every real duration, transfer and boot is at most its
  ticks, so the tick schedule itself satisfies the re-timing's constraints;
- ``"down"`` (floor): a relaxation. For a valid plan with real starts s_i, the ticks
  floor(s_i S) solve the model: floor(s S) + floor(d S) <= floor((s + d) S) keeps every
  precedence, transfer and non-overlap (no two tasks or leases overlap that did not); a
  lease of real length l becomes at most ceil(l S) ticks (floor(a) - floor(b) + floor(c) <
  a - b + c + 1), within the ceil(l / g) billing steps of ceil(g S) ticks that it is billed;
  memory counts in units (KiB) rounded down against a capacity rounded down; billing steps
  and minimums cost their ticks rounded down. So the "down" optimum is at most the true one
  (over plans that keep the rules exactly: billed ceil(lease / g) steps, not the checker's
  1e-9 float tolerance), and a bound on it bounds the true optimum.

When every datum is a whole number of ticks the two models time tasks exactly as the real
one (only memory is still counted in rounded units): some optimal plan starts every task
at a whole tick (:func:`choose_ticks`).
Otherwise the two optima differ by the rounding: at most one tick for each task and
transfer on a path (2n ticks for n tasks) on the makespan and on each lease, plus one
billing step where a lease lies within those ticks above a whole step.

Data: tasks in topological order; the types kept by :func:`~agora_optimizer.engines.exact.shared.prune_types`
(a dominated type's machines move to a dominating type at no loss); S_k slots per type: the
tasks that fit k, no more than the cost cap pays for at k's cheapest lease, and ``count_k`` for
a time objective without budget when smaller (machines whose leases never overlap merge into
one id, which only lengthens leases, whose cost does not matter there); a horizon that some
optimal plan respects (idle instants cut out), tightened, like the cost cap, by the warm start:
the model holds every plan at least as good as it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from agora_optimizer.engines.exact.repair import Slot
from agora_optimizer.engines.exact.shared import (
    ancestor_sets,
    caps,
    chain_cover,
    head_tail,
    indexed_tasks,
    prune_types,
    real_horizon_s,
    slot_count,
)
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.problem import Problem

Direction = Literal["down", "up"]
KIB = 1024
INT_LIMIT = 2**60  # what a row's terms may add up to
_MAX_TICKS = 10**10
_MAX_PER_S = 10**9
ROUNDING_SHARE = 5e-7  # of the makespan bound: the most that 2n ticks of rounding may cost


def to_ticks(seconds: float, ticks_per_s: int, direction: Direction) -> int:
    """``seconds`` in ticks, rounded exactly (the float's own value, as a fraction)."""
    exact = Fraction(seconds) * ticks_per_s
    return math.floor(exact) if direction == "down" else math.ceil(exact)


@dataclass(frozen=True)
class Ticks:
    """The time unit: ``per_s`` ticks a second; ``exact`` when every datum is a whole number of ticks."""

    per_s: int
    exact: bool


def _data_seconds(problem: Problem, kinds: Sequence[Resource]) -> list[float]:
    """Every duration, transfer, release, boot, billing step and minimum the model rounds to ticks."""
    values = [r.runtime_s(t) for t in problem.workflow.tasks for r in kinds if r.fits(t)]
    values += [problem.catalog.transfer_s(e.bytes) for e in problem.workflow.edges]
    values += [v for r in kinds for v in (r.release_s, r.boot_s, r.billing.granularity_s, r.billing.minimum_s)]
    values += [t.release_s for t in problem.workflow.tasks]
    return values


def choose_ticks(problem: Problem, kinds: Sequence[Resource]) -> Ticks:
    """The coarsest tick that is exact (10^0 .. 10^6 a second), else one fine enough for the tolerance.

    Exact data make both models the real one: some optimal plan starts every task at a whole
    tick (fix its machines, orders and billed steps: the rest is a system of difference
    constraints with integer data, whose vertices are integral). Otherwise the rounding costs
    up to 2n ticks on the makespan; the tick keeps that below ``ROUNDING_SHARE`` of the
    makespan bound, and the horizon below about 10^10 ticks. CP-SAT searches much faster on
    coarse ticks.
    """
    values = [Fraction(v) for v in _data_seconds(problem, kinds)]
    for exponent in range(7):
        if all((v * 10**exponent).denominator == 1 for v in values):
            return Ticks(10**exponent, True)
    needed = 2 * len(problem.workflow.tasks) / (ROUNDING_SHARE * max(problem.bounds.makespan_s, 1e-9))
    horizon = max(real_horizon_s(problem, kinds), 1e-9)
    per_s = 1
    while per_s < min(needed, _MAX_PER_S) and per_s * horizon < _MAX_TICKS:
        per_s = _next_nice(per_s)
    return Ticks(per_s, False)


def _next_nice(value: int) -> int:
    """1, 2, 5, 10, 20, 50, ..."""
    lead = int(str(value)[0])
    return value * 5 // 2 if lead == 2 else value * 2


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class TickType:
    """A kept resource type in ticks: its slots, release, boot, billing rows and memory capacity."""

    resource: Resource
    slots: int
    boot: int
    release: int  # no lease of the type begins before it
    step: int  # ticks of one billing step in the steps row
    step_units: int  # billed units per step (a unit is ``unit_ticks``)
    minimum_units: int
    unit_ticks: int


@dataclass(frozen=True)
class TickData:
    """Everything the model needs, in ticks, for one rounding direction."""

    problem: Problem
    direction: Direction
    ticks_per_s: int
    tasks: tuple[Task, ...]  # topological order
    types: tuple[TickType, ...]
    options: tuple[tuple[int, ...], ...]  # type indices per task
    rank: dict[tuple[int, int], int]  # (task, type) -> rank among the tasks that fit the type
    duration: dict[tuple[int, int], int]  # (task, type) -> ticks
    edges: tuple[tuple[int, int, int], ...]  # (parent, child, transfer ticks)
    transfers_s: tuple[tuple[int, int, float], ...]  # (parent, child, real transfer seconds)
    memory_unit_bytes: int  # KiB, or coarser when a finer unit could overflow int64 rows
    memory: tuple[int, ...]  # per task, in memory units (rounded the model's way)
    capacity: tuple[int, ...]  # per type, in memory units (rounded down)
    chains: tuple[tuple[int, ...], ...]  # mutually dependent tasks (never overlap)
    related: tuple[frozenset[int], ...]  # per task, its ancestors and descendants
    ancestors: tuple[frozenset[int], ...]
    release: tuple[int, ...]  # per task, its own release in ticks (no start before it)
    head: tuple[int, ...]
    tail: tuple[int, ...]
    horizon: int
    deadline: int | None
    budget_usd: float | None
    cost_cap_usd: float  # math.inf when nothing caps the cost
    replacement: dict[str, Resource] = field(default_factory=dict)

    def slots_of(self, i: int) -> list[Slot]:
        return [(k, m) for k in self.options[i] for m in range(min(self.types[k].slots, self.rank[i, k] + 1))]

    def unit_usd(self, k: int) -> float:
        """What one billed unit of type k costs."""
        kind = self.types[k]
        return kind.resource.price_per_hour_usd / 3600.0 * kind.unit_ticks / self.ticks_per_s


def _tick_type(resource: Resource, slots: int, ticks: Ticks, direction: Direction) -> TickType:
    billing, down, per_s = resource.billing, direction == "down", ticks.per_s
    exact_step = Fraction(billing.granularity_s) * per_s
    if down:  # ticks a step covers: ceil (so it covers a real step); what a step costs: floor
        step = max(1, math.ceil(exact_step))
        step_cost, minimum = math.floor(exact_step), to_ticks(billing.minimum_s, per_s, "down")
    else:
        step = max(1, math.floor(exact_step))
        step_cost, minimum = math.ceil(exact_step), to_ticks(billing.minimum_s, per_s, "up")
    unit = math.gcd(step_cost, minimum) or 1
    return TickType(
        resource=resource,
        slots=slots,
        boot=to_ticks(resource.boot_s, per_s, direction),
        release=to_ticks(resource.release_s, per_s, direction),
        step=step,
        step_units=step_cost // unit,
        minimum_units=minimum // unit,
        unit_ticks=unit,
    )


def build_data(problem: Problem, direction: Direction, ticks: Ticks, warm: Sequence[Assignment] | None) -> TickData:
    workflow, catalog, objective = problem.workflow, problem.catalog, problem.objective
    kinds, replacement = prune_types(problem)
    limits = caps(problem, kinds, warm)
    per_s = ticks.per_s
    tasks, index, options, rank = indexed_tasks(problem, kinds)
    types = tuple(_tick_type(r, slot_count(problem, r, tasks, limits.cost_usd), ticks, direction) for r in kinds)
    duration = {
        (i, k): to_ticks(kinds[k].runtime_s(t), per_s, direction) for i, t in enumerate(tasks) for k in options[i]
    }
    edges = tuple(
        (index[e.parent], index[e.child], to_ticks(catalog.transfer_s(e.bytes), per_s, direction))
        for e in workflow.edges
    )
    parents: dict[int, list[int]] = defaultdict(list)
    for p, c, _ in edges:
        parents[c].append(p)
    ancestors = ancestor_sets(parents, len(tasks))
    shortest = [min(duration[i, k] for k in options[i]) for i in range(len(tasks))]
    release = [to_ticks(t.release_s, per_s, direction) for t in tasks]  # each task's own
    earliest = [max(min(types[k].release + types[k].boot for k in options[i]), release[i]) for i in range(len(tasks))]
    head, tail = head_tail(earliest, shortest, parents)
    if direction == "down":  # every plan within the caps ends by floor(cap * S)
        horizon = to_ticks(limits.makespan_s, per_s, "down")
    else:  # the model's own compression bound, in its (rounded-up) ticks
        out: dict[int, int] = defaultdict(int)
        for p, _, tr in edges:
            out[p] = max(out[p], tr)
        horizon = max([0, *(kind.release for kind in types), *release]) + sum(
            max(types[k].boot for k in options[i]) + max(duration[i, k] for k in options[i]) + out[i]
            for i in range(len(tasks))
        )
    deadline = None
    if objective.deadline_s is not None:
        deadline = to_ticks(objective.deadline_s + (1e-6 if direction == "down" else 0.0), per_s, "down")
        horizon = min(horizon, deadline)
    unit = KIB  # memory rows: capacity * horizon * (tasks + 2) within int64
    largest = max((kind.resource.memory_bytes for kind in types), default=0)
    while largest // unit * max(horizon, 1) * (len(tasks) + 2) > INT_LIMIT:
        unit *= 2
    rounding = math.floor if direction == "down" else math.ceil
    return TickData(
        problem=problem,
        direction=direction,
        ticks_per_s=per_s,
        tasks=tasks,
        types=types,
        options=options,
        rank=rank,
        duration=duration,
        edges=edges,
        transfers_s=tuple((index[e.parent], index[e.child], catalog.transfer_s(e.bytes)) for e in workflow.edges),
        memory_unit_bytes=unit,
        memory=tuple(int(rounding(Fraction(t.memory_bytes, unit))) for t in tasks),
        capacity=tuple(kind.resource.memory_bytes // unit for kind in types),
        chains=chain_cover(ancestors, shortest),
        ancestors=ancestors,
        related=tuple(
            frozenset(ancestors[i] | {j for j in range(len(tasks)) if i in ancestors[j]}) for i in range(len(tasks))
        ),
        release=tuple(release),
        head=tuple(head),
        tail=tuple(tail),
        horizon=max(horizon, 0),
        deadline=deadline,
        budget_usd=objective.budget_usd,
        cost_cap_usd=limits.cost_usd,
        replacement=replacement,
    )
