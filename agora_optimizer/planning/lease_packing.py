"""Lease packing: a schedule's machines each held for less time, every task on its machine, no end later.

A lease runs from its machine's first task to its last and is paid for whole. Re-timing
(:mod:`~agora_optimizer.planning.retime`) starts every task as early as it can, or ends it as late:
the first leaves a machine's early tasks far ahead of its late ones, the second the reverse. Packing
takes one machine at a time and moves its tasks toward the other end of its lease:

- :func:`pack_later`: children first, each task ends as late as its children's data (at their times
  now), its machine's other tasks and the lease's end allow; the lease starts later;
- :func:`pack_earlier`: parents first, each task starts as early as its parents' data, the machine's
  other tasks and the lease's start allow; the lease ends sooner.

A machine whose tasks would not all fit so (a task pushed past its parents' data or its children's
needs) keeps its times; so does one whose lease would not shrink. Every other machine's tasks stay
where they are while one moves, so the schedule stays valid, and its makespan never grows.
"""

from __future__ import annotations

from collections.abc import Sequence

from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, machine_type, tasks_by_machine
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.timeline import MachineTimeline

EPSILON_S = 1e-9


def pack_later(workflow: Workflow, catalog: Catalog, assignments: Sequence[Assignment]) -> list[Assignment]:
    """Every machine's tasks as late as they can run within its lease's end (see the module)."""
    return _pack(workflow, catalog, assignments, later=True)


def pack_earlier(workflow: Workflow, catalog: Catalog, assignments: Sequence[Assignment]) -> list[Assignment]:
    """Every machine's tasks as early as they can run after its lease's start (see the module)."""
    return _pack(workflow, catalog, assignments, later=False)


def _pack(workflow: Workflow, catalog: Catalog, assignments: Sequence[Assignment], later: bool) -> list[Assignment]:
    placed = {a.task: a for a in assignments}
    for machine, tasks in tasks_by_machine((a.task, a.machine) for a in assignments).items():
        if len(tasks) < 2:
            continue  # a lease of one task is as short as it can be
        moved = _packed_machine(workflow, catalog, placed, machine, tasks, later)
        if moved is not None:
            placed.update(moved)
    return [placed[a.task] for a in assignments]


def _packed_machine(
    workflow: Workflow,
    catalog: Catalog,
    placed: dict[str, Assignment],
    machine: str,
    tasks: list[str],
    later: bool,
) -> dict[str, Assignment] | None:
    """The machine's tasks moved toward one end of its lease, or None when that fails or gains nothing."""
    resource = catalog.by_name[machine_type(machine)]
    first = min(placed[t].start_s for t in tasks)
    last = max(placed[t].end_s for t in tasks)
    timeline = MachineTimeline(resource.vcpus, resource.memory_bytes, gpus=resource.gpus)
    moved: dict[str, Assignment] = {}

    def arrival(task_id: str) -> float:  # when its parents' data is there, and its type lets it start
        ready = resource.earliest_start_of(workflow.by_id[task_id])
        for edge in workflow.parents[task_id]:
            parent = moved.get(edge.parent) or placed[edge.parent]
            hop = 0.0 if parent.machine == machine else catalog.transfer_s(edge.bytes)
            ready = max(ready, parent.end_s + hop)
        return ready

    def needed(task_id: str) -> float:  # when its children need its data
        due = last
        for edge in workflow.children[task_id]:
            child = moved.get(edge.child) or placed[edge.child]
            hop = 0.0 if child.machine == machine else catalog.transfer_s(edge.bytes)
            due = min(due, child.start_s - hop)
        return due

    key = (lambda t: -placed[t].end_s) if later else (lambda t: placed[t].start_s)
    for task_id in sorted(tasks, key=key):
        task, current = workflow.by_id[task_id], placed[task_id]
        duration = current.end_s - current.start_s
        if later:  # never before its data (or time 0): a start a rounding error early is clamped to it
            latest = timeline.latest_start(
                arrival(task_id), needed(task_id), duration, task.cores, task.memory_bytes, task.gpus
            )
            if latest is None:
                return None
            start = latest
        else:
            start = timeline.earliest_start(
                max(first, arrival(task_id)), duration, task.cores, task.memory_bytes, task.gpus
            )
            if start + duration > needed(task_id) + EPSILON_S:
                return None
        timeline.add(start, start + duration, task.cores, task.memory_bytes, task.gpus)
        moved[task_id] = Assignment(
            current.task,
            current.resource,
            machine,
            start,
            start + duration,
            current.cores,
            current.memory_bytes,
            current.gpus,
        )
    span = max(a.end_s for a in moved.values()) - min(a.start_s for a in moved.values())
    return moved if span < last - first - EPSILON_S else None
