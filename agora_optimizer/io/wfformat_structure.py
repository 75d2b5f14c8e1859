"""The structure of a WfCommons WfFormat document (schema 1.4 or 1.5): its tasks, files and edges.

Shared by the two readers of the format, which differ in what they demand of the measured values:
:func:`agora_optimizer.io.wfformat.load_workflow` (a workflow to plan: every task needs its
``runtimeInSeconds``) and :mod:`agora_optimizer.traces.wfformat_import` (attempts and task shapes:
a task's record may be absent or bad, and is then skipped). Both read the structure here, with the
same errors for a malformed document (each names the file and the field):

- 1.5: tasks in ``workflow.specification.tasks`` (``id``, ``name``, ``inputFiles``, ``outputFiles``,
  ``parents``, ``children``), file sizes in ``workflow.specification.files``, each task's record
  in ``workflow.execution.tasks`` (by ``id``), machines in ``workflow.execution.machines``;
- 1.4: tasks in ``workflow.tasks`` (``name``, ``files`` with ``link`` input or output,
  ``parents``, ``children``), each task its own record, machines in ``workflow.machines``;
- before 1.4 (``jobs``): refused, with how to convert it.

A task's ``gpus`` follows the GPU rule of :mod:`agora_optimizer.io.wfformat`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agora_optimizer.errors import FieldError
from agora_optimizer.io.documents import Node, read_document
from agora_optimizer.model.limits import MAX_GPUS
from agora_optimizer.model.workflow import Edge, shown

MAX_FILE_BYTES = 2**60


@dataclass
class TaskEntry:
    """One task as the document lays it out, before any of its measured values is read."""

    task_id: str
    name: str
    declared_category: object  # the task's ``category``, None where it has none
    entry: Node  # the task's entry (1.5: in ``specification.tasks``; 1.4: in ``tasks``)
    record: Node | None  # its execution record (1.4: the entry itself); None: the file has none
    cores_key: str  # its record's key for the cores it ran on: ``coreCount`` (1.5) or ``cores`` (1.4)
    gpus: int = 0
    inputs: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    parents: set[str] = field(default_factory=set)
    children: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Structure:
    tasks: dict[str, TaskEntry]  # by id, in the file's order
    sizes: dict[str, int]  # file sizes by file id (1.5) or name (1.4)
    machines: Node  # the list of machines the execution ran on (may be empty)
    workflow: Node  # ``workflow``, for errors about the whole


def read_structure(path: str | Path) -> Structure:
    """The structure of the WfFormat file at ``path``; a malformed document raises naming the file and field."""
    root = Node(read_document(path), str(path))
    root.mapping()
    workflow = root.get("workflow")
    workflow.mapping()
    if workflow.has("specification"):
        tasks, sizes = _read_v15(workflow)
        machines = workflow.get("execution", {}).get("machines", [])
    elif workflow.has("tasks"):
        tasks, sizes = _read_v14(workflow)
        machines = workflow.get("machines", [])
    elif workflow.has("jobs"):
        raise workflow.fail("WfFormat before 1.4 ('jobs') is not supported; convert it with wfcommons first")
    else:
        raise workflow.fail("has neither 'specification' (WfFormat 1.5) nor 'tasks' (WfFormat 1.4)")
    return Structure(tasks, sizes, machines, workflow)


def edges(tasks: dict[str, TaskEntry], sizes: dict[str, int], source: str) -> list[Edge]:
    """Every edge a task's ``parents`` or ``children`` names, sorted, each with the bytes of the files the
    parent writes and the child reads; a name no task has raises, naming the task that refers to it."""
    pairs: set[tuple[str, str]] = set()
    for task in tasks.values():
        pairs.update((parent, task.task_id) for parent in task.parents)
        pairs.update((task.task_id, child) for child in task.children)
    found = []
    for parent, child in sorted(pairs):
        for end, role in ((parent, "parent"), (child, "child")):
            if end not in tasks:
                referrer = child if role == "parent" else parent
                raise FieldError(source, f"tasks[{referrer}]", f"refers to unknown {role} task {shown(end)}")
        shared = tasks[parent].outputs & tasks[child].inputs
        found.append(Edge(parent, child, sum(sizes.get(name, 0) for name in shared)))
    return found


def task_gpus(task_id: str, node: Node) -> int:
    """The task's ``gpus`` key in ``node`` (0 where absent or null); an error names the task."""
    value = node.get("gpus", None)
    if value.value is None:
        return 0
    try:
        return value.integer(maximum=MAX_GPUS)
    except FieldError as error:
        raise FieldError(error.source, error.field, f"task {shown(task_id)}: {error.reason}") from None


def _read_v15(workflow: Node) -> tuple[dict[str, TaskEntry], dict[str, int]]:
    spec = workflow.get("specification")
    sizes = {f.get("id").string(): _size(f) for f in spec.get("files", []).items()}
    records = {item.get("id").string(): item for item in workflow.get("execution", {}).get("tasks", []).items()}
    tasks: dict[str, TaskEntry] = {}
    for item in spec.get("tasks").items():
        task_id = item.get("id").string()
        if task_id in tasks:
            raise item.get("id").fail(f"duplicate task id {shown(task_id)}")
        record = records.get(task_id)
        if record is not None:
            record.mapping()
        name, category = item.get("name", task_id).string(), item.get("category", None).value
        task = TaskEntry(task_id, name, category, item, record, "coreCount")
        task.gpus = task_gpus(task_id, record if record is not None and record.has("gpus") else item)
        task.inputs = _names(item.get("inputFiles", []))
        task.outputs = _names(item.get("outputFiles", []))
        task.parents = _names(item.get("parents", []))
        task.children = _names(item.get("children", []))
        tasks[task_id] = task
    return tasks, sizes


def _read_v14(workflow: Node) -> tuple[dict[str, TaskEntry], dict[str, int]]:
    tasks: dict[str, TaskEntry] = {}
    sizes: dict[str, int] = {}
    for item in workflow.get("tasks").items():
        task_id = item.get("name").string()
        if task_id in tasks:
            raise item.get("name").fail(f"duplicate task name {shown(task_id)}")
        item.mapping()
        category = item.get("category", None).value
        task = TaskEntry(task_id, task_id, category, item, item, "cores", task_gpus(task_id, item))
        for file_node in item.get("files", []).items():
            file_name = file_node.get("name").string()
            sizes[file_name] = max(sizes.get(file_name, 0), _size(file_node))
            link = file_node.get("link").string()
            if link not in ("input", "output"):
                raise file_node.get("link").fail(f"expected 'input' or 'output', got {shown(link)}")
            (task.inputs if link == "input" else task.outputs).add(file_name)
        task.parents = _names(item.get("parents", []))
        task.children = _names(item.get("children", []))
        tasks[task_id] = task
    return tasks, sizes


def _size(file_node: Node) -> int:
    return file_node.get("sizeInBytes", 0).integer(maximum=MAX_FILE_BYTES)


def _names(refs: Node) -> set[str]:
    values = refs.value
    # A list of names, checked at once: a 30,000-task file holds 120,000 such lists, and a node per name
    # took a second to read them. A list with a bad entry is read one node at a time, to name that entry.
    if isinstance(values, list) and all(isinstance(value, str) and value.strip() for value in values):
        return set(values)
    return {ref.string() for ref in refs.items()}
