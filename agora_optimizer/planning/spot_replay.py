"""Replaying a plan whose spot tasks are interrupted: what it then costs and when it ends.

The executor's policy for spot capacity (``docs/spot.md``): a task interrupted on a spot machine
re-runs once, on a new machine of the spot type's ``fallback`` (on-demand), booted for it, as soon as
the machine is up and the task's inputs have been sent to it; its outputs then leave from there.
Every other task keeps its machine and its place in the machine's order and starts at its planned
start shifted by the delays that reach it: a parent's outputs that arrive later, or a task planned
before it on its machine (ended by its start) that left the machine later. A task's shift is the
largest of these, so two tasks share a machine at an instant of the replay only if they overlapped
in the plan (intervals that meet pairwise meet at one instant): the machines' capacities hold. The
``count`` of a type is not re-checked (a replayed lease may overlap the next one of its type where
the plan leased them one after another).

``interrupted_after_s`` gives, for the tasks whose spot attempt is interrupted, the time from the
attempt's start to the interruption. :func:`sample_interruptions` draws it from each spot type's
Poisson process. :func:`worst_case_makespan_s` is the plan's deadline check with spot capacity:
the latest end of a replay in which one spot task is interrupted at the worst moment, its attempt's
end (a replay's ends only grow with a later interruption). Delays from several interruptions
propagate as their largest, so it also holds for any interruptions of which none is delayed by
another's re-run; :func:`all_interrupted_makespan_s` (every spot task interrupted at the last
moment) bounds every case, chains of re-runs included.
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, SpotFigures
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.spot import expected_cost_usd, expected_reruns, rate_per_s

EPS_S = 1e-9


@dataclass(frozen=True)
class Replay:
    """One replay: its makespan, its cost (planned machines as leased in the replay, plus a lease
    per re-run) and the tasks that re-ran."""

    makespan_s: float
    cost_usd: float
    reruns: tuple[str, ...]


def replay(
    assignments: Iterable[Assignment],
    workflow: Workflow,
    catalog: Catalog,
    interrupted_after_s: Mapping[str, float],
) -> Replay:
    """Replay the plan with the interruptions given (see the module's text)."""
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    items = sorted(assignments, key=lambda a: (a.start_s, a.end_s, position[a.task]))
    by_name = catalog.by_name
    outputs: dict[str, tuple[float, str | None]] = {}  # task -> (its outputs' time, the machine they are on)
    pending: dict[str, list[tuple[float, float]]] = {}  # machine -> heap of (planned end, delay it left with)
    released: dict[str, float] = {}  # machine -> the largest delay of its tasks ended by now (in the plan)
    leases: dict[str, tuple[float, float]] = {}  # machine -> (first start, last end) in the replay
    cost = 0.0
    reruns: list[str] = []
    makespan = 0.0
    for a in items:
        task = workflow.by_id[a.task]
        resource = by_name[a.resource]
        heap = pending.setdefault(a.machine, [])
        while heap and heap[0][0] <= a.start_s + EPS_S:
            released[a.machine] = max(released.get(a.machine, 0.0), heapq.heappop(heap)[1])
        start = a.start_s + released.get(a.machine, 0.0)
        for edge in workflow.parents[a.task]:
            ready_s, machine = outputs[edge.parent]
            start = max(start, ready_s if machine == a.machine else ready_s + catalog.transfer_s(edge.bytes))
        duration = a.end_s - a.start_s
        after = interrupted_after_s.get(a.task)
        if after is not None and resource.spot and after <= duration:
            left = start + after  # the attempt ends at the interruption; the task re-runs on a new fallback machine
            fallback = catalog.fallback_of(resource)
            rerun_start = left + fallback.boot_s
            for edge in workflow.parents[a.task]:
                rerun_start = max(rerun_start, outputs[edge.parent][0] + catalog.transfer_s(edge.bytes))
            done = rerun_start + fallback.runtime_s(task)
            cost += fallback.lease_cost_usd(done - rerun_start + fallback.boot_s)
            outputs[a.task] = (done, None)
            reruns.append(a.task)
        else:
            left = done = start + duration
            outputs[a.task] = (done, a.machine)
        heapq.heappush(heap, (a.end_s, left - a.end_s))
        first, last = leases.get(a.machine, (start, left))
        leases[a.machine] = (min(first, start), max(last, left))
        makespan = max(makespan, done)
    for machine, (first, last) in leases.items():
        resource = by_name[machine.rsplit("#", 1)[0]]
        cost += resource.lease_cost_usd(last - first + resource.boot_s)
    return Replay(makespan, cost, tuple(reruns))


def sample_interruptions(assignments: Iterable[Assignment], catalog: Catalog, rng: random.Random) -> dict[str, float]:
    """Draw each spot task's first interruption from its type's Poisson process; keep those that fall
    within its attempt (the time from the attempt's start)."""
    drawn: dict[str, float] = {}
    for a in assignments:
        rate = rate_per_s(catalog.by_name[a.resource])
        if rate > 0:
            after = rng.expovariate(rate)
            if after < a.end_s - a.start_s:
                drawn[a.task] = after
    return drawn


def all_interrupted_makespan_s(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> float:
    """The makespan were every spot task interrupted at its attempt's end and re-run on its fallback
    (delays add up along chains of spot tasks: a bound for any number of interruptions)."""
    items = list(assignments)
    by_name = catalog.by_name
    every = {a.task: a.end_s - a.start_s for a in items if by_name[a.resource].spot}
    return replay(items, workflow, catalog, every).makespan_s


def worst_case_makespan_s(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> float:
    """The largest makespan of the replays in which one spot task is interrupted, at the worst moment
    (its attempt's end), and re-runs on its fallback; the plan's makespan without spot tasks."""
    items = list(assignments)
    return max([max((a.end_s for a in items), default=0.0), *rerun_makespans_s(items, workflow, catalog).values()])


def rerun_makespans_s(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> dict[str, float]:
    """For each spot task, the makespan of the replay in which it alone is interrupted at the worst
    moment (its attempt's end) and re-runs on its fallback.

    Computed in one backward pass instead of one replay per spot task: with ``M`` the plan's
    makespan, ``R_j`` the latest end that a delay of task ``j``'s start by ``x`` pushes to ``R_j + x``
    (``R_j = max(end_j, R_y - gap_jy)`` over its children and the tasks after it on its machine,
    ``gap`` the slack between them in the plan), a re-run of ``i`` that ends at ``E_i`` ends the
    replay at ``max(M, E_i, E_i + transfer_ic + R_c - start_c)`` over its children ``c``.
    """
    by_name = catalog.by_name
    listed = list(assignments)
    if not any(by_name[a.resource].spot for a in listed):
        return {}  # nothing can be interrupted: no pass needed
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    items = sorted(listed, key=lambda a: (a.start_s, a.end_s, position[a.task]))
    placed = {a.task: a for a in items}
    makespan = max((a.end_s for a in items), default=0.0)
    reach: dict[str, float] = {}  # task -> R (above)
    later: dict[str, tuple[list[float], list[float]]] = {}  # machine -> (-start, running max of R - start), by start
    worst: dict[str, float] = {}
    for a in reversed(items):
        latest = a.end_s
        for edge in workflow.children[a.task]:
            child = placed[edge.child]
            send = 0.0 if child.machine == a.machine else catalog.transfer_s(edge.bytes)
            latest = max(latest, reach[edge.child] - (child.start_s - a.end_s - send))
        starts, tails = later.setdefault(a.machine, ([], []))
        count = bisect_right(starts, -(a.end_s - EPS_S))  # those that start once this task has ended
        if count:
            latest = max(latest, tails[count - 1] + a.end_s)
        reach[a.task] = latest
        starts.append(-a.start_s)
        tails.append(max(tails[-1], latest - a.start_s) if tails else latest - a.start_s)
        resource = by_name[a.resource]
        if not resource.spot:
            continue
        fallback = catalog.fallback_of(resource)
        rerun_start = a.end_s + fallback.boot_s
        for edge in workflow.parents[a.task]:
            rerun_start = max(rerun_start, placed[edge.parent].end_s + catalog.transfer_s(edge.bytes))
        rerun_end = rerun_start + fallback.runtime_s(workflow.by_id[a.task])
        ends = max(makespan, rerun_end)
        for edge in workflow.children[a.task]:
            child = placed[edge.child]
            ends = max(ends, rerun_end + catalog.transfer_s(edge.bytes) + reach[edge.child] - child.start_s)
        worst[a.task] = ends
    return worst


def spot_summary(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> SpotFigures | None:
    """The plan's spot figures, or None when no task is on a spot type."""
    items = list(assignments)
    by_name = catalog.by_name
    spot_tasks = sum(1 for a in items if a.resource in by_name and by_name[a.resource].spot)
    if not spot_tasks:
        return None
    return SpotFigures(
        spot_tasks=spot_tasks,
        expected_reruns=expected_reruns(items, catalog),
        expected_cost_usd=expected_cost_usd(items, workflow, catalog),
        worst_case_makespan_s=worst_case_makespan_s(items, workflow, catalog),
    )
