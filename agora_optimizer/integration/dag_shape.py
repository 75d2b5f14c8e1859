"""The shape of an Airflow DAG as planning sees it: its tasks, their upstream ids and what they declare.

:mod:`agora_optimizer.integration.airflow_dag` reads it from a DAG folder;
:mod:`agora_optimizer.integration.usual_path` trims it to the path runs usually take.
"""

from __future__ import annotations

from dataclasses import dataclass

from agora_optimizer.integration.task_inputs import NO_DECLARATION, InputDeclaration


@dataclass(frozen=True)
class DagTask:
    """One task of an Airflow DAG, as far as planning cares."""

    task_id: str
    operator: str
    upstream: tuple[str, ...]
    cores: int = 1
    runtime_hint_s: float | None = None
    memory_hint_bytes: int | None = None
    mapped: bool = False  # expanded at run time: an ``.expand()``, or a task of a mapped task group
    category: str = ""  # declared; empty: the task id without its index
    literal_width: int | None = None  # a mapped task's width when Airflow knows it at parse time
    map_group: str = ""  # the closest mapped task group's id: its tasks' instance i follow each other's i
    waits: bool = False  # waits without a worker (deferrable, or a reschedule-mode sensor): a release, not work
    gpus: int = 0  # declared: the GPUs the task needs (section 5 of the spec)
    inputs: InputDeclaration = NO_DECLARATION  # what it reads: declared sizes, inlets (integration/task_inputs.py)
    map_index: int = -1  # an instance of a mapped task (after expand_mapped): its index; -1: not an instance
    map_width: int = 1  # ... and its task's planned width: both feed the predictor


@dataclass(frozen=True)
class DagShape:
    """A DAG's id, its file and its tasks in Airflow's order."""

    dag_id: str
    fileloc: str
    tasks: tuple[DagTask, ...]
