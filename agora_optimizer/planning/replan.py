"""Re-planning a run that drifted: new placements for the tasks not yet queued, around what has run.

Why one module of some 700 lines: the fleet's bookkeeping of leases and counts over time serves the
schedules below and nothing else.

When a run drifts from its plan (a task ends later than planned, fails, or is OOM-killed), the
executor asks :func:`replan` where the tasks it has not queued yet should go now. What has run
cannot move: a *done* task keeps its machine and its real times, a *running* one its machine, its
start and an expected end of ``max(now, start + planned duration)``. Every other task is
*pending*, free to move (a failed task to be retried is pending again; after an OOM kill it
reserves more memory, :class:`Pending`).

The machines of the plan that are leased already (those of done and running tasks, and those
whose planned lease has begun, where its type's ``count`` left room for it beside what ran: a
machine planned to follow one that ran late waited for it) stay available from when they are free
and from ``now`` on; a task on them waits for no boot but one under way, and one still held for
planned tasks is paid up to now (a failed attempt ran on it). Any other machine, a planned one not
leased yet or a new one the catalog allows, starts its lease no earlier than ``now`` (nor its
type's release) and boots first. Section 3 of the spec holds for what is planned beside what ran:
cores and memory per machine, parents' ends plus transfers, and at no instant more leases of a
type than its ``count`` (checked over time, so a machine whose lease has ended frees its place).
The count bounds the leases as the spec reads them from the tasks (first start minus boot to last
end; what is paid for a machine held idle or booting is cost, not a lease the checker sees), and
only what a lease gains is checked against the others: a run may have held more machines of a type
at once than its plan did (the executor holds a type to ``count x vcpus`` cores, whichever machine
ids run them), and that past forbids nothing to come. So a task always has a place: where every
candidate would break the count (on a type of count 1, a machine's lease would grow back over the
one before it, or on over the one after it), it goes on a leased machine after that machine's
first task, which the machine whose lease ends last can always take.

Two schedules are built and the better one for the plan's objective is kept (deadline and budget
first, then the objective's score):

- *kept*: every pending task on its planned machine, in the plan's order, as early as it can
  start now (the plan shifted; a task whose planned machine no longer fits it is searched for);
- *list*: the memory- and cost-aware list scheduler of
  :mod:`agora_optimizer.planning.list_schedule` over the pending tasks, in decreasing upward
  rank, each placed where it minimises ``alpha * makespan / T + (1 - alpha) * added cost / C``
  over the machines above, and left on its planned machine when that is not worse.

**A deadline at risk.** When the plan has a deadline and the better of the two still ends past it,
the run may buy time: the list schedule is built again with time alone as its objective, which
moves tasks to faster types and onto more machines within the catalog's counts, and, when that
keeps the deadline, with the weight on time halved toward the objective's (:data:`DEADLINE_STEPS`
times, a bisection) for the cheapest schedule that still keeps it; the best of them for the plan's
objective wins as before (deadline and budget first: a schedule that keeps the deadline by breaking
the budget by more does not). The answer
says so (:attr:`Replan.deadline_note`: ``deadline at risk: ...``, what moved and what it costs). Without
a deadline nothing of this runs: the re-plan keeps cost down as the objective says.

The list schedules are abandoned when they would pass ``time_limit_s``, so an answer comes within
about that time even on a slow machine (the kept schedule is a single pass). No Airflow, no I/O.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from agora_optimizer.errors import AgoraError, TooManyGpusError, UnplaceableTaskError
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment, Plan, machine_type
from agora_optimizer.model.workflow import Task, Workflow, parents_first
from agora_optimizer.planning.arrivals import Arrivals
from agora_optimizer.planning.bounds import fastest_runtime_s
from agora_optimizer.planning.list_schedule import GrowingLease, upward_ranks
from agora_optimizer.planning.problem import Bounds, Problem
from agora_optimizer.planning.timeline import SkippingTimeline

TIME_TOLERANCE_S = 1e-6
REPLAN_SLACK = 0.2  # [agora] replan_slack's default: how late (a share of its planned duration) a task may end
REPLAN_TIME_LIMIT_S = 0.5  # the executor's re-plans abandon their list schedules past it (the scheduler's loop waits)
DEADLINE_STEPS = (
    4  # a deadline at risk: halvings of the weight on time, after time alone, for the cheapest that keeps it
)
MOVES_NAMED = 5  # tasks a deadline note names
MACHINES_PER_TYPE = 2  # beyond it, a task tries the first-idle machines of a type (and its parents', its planned)
TIME_CHECK_EVERY = 32  # tasks placed between two looks at the clock


def late_by_s(start_s: float, end_s: float, ended_s: float, slack: float, min_late_s: float = 0.0) -> float | None:
    """How late a task planned from ``start_s`` to ``end_s`` ended (at ``ended_s``) when that is a drift that
    calls for a re-plan: later than planned by more than ``slack`` times its planned duration and more than
    ``min_late_s`` (the platform's jitter); None when it is not, or ``slack`` <= 0 (repair off). The executor's
    rule (:func:`agora_optimizer.executor.runs.repair.late_end`) and the simulated repairs' alike."""
    duration_s, late_s = end_s - start_s, ended_s - end_s
    if slack <= 0 or duration_s <= 0 or late_s <= max(slack * duration_s, min_late_s):
        return None
    return late_s


class ReplanError(AgoraError):
    """A run's state that cannot be re-planned: an unknown task or machine, a time in the future."""


@dataclass(frozen=True)
class Done:
    """The task ended at ``end_s`` on ``machine`` (its start, when known, keeps the lease's start)."""

    machine: str
    end_s: float
    start_s: float | None = None


@dataclass(frozen=True)
class Running:
    """The task runs on ``machine`` since ``start_s``; ``memory_bytes`` if it reserved more than planned."""

    machine: str
    start_s: float
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Pending:
    """Not queued yet, free to move; ``memory_bytes``: what a retry after an OOM kill reserves."""

    memory_bytes: int | None = None


TaskState = Done | Running | Pending


@dataclass(frozen=True)
class Replan:
    """The answer: new placements of the pending tasks, and what the whole run is predicted to be.

    ``fixed`` holds the done and running tasks as they ran or are expected to (a done task's real
    duration, not its planned one); ``moved_machine`` the pending tasks on another machine than
    planned, ``moved_resource`` those of them on another type. ``makespan_s`` and ``cost_usd``
    cover the whole run (leases already paid included); ``method`` says which schedule won, and
    ``list_wall_s`` how long the list schedule took (None: abandoned at the time limit).
    ``deadline_note``: with a deadline at risk, what the re-plan moved to keep it, and why ('' otherwise).
    """

    assignments: tuple[Assignment, ...]
    fixed: tuple[Assignment, ...]
    moved_machine: tuple[str, ...]
    moved_resource: tuple[str, ...]
    makespan_s: float
    cost_usd: float
    method: Literal["kept", "list", "deadline"]
    wall_s: float
    list_wall_s: float | None = None
    deadline_note: str = ""

    @property
    def schedule(self) -> tuple[Assignment, ...]:
        """Every task of the run: what ran, what runs, what is planned."""
        return self.fixed + self.assignments


@dataclass(eq=False)
class _Machine(GrowingLease):
    """One machine of the re-planned run.

    ``leased``: its lease began before now, so no new lease waits for it; ``floor_s`` is the
    earliest a task may start on it (now, or the end of its boot; a machine not leased yet boots
    after now, or after its type's release). ``lease_start_s`` and ``lease_end_s``: what is paid
    for it (a leased machine held for tasks to come up to now, one booting from its boot);
    ``span``: its lease as the spec reads it from the tasks on it, first start minus boot to last
    end (None with no task yet), which the type's ``count`` bounds.
    """

    id: str
    resource: Resource
    timeline: SkippingTimeline
    floor_s: float
    leased: bool
    lease_start_s: float | None = None
    lease_end_s: float = 0.0
    span: tuple[float, float] | None = None

    def take(self, start_s: float, end_s: float, cores: int, memory_bytes: int, gpus: int = 0) -> None:
        self.timeline.add(start_s, end_s, cores, memory_bytes, gpus)
        self.lease_start_s, self.lease_end_s = self.lease_after(start_s, end_s)
        self.span = self.span_after(start_s, end_s)

    def span_after(self, start_s: float, end_s: float) -> tuple[float, float]:
        """Its span once it also holds a task over [start_s, end_s)."""
        first = start_s - self.resource.boot_s
        return (first, end_s) if self.span is None else (min(self.span[0], first), max(self.span[1], end_s))

    @property
    def first_start_s(self) -> float:
        """The earliest a task may start on it without its span beginning sooner (its floor, with no task)."""
        return self.floor_s if self.span is None else self.span[0] + self.resource.boot_s


class _Fleet:
    """The machines of one re-planned schedule: leased ones, planned ones not leased yet, new ones."""

    def __init__(self, catalog: Catalog, now_s: float, min_task_memory_bytes: int) -> None:
        self.catalog = catalog
        self.now_s = now_s
        self.min_task_memory_bytes = min_task_memory_bytes
        self.by_id: dict[str, _Machine] = {}
        self.active: dict[str, list[_Machine]] = {r.name: [] for r in catalog.resources}
        self.spare: dict[str, dict[str, None]] = {r.name: {} for r in catalog.resources}  # ordered sets of ids
        self.next_index: dict[str, int] = {r.name: 0 for r in catalog.resources}

    def machine(self, machine_id: str, leased: bool) -> _Machine:
        """The machine ``machine_id`` (``TYPE#N`` of a catalog type), made on first use."""
        found = self.by_id.get(machine_id)
        if found is not None:
            found.leased = found.leased or leased
            if leased:
                found.floor_s = self.now_s
            return found
        resource = self.catalog.by_name.get(machine_type(machine_id))
        head, _, index = machine_id.rpartition("#")
        if resource is None or not index.isdigit():
            raise ReplanError(
                f"machine '{machine_id}' is not TYPE#N of a resource type of catalog {self.catalog.source}"
            )
        floor = self.now_s if leased else self.boot_floor_s(resource)
        timeline = SkippingTimeline(
            resource.vcpus, resource.memory_bytes, self.min_task_memory_bytes, gpus=resource.gpus
        )
        made = self.by_id[machine_id] = _Machine(machine_id, resource, timeline, floor, leased)
        self.next_index[head] = max(self.next_index[head], int(index) + 1)
        return made

    def boot_floor_s(self, resource: Resource) -> float:
        """The earliest a task starts on a machine of ``resource`` not leased yet: booted from now (or its release)."""
        return max(self.now_s, resource.release_s) + resource.boot_s

    def unlease(self, machine: _Machine) -> None:
        """``machine``, held for leased with nothing on it yet, is not: it boots when its lease begins."""
        machine.leased, machine.floor_s = False, self.boot_floor_s(machine.resource)

    def empty(self, resource: Resource) -> _Machine:
        """A machine of ``resource`` with no lease: the first planned one not leased, else a new id."""
        for machine_id in self.spare[resource.name]:
            return self.by_id[machine_id]
        machine_id = f"{resource.name}#{self.next_index[resource.name]}"
        self.spare[resource.name][machine_id] = None
        return self.machine(machine_id, leased=False)

    def take(
        self, machine: _Machine, start_s: float, end_s: float, cores: int, memory_bytes: int, gpus: int = 0
    ) -> None:
        if machine.lease_start_s is None:
            self.active[machine.resource.name].append(machine)
            self.spare[machine.resource.name].pop(machine.id, None)
        machine.take(start_s, end_s, cores, memory_bytes, gpus)

    def count_allows(self, machine: _Machine, start_s: float, end_s: float) -> bool:
        """Whether ``machine``'s span, grown to hold [start_s, end_s), keeps its type within ``count``.

        Only what the span gains is checked, against the other spans of its type: its span as it is
        stays as it ran (a run may have held more machines of a type at once than the plan did: the
        executor holds a type to ``count x vcpus`` cores, whichever machines run them), so the machine
        whose span ends last may always grow past its end.
        """
        limit = machine.resource.count
        others = [m.span for m in self.active[machine.resource.name] if m is not machine and m.span is not None]
        if limit is None or len(others) < limit:
            return True
        first, last = machine.span_after(start_s, end_s)
        gained = [(first, last)] if machine.span is None else [(first, machine.span[0]), (machine.span[1], last)]
        return all(_most_at_once(others, a, b) < limit for a, b in gained if b - a > TIME_TOLERANCE_S)

    def cost_usd(self) -> float:
        return sum(
            m.resource.lease_cost_usd(m.lease_end_s - m.lease_start_s)
            for m in self.by_id.values()
            if m.lease_start_s is not None
        )


def _most_at_once(spans: list[tuple[float, float]], start_s: float, end_s: float) -> int:
    """The most of ``spans`` that hold one instant of [start_s, end_s)."""
    events: list[tuple[float, int]] = []
    for first, last in spans:
        if first < end_s - TIME_TOLERANCE_S and last > start_s + TIME_TOLERANCE_S:
            events += [(max(first, start_s), 1), (min(last, end_s), -1)]
    most = held = 0
    for _, step in sorted(events):  # an end sorts before a start at the same instant
        held += step
        most = max(most, held)
    return most


@dataclass
class _Run:
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


def replan(
    workflow: Workflow,
    catalog: Catalog,
    plan: Plan,
    state: Mapping[str, TaskState],
    now_s: float,
    *,
    leased: Collection[str] | None = None,
    scale: Bounds | None = None,
    time_limit_s: float = 0.8,
) -> Replan:
    """New placements for the pending tasks of a run of ``plan`` at plan time ``now_s``.

    ``state``: each task's :class:`Done`, :class:`Running` or :class:`Pending` (a task not in it is
    pending). ``leased``: the plan's machines leased already (default: those of done and running
    tasks, and those whose planned lease began by ``now_s`` where their type's count left room for
    them beside what ran). ``scale``: the objective's makespan
    and cost scales (:func:`agora_optimizer.planning.problem.lower_bounds`; they take a second or more on a
    thousand tasks, so the default is the plan's own makespan and cost). ``time_limit_s``: the list
    schedule is abandoned beyond it, and the kept one answers.
    """
    started = time.perf_counter()
    run = _prepare(workflow, catalog, plan, state, now_s, leased)
    scale = scale or Bounds(max(plan.makespan_s, 1e-9), max(plan.cost_usd, 1e-12))
    problem = Problem(workflow, catalog, plan.objective, scale)
    alpha = {"time": 1.0, "cost": 0.0, "balanced": plan.objective.alpha}[plan.objective.kind]
    rank = upward_ranks(workflow, catalog)
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    pending = [t for t in workflow.topological_order if isinstance(state.get(t, Pending()), Pending)]

    never = float("inf")
    kept_order = _parents_first(
        workflow, pending, lambda t: (run.planned[t].start_s if t in run.planned else never, position[t])
    )
    best = _schedule(run, kept_order, rank, alpha, scale, keep=True, deadline=None)
    assert best is not None  # no deadline: always completes
    method: Literal["kept", "list", "deadline"] = "kept"
    list_order = _parents_first(workflow, pending, lambda t: (-rank[t], position[t]))
    list_started = time.perf_counter()
    listed = _schedule(run, list_order, rank, alpha, scale, keep=False, deadline=started + time_limit_s)
    list_wall_s = None if listed is None else time.perf_counter() - list_started
    if listed is not None and problem.rank(listed[1], listed[2]) < problem.rank(best[1], best[2]):
        best, method = listed, "list"
    deadline_note = ""
    deadline_s = plan.objective.deadline_s
    if deadline_s is not None and best[1] > deadline_s + TIME_TOLERANCE_S:
        kept_cost, tried = best, 0
        low, high = alpha, 1.0  # the weight on time: ``high`` keeps the deadline (if anything does), ``low`` not
        for step in range(DEADLINE_STEPS + 1):
            weight = high if step == 0 else (low + high) / 2
            if weight <= alpha:
                break  # a time plan: its list schedule was all on time already
            rushed = _schedule(run, list_order, rank, weight, scale, keep=False, deadline=started + time_limit_s)
            if rushed is None:
                break  # the time limit: the best so far answers
            tried += 1
            if problem.rank(rushed[1], rushed[2]) < problem.rank(best[1], best[2]):
                best, method = rushed, "deadline"
            if problem.excess(rushed[1], rushed[2]) > 0:
                if step == 0:
                    break  # time alone cannot keep it: less weight on time will not
                low = weight
            else:
                high = weight
        deadline_note = _deadline_note(deadline_s, kept_cost, best, run.planned, catalog, tried)

    assignments, makespan, cost = best
    moved = [a for a in assignments if a.task not in run.planned or run.planned[a.task].machine != a.machine]
    return Replan(
        assignments=tuple(assignments),
        fixed=tuple(run.fixed),
        moved_machine=tuple(a.task for a in moved),
        moved_resource=tuple(
            a.task for a in moved if a.task not in run.planned or run.planned[a.task].resource != a.resource
        ),
        makespan_s=makespan,
        cost_usd=cost,
        method=method,
        wall_s=time.perf_counter() - started,
        list_wall_s=list_wall_s,
        deadline_note=deadline_note,
    )


_Schedule = tuple[list[Assignment], float, float]  # (assignments, makespan, cost)


def _deadline_note(
    deadline_s: float,
    before: _Schedule,
    after: _Schedule,
    planned: Mapping[str, Assignment],
    catalog: Catalog,
    tried: int,
) -> str:
    """In words: the run at risk of missing ``deadline_s`` as re-planned to keep its cost (``before``), and
    what the schedule chosen (``after``, of ``tried`` schedules with more weight on time) moved to keep it."""
    at_risk = f"deadline at risk: the run ends at {before[1]:.1f} s, past its deadline {deadline_s:.1f} s"
    if after is before and not tried:
        return f"{at_risk}; the re-plan's time limit left no time to look for faster types or more machines"
    if after is before:
        return f"{at_risk}; no faster type or further machine within the catalog's counts and budget keeps it"
    was = {a.task: a for a in before[0]}
    speed = {r.name: r.speed for r in catalog.resources}
    faster = [a for a in after[0] if a.task in was and speed[a.resource] > speed[was[a.task].resource]]
    named = ", ".join(f"{a.task} {was[a.task].resource} -> {a.resource}" for a in faster[:MOVES_NAMED])
    more = f" and {len(faster) - MOVES_NAMED} more" if len(faster) > MOVES_NAMED else ""
    machines_before = {a.machine for a in before[0]} | {a.machine for a in planned.values()}
    added = sorted({a.machine for a in after[0]} - machines_before)
    kept = "keeps it" if after[1] <= deadline_s + TIME_TOLERANCE_S else "comes closer"
    moves = [f"{len(faster)} tasks moved to faster types ({named}{more})"] if faster else []
    more_machines = f" and {len(added) - MOVES_NAMED} more" if len(added) > MOVES_NAMED else ""
    moves += [f"{len(added)} more machines ({', '.join(added[:MOVES_NAMED])}{more_machines})"] if added else []
    return (
        f"{at_risk}; {', '.join(moves) or 'tasks moved to other machines'}"
        + f"; it now ends at {after[1]:.1f} s ({kept}) for {after[2]:.4f} USD, {after[2] - before[2]:+.4f} USD"
    )


def _prepare(
    workflow: Workflow,
    catalog: Catalog,
    plan: Plan,
    state: Mapping[str, TaskState],
    now_s: float,
    leased: Collection[str] | None,
) -> _Run:
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
    run = _Run(workflow, catalog, plan, now_s, state, set(leased), planned, options, reserve, leased_told=told)
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


def _parents_first(workflow: Workflow, tasks: list[str], key: Callable[[str], tuple[float, int]]) -> list[str]:
    """``tasks`` by ``key``, but never a task before a parent among them (Kahn's algorithm on a heap)."""
    among = set(tasks)
    return parents_first(
        {t: sum(1 for e in workflow.parents[t] if e.parent in among) for t in tasks},
        lambda task_id: (edge.child for edge in workflow.children[task_id]),
        key,
    )


def _base_fleet(run: _Run) -> tuple[_Fleet, dict[str, tuple[_Machine, float]]]:
    """A fleet holding what ran and what runs, with the plan's machines known by id."""
    memories = [run.reserve[t] for t in run.options] or [0]
    fleet = _Fleet(run.catalog, run.now_s, min(memories))
    ends: dict[str, tuple[_Machine, float]] = {}
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


_Choice = tuple[tuple[float, float, float], _Machine, float, float]  # (key, machine, start, end)


def _schedule(
    run: _Run,
    order: list[str],
    rank: dict[str, float],
    alpha: float,
    scale: Bounds,
    keep: bool,
    deadline: float | None,
) -> tuple[list[Assignment], float, float] | None:
    """Place ``order``'s tasks one by one; (assignments, makespan, cost), or None past ``deadline``.

    ``keep``: each task on its planned machine (searched for only where that cannot be); else each
    where it scores best, its planned machine winning ties.
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
        place = _Placer(fleet, task, memory, inputs, estimated, tail, weights, planned_machine)
        if keep and planned_machine is not None:
            place.consider(planned_machine)
        if place.best is None:
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
    """

    def __init__(
        self,
        fleet: _Fleet,
        task: Task,
        memory_bytes: int,
        inputs: list[tuple[_Machine, float, float]],
        estimated_makespan_s: float,
        tail_s: float,
        weights: tuple[float, float],  # (alpha / T, (1 - alpha) / C)
        planned: _Machine | None,
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
        self.best: _Choice | None = None
        self.kept: _Choice | None = None

    def hopeless(self, resource: Resource) -> bool:
        """Whether no machine of ``resource`` can beat the best so far."""
        return self._beaten(self.inputs_ready_s + resource.runtime_s(self.task)) and (
            self.planned is None or self.planned.resource is not resource
        )

    def consider(self, machine: _Machine, not_before_s: float = 0.0) -> None:
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
        time_part = self.time_weight * max(self.estimated_makespan_s, end + self.tail_s)
        added = machine.added_cost_usd(start, end)
        choice = ((time_part + self.cost_weight * added, end, added), machine, start, end)
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
        if kept is not None and best is not None and kept[0][0] <= best[0][0] + 1e-12:
            return kept
        return best

    def _beaten(self, end_s: float) -> bool:
        """Whether a machine on which the task would end at ``end_s`` (or later) cannot beat the best."""
        if self.best is None:
            return False
        (score, best_end, _), *_ = self.best
        time_part = self.time_weight * max(self.estimated_makespan_s, end_s + self.tail_s)
        if time_part > score + 1e-12:
            return True
        return self.cost_weight == 0.0 and time_part >= score - 1e-12 and end_s > best_end + TIME_TOLERANCE_S


_LEASE_END = operator.attrgetter("lease_end_s")


def _candidates(
    fleet: _Fleet, resource: Resource, inputs: list[tuple[_Machine, float, float]], planned: _Machine | None
) -> list[_Machine]:
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
