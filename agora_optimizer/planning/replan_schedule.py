"""One schedule of a re-planned run: the run's inputs checked once, then its pending tasks placed one by one.

:func:`prepare` checks the state against the workflow and the catalog and fixes what ran
(:class:`ReplanInputs`); :func:`schedule` places the pending tasks in a given order, each on its
planned machine (*kept*) or where the list scheduler's score is best (*list*), over a
:class:`~agora_optimizer.planning.replan_fleet.Fleet` that starts from what ran and what runs.
:func:`agora_optimizer.planning.replan.replan` builds the schedules and keeps the best.

With latest ends (a deadline at risk), each task goes where it adds the least cost among the places
where it ends by its own (where it can end by it nowhere, where it ends least late); a *kept* task
stays on its planned machine when it ends by it there, so only the tasks that would end late move.
:func:`tails` gives each task the longest path after it on the fastest types, as
:mod:`agora_optimizer.engines.deadline_list` reads it.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from agora_optimizer.errors import TooManyGpusError, UnplaceableTaskError
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import Assignment, Plan, machine_type
from agora_optimizer.model.workflow import Task, Workflow, parents_first
from agora_optimizer.planning.arrivals import Arrivals
from agora_optimizer.planning.bounds import fastest_runtime_s
from agora_optimizer.planning.problem import Bounds
from agora_optimizer.planning.replan_fleet import Fleet, FleetMachine
from agora_optimizer.planning.run_state import Done, Pending, ReplanError, TaskState

MACHINES_PER_TYPE = 2  # beyond it, a task tries the first-idle machines of a type (and its parents', its planned)
TIME_CHECK_EVERY = 32  # tasks placed between two looks at the clock

Schedule = tuple[list[Assignment], float, float]  # (assignments, makespan, cost)


@dataclass
class ReplanInputs:
    """What a schedule is built from: the inputs, checked once, shared by both schedules."""

    workflow: Workflow
    catalog: Catalog
    plan: Plan
    now_s: float
    state: Mapping[str, TaskState]
    leased: Collection[str]
    planned: dict[str, Assignment]
    options: dict[str, list[Resource]]
    reserve: dict[str, int]
    fixed: list[Assignment] = field(default_factory=list)  # done and running tasks, as they run
    leased_told: bool = False  # ``leased`` is the caller's word, not read from the plan


def prepare(
    workflow: Workflow,
    catalog: Catalog,
    plan: Plan,
    state: Mapping[str, TaskState],
    now_s: float,
    leased: Collection[str] | None,
) -> ReplanInputs:
    """Check the state against the workflow and the catalog, and fix what ran."""
    for task_id in state:
        if task_id not in workflow.by_id:
            raise ReplanError(f"state names task '{task_id}', which is not in workflow '{workflow.name}'")
    planned = {a.task: a for a in plan.assignments}
    told = leased is not None
    if leased is None:
        leased = _leased_by_plan(plan, catalog, now_s)
    reserve: dict[str, int] = {}
    options: dict[str, list[Resource]] = {}
    run = ReplanInputs(workflow, catalog, plan, now_s, state, set(leased), planned, options, reserve, leased_told=told)
    for task in workflow.tasks:
        status = state.get(task.id, Pending())
        reserve[task.id] = max(task.memory_bytes, status.memory_bytes or 0) if not isinstance(status, Done) else 0
        if isinstance(status, Pending):
            options[task.id] = _fitting(task, reserve[task.id], catalog)
            continue
        resource = catalog.by_name.get(machine_type(status.machine))
        if resource is None:
            raise ReplanError(
                f"task '{task.id}' ran on machine '{status.machine}', whose type is not in catalog {catalog.source}"
            )
        duration = resource.runtime_s(task)
        memory = max(task.memory_bytes, planned[task.id].memory_bytes if task.id in planned else 0)
        if isinstance(status, Done):
            if status.end_s > now_s + TIME_TOLERANCE_S:
                raise ReplanError(f"task '{task.id}' is done at {status.end_s} s, after now ({now_s} s)")
            start = max(0.0, status.end_s - duration) if status.start_s is None else status.start_s
            end = status.end_s
        else:
            if status.start_s > now_s + TIME_TOLERANCE_S:
                raise ReplanError(f"task '{task.id}' runs since {status.start_s} s, after now ({now_s} s)")
            start, end = status.start_s, max(now_s, status.start_s + duration)
            memory = max(memory, status.memory_bytes or 0)
        placed = Assignment(task.id, resource.name, status.machine, start, end, task.cores, memory, task.gpus)
        run.fixed.append(placed)
    return run


def _leased_by_plan(plan: Plan, catalog: Catalog, now_s: float) -> set[str]:
    """The plan's machines whose planned lease (first start minus boot) began by ``now_s``."""
    first: dict[str, float] = {}
    for a in plan.assignments:
        resource = catalog.by_name.get(a.resource)
        boot = resource.boot_s if resource is not None else 0.0
        first[a.machine] = min(first.get(a.machine, a.start_s - boot), a.start_s - boot)
    return {machine for machine, start in first.items() if start <= now_s + TIME_TOLERANCE_S}


def _fitting(task: Task, memory_bytes: int, catalog: Catalog) -> list[Resource]:
    options = [r for r in catalog.resources if r.fits(replace(task, memory_bytes=memory_bytes))]
    options.sort(key=lambda r: (r.runtime_s(task), r.price_per_hour_usd))  # fastest first: the rest prune early
    if not options:
        most = catalog.most_gpus()
        if task.gpus > most.gpus:
            raise TooManyGpusError(task.id, task.gpus, most.name, most.gpus)
        largest = catalog.largest()
        raise UnplaceableTaskError(
            task.id,
            task.cores,
            memory_bytes,
            f"{largest.name} ({largest.vcpus} vcpus, {largest.memory_bytes} bytes, {largest.gpus} GPUs)",
            task.gpus,
        )
    return options


def parents_first_by(workflow: Workflow, tasks: list[str], key: Callable[[str], tuple[float, int]]) -> list[str]:
    """``tasks`` by ``key``, but never a task before a parent among them (Kahn's algorithm on a heap)."""
    among = set(tasks)
    return parents_first(
        {t: sum(1 for e in workflow.parents[t] if e.parent in among) for t in tasks},
        lambda task_id: (edge.child for edge in workflow.children[task_id]),
        key,
    )


def _base_fleet(run: ReplanInputs) -> tuple[Fleet, dict[str, tuple[FleetMachine, float]]]:
    """A fleet holding what ran and what runs, with the plan's machines known by id."""
    memories = [run.reserve[t] for t in run.options] or [0]
    fleet = Fleet(run.catalog, run.now_s, min(memories))
    ends: dict[str, tuple[FleetMachine, float]] = {}
    for placed in run.fixed:
        machine = fleet.machine(placed.machine, leased=True)
        fleet.take(machine, placed.start_s, placed.end_s, placed.cores, placed.memory_bytes, placed.gpus)
        ends[placed.task] = (machine, placed.end_s)
    first: dict[str, float] = {}
    for planned in run.plan.assignments:
        if planned.resource not in run.catalog.by_name:
            continue  # a type the catalog lost: its tasks are searched for elsewhere
        machine = fleet.machine(planned.machine, leased=planned.machine in run.leased)
        first[machine.id] = min(first.get(machine.id, planned.start_s), planned.start_s)
    for planned in run.plan.assignments:  # a leased machine still held for tasks to come is paid up to now
        held = fleet.by_id.get(planned.machine)
        coming = not isinstance(run.state.get(planned.task, Pending()), Done)
        if coming and held is not None and held.leased and held.lease_start_s is not None:
            held.lease_end_s = max(held.lease_end_s, run.now_s)
    for machine_id, start in sorted(first.items(), key=lambda item: (item[1], item[0])):
        machine = fleet.by_id[machine_id]
        if machine.lease_start_s is not None:
            continue
        # leased, nothing started on it yet: booting; unless the plan alone says so and its type's count had
        # no room for it beside what ran (a machine planned to follow one that ran late waited for it)
        if machine.leased and not run.leased_told and not fleet.count_allows(machine, start, run.now_s):
            fleet.unlease(machine)
        if machine.leased:
            fleet.active[machine.resource.name].append(machine)
            machine.lease_start_s, machine.lease_end_s = start - machine.resource.boot_s, run.now_s
            machine.floor_s = max(run.now_s, start)
        else:
            fleet.spare[machine.resource.name][machine_id] = None
    return fleet, ends


def tails(run: ReplanInputs, rank: Mapping[str, float]) -> dict[str, float]:
    """Each pending task's tail: its upward rank less its own fastest runtime (the path after it, transfers in)."""
    return {t: rank[t] - fastest_runtime_s(run.workflow.by_id[t], options) for t, options in run.options.items()}


_Choice = tuple[tuple[float, float, float], FleetMachine, float, float]  # (key, machine, start, end)


def schedule(
    run: ReplanInputs,
    order: list[str],
    rank: dict[str, float],
    alpha: float,
    scale: Bounds,
    keep: bool,
    deadline: float | None,
    latest_end_s: Mapping[str, float] | None = None,
) -> tuple[list[Assignment], float, float] | None:
    """Place ``order``'s tasks one by one; (assignments, makespan, cost), or None past ``deadline``.

    ``keep``: each task on its planned machine (searched for only where that cannot be, or, with
    ``latest_end_s``, where it would end past its latest end); else each where it scores best, its
    planned machine winning ties. ``latest_end_s``: each task's score is how late it ends past its
    latest end, then the cost it adds (``alpha`` aside).
    """
    workflow, catalog = run.workflow, run.catalog
    fleet, ends = _base_fleet(run)
    estimated = max([run.now_s, *(end for _, end in ends.values())])
    weights = (alpha / max(scale.makespan_s, 1e-9), (1.0 - alpha) / max(scale.cost_usd, 1e-12))
    assignments: list[Assignment] = []
    for count, task_id in enumerate(order):
        if deadline is not None and count % TIME_CHECK_EVERY == 0 and time.perf_counter() > deadline:
            return None
        task = workflow.by_id[task_id]
        memory, options = run.reserve[task_id], run.options[task_id]
        tail = rank[task_id] - fastest_runtime_s(task, options)
        inputs = [
            (ends[e.parent][0], ends[e.parent][1], catalog.transfer_s(e.bytes)) for e in workflow.parents[task_id]
        ]
        planned = run.planned.get(task_id)
        planned_machine = fleet.by_id.get(planned.machine) if planned is not None else None
        if planned_machine is not None and planned_machine.resource not in options:
            planned_machine = None  # a retry that needs more memory than its planned type has
        latest = None if latest_end_s is None else latest_end_s[task_id]
        place = _Placer(fleet, task, memory, inputs, estimated, tail, weights, planned_machine, latest)
        if keep and planned_machine is not None:
            place.consider(planned_machine)
        if place.best is None or (latest is not None and place.best[0][0] > 0.0):  # none, or late there
            for resource in options:
                if not place.hopeless(resource):
                    for machine in _candidates(fleet, resource, inputs, planned_machine):
                        place.consider(machine)
        if place.best is None:  # count forbade every candidate: a machine the run leases, from its first task on
            for machine in (m for r in options for m in fleet.active[r.name]):
                place.consider(machine)
                # As soon as it can there, its lease may grow back over another's; from its first task on it grows
                # forward only, which the machine whose lease ends last may always do.
                place.consider(machine, not_before_s=machine.first_start_s)
        best = place.choice()
        if best is None:
            raise ReplanError(f"task '{task_id}' fits on no machine within the catalog's counts")
        _, machine, start, end = best
        fleet.take(machine, start, end, task.cores, memory, task.gpus)
        ends[task_id] = (machine, end)
        estimated = max(estimated, end + tail)
        assignments.append(
            Assignment(task_id, machine.resource.name, machine.id, start, end, task.cores, memory, task.gpus)
        )
    makespan = max([0.0, *(a.end_s for a in assignments), *(a.end_s for a in run.fixed)])
    return assignments, makespan, fleet.cost_usd()


class _Placer:
    """Where one task goes: the list scheduler's score over the machines it is shown, within the
    catalog's counts, its planned machine winning ties.

    A machine, or a whole type, is passed over before any timeline is searched when even starting
    as soon as the task's inputs could arrive would not beat the best so far: the cost term is
    never negative and, for time alone, the end breaks ties. The planned machine is always scored.

    With ``latest_end_s`` the score is ``(how late past it, added cost, end)`` instead: the cheapest
    place that ends in time, else the least late.
    """

    def __init__(
        self,
        fleet: Fleet,
        task: Task,
        memory_bytes: int,
        inputs: list[tuple[FleetMachine, float, float]],
        estimated_makespan_s: float,
        tail_s: float,
        weights: tuple[float, float],  # (alpha / T, (1 - alpha) / C)
        planned: FleetMachine | None,
        latest_end_s: float | None = None,
    ) -> None:
        self.fleet = fleet
        self.task = task
        self.memory_bytes = memory_bytes
        self.arrivals = Arrivals(inputs)
        # on any machine, at the soonest
        self.inputs_ready_s = max([fleet.now_s, task.release_s, *(end for _, end, _ in inputs)])
        self.estimated_makespan_s = estimated_makespan_s
        self.tail_s = tail_s
        self.time_weight, self.cost_weight = weights
        self.planned = planned
        self.latest_end_s = latest_end_s
        self.best: _Choice | None = None
        self.kept: _Choice | None = None

    def hopeless(self, resource: Resource) -> bool:
        """Whether no machine of ``resource`` can beat the best so far."""
        return self._beaten(self.inputs_ready_s + resource.runtime_s(self.task)) and (
            self.planned is None or self.planned.resource is not resource
        )

    def consider(self, machine: FleetMachine, not_before_s: float = 0.0) -> None:
        """Score the task on ``machine``, started as soon as it can there (and not before ``not_before_s``)."""
        task, best = self.task, self.best
        duration = machine.resource.runtime_s(task)
        ready = max(machine.floor_s, task.release_s, self.arrivals.on(machine), not_before_s)
        if machine is not self.planned and self._beaten(ready + duration):
            return
        start = machine.timeline.earliest_start(ready, duration, task.cores, self.memory_bytes, task.gpus)
        end = start + duration
        if machine is not self.planned and self._beaten(end):
            return
        added = machine.added_cost_usd(start, end)
        choice = (self._key(end, added), machine, start, end)
        better = best is None or choice[0] < best[0]
        if not (better or machine is self.planned) or not self.fleet.count_allows(machine, start, end):
            return
        if machine is self.planned:
            self.kept = choice
        if better:
            self.best = choice

    def choice(self) -> _Choice | None:
        """The best machine, or the planned one where it is not worse."""
        kept, best = self.kept, self.best
        if kept is None or best is None:
            return best
        if self.latest_end_s is None:
            return kept if kept[0][0] <= best[0][0] + 1e-12 else best
        # as late and no dearer (the end aside)
        return kept if kept[0][0] <= best[0][0] + TIME_TOLERANCE_S and kept[0][1] <= best[0][1] + 1e-12 else best

    def _key(self, end_s: float, added_usd: float) -> tuple[float, float, float]:
        """The score of ending at ``end_s`` for ``added_usd`` more (smaller is better)."""
        if self.latest_end_s is not None:
            return (max(0.0, end_s - self.latest_end_s - TIME_TOLERANCE_S), added_usd, end_s)
        time_part = self.time_weight * max(self.estimated_makespan_s, end_s + self.tail_s)
        return (time_part + self.cost_weight * added_usd, end_s, added_usd)

    def _beaten(self, end_s: float) -> bool:
        """Whether a machine on which the task would end at ``end_s`` (or later) cannot beat the best."""
        if self.best is None:
            return False
        if self.latest_end_s is not None:  # later is as late or later; the cost added is never negative
            return end_s - self.latest_end_s - TIME_TOLERANCE_S > self.best[0][0] + TIME_TOLERANCE_S
        (score, best_end, _), *_ = self.best
        time_part = self.time_weight * max(self.estimated_makespan_s, end_s + self.tail_s)
        if time_part > score + 1e-12:
            return True
        return self.cost_weight == 0.0 and time_part >= score - 1e-12 and end_s > best_end + TIME_TOLERANCE_S


_LEASE_END = operator.attrgetter("lease_end_s")


def _candidates(
    fleet: Fleet, resource: Resource, inputs: list[tuple[FleetMachine, float, float]], planned: FleetMachine | None
) -> list[FleetMachine]:
    """The machines of ``resource`` worth trying: its leased ones (of a large pool the first-idle few,
    the parents' and the planned one), and one with no lease (the planned one if it has none, else
    the first planned but not leased, else a new id)."""
    pool = fleet.active[resource.name]
    if len(pool) <= MACHINES_PER_TYPE:
        chosen = list(pool)
    else:
        chosen = sorted(pool, key=_LEASE_END)[:MACHINES_PER_TYPE]
        seen = {id(m) for m in chosen}
        extra = [m for m, _, _ in inputs if m.resource is resource]
        if planned is not None and planned.resource is resource:
            extra.append(planned)
        for machine in extra:
            if machine.lease_start_s is not None and id(machine) not in seen:
                seen.add(id(machine))
                chosen.append(machine)
    if planned is not None and planned.resource is resource and planned.lease_start_s is None:
        chosen.append(planned)
    else:
        chosen.append(fleet.empty(resource))
    return chosen
