"""Many DAG runs on one platform: every run of a time window planned together (issue 20, part 2).

Each run has its workflow, its start in the window (``offset_s``) and its own deadline (seconds
after its start, or none). Each run leases machines of its own, as the executor runs them, and a
type's ``count`` bounds the machines leased at once over all runs
(:mod:`agora_optimizer.planning.shared_counts`): each run's plan is a plan of the spec on its own
(times from its start), and together they never lease more of a type at once than its count.

Three ways to plan the window, side by side:

- :func:`plan_jointly`: all runs at once. Deadline-aware list scheduling
  (:mod:`agora_optimizer.engines.deadline_list`) over the runs' union: each task's latest end is its
  run's start plus ``beta_run`` times its deadline less its tail, tasks are taken by latest start
  over all runs (so a tight run does not wait behind an easy one), and each goes where it adds the
  least cost while on time. ``beta`` is searched per run: a late run's shrinks in proportion to its
  overrun, then bisection looks for slack. Then, while time is left, each run in turn is planned
  again with the others' leases fixed and kept where it is cheaper (block coordinate descent).
- :func:`plan_first_come`: each run alone, in the order the runs start, on what the runs before it
  left (a platform whose DAGs each plan alone when they run).
- :func:`plan_each_alone`: each run alone on the whole catalog, as ``agora optimize`` plans one DAG:
  the cheapest, but together the plans may lease more of a type at once than its count
  (:func:`count_peaks` says where).

Under a deadline margin (``agora optimize --deadline-margin``, as one DAG's plan) the three plan
runs whose deadlines are that share earlier (:func:`aimed_runs`, never before a run's makespan
bound), and the plans carry the runs' own deadlines again (:func:`with_runs`): on time, late and the
lateness are counted against them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import Assignment, Objective, machine_type
from agora_optimizer.model.workflow import Edge, Task, Workflow, parents_first
from agora_optimizer.planning.bounds import (
    cost_lower_bound_usd,
    fastest_runtime_s,
    feasible_types,
    makespan_lower_bound_s,
)
from agora_optimizer.planning.deadline_aim import aimed_deadline_s
from agora_optimizer.planning.leases import cost_usd, leases, makespan_s
from agora_optimizer.planning.list_schedule import list_schedule, upward_ranks
from agora_optimizer.planning.problem import written_assignments
from agora_optimizer.planning.shared_counts import SEPARATOR, CountLedger, RunPools
from agora_optimizer.planning.time_budget import TimeBudget

MIN_BETA = 0.05
BISECTIONS = 6
NEIGHBOURHOOD = 3  # runs planned again together by one step of the joint search
ALONE_SHARE = 0.35  # of the time limit: each run's own plan from the portfolio, the first choice where it fits


class UnplannableWindowError(AgoraError):
    """The window cannot be planned as asked (no runs, a run that fits nowhere)."""


@dataclass(frozen=True)
class WindowProgress:
    """Where the window planner is, for a display (nothing is drawn here): what it does now, and the best
    window so far: its cost and how many runs miss their deadline."""

    stage: str
    cost_usd: float | None = None
    late_runs: int = 0


WindowProgressFn = Callable[[WindowProgress], None]


@dataclass(frozen=True)
class WindowRun:
    """One DAG run of the window: its workflow, its start in the window and its deadline after that."""

    name: str
    workflow: Workflow
    offset_s: float
    deadline_s: float | None = None


@dataclass(frozen=True)
class RunPlan:
    """One run's schedule: times from the run's start, machines ``TYPE#N`` of its own."""

    run: WindowRun
    assignments: tuple[Assignment, ...]
    makespan_s: float
    cost_usd: float

    @property
    def on_time(self) -> bool:
        return self.run.deadline_s is None or self.makespan_s <= self.run.deadline_s + TIME_TOLERANCE_S


@dataclass(frozen=True)
class WindowSchedule:
    """Every run's plan, as one way of planning the window gave them."""

    method: str
    plans: tuple[RunPlan, ...]

    @cached_property
    def cost_usd(self) -> float:
        return sum(plan.cost_usd for plan in self.plans)

    @cached_property
    def late_runs(self) -> list[str]:
        return [plan.run.name for plan in self.plans if not plan.on_time]

    def lateness_s(self) -> float:
        return lateness_s(self.plans)


def lateness_s(plans: Iterable[RunPlan]) -> float:
    """How long, in all, the runs end after their deadlines."""
    return sum(max(p.makespan_s - (p.run.deadline_s or math.inf), 0.0) for p in plans)


def check_runs(runs: Sequence[WindowRun], catalog: Catalog) -> None:
    """Refuse an empty window, a name twice, a negative offset or a run with a task no type holds."""
    if not runs:
        raise UnplannableWindowError("the window holds no DAG run")
    seen: set[str] = set()
    for run in runs:
        if run.name in seen:
            raise UnplannableWindowError(f"DAG run '{run.name}' is twice in the window")
        seen.add(run.name)
        if run.offset_s < 0 or not math.isfinite(run.offset_s):
            raise UnplannableWindowError(f"DAG run '{run.name}': offset_s must be >= 0, got {run.offset_s!r}")
        try:
            feasible_types(run.workflow, catalog)
        except AgoraError as exc:
            raise UnplannableWindowError(f"DAG run '{run.name}': {exc}") from None


def aimed_runs(
    runs: Sequence[WindowRun], catalog: Catalog, margin: float, bounds_s: Mapping[str, float] | None = None
) -> list[WindowRun]:
    """``runs`` with each deadline where a plan aims (:func:`agora_optimizer.planning.deadline_aim.aimed_deadline_s`:
    ``margin`` of it earlier, but not before the run's makespan bound, nor after the deadline itself).
    ``bounds_s``: each run's makespan bound by its name, where the caller has them (else computed here)."""
    if not 0 <= margin < 1:
        raise ValueError(f"deadline margin must be in [0, 1), got {margin}")
    aimed = []
    for run in runs:
        if run.deadline_s is not None and margin > 0 and run.workflow.tasks:
            bound_s = bounds_s[run.name] if bounds_s is not None else makespan_lower_bound_s(run.workflow, catalog)
            run = replace(run, deadline_s=aimed_deadline_s(run.deadline_s, bound_s, margin))
        aimed.append(run)
    return aimed


def with_runs(schedule: WindowSchedule, runs: Sequence[WindowRun]) -> WindowSchedule:
    """``schedule`` with each plan's run the one of ``runs`` by its name (its own deadline, after
    :func:`aimed_runs`)."""
    by_name = {run.name: run for run in runs}
    return replace(schedule, plans=tuple(replace(plan, run=by_name[plan.run.name]) for plan in schedule.plans))


def cost_lower_bound(runs: Sequence[WindowRun], catalog: Catalog) -> float:
    """No plan of the window costs less: each run's cost bound under its own deadline, summed."""
    return sum(cost_lower_bound_usd(r.workflow, catalog, r.deadline_s) for r in runs if r.workflow.tasks)


def count_peaks(plans: Sequence[RunPlan], catalog: Catalog) -> dict[str, tuple[int, float]]:
    """Per type with a ``count``: the most machines leased at once over all runs, and the first instant
    (in the window) at which that many are. Above the count, the plans cannot all run as planned."""
    events: dict[str, list[tuple[float, int]]] = {}
    for plan in plans:
        for resource, _, start, end in _window_leases(plan, catalog):
            events.setdefault(resource, []).extend([(start, 1), (end, -1)])
    peaks: dict[str, tuple[int, float]] = {}
    for name, steps in events.items():
        running, peak = 0, (0, 0.0)
        for instant, step in sorted(steps, key=lambda e: (e[0] + (TIME_TOLERANCE_S if e[1] > 0 else 0.0), e[1])):
            running += step
            if running > peak[0]:
                peak = (running, instant)
        if catalog.by_name[name].count is not None:
            peaks[name] = peak
    return peaks


def over_counts(plans: Sequence[RunPlan], catalog: Catalog) -> dict[str, tuple[int, float]]:
    """The types whose ``count`` the plans exceed together (:func:`count_peaks`)."""
    return {
        name: peak for name, peak in count_peaks(plans, catalog).items() if peak[0] > (catalog.by_name[name].count or 0)
    }


class _Window:
    """The runs' union as one workflow (task ids ``RUN/TASK``, each released at its run's start)."""

    def __init__(self, runs: Sequence[WindowRun], catalog: Catalog) -> None:
        self.runs = {run.name: run for run in runs}
        self.catalog = catalog
        tasks: list[Task] = []
        edges: list[Edge] = []
        self.run_of: dict[str, str] = {}
        for run in runs:
            for task in run.workflow.tasks:
                merged = f"{run.name}{SEPARATOR}{task.id}"
                self.run_of[merged] = run.name
                tasks.append(replace(task, id=merged, release_s=run.offset_s + task.release_s))
            edges += [
                Edge(f"{run.name}{SEPARATOR}{e.parent}", f"{run.name}{SEPARATOR}{e.child}", e.bytes)
                for e in run.workflow.edges
            ]
        self.workflow = Workflow.create("window", tasks, edges)
        options = feasible_types(self.workflow, catalog)
        rank = upward_ranks(self.workflow, catalog)
        self.fastest = {t.id: fastest_runtime_s(t, options[t.id]) for t in self.workflow.tasks}
        self.tails = {t.id: rank[t.id] - self.fastest[t.id] for t in self.workflow.tasks}
        self.start_s = {run.name: run.offset_s for run in runs}
        self.min_memory = min((t.memory_bytes for t in tasks), default=0)
        self.topological = {task_id: i for i, task_id in enumerate(self.workflow.topological_order)}

    def latest_ends(self, betas: Mapping[str, float]) -> dict[str, float]:
        """Each task of the runs in ``betas``: its run's start, plus beta times its deadline, less its tail."""
        latest = {}
        for task_id, tail in self.tails.items():
            run = self.runs[self.run_of[task_id]]
            if run.name not in betas:
                continue
            budget = math.inf if run.deadline_s is None else betas[run.name] * run.deadline_s
            latest[task_id] = run.offset_s + budget - tail
        return latest

    def schedule(
        self, names: Sequence[str], betas: Mapping[str, float], ledger: CountLedger, shared_cost: bool = True
    ) -> dict[str, RunPlan]:
        """Plan the runs ``names`` (the ledger holds the other runs' leases and gets theirs)."""
        chosen = set(names)
        members = [t for t in self.workflow.tasks if self.run_of[t.id] in chosen]
        ids = {t.id for t in members}
        part = Workflow.create("window", members, [e for e in self.workflow.edges if e.child in ids])
        latest = self.latest_ends(betas)
        waiting = {t.id: len(part.parents[t.id]) for t in part.tasks}
        order = parents_first(
            waiting,
            lambda task_id: (e.child for e in part.children[task_id]),
            lambda task_id: (latest[task_id] - self.fastest[task_id], self.topological[task_id]),
        )
        pools = RunPools(self.catalog, self.run_of, self.start_s, ledger, self.min_memory)
        assignments = list_schedule(part, self.catalog, 0.0, 1.0, 1.0, latest_end_s=latest, shared_cost=shared_cost,
                                    pools=pools, order=order)  # fmt: skip
        written = written_assignments(assignments, part, self.catalog)
        return {name: self._run_plan(name, [a for a in written if self.run_of[a.task] == name]) for name in names}

    def _run_plan(self, name: str, merged: list[Assignment]) -> RunPlan:
        """The run's assignments with its own task ids, times from its start and machines renumbered."""
        run, cut = self.runs[name], len(name) + len(SEPARATOR)
        numbers: dict[str, str] = {}
        counters: dict[str, int] = {}
        items = []
        for a in sorted(merged, key=lambda a: (a.start_s, a.task)):
            if a.machine not in numbers:
                kind = machine_type(a.machine)
                numbers[a.machine] = f"{kind}#{counters.get(kind, 0)}"
                counters[kind] = counters.get(kind, 0) + 1
            shift = run.offset_s
            items.append(
                replace(
                    a, task=a.task[cut:], machine=numbers[a.machine], start_s=a.start_s - shift, end_s=a.end_s - shift
                )
            )
        return RunPlan(run, tuple(items), makespan_s(items), cost_usd(items, self.catalog))

    def search(
        self, names: Sequence[str], ledger: CountLedger, budget: TimeBudget
    ) -> tuple[dict[str, RunPlan], CountLedger]:
        """The cheapest on-time plans of the runs ``names`` beside the ledger's leases (else the least late):
        ``beta`` per run, shrunk where late, then bisected; the ledger with the chosen plans' leases."""
        betas = dict.fromkeys(names, 1.0)
        late_beta: dict[str, float] = {}
        best: tuple[tuple[float, float], dict[str, RunPlan], CountLedger] | None = None

        def attempt(trial: Mapping[str, float], shared_cost: bool = True) -> dict[str, RunPlan]:
            nonlocal best
            filled = ledger.copy()
            with budget:
                plans = self.schedule(names, trial, filled, shared_cost)
            key = (lateness_s(plans.values()), sum(p.cost_usd for p in plans.values()))
            if best is None or key < best[0]:
                best = (key, plans, filled)
            return plans

        while True:
            plans = attempt(betas)
            late = [n for n in names if not plans[n].on_time]
            if not late or not budget.affords():
                break
            for name in late:
                late_beta[name] = betas[name]
                deadline = self.runs[name].deadline_s
                assert deadline is not None
                betas[name] = max(betas[name] * deadline / plans[name].makespan_s * 0.99, MIN_BETA)
            if all(late_beta[n] <= MIN_BETA for n in late):
                break
        timely = dict(betas)
        for _ in range(BISECTIONS):
            if not late_beta or not budget.affords():
                break
            trial = {n: (timely[n] + late_beta[n]) / 2 if n in late_beta else timely[n] for n in names}
            plans = attempt(trial)
            for name in late_beta:
                if plans[name].on_time:
                    timely[name] = trial[name]
                else:
                    late_beta[name] = trial[name]
        if budget.affords():
            attempt(timely, shared_cost=False)
        assert best is not None
        return best[1], best[2]


def plan_jointly(
    runs: Sequence[WindowRun],
    catalog: Catalog,
    time_limit_s: float = 60.0,
    seed: int = 0,
    progress: WindowProgressFn | None = None,
) -> WindowSchedule:
    """Every run planned together (see the module's docstring); ``progress`` is told of each step."""
    check_runs(runs, catalog)
    tell = progress or (lambda state: None)
    budget = TimeBudget(time_limit_s)
    window = _Window(runs, catalog)
    names = [run.name for run in runs]
    # Starting points: the runs one by one in the order they start, and in the order of their deadlines,
    # each with its own plan from the portfolio where that fits beside the runs before it.
    tell(WindowProgress("each run alone"))
    alone = _portfolio_plans(runs, catalog, TimeBudget(budget.remaining_s() * ALONE_SHARE))
    tell(WindowProgress("first come"))
    by_start = _first_come(window, names, budget.share(4), preferred=alone)
    due = {r.name: r.offset_s + (r.deadline_s if r.deadline_s is not None else math.inf) for r in runs}
    by_deadline = _first_come(window, names, budget.share(3), key=lambda n: due[n], preferred=alone)
    best = by_deadline if _better(by_deadline, by_start) else by_start
    # Large-neighbourhood search: take out a few runs that overlap in time, plan them again one by one in
    # a random order on what the others leave, keep the window where it is cheaper (on time first).
    rng = random.Random(seed)
    steps = 0
    while budget.affords() and len(names) > 1:
        tell(WindowProgress(f"joint search, step {steps + 1}", best.cost_usd, len(best.late_runs)))
        steps += 1
        with budget:
            spans = {p.run.name: (p.run.offset_s, p.run.offset_s + p.makespan_s) for p in best.plans}
            first = rng.choice(names)
            near = [n for n in names if n != first and _overlap(spans[n], spans[first])]
            near = near or [n for n in names if n != first]
            chosen = [first, *rng.sample(near, min(NEIGHBOURHOOD - 1, len(near)))]
            rng.shuffle(chosen)
            ledger = CountLedger(catalog)
            for plan in best.plans:
                if plan.run.name not in chosen:
                    _enter(ledger, plan, catalog)
            again: dict[str, RunPlan] = {}
            for name in chosen:
                planned, ledger = window.search([name], ledger, budget.share(len(chosen) * 4))
                again[name] = planned[name]
            trial = WindowSchedule("joint", tuple(again.get(p.run.name, p) for p in best.plans))
            if _better(trial, best, margin=1e-9):
                best = trial
    tell(WindowProgress("joint search done", best.cost_usd, len(best.late_runs)))
    return WindowSchedule("joint", best.plans)


def plan_first_come(runs: Sequence[WindowRun], catalog: Catalog, time_limit_s: float = 60.0) -> WindowSchedule:
    """Each run alone, in the order the runs start, on what the runs before it left: its own plan from the
    portfolio where that fits, else the deadline-aware search on what is left."""
    check_runs(runs, catalog)
    budget = TimeBudget(time_limit_s)
    window = _Window(runs, catalog)
    alone = _portfolio_plans(runs, catalog, TimeBudget(time_limit_s * ALONE_SHARE))
    return _first_come(window, [run.name for run in runs], budget, preferred=alone)


def plan_each_alone(runs: Sequence[WindowRun], catalog: Catalog, time_limit_s: float = 60.0) -> WindowSchedule:
    """Each run planned alone on the whole catalog with agora's portfolio (``agora optimize``), its time
    limit shared out; together the plans may exceed a type's count (:func:`over_counts`). A run whose
    deadline the portfolio cannot meet is refused (:class:`UnplannableWindowError`, naming it)."""
    check_runs(runs, catalog)
    plans = _portfolio_plans(runs, catalog, TimeBudget(time_limit_s))
    missing = [run.name for run in runs if run.name not in plans]
    if missing:
        raise UnplannableWindowError(f"no plan alone meets the deadline of DAG run(s) {', '.join(missing)}")
    return WindowSchedule("each alone", tuple(plans[run.name] for run in runs))


def _portfolio_plans(runs: Sequence[WindowRun], catalog: Catalog, budget: TimeBudget) -> dict[str, RunPlan]:
    """Each run's plan alone on the whole catalog from the portfolio, where one meets its deadline."""
    from agora_optimizer.optimize.optimize import optimize

    plans = {}
    for i, run in enumerate(runs):
        objective = Objective(kind="cost", deadline_s=run.deadline_s)
        try:
            plan = optimize(run.workflow, catalog, objective, "catalog", budget.remaining_s() / (len(runs) - i))
        except AgoraError:  # its deadline cannot be met alone: the window's search tries all the same
            continue
        plans[run.name] = RunPlan(run, plan.assignments, plan.makespan_s, plan.cost_usd)
    return plans


def plans_of(schedule: WindowSchedule) -> dict[str, RunPlan]:
    return {plan.run.name: plan for plan in schedule.plans}


def _first_come(
    window: _Window,
    names: Sequence[str],
    budget: TimeBudget,
    key: Callable[[str], float] | None = None,
    preferred: Mapping[str, RunPlan] | None = None,
) -> WindowSchedule:
    """The runs one by one (in the order they start, or of ``key``), each on what those before it left:
    its ``preferred`` plan where its leases fit there, else the deadline-aware search."""
    ledger = CountLedger(window.catalog)
    plans: dict[str, RunPlan] = {}
    order_key = key or (lambda n: window.runs[n].offset_s)
    ordered = sorted(names, key=lambda n: (order_key(n), names.index(n)))
    for i, name in enumerate(ordered):
        own = (preferred or {}).get(name)
        fitted = None if own is None else _fitted(ledger, own, window.catalog)
        if own is not None and fitted is not None:
            plans[name], ledger = own, fitted
            continue
        planned, ledger = window.search([name], ledger, budget.share(len(ordered) - i))
        plans[name] = planned[name]
    return WindowSchedule("first come", tuple(plans[n] for n in names))


def _fitted(ledger: CountLedger, plan: RunPlan, catalog: Catalog) -> CountLedger | None:
    """The ledger with ``plan``'s leases too, or None where one of them would exceed its type's count."""
    twin = ledger.copy()
    for resource, machine, start, end in _window_leases(plan, catalog):
        if not twin.fits(resource, start, end):
            return None
        twin.place(resource, machine, start, end)
    return twin


def _enter(ledger: CountLedger, plan: RunPlan, catalog: Catalog) -> None:
    for resource, machine, start, end in _window_leases(plan, catalog):
        ledger.place(resource, machine, start, end)


def _window_leases(plan: RunPlan, catalog: Catalog) -> list[tuple[str, str, float, float]]:
    """The run's leases in the window's time: (type, ``RUN/TYPE#N`` as the ledger names it, start, end)."""
    shift = plan.run.offset_s
    return [
        (lease.resource.name, f"{plan.run.name}{SEPARATOR}{lease.machine}", lease.start_s + shift, lease.end_s + shift)
        for lease in leases(plan.assignments, catalog)
    ]


def _better(a: WindowSchedule, b: WindowSchedule, margin: float = 0.0) -> bool:
    """On time first (least lateness), then cheaper."""
    if abs(a.lateness_s() - b.lateness_s()) > TIME_TOLERANCE_S:
        return a.lateness_s() < b.lateness_s()
    return a.cost_usd < b.cost_usd * (1 - margin) - 1e-12


def _overlap(span: tuple[float, float], other: tuple[float, float]) -> bool:
    """Whether two runs' planned spans (start to end, in the window) overlap."""
    return span[0] < other[1] and other[0] < span[1]
