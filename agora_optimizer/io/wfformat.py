"""Load WfCommons WfFormat instances (schema 1.4 and 1.5) into a :class:`Workflow`.

Memory rule, for tasks whose source records no peak memory (absent, null or 0):
1. the median recorded ``memoryInBytes`` of the tasks of the same category in the
   same file (``memory_source = "category-median"``);
2. otherwise ``default_memory_bytes`` (1 GiB unless the caller says otherwise;
   ``memory_source = "default"``).
Plans record the value reserved for every task in ``assignments[].memory_bytes``.

GPU rule (section 5 of the spec; WfFormat itself has no field for a task's accelerators): a
task's ``gpus`` key, a whole number >= 0, read from its record in ``workflow.execution.tasks``
(1.5), else from its entry in ``workflow.specification.tasks`` (1.5) or ``workflow.tasks`` (1.4);
0 where neither has one.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from agora_optimizer.io.wfformat_structure import TaskEntry, edges, read_structure
from agora_optimizer.io.wfformat_structure import task_gpus as task_gpus
from agora_optimizer.model.workflow import (
    MAX_CORES,
    MAX_MEMORY_BYTES,
    MAX_RUNTIME_S,
    Task,
    Workflow,
    category_of,
    shown,
)

DEFAULT_MEMORY_BYTES = 2**30


@dataclass(frozen=True)
class _Measured:
    """What one file says of a task's run, before the memory rule is applied."""

    task_id: str
    category: str
    runtime_s: float
    cores: int
    memory_bytes: int | None
    gpus: int


def load_workflow(path: str | Path, default_memory_bytes: int = DEFAULT_MEMORY_BYTES) -> Workflow:
    """Read a WfFormat 1.4 or 1.5 file. Raises an ``AgoraError`` naming the file and field."""
    source = str(path)
    structure = read_structure(path)
    # No tasks is a workflow too (Airflow runs a DAG with none to success): its plan is the empty plan.
    measured = [_measured(task) for task in structure.tasks.values()]
    tasks = _apply_memory_rule(measured, default_memory_bytes)
    return Workflow.create(Path(path).stem, tasks, edges(structure.tasks, structure.sizes, source), source=source)


def _measured(task: TaskEntry) -> _Measured:
    record = task.record
    if record is None:  # 1.5 only: a 1.4 task is its own record
        raise task.entry.fail(
            f"task {shown(task.task_id)} has no record in workflow.execution.tasks (no runtimeInSeconds)"
        )
    runtime = record.get("runtimeInSeconds", None)
    if runtime.value is None:
        raise record.fail(f"task {shown(task.task_id)} has no runtimeInSeconds")
    cores_node = record.get(task.cores_key, None)
    cores = 1 if cores_node.value is None else math.ceil(cores_node.number(strictly_positive=True, maximum=MAX_CORES))
    memory_node = record.get("memoryInBytes", None)
    memory = None if memory_node.value is None else memory_node.number(maximum=MAX_MEMORY_BYTES)
    declared = task.entry.get("category", None)
    category = "" if declared.value is None else declared.text()  # a string, never what str() makes of a value
    return _Measured(
        task_id=task.task_id,
        category=category or category_of(task.name),
        runtime_s=runtime.number(maximum=MAX_RUNTIME_S),
        cores=cores,
        memory_bytes=math.ceil(memory) if memory else None,
        gpus=task.gpus,
    )


def _apply_memory_rule(measured: list[_Measured], default_memory_bytes: int) -> list[Task]:
    recorded: dict[str, list[int]] = defaultdict(list)
    for task in measured:
        if task.memory_bytes:
            recorded[task.category].append(task.memory_bytes)
    medians = {category: int(statistics.median(values)) for category, values in recorded.items()}
    tasks = []
    for task in measured:
        if task.memory_bytes:
            memory, origin = task.memory_bytes, "recorded"
        elif task.category in medians:
            memory, origin = medians[task.category], "category-median"
        else:
            memory, origin = default_memory_bytes, "default"
        tasks.append(Task(task.task_id, task.runtime_s, task.cores, memory, task.category, origin, gpus=task.gpus))  # type: ignore[arg-type]
    return tasks
