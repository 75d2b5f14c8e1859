"""Read and write a workflow as agora holds it (``agora-workflow/1``), lossless, beside the plan made from it.

A WfFormat instance says what ran, not what the optimizer planned with: memory filled in by the
category median, runtimes predicted from traces, a DAG read from Airflow. The executor re-plans a
drifted run from the workflow its plan was made from (:mod:`agora_optimizer.planning.replan`), so
the plan store keeps that workflow as it was, in this small JSON::

    {"format": "agora-workflow/1", "name": "etl",
     "tasks": [{"id": "a", "runtime_s": 10.0, "cores": 1, "memory_bytes": 1073741824,
                "category": "extract", "memory_source": "recorded", "gpus": 1}, ...],
     "edges": [{"parent": "a", "child": "b", "bytes": 0}, ...]}

A task's ``gpus`` (section 5 of the spec) is written only where it needs some and reads as 0 where
absent. Reading checks every field and the DAG as :meth:`Workflow.create` does; errors name the file and
the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

from agora_optimizer.io.documents import Node, read_document, write_text_atomically
from agora_optimizer.model.limits import MAX_CORES, MAX_GPUS, MAX_MEMORY_BYTES, MAX_RUNTIME_S
from agora_optimizer.model.workflow import Edge, MemorySource, Task, Workflow, shown

WORKFLOW_FORMAT = "agora-workflow/1"
MAX_EDGE_BYTES = 2**60
_MEMORY_SOURCES: tuple[str, ...] = get_args(MemorySource)


def workflow_to_dict(workflow: Workflow) -> dict[str, Any]:
    return {
        "format": WORKFLOW_FORMAT,
        "name": workflow.name,
        "tasks": [
            {
                "id": t.id,
                "runtime_s": t.runtime_s,
                "cores": t.cores,
                "memory_bytes": t.memory_bytes,
                "category": t.category,
                "memory_source": t.memory_source,
                **({"gpus": t.gpus} if t.gpus else {}),
            }
            for t in workflow.tasks
        ],
        "edges": [{"parent": e.parent, "child": e.child, "bytes": e.bytes} for e in workflow.edges],
    }


def workflow_json(workflow: Workflow, target: str) -> str:
    """The file's text; a workflow the reader would refuse is refused here, naming ``target``."""
    document = workflow_to_dict(workflow)
    workflow_from_document(document, target)  # what is written must read back
    return json.dumps(document, indent=1, allow_nan=False) + "\n"


def write_workflow(workflow: Workflow, path: str | Path) -> None:
    write_text_atomically(path, workflow_json(workflow, str(path)))


def load_workflow_file(path: str | Path) -> Workflow:
    """Read an ``agora-workflow/1`` file. Raises an ``AgoraError`` naming the file and field."""
    return workflow_from_document(read_document(path), str(path))


def workflow_from_document(document: Any, source: str) -> Workflow:
    root = Node(document, source)
    root.mapping()
    fmt = root.get("format").string()
    if fmt != WORKFLOW_FORMAT:
        raise root.get("format").fail(f"expected {WORKFLOW_FORMAT!r}, got {shown(fmt)}")
    tasks = [_task(item) for item in root.get("tasks").items()]
    edges = [
        Edge(
            parent=item.get("parent").string(),
            child=item.get("child").string(),
            bytes=item.get("bytes", 0).integer(maximum=MAX_EDGE_BYTES),
        )
        for item in root.get("edges").items()
    ]
    return Workflow.create(root.get("name").string(), tasks, edges, source=source)


def _task(node: Node) -> Task:
    source = node.get("memory_source", "recorded")
    origin = source.string()
    if origin not in _MEMORY_SOURCES:
        raise source.fail(f"expected one of {', '.join(_MEMORY_SOURCES)}, got {shown(origin)}")
    return Task(
        id=node.get("id").string(),
        runtime_s=node.get("runtime_s").number(maximum=MAX_RUNTIME_S),
        cores=node.get("cores").integer(minimum=1, maximum=MAX_CORES),
        memory_bytes=node.get("memory_bytes").integer(maximum=MAX_MEMORY_BYTES),
        category=node.get("category").text(),
        memory_source=origin,  # type: ignore[arg-type]  # checked against MemorySource above
        gpus=node.get("gpus", 0).integer(maximum=MAX_GPUS),
    )
