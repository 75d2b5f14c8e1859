"""Re-timing: given which machine runs each task, start every task as early as it can, or end it as late.

Tasks are taken in a fixed topological order; each starts at the earliest instant at
which its parents' data has arrived and its machine has the cores, memory and GPUs free for
its whole run (insertion into the machine's usage profile). Local search moves tasks
between machines and calls this to get the schedule that follows. :func:`retime_late` is its
mirror: children first, each task ends as late as its children's data needs and its machine
allows, by a horizon, which packs a machine's tasks toward its last (a shorter lease where
they were spread).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment, machine_type
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.timeline import MachineTimeline


def start_order(assignments: Sequence[Assignment], workflow: Workflow) -> list[str]:
    """Task ids by start time, parents before children on ties: a topological order."""
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    return [a.task for a in sorted(assignments, key=lambda a: (a.start_s, position[a.task]))]


def retime(
    workflow: Workflow, catalog: Catalog, machine_of: Mapping[str, str], order: Sequence[str]
) -> list[Assignment]:
    """The earliest-start schedule of ``order`` with each task on ``machine_of[task]``."""
    timelines: dict[str, MachineTimeline] = {}
    placed: dict[str, Assignment] = {}
    for task_id in order:
        task = workflow.by_id[task_id]
        machine = machine_of[task_id]
        resource = catalog.by_name[machine_type(machine)]
        ready = resource.earliest_start_of(task)
        for edge in workflow.parents[task_id]:
            parent = placed[edge.parent]
            arrival = parent.end_s if parent.machine == machine else parent.end_s + catalog.transfer_s(edge.bytes)
            ready = max(ready, arrival)
        timeline = _timeline(timelines, machine, resource)
        duration = resource.runtime_s(task)
        start = timeline.earliest_start(ready, duration, task.cores, task.memory_bytes, task.gpus)
        timeline.add(start, start + duration, task.cores, task.memory_bytes, task.gpus)
        placed[task_id] = _assignment(task, resource, machine, start, duration)
    return [placed[task_id] for task_id in order]


def retime_late(
    workflow: Workflow, catalog: Catalog, machine_of: Mapping[str, str], order: Sequence[str], horizon_s: float
) -> list[Assignment] | None:
    """The latest-end schedule of ``order`` (taken children first) with each task on ``machine_of[task]``, every
    task ending by ``horizon_s``; None when a task would then start before its type allows (release, boot)."""
    timelines: dict[str, MachineTimeline] = {}  # each in mirrored time: horizon_s - t
    placed: dict[str, Assignment] = {}
    for task_id in reversed(order):
        task = workflow.by_id[task_id]
        machine = machine_of[task_id]
        resource = catalog.by_name[machine_type(machine)]
        due = horizon_s
        for edge in workflow.children[task_id]:
            child = placed[edge.child]
            needed = child.start_s if child.machine == machine else child.start_s - catalog.transfer_s(edge.bytes)
            due = min(due, needed)
        timeline = _timeline(timelines, machine, resource)
        duration = resource.runtime_s(task)
        mirrored = timeline.earliest_start(horizon_s - due, duration, task.cores, task.memory_bytes, task.gpus)
        start, earliest = horizon_s - mirrored - duration, resource.earliest_start_of(task)
        if start < earliest - 1e-9:
            return None
        start = max(start, earliest)  # not a rounding error before it (a lease from -5.7e-14 s broke lease filling)
        timeline.add(mirrored, mirrored + duration, task.cores, task.memory_bytes, task.gpus)
        placed[task_id] = _assignment(task, resource, machine, start, duration)
    return [placed[task_id] for task_id in order]


def _timeline(timelines: dict[str, MachineTimeline], machine: str, resource: Resource) -> MachineTimeline:
    """``machine``'s usage profile in ``timelines``, empty the first time."""
    timeline = timelines.get(machine)
    if timeline is None:
        timeline = timelines[machine] = MachineTimeline(resource.vcpus, resource.memory_bytes, gpus=resource.gpus)
    return timeline


def _assignment(task: Task, resource: Resource, machine: str, start_s: float, duration_s: float) -> Assignment:
    return Assignment(
        task=task.id,
        resource=resource.name,
        machine=machine,
        start_s=start_s,
        end_s=start_s + duration_s,
        cores=task.cores,
        memory_bytes=task.memory_bytes,
        gpus=task.gpus,
    )
