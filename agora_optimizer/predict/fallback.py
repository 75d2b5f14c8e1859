"""The cold-start chain: which level of knowledge answers a question about a task.

Levels, best first:

- ``task``: this task (same ``dag_id`` and ``task_id``) ran before: the model's answer,
  corrected by how far the task's own past runs strayed from it (runtime), and never
  below the largest peak it had (memory);
- ``category``: tasks of its category are in the training history (or, for a task that
  declares no hint, tasks of its operator class): the model's answer;
- ``hint``: the workflow declares a value for the task;
- ``default``: none of these: the median reference runtime of all training rows (the
  model's corrections are learned per category and mean nothing for an unknown one), and
  the default reservation (1 GiB, as the workflow loader's rule) for memory.

:func:`first_answer` returns the value AND the level that gave it, so that a plan (and
its reader) knows which numbers were learned and which were guessed.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

Level = Literal["task", "category", "hint", "default"]
LEVELS: tuple[Level, ...] = get_args(Level)


@dataclass(frozen=True)
class Estimate:
    """A predicted value and the level of the chain that gave it."""

    value: float
    source: Level


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def first_answer(task: float | None, category: float | None, hint: float | None, default: float) -> Estimate:
    """The first usable (finite, > 0) answer along task -> category -> hint -> default."""
    for level, value in (("task", task), ("category", category), ("hint", hint)):
        if _usable(value):
            return Estimate(float(value), level)  # type: ignore[arg-type]
    if not _usable(default):
        raise ValueError(f"the default must be finite and > 0, got {default!r}")
    return Estimate(float(default), "default")


@dataclass(frozen=True)
class TaskHistory:
    """What past runs say of one task: how far the model was off, and its largest peak."""

    runs: int
    log_runtime_residual: float | None
    peak_bytes: int | None


@dataclass(frozen=True)
class History:
    """The training history, summarised per task and per category (plain data: saved as JSON)."""

    tasks: Mapping[tuple[str, str], TaskHistory] = field(default_factory=dict)
    categories: frozenset[str] = frozenset()
    operators: frozenset[str] = frozenset()
    memory_categories: frozenset[str] = frozenset()
    memory_operators: frozenset[str] = frozenset()

    def task(self, dag_id: str, task_id: str) -> TaskHistory | None:
        return self.tasks.get((dag_id, task_id))

    def knows_category(self, category: str, operator: str) -> bool:
        """Whether runtimes of this category (or operator) were learned."""
        return category in self.categories or (bool(operator) and operator in self.operators)

    def knows_memory_of(self, category: str, operator: str) -> bool:
        """Whether peaks of this category (or operator) were learned."""
        return category in self.memory_categories or (bool(operator) and operator in self.memory_operators)

    def to_json(self) -> dict[str, object]:
        return {
            "categories": sorted(self.categories),
            "operators": sorted(self.operators),
            "memory_categories": sorted(self.memory_categories),
            "memory_operators": sorted(self.memory_operators),
            "tasks": [
                {
                    "dag_id": d,
                    "task_id": t,
                    "runs": h.runs,
                    "log_runtime_residual": h.log_runtime_residual,
                    "peak_bytes": h.peak_bytes,
                }
                for (d, t), h in sorted(self.tasks.items())
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> History:
        """The inverse of :meth:`to_json`; raises ``KeyError``/``TypeError``/``ValueError`` on a bad document."""
        rows = data["tasks"]
        if not isinstance(rows, list):
            raise TypeError("'tasks' must be a list")
        tasks = {}
        for row in rows:
            peak = row["peak_bytes"]
            residual = row["log_runtime_residual"]
            tasks[(str(row["dag_id"]), str(row["task_id"]))] = TaskHistory(
                int(row["runs"]), None if residual is None else float(residual), None if peak is None else int(peak)
            )
        names = {}
        for key in ("categories", "operators", "memory_categories", "memory_operators"):
            values = data[key]
            if not isinstance(values, list):
                raise TypeError(f"'{key}' must be a list")
            names[key] = frozenset(map(str, values))
        return cls(tasks, **names)


def summarise(
    residuals: Iterable[tuple[tuple[str, str], float]],
    peaks: Iterable[tuple[tuple[str, str], int]],
    runtime_groups: tuple[Iterable[str], Iterable[str]],
    memory_groups: tuple[Iterable[str], Iterable[str]],
) -> History:
    """A :class:`History` from past attempts.

    ``residuals``: ``(task key, log(actual / model))`` per attempt with a runtime; ``peaks``:
    ``(task key, bytes)`` per attempt with a known peak (an OOM-killed attempt gives the limit
    it was killed at); ``runtime_groups`` and ``memory_groups``: the (categories, operators)
    of the rows each model learned from.
    """
    by_task: dict[tuple[str, str], list[float]] = defaultdict(list)
    for key, residual in residuals:
        by_task[key].append(residual)
    largest: dict[tuple[str, str], int] = {}
    for key, peak in peaks:
        largest[key] = max(largest.get(key, 0), peak)
    tasks = {
        key: TaskHistory(
            runs=len(by_task.get(key, [])),
            log_runtime_residual=float(statistics.median(by_task[key])) if by_task.get(key) else None,
            peak_bytes=largest.get(key),
        )
        for key in sorted(set(by_task) | set(largest))
    }
    return History(
        tasks,
        categories=frozenset(runtime_groups[0]),
        operators=frozenset(o for o in runtime_groups[1] if o),
        memory_categories=frozenset(memory_groups[0]),
        memory_operators=frozenset(o for o in memory_groups[1] if o),
    )
