"""The order a plan gives each planned machine, and when a held task may start on it (pure: no I/O, no clock).

A plan places every task on a machine (``TYPE#N``) with a planned start and end. The executor
runs a machine's tasks in that order, which is what the plan's makespan and lease cost assume;
Airflow alone would start a task as soon as its upstream tasks are done, on whichever slot came
first, and two tasks the plan put one after the other could then share a machine the plan sized
for one of them.

**The rule.** A machine runs its tasks in the planned order: by planned start, then planned end
(then task id, so the order is total). A task whose turn it is (every task before it on its machine
has started, or will never come) starts as soon as it fits on the machine (the type's cores and
memory, counting what runs there now). A task whose turn it is not may start *earlier than
planned* when it fits on its machine now and does not delay the machine's next planned task that
has not started, N: either N would still fit beside it (what runs there, plus this task, plus N),
or this task is planned to end before N's planned start (plan clock now + its planned duration
<= N's planned start). Otherwise it is held.

**A machine's lease opens as planned.** Starting a machine's first task opens its lease (a local pool's
machine is priced from its first task's start). Two rules hold that start back:

- *The type's count*: a run never has more machines of a type open at once than the catalog's
  ``count`` (a plan may release a machine and lease another of its type later, ``TYPE#0`` then
  ``TYPE#1``: the second opens once the first has no task running or to come).
- *The planned time*, for plans that weigh cost (objective ``cost`` or ``balanced``) on a priced type
  whose lease starts with its first task (not a SLURM allocation, asked for when its first job
  arrives): the lease opens no earlier than its planned start on the plan clock. Started as soon as
  its upstream tasks were done, an expensive machine the plan opened late would be held from the run's
  start to its last task's end, longer than the plan priced it. It may open sooner once nothing outside
  it can hold it open (:func:`may_open_early`): every task on another machine that its tasks depend on
  has ended, and every machine of its type planned to open before it has opened. A run ahead of its
  plan then goes on ahead, for the same lease length.

Neither holds a machine that has opened. A valid plan cannot deadlock under them: a machine of a type
planned to open after another closes has no task its predecessor's tasks depend on.

Two guards keep a plan from ever stopping a DAG:

- A task that will never come (Airflow marked it skipped, upstream_failed, failed or removed, or
  it already succeeded) does not hold the tasks behind it (:meth:`RunBook.settle`).
- A task that Airflow keeps back (seen ``scheduled``, not queued, at two reads of its states in a
  row: an Airflow pool or ``max_active_tasks`` that a held task fills) does not hold the tasks
  behind it either: the held task would otherwise keep the slot it waits for.
- A task held for ``hold_max_s`` (``[agora] machine_hold_s``) starts all the same, whatever the
  order says (a plan that no longer matches its DAG, a tie the order could not break).

A valid plan cannot deadlock under the rule: a task planned earlier on a machine never depends on
one planned later (a child starts after its parent ends), so the order is consistent with the
DAG's. The plan clock of a run starts when the executor sees the run's first planned task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.instances import split_instance
from agora_optimizer.model.plan import Assignment, Objective, Plan, machine_type
from agora_optimizer.planning.leases import opening_before, opens_on_time, outside_parents

TIME = Objective("time")

NEVER_COMES = frozenset({"skipped", "upstream_failed", "failed", "removed", "success"})
"""Airflow task states after which a task does not come to the executor again (for this try)."""
KEPT_BACK = "scheduled"  # ready, but not handed to an executor: seen twice in a row, it is kept back


def priority_weights(starts: Mapping[str, float]) -> dict[str, int]:
    """Each unmapped task's priority weight (``starts``: each planned task's start, by plan name): the number of
    tasks the plan starts at or after it (the first has the most, the last 1), ties broken by task id. The
    cluster policy gives a planned DAG's tasks these; a repair gives the tasks Airflow has not queued yet those of
    its order (:func:`~agora_optimizer.executor.airflow_db.reprioritize`)."""
    unmapped = sorted((start_s, name) for name, start_s in starts.items() if split_instance(name)[1] < 0)
    return {name: len(unmapped) - rank for rank, (_, name) in enumerate(unmapped)}


@dataclass(frozen=True)
class PlannedTask:
    """One task of a planned machine: when the plan starts and ends it, and what it reserves."""

    task_id: str
    machine: str
    start_s: float
    end_s: float
    cores: int
    memory_bytes: int
    gpus: int = 0

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end_s - self.start_s)


@dataclass(frozen=True)
class MachinePlan:
    """One planned machine: its type's capacity and its tasks in the planned order."""

    machine: str
    resource: str
    cores: int
    memory_bytes: int
    tasks: tuple[PlannedTask, ...]
    gpus: int = 0  # the type's (section 5 of the spec)
    count: int | None = None  # the type's: machines of it open at once (None: no limit)
    opens_on_time: bool = False  # its lease opens no earlier than its planned start (see the module's docstring)

    @property
    def planned_start_s(self) -> float:
        return min((task.start_s for task in self.tasks), default=0.0)

    @property
    def planned_end_s(self) -> float:
        return max((task.end_s for task in self.tasks), default=0.0)

    def position(self, task_id: str) -> int:
        return next(index for index, task in enumerate(self.tasks) if task.task_id == task_id)


@dataclass(frozen=True)
class MachineOrder:
    """Every planned machine of one plan, and which machine each task is on; ``categories``: each task's category
    as the plan's workflow names it (empty when the plan was saved without it: a task's stem serves then);
    ``fixed_memory``: the tasks whose reservation the workflow declares or records, which memory learned during
    the run never lowers (:data:`~agora_optimizer.predict.memory_in_run.LOWERED_SOURCES`); ``parents``: each
    task's upstream tasks in that workflow (empty when unknown: no machine then opens before its planned start);
    ``starts``: every task's planned start in the plan, those on no machine of ``resources`` too (the cluster
    policy's priority weights come from these: :func:`priority_weights`; empty in a repair's order)."""

    machines: Mapping[str, MachinePlan]
    by_task: Mapping[str, PlannedTask]
    categories: Mapping[str, str] = field(default_factory=dict)
    fixed_memory: frozenset[str] = frozenset()
    parents: Mapping[str, frozenset[str]] = field(default_factory=dict)
    objective: Objective = TIME  # the plan's: a repair's order keeps it (whether priced machines open on time)
    starts: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_plan(cls, plan: Plan, resources: Mapping[str, Resource]) -> MachineOrder:
        """The order of ``plan``; a machine whose type is not in ``resources`` is left out (its tasks run unplanned)."""
        order = cls.from_assignments(plan.assignments, resources, plan.objective)
        return replace(order, starts={a.task: a.start_s for a in plan.assignments})

    @classmethod
    def from_assignments(
        cls, assignments: Iterable[Assignment], resources: Mapping[str, Resource], objective: Objective = TIME
    ) -> MachineOrder:
        """The order of a schedule: a plan's assignments, or a repaired run's (what ran and what is re-planned);
        ``objective``: the plan's (whether its priced machines open on time)."""
        grouped: dict[str, list[PlannedTask]] = {}
        for a in assignments:
            if not a.machine or machine_type(a.machine) not in resources:
                continue
            task = PlannedTask(a.task, a.machine, a.start_s, a.end_s, a.cores, a.memory_bytes, a.gpus)
            grouped.setdefault(a.machine, []).append(task)
        machines: dict[str, MachinePlan] = {}
        for machine, tasks in grouped.items():
            kind = resources[machine_type(machine)]
            ordered = tuple(sorted(tasks, key=lambda t: (t.start_s, t.end_s, t.task_id)))
            on_time = opens_on_time(kind, objective)
            machines[machine] = MachinePlan(
                machine, kind.name, kind.vcpus, kind.memory_bytes, ordered, kind.gpus, kind.count, on_time
            )
        by_task = {task.task_id: task for plan_ in machines.values() for task in plan_.tasks}
        return cls(machines, by_task, objective=objective)


@dataclass(frozen=True)
class ReplacedMachine:
    """A planned machine its backend could not give (``open_lease`` refused, ``reason`` says why): its
    tasks ran without it, on their resource's pool, as tasks without a machine do."""

    dag_id: str
    run_id: str
    machine: str
    resource: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """Whether a held task may start now, and why (for the log)."""

    start: bool
    reason: str


@dataclass
class RunBook:
    """Which tasks of one DAG run have started and ended on their planned machines.

    ``origin_s`` is the executor's monotonic clock when it saw the run's first planned task: the
    run's plan clock is ``now_s - origin_s``. A task that started and ended is *done*; one that
    never started and will not come (:meth:`settle`) is *gone*; either no longer holds the tasks
    behind it. A done task is *final* once Airflow holds it in a :data:`NEVER_COMES` state (or, for
    a run whose states were never read, once it ended): a failed try awaiting its retry will run on
    the machine again. A machine whose every task is final or gone has ended.
    """

    order: MachineOrder
    origin_s: float
    plan_version: str = ""  # the plan the run's tasks were placed by (a repair changes ``order``, not this)
    started: set[str] = field(default_factory=set)
    ended: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    final: set[str] = field(default_factory=set)
    answered: bool = False  # Airflow's states of the run were read at least once
    scheduled: set[str] = field(default_factory=set)  # seen ``scheduled`` at the last read of the states
    kept_back: set[str] = field(default_factory=set)  # seen ``scheduled`` at two reads in a row

    started_s: dict[str, float] = field(default_factory=dict)  # plan clock of each started task's release
    ended_s: dict[str, float] = field(default_factory=dict)  # and of its end
    starts: dict[str, float] = field(default_factory=dict)  # each task's start as its weight in Airflow has it
    weights: dict[str, int] = field(default_factory=dict)  # and that weight (agora's), once re-ordered

    def reordered(self, order: MachineOrder) -> dict[str, tuple[int, int]]:
        """Put ``order`` (a repair's) in force; returns the priority weights that change for the tasks not started
        (task id -> (weight now, new weight)): the policy gave the plan's (:func:`priority_weights` of its
        starts), each repair gives its order's (a task it does not place keeps its start)."""
        if not self.weights:
            self.starts = dict(self.order.starts) or {t: planned.start_s for t, planned in self.order.by_task.items()}
            self.weights = priority_weights(self.starts)
        self.order = order
        self.starts.update({t: planned.start_s for t, planned in order.by_task.items()})
        new = priority_weights(self.starts)
        changed = {
            t: (self.weights[t], weight)
            for t, weight in new.items()
            if t in self.weights and weight != self.weights[t] and t not in self.started
        }
        self.weights.update({t: weight for t, (_, weight) in changed.items()})
        return changed

    def clock_s(self, now_s: float) -> float:
        """The run's plan clock at the executor's monotonic ``now_s``."""
        return now_s - self.origin_s

    def start(self, task_id: str, at_s: float | None = None) -> None:
        """The task was let go to its machine (a retry starts again: it is running once more);
        ``at_s``: the plan clock then."""
        self.started.add(task_id)
        self.ended.discard(task_id)
        self.gone.discard(task_id)
        self.final.discard(task_id)
        self.ended_s.pop(task_id, None)
        if at_s is not None:
            self.started_s[task_id] = at_s

    def end(self, task_id: str, at_s: float | None = None) -> bool:
        """The task's process ended (at plan clock ``at_s``): its machine's cores and memory are free again.
        True the first time for this start (a job's status says it ended at several polls)."""
        if task_id not in self.started or task_id in self.ended:
            return False
        self.ended.add(task_id)
        if at_s is not None:
            self.ended_s[task_id] = at_s
        return True

    def ended_again(self, task_id: str, at_s: float) -> None:
        """The task ended for good at plan clock ``at_s``, later than its planned machine saw it end: its try
        re-ran off the machine (an interrupted spot job's re-run on its fallback). Only for a task ended here."""
        if task_id in self.ended_s:
            self.ended_s[task_id] = at_s

    def settle(self, states: Mapping[str, str]) -> None:
        """Airflow's task states (by plan name): a task in a :data:`NEVER_COMES` state is done (if it started)
        or gone (if it never did), and so is a planned task the run does not have (a plan older than its
        DAG, or a mapped task's instance beyond its run's width). A mapped task's planned instance whose
        task the run has not expanded yet is still to come. A task the book counts as running stays
        running until :meth:`end`."""
        if states:  # no answer at all says nothing about which tasks the run has
            self.answered = True
            for task_id in self.order.by_task.keys() - states.keys() - self.started:
                if not _to_expand(task_id, states):
                    self.gone.add(task_id)
        scheduled = {t for t, state in states.items() if state == KEPT_BACK and t in self.order.by_task}
        self.kept_back = (scheduled & self.scheduled) - self.started
        self.scheduled = scheduled
        for task_id, state in states.items():
            if task_id not in self.order.by_task or state not in NEVER_COMES:
                continue
            if task_id not in self.started:
                self.gone.add(task_id)
            else:
                self.final.add(task_id)

    def running(self, machine: str) -> list[PlannedTask]:
        plan = self.order.machines.get(machine)
        if plan is None:
            return []
        return [t for t in plan.tasks if t.task_id in self.started and t.task_id not in self.ended]

    def waiting(self, machine: str) -> list[PlannedTask]:
        """The machine's tasks that have neither started nor gone, in the planned order."""
        plan = self.order.machines.get(machine)
        if plan is None:
            return []
        return [t for t in plan.tasks if t.task_id not in self.started and t.task_id not in self.gone]

    def machine_ended(self, machine: str) -> bool:
        """Every task of the machine is final or gone: its lease may be released (a failed try whose retry
        will come keeps it). A machine the order no longer has (a repair moved its tasks away) has ended too."""
        plan = self.order.machines.get(machine)
        return plan is None or all(self.over(t.task_id) for t in plan.tasks)

    def awaits_word(self) -> bool:
        """A machine whose tasks have all ended waits only for Airflow to say that no retry will come."""
        return any(
            all(t.task_id in self.gone or t.task_id in self.ended for t in plan.tasks) and not self.machine_ended(m)
            for m, plan in self.order.machines.items()
        )

    def over(self, task_id: str) -> bool:
        """The task is final or gone: no try of it will run again."""
        if task_id in self.gone:
            return True
        return task_id in self.ended and (task_id in self.final or not self.answered)

    def ended_machines(self) -> list[str]:
        return [machine for machine in self.order.machines if self.machine_ended(machine)]

    def opened(self, machine: str) -> bool:
        """A task of the machine has started: its lease is open (or was, and has closed)."""
        plan = self.order.machines.get(machine)
        return plan is not None and any(t.task_id in self.started for t in plan.tasks)

    def open_machines(self, resource: str) -> list[str]:
        """The run's machines of ``resource`` that have opened and still have a task running or to come."""
        return [
            name
            for name, plan in self.order.machines.items()
            if plan.resource == resource
            and self.opened(name)
            and any(t.task_id not in self.ended and t.task_id not in self.gone for t in plan.tasks)
        ]


def _to_expand(name: str, states: Mapping[str, str]) -> bool:
    """``name`` is a mapped task's instance whose task Airflow has not expanded yet (its one task
    instance of map index -1 is still to come): the run will have it if its width reaches it."""
    task_id, index = split_instance(name)
    return index >= 0 and task_id in states and states[task_id] not in NEVER_COMES


def _fits(plan: MachinePlan, tasks: Iterable[PlannedTask]) -> bool:
    tasks = list(tasks)
    return (
        sum(t.cores for t in tasks) <= plan.cores
        and sum(t.memory_bytes for t in tasks) <= plan.memory_bytes
        and sum(t.gpus for t in tasks) <= plan.gpus
    )


def may_start(book: RunBook, task_id: str, now_s: float, held_s: float, hold_max_s: float) -> Decision:
    """Whether the held task ``task_id`` may start now under the module's rule.

    ``now_s`` is the executor's monotonic clock, ``held_s`` how long the task has been held,
    ``hold_max_s`` the bound past which it starts whatever the order says.
    """
    task = book.order.by_task.get(task_id)
    if task is None:
        return Decision(True, "not on a planned machine")
    if held_s >= hold_max_s:
        return Decision(True, f"held {held_s:.0f} s, the most [agora] machine_hold_s ({hold_max_s:g} s) allows")
    plan = book.order.machines[task.machine]
    clock_s = now_s - book.origin_s
    if not book.opened(task.machine):
        closed = _lease_closed(book, plan, clock_s)
        if closed is not None:
            return closed
    running = book.running(task.machine)
    if not _fits(plan, [*running, task]):
        names = ", ".join(t.task_id for t in running)
        return Decision(False, f"{task.machine} is full ({names} run there)")
    ahead = [
        t
        for t in book.waiting(task.machine)
        if plan.position(t.task_id) < plan.position(task_id) and t.task_id not in book.kept_back
    ]
    if not ahead:
        return Decision(True, f"its turn on {task.machine}")
    following = ahead[0]
    if _fits(plan, [*running, task, following]):
        return Decision(True, f"early on {task.machine}: {following.task_id}, planned before it, still fits beside it")
    if clock_s + task.duration_s <= following.start_s:
        return Decision(
            True,
            f"early on {task.machine}: planned to end at {clock_s + task.duration_s:.1f} s, before "
            f"{following.task_id} is planned to start ({following.start_s:.1f} s)",
        )
    return Decision(False, f"waits for {following.task_id}, planned before it on {task.machine}")


def _lease_closed(book: RunBook, plan: MachinePlan, clock_s: float) -> Decision | None:
    """Why the machine's lease may not open yet (its type's count is taken, or it is planned to open later), or None."""
    if plan.count is not None:
        others = [name for name in book.open_machines(plan.resource) if name != plan.machine]
        if len(others) >= plan.count:
            return Decision(
                False,
                f"{plan.machine} waits for a machine of {plan.resource} to close (count {plan.count}: "
                f"{', '.join(others)} open)",
            )
    if plan.opens_on_time and clock_s < plan.planned_start_s and not may_open_early(book, plan):
        return Decision(False, f"{plan.machine}'s lease is planned to open at {plan.planned_start_s:.1f} s")
    return None


def may_open_early(book: RunBook, plan: MachinePlan) -> bool:
    """Whether the machine may open before its planned start: nothing outside it can hold its lease open longer
    than planned (every task on another machine that its tasks depend on is over: ended with no retry to come,
    or will not come), and it takes no other machine's turn (every machine of its type planned to open before
    it has opened, or ended). False where the plan's workflow, and so the tasks' parents, is unknown."""
    parents = book.order.parents
    if not parents:
        return False
    outside = outside_parents([task.task_id for task in plan.tasks], parents)
    if not all(book.over(parent) for parent in outside):
        return False
    openings = {name: (other.resource, other.planned_start_s) for name, other in book.order.machines.items()}
    return all(book.opened(name) or book.machine_ended(name) for name in opening_before(plan.machine, openings))
