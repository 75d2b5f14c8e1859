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
from pathlib import Path

from agora_optimizer.errors import FieldError
from agora_optimizer.io.documents import Node, read_document
from agora_optimizer.model.limits import MAX_GPUS
from agora_optimizer.model.workflow import (
    MAX_CORES,
    MAX_MEMORY_BYTES,
    MAX_RUNTIME_S,
    Edge,
    Task,
    Workflow,
    category_of,
)

DEFAULT_MEMORY_BYTES = 2**30


class _RawTask:
    """What one file says of a task before the memory rule is applied."""

    def __init__(
        self, task_id: str, category: str, runtime_s: float, cores: int, memory_bytes: int | None, gpus: int = 0
    ):
        self.id = task_id
        self.category = category
        self.runtime_s = runtime_s
        self.cores = cores
        self.memory_bytes = memory_bytes
        self.gpus = gpus
        self.inputs: set[str] = set()
        self.outputs: set[str] = set()
        self.parents: set[str] = set()
        self.children: set[str] = set()


def load_workflow(path: str | Path, default_memory_bytes: int = DEFAULT_MEMORY_BYTES) -> Workflow:
    """Read a WfFormat 1.4 or 1.5 file. Raises an ``AgoraError`` naming the file and field."""
    source = str(path)
    root = Node(read_document(path), source)
    workflow_node = root.get("workflow")
    workflow_node.mapping()
    if workflow_node.has("specification"):
        raw, sizes = _read_v15(workflow_node)
    elif workflow_node.has("tasks"):
        raw, sizes = _read_v14(workflow_node)
    elif workflow_node.has("jobs"):
        raise workflow_node.fail("WfFormat before 1.4 ('jobs') is not supported; convert it with wfcommons first")
    else:
        raise workflow_node.fail("has neither 'specification' (WfFormat 1.5) nor 'tasks' (WfFormat 1.4)")
    # No tasks is a workflow too (Airflow runs a DAG with none to success): its plan is the empty plan.
    tasks = _apply_memory_rule(raw, default_memory_bytes)
    edges = _edges(raw, sizes, source)
    return Workflow.create(Path(path).stem, tasks, edges, source=source)


def _read_v15(workflow_node: Node) -> tuple[dict[str, _RawTask], dict[str, int]]:
    spec = workflow_node.get("specification")
    sizes = _file_sizes(spec.get("files", []), name_key="id")
    execution = workflow_node.get("execution", {})
    measured: dict[str, Node] = {}
    for item in execution.get("tasks", []).items():
        measured[item.get("id").string()] = item
    raw: dict[str, _RawTask] = {}
    for item in spec.get("tasks").items():
        task_id = item.get("id").string()
        if task_id in raw:
            raise item.get("id").fail(f"duplicate task id '{task_id}'")
        name = item.get("name", task_id).string()
        record = measured.get(task_id)
        if record is None:
            raise item.fail(f"task '{task_id}' has no record in workflow.execution.tasks (no runtimeInSeconds)")
        task = _raw_task(task_id, item.get("category", None).value or category_of(name), record, cores_key="coreCount")
        task.gpus = task_gpus(task_id, record if record.has("gpus") else item)
        task.inputs = _file_refs(item.get("inputFiles", []))
        task.outputs = _file_refs(item.get("outputFiles", []))
        task.parents = _task_refs(item.get("parents", []))
        task.children = _task_refs(item.get("children", []))
        raw[task_id] = task
    return raw, sizes


def _read_v14(workflow_node: Node) -> tuple[dict[str, _RawTask], dict[str, int]]:
    raw: dict[str, _RawTask] = {}
    sizes: dict[str, int] = {}
    for item in workflow_node.get("tasks").items():
        task_id = item.get("name").string()
        if task_id in raw:
            raise item.get("name").fail(f"duplicate task name '{task_id}'")
        task = _raw_task(task_id, item.get("category", None).value or category_of(task_id), item, cores_key="cores")
        task.gpus = task_gpus(task_id, item)
        for file_node in item.get("files", []).items():
            file_name = file_node.get("name").string()
            link = file_node.get("link").string()
            size = file_node.get("sizeInBytes", 0).integer(maximum=2**60)
            sizes[file_name] = max(sizes.get(file_name, 0), size)
            if link == "input":
                task.inputs.add(file_name)
            elif link == "output":
                task.outputs.add(file_name)
            else:
                raise file_node.get("link").fail(f"expected 'input' or 'output', got {link!r}")
        task.parents = _task_refs(item.get("parents", []))
        raw[task_id] = task
    return raw, sizes


def _raw_task(task_id: str, category: object, record: Node, cores_key: str) -> _RawTask:
    runtime = record.get("runtimeInSeconds", None)
    if runtime.value is None:
        raise record.fail(f"task '{task_id}' has no runtimeInSeconds")
    cores_node = record.get(cores_key, None)
    cores = 1 if cores_node.value is None else math.ceil(cores_node.number(strictly_positive=True, maximum=MAX_CORES))
    memory_node = record.get("memoryInBytes", None)
    memory = None if memory_node.value is None else memory_node.number(maximum=MAX_MEMORY_BYTES)
    return _RawTask(
        task_id=task_id,
        category=str(category),
        runtime_s=runtime.number(maximum=MAX_RUNTIME_S),
        cores=cores,
        memory_bytes=math.ceil(memory) if memory else None,
    )


def task_gpus(task_id: str, node: Node) -> int:
    """The task's ``gpus`` key in ``node`` (0 where absent or null); an error names the task."""
    value = node.get("gpus", None)
    if value.value is None:
        return 0
    try:
        return value.integer(maximum=MAX_GPUS)
    except FieldError as error:
        raise FieldError(error.source, error.field, f"task '{task_id}': {error.reason}") from None


def _file_sizes(files: Node, name_key: str) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for file_node in files.items():
        sizes[file_node.get(name_key).string()] = file_node.get("sizeInBytes", 0).integer(maximum=2**60)
    return sizes


def _file_refs(refs: Node) -> set[str]:
    return {ref.string() for ref in refs.items()}


def _task_refs(refs: Node) -> set[str]:
    return {ref.string() for ref in refs.items()}


def _apply_memory_rule(raw: dict[str, _RawTask], default_memory_bytes: int) -> list[Task]:
    recorded: dict[str, list[int]] = defaultdict(list)
    for task in raw.values():
        if task.memory_bytes:
            recorded[task.category].append(task.memory_bytes)
    medians = {category: int(statistics.median(values)) for category, values in recorded.items()}
    tasks = []
    for task in raw.values():
        if task.memory_bytes:
            memory, origin = task.memory_bytes, "recorded"
        elif task.category in medians:
            memory, origin = medians[task.category], "category-median"
        else:
            memory, origin = default_memory_bytes, "default"
        tasks.append(Task(task.id, task.runtime_s, task.cores, memory, task.category, origin, gpus=task.gpus))  # type: ignore[arg-type]
    return tasks


def _edges(raw: dict[str, _RawTask], sizes: dict[str, int], source: str) -> list[Edge]:
    pairs: set[tuple[str, str]] = set()
    for task in raw.values():
        for parent in task.parents:
            pairs.add((parent, task.id))
        for child in task.children:
            pairs.add((task.id, child))
    edges = []
    for parent, child in sorted(pairs):
        for end, role in ((parent, "parent"), (child, "child")):
            if end not in raw:
                raise FieldError(
                    source, f"tasks[{child if role == 'parent' else parent}]", f"refers to unknown {role} task '{end}'"
                )
        shared = raw[parent].outputs & raw[child].inputs
        edges.append(Edge(parent, child, sum(sizes.get(name, 0) for name in shared)))
    return edges
