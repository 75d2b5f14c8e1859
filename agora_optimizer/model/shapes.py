"""A workflow before it runs, as a workflow file or a DAG describes it: tasks with names, sizes and
cores but no runtime. The predictor (:mod:`agora_optimizer.predict`) turns a :class:`WorkflowShape`
into a :class:`~agora_optimizer.model.workflow.Workflow`; readers of files and DAGs build it.
"""

from __future__ import annotations

from dataclasses import dataclass

from agora_optimizer.model.instances import split_instance
from agora_optimizer.model.workflow import Edge


@dataclass(frozen=True)
class TaskShape:
    """A task before it runs: what a workflow file or a DAG says of it.

    ``dag_id`` names the workflow (for a WfFormat file: its stem), so that a task seen in
    past runs of the same workflow is recognised. ``hint_runtime_s`` and
    ``hint_memory_bytes`` are values the workflow declares for the task (used only when no
    history answers, see :mod:`agora_optimizer.predict.fallback`). ``input_files`` and
    ``output_files`` count the files behind ``input_bytes`` and ``output_bytes`` (0 where the
    source does not say: a DAG, a WfFormat task that gives only ``readBytes``). An instance of a
    mapped Airflow task (``load[3]``) has its ``map_index`` and its task's ``map_width`` (how many
    instances the task expands to in the run: the width it is planned with); an unmapped task, -1 and 1.
    """

    task_id: str
    category: str
    operator: str = ""
    input_bytes: int = 0
    output_bytes: int = 0
    cores: int = 1
    dag_id: str = ""
    hint_runtime_s: float | None = None
    hint_memory_bytes: int | None = None
    gpus: int = 0  # the GPUs the task needs, as declared (none are predicted)
    input_files: int = 0  # how many files ``input_bytes`` sums (0: unknown, or none)
    output_files: int = 0  # ... and ``output_bytes``
    map_index: int = -1  # a mapped task's instance: its index (-1: unmapped)
    map_width: int = 1  # ... and how many instances its task has in the run

    @property
    def key(self) -> tuple[str, str]:
        """``(dag_id, task_id)``: the task's identity across runs (a mapped task's instance ``load[3]``:
        its task ``load``, whose attempts the trace store keeps with their map index beside it)."""
        return (self.dag_id, split_instance(self.task_id)[0])


@dataclass(frozen=True)
class WorkflowShape:
    """A workflow before it runs: its tasks' shapes and its edges (with the bytes they carry)."""

    name: str
    tasks: tuple[TaskShape, ...]
    edges: tuple[Edge, ...]
    source: str = "<memory>"
