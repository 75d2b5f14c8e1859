"""Replay a plan with what really happened: the actual workflow's runtimes and memory.

A plan made from predictions keeps its decisions (each task's machine, and the order in
which each machine starts its tasks) while the times follow the truth: tasks are taken
in the plan's start order, and each starts at the earliest instant that

- its parents have ended and their bytes have arrived (``bytes / bandwidth`` across machines),
- its machine is up (``boot_s``) and has started the task before it in the plan's order,
- its own release (``release_s``, e.g. an Airflow sensor's wait before it) has passed,
- for its machine's first task, the machine's planned opening has come, where the executor waits for
  it (:func:`~agora_optimizer.planning.leases.opens_on_time`: a plan that weighs cost, a priced type),
  or, sooner, every task on another machine that the machine's tasks depend on has ended and every
  machine of its type planned to open before it has opened (as the executor's
  :func:`~agora_optimizer.executor.runs.machine_order.may_open_early`),
- the machine has the task's cores and *reserved* memory free for its whole true runtime
  (the reservation is the plan's ``memory_bytes``: that is what an executor asks for), and so
  has its type, over all its machines, within its ``count`` (a run that goes faster than planned
  may not run more of a type at once than the catalog has).

A task whose true peak exceeds its reservation would be killed for lack of memory: the
replay counts and lists them (``oom_tasks``), and times them as if they had run, so the
makespan and cost it reports are a lower bound whenever that list is not empty. Tasks
whose true peak is unknown (not recorded) are counted apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from agora_optimizer.errors import PlanMismatchError
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.leases import cost_usd, makespan_s, opening_before, outside_parents, planned_openings
from agora_optimizer.planning.timeline import MachineTimeline
from agora_optimizer.predict.errors import UnknownResourceError


@dataclass(frozen=True)
class OomTask:
    task: str
    machine: str
    reserved_bytes: int
    actual_bytes: int


@dataclass(frozen=True)
class Replay:
    """The plan's claims, and what its decisions give under the actual runtimes and memory."""

    workflow: str
    planned_makespan_s: float
    planned_cost_usd: float
    makespan_s: float
    cost_usd: float
    assignments: tuple[Assignment, ...]
    oom_tasks: tuple[OomTask, ...]
    unknown_memory_tasks: int

    def summary(self) -> dict[str, object]:
        return {
            "workflow": self.workflow,
            "planned": {"makespan_s": self.planned_makespan_s, "cost_usd": self.planned_cost_usd},
            "actual": {"makespan_s": self.makespan_s, "cost_usd": self.cost_usd},
            "makespan_ratio": self.makespan_s / self.planned_makespan_s if self.planned_makespan_s > 0 else None,
            "cost_ratio": self.cost_usd / self.planned_cost_usd if self.planned_cost_usd > 0 else None,
            "oom_count": len(self.oom_tasks),
            "oom_tasks": [
                {
                    "task": t.task,
                    "machine": t.machine,
                    "reserved_bytes": t.reserved_bytes,
                    "actual_bytes": t.actual_bytes,
                }
                for t in self.oom_tasks
            ],
            "unknown_memory_tasks": self.unknown_memory_tasks,
        }


def replay(plan: Plan, actual: Workflow, catalog: Catalog) -> Replay:
    """Re-time ``plan`` with ``actual``'s runtimes; raises if the plan does not fit the workflow or catalog."""
    check_matches(plan, actual, catalog)
    openings = planned_openings(plan.assignments, catalog, plan.objective)
    placed = true_times(plan.assignments, actual, catalog, openings=openings)
    items = [placed[a.task] for a in start_ordered(plan.assignments, actual)]
    return summarised(plan, actual, catalog, items)


def start_ordered(assignments: Iterable[Assignment], actual: Workflow) -> list[Assignment]:
    """``assignments`` by planned start, parents first on ties: the order a run starts them in."""
    position = {task_id: i for i, task_id in enumerate(actual.topological_order)}
    return sorted(assignments, key=lambda a: (a.start_s, position[a.task]))


def true_times(
    planned: Iterable[Assignment],
    actual: Workflow,
    catalog: Catalog,
    ran: Iterable[Assignment] = (),
    now_s: float = 0.0,
    fresh: Mapping[str, float] | None = None,
    killed_share: Callable[[Assignment], float] | None = None,
    openings: Mapping[str, float] | None = None,
) -> dict[str, Assignment]:
    """Every task timed with ``actual``'s runtimes: ``ran`` as it ran, then ``planned`` (the plan's
    decisions for the tasks not started by ``now_s``) in its start order, none before ``now_s``.

    A machine is up ``boot_s`` after 0, as the plan has it; one of ``fresh`` (a machine a re-plan
    added, with the time of that re-plan) ``boot_s`` after that time. ``killed_share``: the share of
    its true runtime after which a planned attempt ends (below 1: killed for memory; by default every
    attempt runs to its end). ``openings``: the plan clock before which a machine that has not started a task
    may not start its first (:func:`~agora_optimizer.planning.leases.planned_openings`). Raises
    :class:`PlanMismatchError` where a task would start before a parent.
    """
    placed: dict[str, Assignment] = {}
    capacity = _Capacity(catalog)
    last_start: dict[str, float] = {}
    opened: dict[str, float] = {}  # each machine's first start
    ran = list(ran)
    for done in ran:
        capacity.take(done, done.start_s)
        last_start[done.machine] = max(last_start.get(done.machine, 0.0), done.start_s)
        opened[done.machine] = min(opened.get(done.machine, done.start_s), done.start_s)
        placed[done.task] = done
    ordered = start_ordered(planned, actual)
    early = _EarlyOpenings(ran, ordered, actual, openings or {})
    for planned_task in ordered:
        task = actual.by_id[planned_task.task]
        resource = catalog.by_name[planned_task.resource]
        machine = planned_task.machine
        booted = (fresh or {}).get(machine, 0.0) + resource.boot_s
        ready = max(now_s, booted, task.release_s, last_start.get(machine, 0.0))
        if machine not in last_start and machine in early.openings:
            ready = max(ready, early.opening_s(machine, placed, opened))
        for edge in actual.parents[task.id]:
            parent = placed.get(edge.parent)
            if parent is None:  # a parent the plan starts later: the plan breaks precedence
                raise PlanMismatchError(
                    f"plan starts task '{task.id}' before its parent '{edge.parent}'; validate the plan first"
                )
            transfer = 0.0 if parent.machine == machine else catalog.transfer_s(edge.bytes)
            ready = max(ready, parent.end_s + transfer)
        duration = resource.runtime_s(task) * (1.0 if killed_share is None else killed_share(planned_task))
        timed = replace(planned_task, start_s=ready, end_s=ready + duration)
        start = capacity.earliest_start(timed)
        timed = replace(timed, start_s=start, end_s=start + duration)
        capacity.take(timed, start)
        last_start[machine] = start
        opened.setdefault(machine, start)
        placed[task.id] = timed
    return placed


class _EarlyOpenings:
    """When a machine that opens on time (``openings``: its planned opening) may open: at its planned opening, or
    sooner once every task on another machine that its tasks depend on has ended and every machine of its type
    planned to open before it has opened (the executor's rule, :func:`~agora_optimizer.executor.runs.machine_order.
    may_open_early`)."""

    def __init__(
        self, ran: Sequence[Assignment], ordered: Sequence[Assignment], actual: Workflow, openings: Mapping[str, float]
    ) -> None:
        self.openings = openings
        tasks: dict[str, list[str]] = {}  # the tasks still to time of each machine that opens on time
        for a in ordered:
            if a.machine in openings:
                tasks.setdefault(a.machine, []).append(a.task)
        resource = {a.machine: a.resource for a in [*ran, *ordered]}
        typed = {machine: (resource[machine], at_s) for machine, at_s in openings.items() if machine in resource}
        parents = {task: [edge.parent for edge in actual.parents[task]] for mine in tasks.values() for task in mine}
        self.outside = {machine: outside_parents(mine, parents) for machine, mine in tasks.items()}
        self.before = {machine: opening_before(machine, typed) for machine in tasks}

    def opening_s(self, machine: str, placed: Mapping[str, Assignment], opened: Mapping[str, float]) -> float:
        """The plan clock from which ``machine`` may open, given what has been timed so far (``placed``, ``opened``)."""
        planned_s = self.openings[machine]
        outside, before = self.outside[machine], self.before[machine]
        if any(parent not in placed for parent in outside) or any(other not in opened for other in before):
            return planned_s  # a task it depends on, or a machine before it, not timed yet: as planned
        sooner = max([*(placed[p].end_s for p in outside), *(opened[other] for other in before)], default=0.0)
        return min(planned_s, sooner)


class _Capacity:
    """What is in use over time, per machine and, for a type with a ``count``, over all its machines: a
    run's executor holds a type to ``count`` machines' cores and memory at once (its Airflow pool has
    ``count x vcpus`` slots; a local pool has that many cores), however the plan numbered them."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.machines: dict[str, MachineTimeline] = {}
        self.types: dict[str, MachineTimeline] = {}

    def _needs(self, a: Assignment) -> tuple[Resource, int, int, int]:
        resource = self.catalog.by_name[a.resource]
        return (
            resource,
            min(a.cores, resource.vcpus),
            min(a.memory_bytes, resource.memory_bytes),
            min(a.gpus, resource.gpus),
        )

    def _timelines(self, a: Assignment) -> list[MachineTimeline]:
        resource = self.catalog.by_name[a.resource]
        timelines = [self._get(self.machines, a.machine, resource, 1)]
        if resource.count is not None:
            timelines.append(self._get(self.types, resource.name, resource, resource.count))
        return timelines

    @staticmethod
    def _get(found: dict[str, MachineTimeline], key: str, resource: Resource, machines: int) -> MachineTimeline:
        timeline = found.get(key)
        if timeline is None:
            timeline = found[key] = MachineTimeline(
                resource.vcpus * machines, resource.memory_bytes * machines, gpus=resource.gpus * machines
            )
        return timeline

    def earliest_start(self, a: Assignment) -> float:
        """The earliest start from ``a.start_s`` on at which ``a`` fits its machine and its type for its duration."""
        _, cores, memory, gpus = self._needs(a)
        duration, start = a.end_s - a.start_s, a.start_s
        timelines = self._timelines(a)
        while True:
            moved = start
            for timeline in timelines:
                moved = timeline.earliest_start(moved, duration, cores, memory, gpus)
            if moved <= start:
                return start
            start = moved

    def take(self, a: Assignment, start_s: float) -> None:
        _, cores, memory, gpus = self._needs(a)
        for timeline in self._timelines(a):
            timeline.add(start_s, start_s + a.end_s - a.start_s, cores, memory, gpus)


def summarised(plan: Plan, actual: Workflow, catalog: Catalog, items: Sequence[Assignment]) -> Replay:
    """The replay of ``plan`` whose tasks ran as ``items`` (true times): makespan, cost, tasks short of memory."""
    oom = tuple(
        OomTask(a.task, a.machine, a.memory_bytes, actual.by_id[a.task].memory_bytes)
        for a in items
        if actual.by_id[a.task].memory_source == "recorded" and actual.by_id[a.task].memory_bytes > a.memory_bytes
    )
    unknown = sum(1 for task in actual.tasks if task.memory_source != "recorded")
    return Replay(
        workflow=actual.name,
        planned_makespan_s=plan.makespan_s,
        planned_cost_usd=plan.cost_usd,
        makespan_s=makespan_s(items),
        cost_usd=cost_usd(items, catalog),
        assignments=tuple(items),
        oom_tasks=oom,
        unknown_memory_tasks=unknown,
    )


def check_matches(plan: Plan, actual: Workflow, catalog: Catalog) -> None:
    if plan.workflow != actual.name:
        raise PlanMismatchError(f"plan is for workflow '{plan.workflow}', not '{actual.name}' ({actual.source})")
    planned = {a.task for a in plan.assignments}
    missing = [t.id for t in actual.tasks if t.id not in planned]
    extra = sorted(planned - set(actual.by_id))
    if missing or extra or len(plan.assignments) != len(planned):
        raise PlanMismatchError(
            f"plan does not assign each task of '{actual.name}' exactly once: "
            f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} unknown (e.g. {extra[:3]})"
        )
    known = [r.name for r in catalog.resources]
    for a in plan.assignments:
        if a.resource not in catalog.by_name:
            raise UnknownResourceError(a.resource, known)
