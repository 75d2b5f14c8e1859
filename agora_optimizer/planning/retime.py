"""Re-timing: given which machine runs each task, start every task as early as it can.

Tasks are taken in a fixed topological order; each starts at the earliest instant at
which its parents' data has arrived and its machine has the cores, memory and GPUs free for
its whole run (insertion into the machine's usage profile). Local search moves tasks
between machines and calls this to get the schedule that follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, machine_type
from agora_optimizer.model.workflow import Workflow
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
        timeline = timelines.get(machine)
        if timeline is None:
            timeline = timelines[machine] = MachineTimeline(resource.vcpus, resource.memory_bytes, gpus=resource.gpus)
        duration = resource.runtime_s(task)
        start = timeline.earliest_start(ready, duration, task.cores, task.memory_bytes, task.gpus)
        timeline.add(start, start + duration, task.cores, task.memory_bytes, task.gpus)
        placed[task_id] = Assignment(
            task=task_id,
            resource=resource.name,
            machine=machine,
            start_s=start,
            end_s=start + duration,
            cores=task.cores,
            memory_bytes=task.memory_bytes,
            gpus=task.gpus,
        )
    return [placed[task_id] for task_id in order]
