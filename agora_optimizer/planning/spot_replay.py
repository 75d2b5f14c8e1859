"""Replaying a plan whose spot tasks are interrupted: what it then costs and when it ends.

The executor's policy for spot capacity (``docs/spot.md``): a task interrupted on a spot machine
re-runs once, at once, on a new machine of the spot type's ``fallback`` (on-demand), booted for it,
as soon as the machine is up and the task's inputs have been sent to it; its outputs then leave
from there. Every other task keeps its machine and its place in the machine's order, and starts as
the executor starts it (``executor/runs/machine_order.py``, ``docs/running-plans.md``): once its inputs
have arrived and the tasks that the plan ended before its start on its machine have left the
machine, not at its planned start shifted by their delays. Idle time on a machine therefore takes
up a delay: a task 130 s late that the plan follows with 99 s of idle time delays the machine's
next task by 31 s. The replay keeps each task's planned start as its earliest (so that a replay
without interruptions is the plan); the executor may start a task earlier when its turn comes,
which in this model only brings the ends after it earlier. A task waits for no task that overlapped
it in the plan, so two tasks share a machine at an instant of the replay only if they overlapped in
the plan (intervals that meet pairwise meet at one instant): the machines' capacities hold. The
``count`` of a type is not re-checked (a replayed lease may overlap the next one of its type where
the plan leased them one after another).

Each start is the latest of a few ends and transfers (a longest path), so a replay's ends only
grow with a later interruption, and an interruption at an attempt's end ends every task at least
as late as none, or an earlier one, would. ``interrupted_after_s`` gives, for the tasks whose
spot attempt is interrupted, the time from the attempt's start to the interruption.
:func:`sample_interruptions` draws it from each spot type's Poisson process.
:func:`worst_case_makespan_s` is the plan's deadline check with spot capacity: the latest end of a
replay in which one spot task is interrupted at the worst moment, its attempt's end
(:func:`rerun_makespans_s` gives each spot task's, in one backward pass over the same model,
tested equal to a replay per spot task). It also bounds any interruptions of which none is
delayed by another's re-run (a path through two of them is then no longer than one through the
later alone); :func:`all_interrupted_makespan_s` (every spot task interrupted at the last moment)
bounds every case, chains of re-runs included.
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
    """Replay the plan with the interruptions given: each task starts at the latest of its planned
    start, its inputs' arrival and the moment the last task that the plan ended before it on its
    machine left the machine (the module's text)."""
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    items = sorted(assignments, key=lambda a: (a.start_s, a.end_s, position[a.task]))
    by_name = catalog.by_name
    outputs: dict[str, tuple[float, str | None]] = {}  # task -> (its outputs' time, the machine they are on)
    pending: dict[str, list[tuple[float, float]]] = {}  # machine -> heap of (planned end, when it left the machine)
    released: dict[str, float] = {}  # machine -> when the last of its tasks ended by now (in the plan) left it
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
        start = max(a.start_s, released.get(a.machine, 0.0))
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
        heapq.heappush(heap, (a.end_s, left))
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
    """The makespan of the replay in which every spot task is interrupted at its attempt's end and
    re-runs on its fallback (delays add up along chains of spot tasks: a bound for any number of
    interruptions at any moments)."""
    items = list(assignments)
    by_name = catalog.by_name
    every = {a.task: a.end_s - a.start_s for a in items if by_name[a.resource].spot}
    return replay(items, workflow, catalog, every).makespan_s


def worst_case_makespan_s(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> float:
    """The largest makespan of the replays in which one spot task is interrupted, at the worst moment
    (its attempt's end), and re-runs on its fallback (:func:`rerun_makespans_s`); the plan's
    makespan without spot tasks."""
    items = list(assignments)
    return max([max((a.end_s for a in items), default=0.0), *rerun_makespans_s(items, workflow, catalog).values()])


def rerun_makespans_s(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> dict[str, float]:
    """For each spot task, the makespan of :func:`replay` with it alone interrupted at the worst
    moment (its attempt's end), re-run on its fallback.

    Computed in one backward pass instead of one replay per spot task, on the replay's model: a task
    waits for its parents' outputs and for the tasks the plan ended before its start on its machine,
    and idle time in the plan between them takes up a delay. With ``M`` the plan's makespan and
    ``R_j = max(end_j, R_y - gap_jy)`` over ``j``'s children and the tasks after it on its machine
    (``gap_jy`` the idle time between them in the plan: ``start_y - end_j``, less the transfer to a
    child on another machine), a delay of ``j``'s start by ``x >= 0`` ends the replay at
    ``max(M, R_j + x)`` (along a path each idle time takes up what it can; where it takes up all,
    ``R_j + x <= M``). A re-run of ``i`` that ends at ``E_i`` then ends the replay at
    ``max(M, E_i, E_i + transfer_ic + R_c - start_c)`` over its children ``c`` (its outputs leave
    the fallback machine: a child on ``i``'s spot machine gets them over the network too).
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
