"""Feature rows: what the predictor knows of a task before it runs, and of the type it may run on.

A :class:`~agora_optimizer.model.shapes.TaskShape` is a task as a workflow file describes it before
it runs (names, sizes, cores, no runtime); :func:`shape_of_attempt` turns a recorded :class:`TaskAttempt` into the
same shape, so that training rows and prediction rows are built by one function,
:func:`feature_frame`. Its columns:

- categorical: ``category``, ``operator``, ``task_stem`` (the task id without its index);
- task numbers: ``log_input_bytes``, ``log_output_bytes``, ``log_input_files``,
  ``log_output_files`` (how many files the bytes are spread over; 0 where unknown),
  ``cores``, ``map_index`` and ``map_width`` (an instance of a mapped Airflow task: its index, and
  how many instances its task has in the run; -1 and 1 for any other task, so WfFormat rows and
  unmapped tasks read as before). A fan-out's width in general (how many tasks of a category a run
  has) was tried and dropped: with a handful of runs it acts as a run identifier, and a new run's
  value sends it to the leaves of an unrelated run. A map width is kept because it is the mapped
  task's own size: the same work split in more parts, or more parts of the same size; the runtime
  model keeps the trees for a category only where they did better on runs held out
  (:mod:`~agora_optimizer.predict.runtime_choice`);
- resource numbers (:func:`with_resource`): ``log_speed``, ``vcpus``, ``memory_gib``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.shapes import TaskShape
from agora_optimizer.traces.records import TaskAttempt

CATEGORICAL = ("category", "operator", "task_stem")
TASK_NUMERIC = (
    "log_input_bytes",
    "log_output_bytes",
    "log_input_files",
    "log_output_files",
    "cores",
    "map_index",
    "map_width",
)
RESOURCE_NUMERIC = ("log_speed", "vcpus", "memory_gib")

_INDEX_SUFFIX = re.compile(r"(_ID\d+|_\d+|\[\d+\])$")


def task_stem(task_id: str) -> str:
    """The task id without its index: ``mProject_ID0000001`` -> ``mProject``, ``load[3]`` -> ``load``."""
    return _INDEX_SUFFIX.sub("", task_id) or task_id


def shape_of_attempt(attempt: TaskAttempt, run_width: int | None = None) -> TaskShape:
    """The shape of the task an attempt ran (what was known of it before it ran).

    A mapped instance's width is the one recorded with it, else ``run_width`` (what the run's other rows
    say: :func:`run_widths`), else its index + 1.
    """
    mapped = attempt.map_index >= 0
    width = (attempt.map_width or run_width or attempt.map_index + 1) if mapped else 1
    return TaskShape(
        task_id=attempt.task_id,
        category=attempt.category or task_stem(attempt.task_id),
        operator=attempt.operator,
        input_bytes=attempt.input_bytes or 0,
        output_bytes=attempt.output_bytes or 0,
        input_files=attempt.input_files or 0,
        output_files=attempt.output_files or 0,
        cores=attempt.requested_cores or 1,
        dag_id=attempt.dag_id,
        map_index=attempt.map_index if mapped else -1,
        map_width=max(width, attempt.map_index + 1),
    )


def run_widths(attempts: Sequence[TaskAttempt]) -> dict[tuple[str, str, str], int]:
    """Each mapped task's width in each run, from rows that recorded none (older stores, importers):
    its largest map index there, plus one; keyed by (dag_id, task_id, run_id)."""
    widths: dict[tuple[str, str, str], int] = {}
    for attempt in attempts:
        if attempt.map_index >= 0:
            key = (attempt.dag_id, attempt.task_id, attempt.run_id)
            widths[key] = max(widths.get(key, 0), attempt.map_index + 1, attempt.map_width or 0)
    return widths


def shapes_of_attempts(attempts: Sequence[TaskAttempt]) -> list[TaskShape]:
    """:func:`shape_of_attempt` of each attempt, a mapped instance's unrecorded width read off its run's rows."""
    widths = run_widths(attempts)
    return [shape_of_attempt(a, widths.get((a.dag_id, a.task_id, a.run_id))) for a in attempts]


def feature_frame(shapes: Sequence[TaskShape]) -> pd.DataFrame:
    """One row of task features per shape."""
    return pd.DataFrame(
        {
            "category": [shape.category for shape in shapes],
            "operator": [shape.operator for shape in shapes],
            "task_stem": [task_stem(shape.task_id) for shape in shapes],
            "log_input_bytes": [math.log1p(max(shape.input_bytes, 0)) for shape in shapes],
            "log_output_bytes": [math.log1p(max(shape.output_bytes, 0)) for shape in shapes],
            "log_input_files": [math.log1p(max(shape.input_files, 0)) for shape in shapes],
            "log_output_files": [math.log1p(max(shape.output_files, 0)) for shape in shapes],
            "cores": [float(shape.cores) for shape in shapes],
            "map_index": [float(max(shape.map_index, -1)) for shape in shapes],
            "map_width": [float(max(shape.map_width, 1)) for shape in shapes],
        }
    )


def with_resource(frame: pd.DataFrame, resource: Resource | None) -> pd.DataFrame:
    """``frame`` with the resource columns of ``resource`` (NaN where the type is unknown)."""
    out = frame.copy()
    if resource is None:
        for column in RESOURCE_NUMERIC:
            out[column] = np.nan
    else:
        out["log_speed"] = math.log(resource.speed)
        out["vcpus"] = float(resource.vcpus)
        out["memory_gib"] = float(resource.memory_gib)
    return out


def resource_columns(
    speeds: Sequence[float | None], vcpus: Sequence[int | None], memory_gib: Sequence[float | None]
) -> dict[str, list[float]]:
    """Resource columns for rows whose types differ (training rows); ``None`` becomes NaN."""
    return {
        "log_speed": [math.log(s) if s else math.nan for s in speeds],
        "vcpus": [float(v) if v else math.nan for v in vcpus],
        "memory_gib": [float(m) if m else math.nan for m in memory_gib],
    }
