"""Memory-aware, cost-aware list scheduling (the HEFT family, with machine packing).

Tasks are taken in decreasing upward rank (Topcuoglu et al., IEEE TPDS 2002), each
placed on the machine and start time that minimise
``alpha * est_makespan / T_lb + (1 - alpha) * added_cost / C_lb``, where a machine is
an existing lease of any feasible type or a new one where the type's ``count``
allows. Several tasks share a machine whenever their cores and memory fit at every
instant (insertion into the machine's usage profile).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.arrivals import Arrivals
from agora_optimizer.planning.bounds import fastest_runtime_s, feasible_types
from agora_optimizer.planning.timeline import MachineTimeline, SkippingTimeline


@dataclass(eq=False)
class _Machine:
    id: str
    resource: Resource
    timeline: MachineTimeline
    lease_start_s: float | None = None
    lease_end_s: float = 0.0
    tasks: list[str] = field(default_factory=list)

    def added_cost_usd(self, start_s: float, end_s: float) -> float:
        boot = self.resource.boot_s
        if self.lease_start_s is None:
            return self.resource.lease_cost_usd(end_s - start_s + boot)
        old = self.resource.lease_cost_usd(self.lease_end_s - self.lease_start_s)
        new_start = min(self.lease_start_s, start_s - boot)
        new_end = max(self.lease_end_s, end_s)
        return self.resource.lease_cost_usd(new_end - new_start) - old


def upward_ranks(workflow: Workflow, catalog: Catalog) -> dict[str, float]:
    """Longest path from each task to an exit, on fastest types, with full transfer times."""
    options = feasible_types(workflow, catalog)
    rank: dict[str, float] = {}
    for task_id in reversed(workflow.topological_order):
        tail = max((catalog.transfer_s(e.bytes) + rank[e.child] for e in workflow.children[task_id]), default=0.0)
        rank[task_id] = fastest_runtime_s(workflow.by_id[task_id], options[task_id]) + tail
    return rank


INSERTION_WINDOW = 48  # with pruned candidates (very large workflows), gaps are searched this far back


def list_schedule(
    workflow: Workflow,
    catalog: Catalog,
    alpha: float,
    makespan_scale_s: float,
    cost_scale_usd: float,
    machines_per_type: int | None = None,
    latest_end_s: Mapping[str, float] | None = None,
    shared_cost: bool = True,
) -> list[Assignment]:
    """Place every task; ``alpha`` = 1 minimises makespan, 0 minimises cost.

    With ``latest_end_s`` (a latest end per task, from a deadline), ``alpha`` is not used: each
    task goes where it adds the least cost among the places where it ends by its latest end, or,
    when it can end by it nowhere, where it ends least late. The cost a place adds (a new lease,
    or a lease made longer) is counted at the task's share of the machine (the larger of its
    cores over the type's vCPUs and its memory over the type's): the rest of that time is there
    for the tasks that follow (``shared_cost``; else counted in full, and a new large machine is
    never opened for one small task, so that small types dear per core win).

    Per type, a task considers the machines that hold its parents, the
    ``machines_per_type`` machines that fall idle first (all of them when ``None``), and
    one new machine where the type's ``count`` allows; the rest of a large pool is skipped
    for speed on very large workflows.
    """
    options = feasible_types(workflow, catalog)
    rank = upward_ranks(workflow, catalog)
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    order = sorted(workflow.topological_order, key=lambda t: (-rank[t], position[t]))
    machines: dict[str, list[_Machine]] = {r.name: [] for r in catalog.resources}
    placed: dict[str, tuple[_Machine, float]] = {}
    estimated_makespan = 0.0
    t_scale = max(makespan_scale_s, 1e-9)
    c_scale = max(cost_scale_usd, 1e-12)
    assignments: list[Assignment] = []
    smallest_memory = min(t.memory_bytes for t in workflow.tasks)

    for task_id in order:
        task = workflow.by_id[task_id]
        tail = rank[task_id] - fastest_runtime_s(task, options[task_id])
        inputs = [
            (placed[e.parent][0], placed[e.parent][1], catalog.transfer_s(e.bytes)) for e in workflow.parents[task_id]
        ]
        arrivals = Arrivals(inputs)
        parent_machines = {id(m): m for m, _, _ in inputs}
        latest = None if latest_end_s is None else latest_end_s[task_id]
        if latest is not None:
            share = {
                r.name: max(task.cores / r.vcpus, task.memory_bytes / r.memory_bytes) if shared_cost else 1.0
                for r in options[task_id]
            }
        best: tuple[tuple[float, float, float], _Machine, float, float] | None = None
        for resource in options[task_id]:
            duration = resource.runtime_s(task)
            pool = machines[resource.name]
            for machine in _candidates(resource, pool, parent_machines, machines_per_type, smallest_memory):
                ready = max(resource.earliest_start_of(task), arrivals.on(machine))
                start = machine.timeline.earliest_start(ready, duration, task.cores, task.memory_bytes)
                end = start + duration
                if latest is not None:
                    late = max(end - latest, 0.0)
                    if best is not None and late > best[0][0] + 1e-9:
                        continue  # later than a place already found
                    key = (late, machine.added_cost_usd(start, end) * share[resource.name], end)
                else:
                    makespan_part = alpha * max(estimated_makespan, end + tail) / t_scale
                    if best is not None and makespan_part > best[0][0] + 1e-12:
                        continue  # cannot win: its cost term is never negative
                    added = machine.added_cost_usd(start, end)
                    key = (makespan_part + (1.0 - alpha) * added / c_scale, end, added)
                if best is None or key < best[0]:
                    best = (key, machine, start, end)
        assert best is not None  # feasible_types guarantees at least one option
        _, machine, start, end = best
        if machine.lease_start_s is None:
            machines[machine.resource.name].append(machine)
        machine.timeline.add(start, end, task.cores, task.memory_bytes)
        boot = machine.resource.boot_s
        machine.lease_start_s = (
            start - boot if machine.lease_start_s is None else min(machine.lease_start_s, start - boot)
        )
        machine.lease_end_s = max(machine.lease_end_s, end)
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
            )
        )
    return assignments


def _candidates(
    resource: Resource,
    pool: list[_Machine],
    parent_machines: dict[int, _Machine],
    machines_per_type: int | None,
    min_task_memory_bytes: int,
) -> list[_Machine]:
    """The machines of one type worth trying for a task (see :func:`list_schedule`)."""
    if machines_per_type is None or len(pool) <= machines_per_type:
        chosen = list(pool)
    else:
        chosen = heapq.nsmallest(machines_per_type, pool, key=lambda m: m.lease_end_s)
        seen = {id(m) for m in chosen}
        chosen += [m for key, m in parent_machines.items() if m.resource is resource and key not in seen]
    if resource.count is None or len(pool) < resource.count:
        window = None if machines_per_type is None else INSERTION_WINDOW
        timeline = SkippingTimeline(resource.vcpus, resource.memory_bytes, min_task_memory_bytes, window)
        chosen.append(_Machine(f"{resource.name}#{len(pool)}", resource, timeline))
    return chosen
