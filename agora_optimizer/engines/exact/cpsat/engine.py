"""The CP-SAT engine: section 3 of the spec as a constraint program over whole ticks, solved by OR-Tools.

The model (:mod:`agora_optimizer.engines.exact.cpsat.model`) places optional intervals per
(task, machine slot) on unit core lanes that never overlap and under a memory cumulative,
bills leases in whole steps above a minimum, keeps count limits with a cumulative over lease
intervals, and delays a child by its transfer when it runs elsewhere. Time is integer there,
so the data (:mod:`agora_optimizer.engines.exact.cpsat.data`) is rounded to ticks either way:

1. "down" first: a relaxation, so CP-SAT's bound on it (the integer objective's, scaled back
   with coefficients rounded down) is a valid lower bound on the true optimum. Its schedule,
   re-timed with the real durations (:func:`agora_optimizer.engines.exact.repair.retime`), is
   usually a valid plan whose score meets that bound within the tolerance: the rounding costs
   at most a tick for each task and transfer on a path (the tick keeps 2n of them below 5e-7
   of the makespan bound), and billing moves only when a lease lies within those ticks above a
   whole step. When every datum is a whole number of ticks, nothing is rounded at all.
2. "up" only when that fails (the re-timed plan is invalid, misses a limit or stays above the
   bound) and time is left: every schedule of this model re-times into a valid plan no longer
   and no dearer than the model says. It starts from the best plan so far.

"optimal" means: the returned plan's score is within ``OPTIMALITY_TOLERANCE`` (1e-6, relative)
of a valid lower bound on the true optimum over plans that keep the rules exactly (the
checker's 1e-6 s tolerances are not exploited): the "down" bound, or, as the model holds only
the plans at least as good as the warm start (horizon, cost cap, machine slots), min(that
bound, the warm start's score); a model proven infeasible then proves the warm start optimal.
Otherwise "feasible", with gap = (value - bound) / value.

Search: ``num_workers`` CP-SAT workers (2: the machine has two cores), linearization level 2,
a complete hint from the best of the given warm start and a few list schedules
(:func:`~agora_optimizer.engines.exact.shared.best_warm_start`), and an explicit time limit for each
phase out of ``time_limit_s``. The better of the model's plans and the warm start is returned.
A workflow above ``max_tasks``, a deadline or budget proven infeasible (by the lower bounds or
the "down" model), and a run that neither finds a plan nor proves the warm start optimal
return None.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.exact.cpsat.data import Direction, TickData, Ticks, build_data, choose_ticks, to_ticks
from agora_optimizer.engines.exact.cpsat.model import TickModel, build_model
from agora_optimizer.engines.exact.repair import (
    RealTimes,
    Slot,
    SolverSchedule,
    least_starts,
    lift_pruned,
    real_starts,
    structure_edges,
    to_assignments,
)
from agora_optimizer.engines.exact.shared import (
    applies,
    best_warm_start,
    colour_lanes,
    exact_result,
    is_valid,
    meets_bound,
    prune_types,
)
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget

log = logging.getLogger(__name__)

DEFAULT_MAX_TASKS = 40
UP_RESERVE_S = 1.0  # kept from the "down" run for an "up" one: at most this,
UP_RESERVE_SHARE = 0.1  # and at most this share of the time limit
_MIN_SOLVE_S = 0.05
_STATUS = {"OPTIMAL": "optimal", "FEASIBLE": "feasible", "INFEASIBLE": "infeasible", "MODEL_INVALID": "invalid"}


@dataclass(frozen=True)
class Phase:
    """One CP-SAT run: which model, what it ended with, its bound on the score, how long it took."""

    direction: Direction
    status: str  # "optimal", "feasible", "infeasible", "invalid" or "unknown"
    bound: float | None  # on the score, valid for that model
    wall_s: float
    plan: list[Assignment] | None = None  # the model's schedule, re-timed and valid
    place: list[Slot] | None = None  # the model's slot for each task


# --------------------------------------------------------------------------- hints


def plan_slots(data: TickData, assignments: Sequence[Assignment]) -> list[Slot] | None:
    """Each task's slot in the model's numbering (machines by lowest-ranked task), or None if it does not fit."""
    index = {t.id: n for n, t in enumerate(data.tasks)}
    type_index = {kind.resource.name: k for k, kind in enumerate(data.types)}
    machines: dict[str, list[int]] = {}
    kinds: dict[str, int] = {}
    for a in assignments:
        if a.resource not in type_index:
            return None
        machines.setdefault(a.machine, []).append(index[a.task])
        kinds[a.machine] = type_index[a.resource]
    place: list[Slot | None] = [None] * len(data.tasks)
    for k in range(len(data.types)):
        ordered = sorted(
            (min(data.rank[i, k] for i in items), machine) for machine, items in machines.items() if kinds[machine] == k
        )
        if len(ordered) > data.types[k].slots:
            return None
        for m, (_, machine) in enumerate(ordered):
            for i in machines[machine]:
                place[i] = (k, m)
    if any(slot is None for slot in place):
        return None
    return [slot for slot in place if slot is not None]


def _tick_starts(data: TickData, place: list[Slot], assignments: Sequence[Assignment]) -> list[int] | None:
    """Tick starts of a real plan: rounded down ("down": feasible); least ones keeping its orders ("up")."""
    by_task = {a.task: a for a in assignments}
    start = [by_task[t.id].start_s for t in data.tasks]
    if data.direction == "down":
        return [to_ticks(s, data.ticks_per_s, "down") for s in start]
    end = [by_task[t.id].end_s for t in data.tasks]
    boot = {slot: float(data.types[slot[0]].boot) for slot in set(place)}
    release = {slot: float(data.types[slot[0]].release) for slot in boot}
    lease = {slot: (math.inf, -math.inf) for slot in boot}
    for i, slot in enumerate(place):
        begin, finish = lease[slot]
        lease[slot] = (min(begin, start[i] - data.types[slot[0]].resource.boot_s), max(finish, end[i]))
    ticks = RealTimes(
        duration_s=[float(data.duration[i, slot[0]]) for i, slot in enumerate(place)],
        edges=[(p, c, float(tr)) for p, c, tr in data.edges],
        boot_s=boot,
        release_s=release,
        count_limited=frozenset(range(len(data.types))),
    )
    found = least_starts(
        [max(release[s] + boot[s], data.release[i]) for i, s in enumerate(place)],
        structure_edges(SolverSchedule(place, start, end, lease), ticks, None),
    )
    return None if found is None else [round(s) for s in found]


def add_hints(model: TickModel, data: TickData, assignments: Sequence[Assignment]) -> bool:
    """Hint every variable with a real plan (its machines of pruned types lifted); False if it does not fit."""
    lifted = lift_pruned(assignments, data.replacement, data.problem.workflow)
    place = plan_slots(data, lifted)
    if place is None:
        return False
    start = _tick_starts(data, place, lifted)
    if start is None:
        return False
    cp = model.cp
    end = [start[i] + data.duration[i, place[i][0]] for i in range(len(start))]
    on_slot: dict[Slot, list[int]] = {}
    for i, k, m, _ in model.lanes:
        if place[i] == (k, m):
            on_slot.setdefault((k, m), []).append(i)
    vcpus = [kind.resource.vcpus for kind in data.types]
    lanes = colour_lanes(on_slot, vcpus, [t.cores for t in data.tasks], data.rank, start, end) or {}
    for (i, k, m), x in model.x.items():
        cp.add_hint(x, place[i] == (k, m))
    for i in range(len(start)):
        cp.add_hint(model.start[i], start[i])
        cp.add_hint(model.end[i], end[i])
    cp.add_hint(model.makespan, max(end, default=0))
    for (p, c), same in model.same.items():
        cp.add_hint(same, place[p] == place[c])
    for (i, k, m, lane), y in model.lanes.items():
        cp.add_hint(y, place[i] == (k, m) and lane in lanes.get(i, ()))
    for slot, used in model.used.items():
        items = [i for i in range(len(start)) if place[i] == slot]
        kind = data.types[slot[0]]
        begin = min((start[i] for i in items), default=kind.boot) - kind.boot
        finish = max((end[i] for i in items), default=begin)
        size = finish - begin if items else 0
        steps = -(-size // kind.step)
        cp.add_hint(used, bool(items))
        cp.add_hint(model.lease_start[slot], max(begin, 0))
        cp.add_hint(model.lease_end[slot], max(finish, 0))
        cp.add_hint(model.size[slot], size)
        cp.add_hint(model.steps[slot], steps)
        cp.add_hint(model.billed[slot], max(kind.step_units * steps, kind.minimum_units if items else 0))
    leased = sum(data.types[k].resource.vcpus for k, _ in set(place))
    if model.cores_leased is not None:
        cp.add_hint(model.cores_leased, leased)
    for cores, at_most in model.cores_at_most.items():
        cp.add_hint(at_most, leased <= cores)
    return True


# ------------------------------------------------------------------------ solving


def _solve(model: TickModel, time_limit_s: float, workers: int, seed: int) -> tuple[Any, str, float | None]:
    """Run CP-SAT: (solver, status, bound on the score for this model, or None)."""
    from ortools.sat.python import cp_model  # here, not at import: OR-Tools (and pandas) take 0.5 s to load

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(time_limit_s, _MIN_SOLVE_S)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    solver.parameters.linearization_level = 2  # cuts from the intervals and enforced rows: closes more gaps
    solver.parameters.cp_model_probing_level = 0  # presolve probing took whole time limits at 40 tasks
    status = _STATUS.get(solver.status_name(solver.solve(model.cp)), "unknown")
    if status == "invalid":
        log.error("CP-SAT rejected the model: %s", model.cp.validate())
    if status in ("invalid", "infeasible") or model.scale <= 0:
        return solver, status, None
    raw = solver.objective_value if status == "optimal" else solver.best_objective_bound
    if not math.isfinite(raw):
        return solver, status, None
    return solver, status, raw / model.scale * (1 - 1e-12)


def read_schedule(solver: Any, model: TickModel, data: TickData) -> SolverSchedule:
    """The tick schedule: each task's slot, start and end, and each used slot's lease from its tasks."""
    n = len(data.tasks)
    place = [next(slot for slot in data.slots_of(i) if solver.boolean_value(model.x[(i, *slot)])) for i in range(n)]
    start = [float(solver.value(model.start[i])) for i in range(n)]
    end = [start[i] + data.duration[i, place[i][0]] for i in range(n)]
    lease: dict[Slot, tuple[float, float]] = {}
    for i, slot in enumerate(place):
        begin, finish = lease.get(slot, (math.inf, -math.inf))
        lease[slot] = (min(begin, start[i] - data.types[slot[0]].boot), max(finish, end[i]))
    return SolverSchedule(place, start, end, lease)


def allowance_s(data: TickData, schedule: SolverSchedule) -> dict[Slot, float]:
    """Per used slot, the longest real lease billed no more than the tick schedule's lease (whole steps)."""
    result = {}
    for slot, (begin, finish) in schedule.lease.items():
        billing = data.types[slot[0]].resource.billing
        step = Fraction(billing.granularity_s) * data.ticks_per_s
        steps = math.ceil(Fraction(round(finish - begin)) / step)
        result[slot] = max(steps, math.floor(billing.minimum_s / billing.granularity_s + 1e-9)) * billing.granularity_s
    return result


def to_plan(data: TickData, schedule: SolverSchedule) -> list[Assignment] | None:
    """The tick schedule re-timed with the real durations, if that is valid and within the limits."""
    place, resources = schedule.place, [kind.resource for kind in data.types]
    counted = [k for k, kind in enumerate(data.types) if kind.resource.count is not None]
    real = RealTimes(
        duration_s=[resources[slot[0]].runtime_s(data.tasks[i]) for i, slot in enumerate(place)],
        edges=data.transfers_s,
        boot_s={slot: resources[slot[0]].boot_s for slot in set(place)},
        release_s={slot: resources[slot[0]].release_s for slot in set(place)},
        task_release_s=[t.release_s for t in data.tasks],
        count_limited=frozenset(k for k in counted if (data.types[k].resource.count or 0) < data.types[k].slots),
    )
    starts = real_starts(schedule, real, allowance_s(data, schedule))
    if starts is None:
        return None
    plan = to_assignments(data.tasks, resources, place, starts)
    return plan if is_valid(data.problem, plan) else None


# ------------------------------------------------------------------------- engine


class CpSatEngine(Engine):
    """The exact CP-SAT model of the execution rules, for small workflows (see the module docstring).

    ``max_tasks``: larger workflows return None at once. ``num_workers``: CP-SAT's workers.
    ``ticks_per_s``: None chooses the tick (:func:`~agora_optimizer.engines.exact.cpsat.data.choose_ticks`);
    a number forces it, treated as inexact (rounded both ways). ``margin_s``: time kept
    back from ``time_limit_s`` for reading and re-timing. ``seed``: CP-SAT's random seed.
    ``last_phases`` tells what the last run did. A workflow with a task that needs GPUs returns None
    at once: the model packs cores and memory only (GPUs are section 5 of the spec), so a plan of
    it could over-subscribe a machine's GPUs.
    """

    name = "cpsat"

    def __init__(
        self,
        max_tasks: int = DEFAULT_MAX_TASKS,
        num_workers: int = 2,
        ticks_per_s: int | None = None,
        margin_s: float = 0.1,
        seed: int = 0,
    ) -> None:
        self.max_tasks = max_tasks
        self.num_workers = num_workers
        self.ticks_per_s = ticks_per_s
        self.margin_s = margin_s
        self.seed = seed
        self.last_phases: list[Phase] = []

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        started = time.perf_counter()
        self.last_phases = []
        if not applies(problem, self.max_tasks, time_limit_s):
            return None  # GPUs, spot types, too many tasks, no time, or limits proven out of reach
        warm = best_warm_start(
            problem, warm_start, TimeBudget.until(started + time_limit_s - self.margin_s - _MIN_SOLVE_S)
        )
        ticks = Ticks(self.ticks_per_s, False) if self.ticks_per_s else choose_ticks(problem, prune_types(problem)[0])

        def left() -> float:
            return time_limit_s - (time.perf_counter() - started) - self.margin_s

        reserve = min(UP_RESERVE_S, UP_RESERVE_SHARE * time_limit_s)  # for an "up" run if "down" uses its all
        down = self._phase(problem, "down", ticks, warm, lambda: left() - reserve)
        if down.status == "invalid" or (down.status == "infeasible" and warm is None):
            return None  # a model error; or a relaxation with no warm start's caps: no plan meets the limits
        bound = _valid_bound(problem, down, warm)
        plans = [p for p in (down.plan, warm) if p is not None]
        if down.place is not None and not _proven(problem, plans, bound) and left() > _MIN_SOLVE_S:
            # the rounding lost the proof (or the plan): first the "down" machines, timed rounded up
            fixed = self._phase(problem, "up", ticks, min(plans, key=problem.score), left, down.place)
            plans += [fixed.plan] if fixed.plan is not None else []
        if down.status == "optimal" and not _proven(problem, plans, bound) and left() > _MIN_SOLVE_S:
            up = self._phase(problem, "up", ticks, min(plans, key=problem.score), left)
            plans += [up.plan] if up.plan is not None else []
        if not plans or (len(plans) == 1 and warm is not None and not _proven(problem, plans, bound)):
            return None  # CP-SAT found nothing and proved nothing of the warm start
        return exact_result(problem, min(plans, key=problem.score), bound, CpSatEngine.name)

    def _phase(
        self,
        problem: Problem,
        direction: Direction,
        ticks: Ticks,
        warm: list[Assignment] | None,
        left: Callable[[], float],
        fixed: list[Slot] | None = None,
    ) -> Phase:
        """Build and solve one model (with each task's slot fixed, if given) in the time ``left()`` says."""
        began = time.perf_counter()
        try:  # building a large model can take seconds: it must not overrun the time limit either
            deadline = TimeBudget(left() - _MIN_SOLVE_S)
            data = build_data(problem, direction, ticks, warm)
            model = build_model(data, deadline)
            if warm is not None:
                add_hints(model, data, warm)
            deadline.check()
        except OutOfTime:
            return self._record(Phase(direction, "unknown", None, time.perf_counter() - began))
        if fixed is not None:
            if any((i, *slot) not in model.x for i, slot in enumerate(fixed)):
                return self._record(Phase(direction, "unknown", None, time.perf_counter() - began))
            for i, slot in enumerate(fixed):
                model.cp.add(model.x[(i, *slot)] == 1)
        remaining = left()
        if remaining < _MIN_SOLVE_S:
            return self._record(Phase(direction, "unknown", None, time.perf_counter() - began))
        solver, status, bound = _solve(model, remaining, self.num_workers, self.seed)
        plan, place = None, None
        if status in ("optimal", "feasible"):
            schedule = read_schedule(solver, model, data)
            plan, place = to_plan(data, schedule), schedule.place
        if fixed is not None:
            bound = None  # a bound for these machines only
        return self._record(Phase(direction, status, bound, time.perf_counter() - began, plan, place))

    def _record(self, phase: Phase) -> Phase:
        self.last_phases.append(phase)
        return phase


def _valid_bound(problem: Problem, down: Phase, warm: list[Assignment] | None) -> float | None:
    """A lower bound on the true optimum from the "down" run.

    Without a warm start the model is a relaxation: its bound holds. With one, the model holds
    every plan at least as good as the warm start (the caps), so min(bound, warm value) holds, and
    a model proven infeasible proves the warm start optimal.
    """
    if warm is None:
        return down.bound
    value = problem.score(warm)[0]
    if down.status == "infeasible":
        return value
    return None if down.bound is None else min(down.bound, value)


def _proven(problem: Problem, plans: Sequence[Sequence[Assignment]], bound: float | None) -> bool:
    if not plans or bound is None:
        return False
    return meets_bound(min(problem.score(p)[0] for p in plans), bound)
