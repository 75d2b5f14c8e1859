"""The machine-local list schedule: every task on its block's machine, sharing the machine's cores and
memory; the makespan recomputed from the tasks."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from agora_optimizer.engines.partition.graph import TaskGraph
from agora_optimizer.engines.partition.placement import Processor

BACKFILL_DEPTH = 4
"""How many higher-priority ready tasks that do not fit a machine yet a list schedule may skip."""


@dataclass(frozen=True)
class Schedule:
    """Start and end of every task, its machine (slot index), and its critical predecessor."""

    start: list[float]
    end: list[float]
    machine: list[int]
    critical_pred: list[int]
    makespan_s: float

    def critical_path(self) -> list[int]:
        """Tasks from a first one to the last to finish, each waiting for the one before it."""
        if not self.end:
            return []
        v = max(range(len(self.end)), key=self.end.__getitem__)
        path = [v]
        while self.critical_pred[v] >= 0:
            v = self.critical_pred[v]
            path.append(v)
        path.reverse()
        return path


def simulate(
    graph: TaskGraph, machine: list[int], slots: Sequence[Processor], bandwidth_bytes_per_s: float
) -> Schedule:
    """List-schedule every task on its machine, sharing the machine's cores and memory.

    An event-driven list schedule: a task is released when its last input arrives (its
    parents' ends, plus ``bytes / bandwidth`` from another machine, and not before the
    machine's release and ``boot_s``, nor its own ``release_s``); whenever a machine frees
    capacity or receives a task, it starts its released tasks in decreasing upward rank while
    their cores and memory fit beside the running ones (skipping at most :data:`BACKFILL_DEPTH`
    that do not fit yet). Each task records what it waited for last (a parent's data or its
    machine) for the critical path. ``O((n + e) log n)``.
    """
    n = graph.n
    runtime, cores, memory = graph.runtime, graph.cores, graph.memory
    children, position = graph.children, graph.position
    inverse_bw = 1.0 / bandwidth_bytes_per_s
    speed = [s.resource.speed for s in slots]
    latency = [s.resource.added_latency_s for s in slots]  # the platform's, when the planner adds it
    duration = [runtime[v] / speed[machine[v]] + latency[machine[v]] for v in range(n)]
    rank = _mapped_upward_ranks(graph, machine, duration, inverse_bw)
    free_cores = [s.resource.vcpus for s in slots]
    free_memory = [s.resource.memory_bytes for s in slots]
    ready: list[list[tuple[float, int, int]]] = [[] for _ in slots]
    last_finished = [-1] * len(slots)
    release = [max(slots[machine[v]].resource.earliest_start_s, graph.release[v]) for v in range(n)]
    released_by = [-1] * n
    missing = [len(p) for p in graph.parents]
    start, end, critical = [0.0] * n, [0.0] * n, [-1] * n
    events = [(release[v], 1, v) for v in range(n) if missing[v] == 0]
    heapq.heapify(events)
    while events:
        now = events[0][0]
        touched: set[int] = set()
        while events and events[0][0] <= now:
            _, kind, v = heapq.heappop(events)
            m = machine[v]
            touched.add(m)
            if kind == 1:
                heapq.heappush(ready[m], (-rank[v], position[v], v))
                continue
            free_cores[m] += cores[v]
            free_memory[m] += memory[v]
            last_finished[m] = v
            finished = end[v]
            for child, nbytes in children[v]:
                arrival = finished if machine[child] == m else finished + nbytes * inverse_bw
                if arrival >= release[child]:
                    release[child] = arrival
                    released_by[child] = v
                missing[child] -= 1
                if missing[child] == 0:
                    heapq.heappush(events, (release[child], 1, child))
        for m in touched:
            queue = ready[m]
            fc, fm = free_cores[m], free_memory[m]
            skipped: list[tuple[float, int, int]] = []
            while queue:
                v = queue[0][2]
                if cores[v] <= fc and memory[v] <= fm:
                    heapq.heappop(queue)
                    fc -= cores[v]
                    fm -= memory[v]
                    start[v] = now
                    end[v] = now + duration[v]
                    critical[v] = released_by[v] if now <= release[v] else last_finished[m]
                    heapq.heappush(events, (end[v], 0, v))
                elif fc == 0 or len(skipped) >= BACKFILL_DEPTH:
                    break
                else:
                    skipped.append(heapq.heappop(queue))
            for item in skipped:
                heapq.heappush(queue, item)
            free_cores[m], free_memory[m] = fc, fm
    return Schedule(start, end, list(machine), critical, max(end, default=0.0))


def _mapped_upward_ranks(graph: TaskGraph, machine: list[int], duration: list[float], inverse_bw: float) -> list[float]:
    """Longest path to an exit on the mapped machines, transfers only across machines (HEFT's rank)."""
    rank = [0.0] * graph.n
    children = graph.children
    for v in reversed(graph.order):
        m = machine[v]
        tail = 0.0
        for child, nbytes in children[v]:
            reach = rank[child] if machine[child] == m else rank[child] + nbytes * inverse_bw
            if reach > tail:
                tail = reach
        rank[v] = duration[v] + tail
    return rank
