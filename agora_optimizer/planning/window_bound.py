"""A head-body-tail lower bound on the makespan over windows of the DAG.

The critical path ignores that machines are few; perfect work sharing ignores that
tasks are whole and wait for their parents. This bound looks at both at once, the way
the classical head-body-tail bounds of machine scheduling do:

- every task ``j`` has a *head* (it cannot start before its ancestors could finish on
  their fastest types, nor before the least release plus boot of the types it fits) and a
  *tail* (after it ends, its longest chain of descendants still has to run);
- for a set ``S`` of tasks, no plan ends before ``min head + body(S) + min tail``, where
  ``body(S)`` is any lower bound on the time to run ``S`` alone on the machines it may use.

``body`` is the larger of two relaxations, each over the machines whose type has memory
and cores for the smallest task of ``S`` (a superset of where any task of ``S`` may run):

- *work*: the core-seconds (and the byte-seconds of memory) of ``S`` over what those
  machines offer per second;
- *whole tasks*: the ``k`` longest tasks of ``S`` take at least as long as ``k`` jobs of the
  ``k``-th longest runtime; a machine of type ``t`` runs at most
  ``min(vcpus_t // least cores, memory_t // least memory)`` of them at once, each for
  ``runtime / speed_t``, and the shortest time in which machines of uniform speeds finish
  ``k`` equal jobs is ``min T: sum_t slots_t * floor(T * speed_t / p) >= k``.

Sets ``S`` are taken by thresholds on head, tail and memory, so that the fan-out of a
split-map-join workflow or the big-memory tasks that fit only slow types are looked at
on their own. Every bound here is a relaxation of the plan model of the spec, so the
result is a true lower bound (it is reported as such, and tested against exact optima).
Only for catalogs where every type a task may use has a ``count``.
"""

from __future__ import annotations

import numpy as np

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import Workflow

MAX_THRESHOLDS = 12  # head and tail thresholds each: at most 144 windows
_BISECTION_STEPS = 32


def timing_types(options: dict[str, list[Resource]]) -> dict[str, list[Resource]]:
    """Per task, one of its types for each distinct (earliest start, speed, added latency).

    Types alike in these three give a task the same earliest start and the same run, so a least start,
    run or end over a task's types is the same over these (a workflow of 30,000 tasks that fit 27 types
    of a handful of speeds: a few instead of 27 per task, and the same floats).
    """
    kept: dict[tuple[int, ...], list[Resource]] = {}
    result: dict[str, list[Resource]] = {}
    for task_id, rs in options.items():
        key = tuple(map(id, rs))
        found = kept.get(key)
        if found is None:
            alike: dict[tuple[float, float, float], Resource] = {}
            for r in rs:  # the first of each kind, in the task's order
                alike.setdefault((r.earliest_start_s, r.speed, r.added_latency_s), r)
            found = kept[key] = list(alike.values())
        result[task_id] = found
    return result


def window_bound_s(workflow: Workflow, options: dict[str, list[Resource]]) -> float:
    """The best head-body-tail bound over windows of ``workflow``; 0 when a type is unlimited."""
    types = {r.name: r for rs in options.values() for r in rs}
    if not types or any(r.count is None for r in types.values()):
        return 0.0
    order = workflow.topological_order
    index = {task_id: i for i, task_id in enumerate(order)}
    tasks = [workflow.by_id[task_id] for task_id in order]
    timing = timing_types(options)
    fastest = np.array([min(r.runtime_s(t) for r in timing[t.id]) for t in tasks])
    head = np.zeros(len(tasks))
    finish = np.zeros(len(tasks))
    for i, task in enumerate(tasks):
        ready = max((finish[index[e.parent]] for e in workflow.parents[task.id]), default=0.0)
        head[i] = max(ready, min(r.earliest_start_of(task) for r in timing[task.id]))
        finish[i] = min(max(ready, r.earliest_start_of(task)) + r.runtime_s(task) for r in timing[task.id])
    tail = np.zeros(len(tasks))
    for i in range(len(tasks) - 1, -1, -1):
        children = workflow.children[tasks[i].id]
        if children:
            tail[i] = max(fastest[index[e.child]] + tail[index[e.child]] for e in children)
    runtime = np.array([t.runtime_s for t in tasks])
    cores = np.array([t.cores for t in tasks])
    memory = np.array([t.memory_bytes for t in tasks], dtype=float)
    machines = _Machines(list(types.values()))
    best = 0.0
    seen: set[bytes] = set()
    for h in _thresholds(head):
        for t in _thresholds(tail):
            inside = (head >= h) & (tail >= t)
            signature = np.packbits(inside).tobytes()
            if not inside.any() or signature in seen:
                continue
            seen.add(signature)
            body = machines.body_s(runtime[inside], cores[inside], memory[inside])
            best = max(best, float(head[inside].min()) + body + float(tail[inside].min()))
    return best * (1 - 1e-9)


def _thresholds(values: np.ndarray) -> np.ndarray:
    distinct = np.unique(values)
    if len(distinct) <= MAX_THRESHOLDS:
        return distinct
    return np.unique(np.quantile(distinct, np.linspace(0.0, 1.0, MAX_THRESHOLDS), method="lower"))


class _Machines:
    """The catalog's machines as arrays: memory, cores, speed and count of every type."""

    def __init__(self, types: list[Resource]) -> None:
        self.memory = np.array([r.memory_bytes for r in types], dtype=float)
        self.vcpus = np.array([r.vcpus for r in types])
        self.speed = np.array([r.speed for r in types])
        self.count = np.array([r.count or 0 for r in types])
        self.levels = np.unique(np.concatenate(([-1.0], self.memory)))

    def body_s(self, runtime: np.ndarray, cores: np.ndarray, memory: np.ndarray) -> float:
        """A lower bound on the time to run these tasks alone, by memory thresholds."""
        best = 0.0
        previous = -1
        for level in self.levels:
            big = memory > level
            size = int(big.sum())
            if size == 0:
                break
            if size != previous:  # the same tasks as at the last level: the same bound
                best = max(best, self._body_on_fitting(runtime[big], cores[big], memory[big]))
            previous = size
        return best

    def _body_on_fitting(self, runtime: np.ndarray, cores: np.ndarray, memory: np.ndarray) -> float:
        usable = (self.memory >= memory.min()) & (self.vcpus >= cores.min())
        if not usable.any():
            return 0.0
        speed, vcpus, count, size = self.speed[usable], self.vcpus[usable], self.count[usable], self.memory[usable]
        core_capacity = float((speed * vcpus * count).sum())
        memory_capacity = float((speed * size * count).sum())
        if core_capacity <= 0:
            return 0.0
        work = max(
            float((runtime * cores).sum()) / core_capacity,
            float((runtime * memory).sum()) / memory_capacity if memory_capacity > 0 else 0.0,
        )
        order = np.argsort(-runtime, kind="stable")
        longest = runtime[order]
        least_cores = np.minimum.accumulate(cores[order])
        least_memory = np.minimum.accumulate(memory[order])
        ks = np.unique(np.geomspace(1, len(longest), num=min(len(longest), 24)).astype(int))
        per_machine = np.minimum(
            vcpus[None, :] // least_cores[ks - 1, None],
            np.floor(size[None, :] / np.maximum(least_memory[ks - 1, None], 1.0)),
        )
        slots = count[None, :] * per_machine
        return max(work, float(_equal_jobs_s(ks, longest[ks - 1], speed, slots).max()))


def _equal_jobs_s(jobs: np.ndarray, size_s: np.ndarray, speed: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """For each ``(k, p)`` and its row of slots: a time below the shortest in which they finish ``k`` jobs of ``p``.

    Bisection on ``T`` with ``done(T) = sum slots * floor(T * speed / p)``; the lower end
    always has ``done < k``, so it is a valid bound (at most a hair under the optimum).
    """
    low = np.zeros(len(jobs))
    high = jobs * size_s / speed.max()
    positive = size_s > 0
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        done = (slots * np.floor(middle[:, None] * speed[None, :] / np.where(positive, size_s, 1)[:, None])).sum(axis=1)
        enough = done >= jobs
        high = np.where(enough, middle, high)
        low = np.where(enough, low, middle)
    return np.where(positive, low, 0.0)
