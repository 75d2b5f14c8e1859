"""Re-timing an exact engine's schedule to the real durations: shared by the MILP and CP-SAT engines.

An exact model decides where each task runs, which tasks on a machine come one after the
other, how long each lease may be billed and which leases of a count-limited type stay
apart. Its start times are not the plan's: CBC's carry solver noise, CP-SAT's are whole
ticks of rounded durations. The plan keeps the decisions and recomputes every start as the
least solution of the difference constraints they imply (Bellman-Ford), with durations
exactly ``runtime_s / speed``:

- s_i >= release + boot of its type (a lease cannot begin before 0 nor before the release), and >=
  the task's own release where given;
- an edge p -> c: s_c >= s_p + d_p, plus the transfer when they run on different machines;
- two tasks on one machine that the schedule runs one after the other (the first ends
  no later than the second starts) keep that order: s_j >= s_i + d_i. Tasks that the
  schedule overlaps may overlap; so every set of tasks that overlap in the plan overlapped
  pairwise, hence at one instant (intervals: Helly), in the schedule, which the model
  kept within the machine's cores and memory;
- every lease stays within what its billing allows: for tasks a, b on one machine,
  s_b + d_b - (s_a - boot) <= allowance;
- two leases of a count-limited type that the schedule keeps apart stay apart (so the
  leases that overlap in the plan overlapped in the schedule: the count holds).

When the schedule's own times (with durations at least the real ones) satisfy all of these,
the least solution exists and starts no task later: the makespan and each lease do not grow.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task, Workflow

DifferenceEdge = tuple[int, int, float]  # s[v] >= s[u] + w
Slot = tuple[int, int]  # (type index, machine index) in an engine's model
EPS_S = 1e-9


def least_starts(lower: list[float], edges: list[DifferenceEdge]) -> list[float] | None:
    """The least solution of s[v] >= s[u] + w and s >= lower (Bellman-Ford); None on a positive cycle."""
    start = list(lower)
    for _ in range(len(lower) + 1):
        changed = False
        for u, v, w in edges:
            if start[u] + w > start[v] + EPS_S:
                start[v] = start[u] + w
                changed = True
        if not changed:
            return start
    return None


@dataclass(frozen=True)
class SolverSchedule:
    """An exact model's schedule in its own time unit: each task's machine, start and end, in task order."""

    place: list[Slot]
    start: list[float]
    end: list[float]
    lease: dict[Slot, tuple[float, float]]  # each used machine's lease (start, end) in the same unit


@dataclass(frozen=True)
class RealTimes:
    """The real data the plan is timed with: durations per task (on its machine), transfers, boots, releases."""

    duration_s: list[float]
    edges: Sequence[tuple[int, int, float]]  # (parent, child, transfer_s)
    boot_s: Mapping[Slot, float]
    count_limited: frozenset[int]  # type indices whose leases are counted
    release_s: Mapping[Slot, float] = field(default_factory=dict)  # no lease of a slot begins before its release
    task_release_s: Sequence[float] = ()  # per task (where given): it starts no earlier (a wait before it)


def structure_edges(
    schedule: SolverSchedule, real: RealTimes, allowance_s: Mapping[Slot, float] | None
) -> list[DifferenceEdge]:
    """The difference constraints that keep ``schedule``'s decisions (see the module docstring)."""
    place, start, end, run = schedule.place, schedule.start, schedule.end, real.duration_s
    edges = [(p, c, run[p] + (tr if place[p] != place[c] else 0.0)) for p, c, tr in real.edges]
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, slot in enumerate(place):
        on_slot[slot].append(i)
    for items in on_slot.values():
        for i in items:
            for j in items:
                if end[i] <= start[j] and (start[i], i) < (start[j], j):
                    edges.append((i, j, run[i]))
    if allowance_s is not None:
        for slot, items in on_slot.items():
            boot = real.boot_s[slot]
            edges += [(b, a, run[b] + boot - allowance_s[slot]) for a in items for b in items]
    for before, (_, before_end) in schedule.lease.items():
        for after, (after_start, _) in schedule.lease.items():
            if before[0] != after[0] or before == after or before[0] not in real.count_limited:
                continue
            if before_end <= after_start:
                boot = real.boot_s[after]
                edges += [(a, b, run[a] + boot) for a in on_slot[before] for b in on_slot[after]]
    return edges


def real_starts(
    schedule: SolverSchedule, real: RealTimes, allowance_s: Mapping[Slot, float] | None
) -> list[float] | None:
    """Real starts that keep the schedule's decisions; without the lease allowances if they cannot hold."""
    lower = [real.release_s.get(slot, 0.0) + real.boot_s[slot] for slot in schedule.place]
    if real.task_release_s:
        lower = [max(low, release) for low, release in zip(lower, real.task_release_s, strict=True)]
    for allowance in (allowance_s, None) if allowance_s is not None else (None,):
        starts = least_starts(lower, structure_edges(schedule, real, allowance))
        if starts is not None:
            return starts
    return None


def number_machines(place: Sequence[Slot], starts: Sequence[float]) -> dict[Slot, int]:
    """Machine numbers per type, in order of each machine's first start."""
    first: dict[Slot, float] = {}
    for i, slot in enumerate(place):
        first[slot] = min(first.get(slot, math.inf), starts[i])
    numbers: dict[Slot, int] = {}
    for k in sorted({slot[0] for slot in first}):
        ordered = sorted((slot for slot in first if slot[0] == k), key=lambda slot: (first[slot], slot[1]))
        numbers.update({slot: n for n, slot in enumerate(ordered)})
    return numbers


def to_assignments(
    tasks: Sequence[Task], resources: Sequence[Resource], place: Sequence[Slot], starts: Sequence[float]
) -> list[Assignment]:
    """Assignments with machine ids ``TYPE#N`` numbered per type in order of first start."""
    numbers = number_machines(place, starts)
    result = []
    for i, task in enumerate(tasks):
        resource = resources[place[i][0]]
        result.append(
            Assignment(
                task=task.id,
                resource=resource.name,
                machine=f"{resource.name}#{numbers[place[i]]}",
                start_s=starts[i],
                end_s=starts[i] + resource.runtime_s(task),
                cores=task.cores,
                memory_bytes=task.memory_bytes,
                gpus=task.gpus,
            )
        )
    return result


def lift_pruned(
    assignments: Sequence[Assignment], replacement: Mapping[str, Resource], workflow: Workflow
) -> list[Assignment]:
    """Machines of pruned types moved to the type that replaced them (same starts, runs no longer)."""
    result = []
    for a in assignments:
        target = replacement.get(a.resource)
        if target is None:
            result.append(a)
            continue
        end = a.start_s + target.runtime_s(workflow.by_id[a.task])
        machine = f"{target.name}#pruned-{a.machine}"
        result.append(Assignment(a.task, target.name, machine, a.start_s, end, a.cores, a.memory_bytes, a.gpus))
    return result
