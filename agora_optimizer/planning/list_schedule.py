"""Memory-aware, cost-aware list scheduling (the HEFT family, with machine packing).

Tasks are taken in decreasing upward rank (Topcuoglu et al., IEEE TPDS 2002), each
placed on the machine and start time that minimise
``alpha * est_makespan / T_lb + (1 - alpha) * added_cost / C_lb``, where a machine is
an existing lease of any feasible type or a new one where the type's ``count``
allows. Several tasks share a machine whenever their cores, memory and GPUs fit at every
instant (insertion into the machine's usage profile).

On a spot type (``docs/spot.md``) a place's added cost includes the task's expected re-run cost
(its chance of an interruption times its re-run's lease on the fallback type), and under latest
ends (a deadline) the place counts as ending when a re-run would, were the task interrupted at
the last moment: its end, then the fallback's boot, its inputs sent again and its run there. A task
without that slack stays on demand.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.arrivals import Arrivals
from agora_optimizer.planning.bounds import fastest_runtime_s, feasible_types
from agora_optimizer.planning.spot import expected_rerun_cost_usd, fallback_s
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.timeline import MachineTimeline, SkippingTimeline
from agora_optimizer.planning.window_bound import timing_types

INSERTION_WINDOW = 48  # with pruned candidates (very large workflows), gaps are searched this far back
STOP_CHECK_TASKS = 64  # with a ``stop`` budget, the clock is read once per this many tasks placed


class GrowingLease:
    """A machine's lease as tasks are added to it (``resource``, ``lease_start_s``: None before its first
    task, ``lease_end_s``): what it becomes, and what that adds to its cost."""

    resource: Resource
    lease_start_s: float | None
    lease_end_s: float

    def lease_after(self, start_s: float, end_s: float) -> tuple[float, float]:
        """Its lease once it also holds a task over [start_s, end_s) (a lease begins with the boot)."""
        boot = self.resource.boot_s
        if self.lease_start_s is None:
            return start_s - boot, end_s
        return min(self.lease_start_s, start_s - boot), max(self.lease_end_s, end_s)

    def added_cost_usd(self, start_s: float, end_s: float) -> float:
        first, last = self.lease_after(start_s, end_s)
        old = 0.0 if self.lease_start_s is None else self.resource.lease_cost_usd(self.lease_end_s - self.lease_start_s)
        return self.resource.lease_cost_usd(last - first) - old


@dataclass(eq=False)
class PlannedMachine(GrowingLease):
    """A machine of the schedule being built: its type, its usage over time and its lease so far."""

    id: str
    resource: Resource
    timeline: MachineTimeline
    lease_start_s: float | None = None
    lease_end_s: float = 0.0
    tasks: list[str] = field(default_factory=list)
    lease_cost_usd: float = 0.0  # its lease's cost so far, kept by TypePools.place (asked for every candidate)

    def added_cost_usd(self, start_s: float, end_s: float) -> float:
        first, last = self.lease_after(start_s, end_s)
        return self.resource.lease_cost_usd(last - first) - self.lease_cost_usd


class IdlePool:
    """A type's machines in the order they were made, and in the order they fall idle (lease end,
    then the order made: what sorting the machines by lease end gives), kept as leases grow."""

    def __init__(self) -> None:
        self.machines: list[PlannedMachine] = []
        self._by_end: list[tuple[float, int]] = []  # (lease end, index in machines), sorted
        self._index: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.machines)

    def __iter__(self) -> Iterator[PlannedMachine]:
        return iter(self.machines)

    def add(self, machine: PlannedMachine) -> None:
        index = self._index[id(machine)] = len(self.machines)
        self.machines.append(machine)
        insort(self._by_end, (machine.lease_end_s, index))

    def moved(self, machine: PlannedMachine, old_end_s: float) -> None:
        """``machine``'s lease, which ended at ``old_end_s``, now ends at its ``lease_end_s``."""
        index = self._index[id(machine)]
        del self._by_end[bisect_left(self._by_end, (old_end_s, index))]
        insort(self._by_end, (machine.lease_end_s, index))

    def idle_first(self, count: int) -> list[PlannedMachine]:
        """The ``count`` machines whose leases end first."""
        return [self.machines[index] for _, index in self._by_end[:count]]


class TypePools:
    """Which machines a task may go on: per type, the machines that hold its parents, the
    ``machines_per_type`` machines that fall idle first (all of them when ``None``), and one new
    machine while fewer than the type's ``count`` exist (a type's ``count`` bounds its machines over
    the whole schedule, a little stricter than the spec's "at no instant")."""

    def __init__(self, catalog: Catalog, machines_per_type: int | None, min_task_memory_bytes: int) -> None:
        self.machines: dict[str, IdlePool] = {r.name: IdlePool() for r in catalog.resources}
        self.machines_per_type = machines_per_type
        self.min_task_memory_bytes = min_task_memory_bytes
        self._unused: dict[str, PlannedMachine] = {}  # per type, the new machine last offered and not yet placed on

    def candidates(
        self, task: Task, resource: Resource, parent_machines: dict[int, PlannedMachine]
    ) -> list[PlannedMachine]:
        pool = self.machines[resource.name]
        chosen = self.idle_first(pool, resource, parent_machines)
        if resource.count is None or len(pool) < resource.count:
            chosen.append(self.new_machine(resource, f"{resource.name}#{len(pool)}"))
        return chosen

    def idle_first(
        self, pool: IdlePool, resource: Resource, parent_machines: dict[int, PlannedMachine]
    ) -> list[PlannedMachine]:
        """Of ``pool``, the ``machines_per_type`` that fall idle first and those that hold the task's
        parents (all of them when ``machines_per_type`` is None or the pool is no larger)."""
        machines_per_type = self.machines_per_type
        if machines_per_type is None or len(pool) <= machines_per_type:
            return list(pool)
        chosen = pool.idle_first(machines_per_type)
        seen = {id(m) for m in chosen}
        return chosen + [m for key, m in parent_machines.items() if m.resource is resource and key not in seen]

    def new_machine(self, resource: Resource, machine_id: str) -> PlannedMachine:
        """A machine of ``resource`` with nothing on it yet, named ``machine_id``.

        Each task is offered a new machine of every type; the one offered last is offered again while no
        task was placed on it (still empty, same name), instead of building a timeline per task and type.
        """
        unused = self._unused.get(resource.name)
        if unused is not None and unused.id == machine_id and unused.lease_start_s is None:
            return unused
        self._unused[resource.name] = machine = self._make_machine(resource, machine_id)
        return machine

    def _make_machine(self, resource: Resource, machine_id: str) -> PlannedMachine:
        window = None if self.machines_per_type is None else INSERTION_WINDOW
        timeline = SkippingTimeline(
            resource.vcpus, resource.memory_bytes, self.min_task_memory_bytes, window, resource.gpus
        )
        return PlannedMachine(machine_id, resource, timeline)

    def start_on(self, machine: PlannedMachine, task: Task, ready_s: float, duration_s: float) -> float | None:
        """The earliest start of ``task`` on ``machine`` from ``ready_s`` (None: not on this machine)."""
        ready = max(ready_s, machine.resource.earliest_start_of(task))
        return machine.timeline.earliest_start(ready, duration_s, task.cores, task.memory_bytes, task.gpus)

    def place(self, machine: PlannedMachine, task: Task, start_s: float, end_s: float) -> None:
        made, old_end = machine.lease_start_s is None, machine.lease_end_s
        machine.timeline.add(start_s, end_s, task.cores, task.memory_bytes, task.gpus)
        machine.lease_start_s, machine.lease_end_s = machine.lease_after(start_s, end_s)
        machine.lease_cost_usd = machine.resource.lease_cost_usd(machine.lease_end_s - machine.lease_start_s)
        pool = self.machines[machine.resource.name]
        if made:
            pool.add(machine)
        else:
            pool.moved(machine, old_end)


def upward_ranks(workflow: Workflow, catalog: Catalog) -> dict[str, float]:
    """Longest path from each task to an exit, on fastest types, with full transfer times."""
    timing = timing_types(feasible_types(workflow, catalog))
    rank: dict[str, float] = {}
    for task_id in reversed(workflow.topological_order):
        tail = max((catalog.transfer_s(e.bytes) + rank[e.child] for e in workflow.children[task_id]), default=0.0)
        rank[task_id] = fastest_runtime_s(workflow.by_id[task_id], timing[task_id]) + tail
    return rank


def list_schedule(
    workflow: Workflow,
    catalog: Catalog,
    alpha: float,
    makespan_scale_s: float,
    cost_scale_usd: float,
    machines_per_type: int | None = None,
    latest_end_s: Mapping[str, float] | None = None,
    shared_cost: bool = True,
    pools: TypePools | None = None,
    order: Sequence[str] | None = None,
    stop: TimeBudget | None = None,
) -> list[Assignment]:
    """Place every task; ``alpha`` = 1 minimises makespan, 0 minimises cost.

    With ``latest_end_s`` (a latest end per task, from a deadline), ``alpha`` is not used: each
    task goes where it adds the least cost among the places where it ends by its latest end, or,
    when it can end by it nowhere, where it ends least late. The cost a place adds (a new lease,
    or a lease made longer) is counted at the task's share of the machine (the largest of its
    cores over the type's vCPUs, its memory over the type's and its GPUs over the type's): the
    rest of that time is there for the tasks that follow (``shared_cost``; else counted in full,
    and a new large machine is never opened for one small task, so that small types dear per core
    win).

    Per type, a task considers the machines that hold its parents, the
    ``machines_per_type`` machines that fall idle first (all of them when ``None``), and
    one new machine where the type's ``count`` allows; the rest of a large pool is skipped
    for speed on very large workflows. Other ``pools`` choose otherwise (e.g. machines of one DAG
    run each, with counts shared by instant: :mod:`agora_optimizer.planning.shared_counts`);
    ``order`` (parents first) replaces the order of decreasing upward rank.

    With ``stop``, the schedule is given up (:class:`~agora_optimizer.planning.time_budget.OutOfTime`)
    once that budget has expired, checked every :data:`STOP_CHECK_TASKS` tasks: a caller with a plan
    in hand keeps its time limit instead.
    """
    options = feasible_types(workflow, catalog)
    timing = timing_types(options)
    rank = upward_ranks(workflow, catalog)
    if order is None:
        position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
        order = sorted(workflow.topological_order, key=lambda t: (-rank[t], position[t]))
    placed: dict[str, tuple[PlannedMachine, float]] = {}
    estimated_makespan = 0.0
    t_scale = max(makespan_scale_s, 1e-9)
    c_scale = max(cost_scale_usd, 1e-12)
    assignments: list[Assignment] = []
    if pools is None:
        pools = TypePools(catalog, machines_per_type, min(t.memory_bytes for t in workflow.tasks))

    for placed_count, task_id in enumerate(order):
        if stop is not None and placed_count % STOP_CHECK_TASKS == 0:
            stop.check()
        task = workflow.by_id[task_id]
        tail = rank[task_id] - fastest_runtime_s(task, timing[task_id])
        inputs = [
            (placed[e.parent][0], placed[e.parent][1], catalog.transfer_s(e.bytes)) for e in workflow.parents[task_id]
        ]
        arrivals = Arrivals(inputs)
        parent_machines = {id(m): m for m, _, _ in inputs}
        latest = None if latest_end_s is None else latest_end_s[task_id]
        if latest is not None:
            share = {
                r.name: max(task.cores / r.vcpus, task.memory_bytes / r.memory_bytes, task.gpus / max(r.gpus, 1))
                if shared_cost
                else 1.0
                for r in options[task_id]
            }
        best: tuple[tuple[float, float, float], PlannedMachine, float, float] | None = None
        for resource in options[task_id]:
            duration = resource.runtime_s(task)
            rerun_s, rerun_usd = 0.0, 0.0  # a spot type's worst-case extra time and expected extra cost
            if resource.spot:
                resend_s = max((catalog.transfer_s(e.bytes) for e in workflow.parents[task_id]), default=0.0)
                rerun_s = fallback_s(task, resource, catalog) + resend_s
                rerun_usd = expected_rerun_cost_usd(task, resource, catalog, duration)
            for machine in pools.candidates(task, resource, parent_machines):
                found = pools.start_on(machine, task, arrivals.on(machine), duration)
                if found is None:
                    continue
                start, end = found, found + duration
                if latest is not None:
                    late = max(end + rerun_s - latest, 0.0)
                    if best is not None and late > best[0][0] + 1e-9:
                        continue  # later than a place already found
                    key = (late, machine.added_cost_usd(start, end) * share[resource.name] + rerun_usd, end)
                else:
                    makespan_part = alpha * max(estimated_makespan, end + tail) / t_scale
                    if best is not None and makespan_part > best[0][0] + 1e-12:
                        continue  # cannot win: its cost term is never negative
                    added = machine.added_cost_usd(start, end) + rerun_usd
                    key = (makespan_part + (1.0 - alpha) * added / c_scale, end, added)
                if best is None or key < best[0]:
                    best = (key, machine, start, end)
        assert best is not None  # feasible_types and the pools guarantee at least one place
        _, machine, start, end = best
        pools.place(machine, task, start, end)
        placed[task_id] = (machine, end)
        estimated_makespan = max(estimated_makespan, end + tail)
        assignments.append(
            Assignment(
                task=task_id,
                resource=machine.resource.name,
                machine=machine.id,
                start_s=start,
                end_s=end,
                cores=task.cores,
                memory_bytes=task.memory_bytes,
                gpus=task.gpus,
            )
        )
    return assignments
