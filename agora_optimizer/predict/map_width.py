"""How many instances a mapped task will have: learned from its past runs' map indexes, else told.

A mapped task's width (its number of task instances) is known only when its run expands it,
after its upstream tasks ran. The planner needs it before: it plans each instance. The width
comes, in this order, from

1. the trace store: the widths of the task's last :data:`RECENT_RUNS` runs (a run's width is its
   largest map index plus one); the planned width is their 90th percentile (nearest rank), so
   that nine runs in ten need no instance the plan did not place, and the median is kept beside it;
2. the DAG itself: a literal list (or dict) given to ``.expand()``, whose length Airflow knows at
   parse time;
3. ``[agora] default_map_width``.

Instances beyond the planned width still run (on the mapped task's resource, with its hints, as
the executor's "overflow"); instances the run does not have free their planned slots.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agora_optimizer.traces.records import TaskAttempt

RECENT_RUNS = 20  # a width that grows is followed within this many runs
MAX_MAP_WIDTH = 1024  # instances planned per mapped task at most (Airflow's [core] max_map_length is 1024 too)


@dataclass(frozen=True)
class MapWidth:
    """A mapped task's planned width and where it came from."""

    width: int
    source: str  # "history", "literal" or "default"
    median: float | None = None  # of the past widths (history only)
    runs: int = 0  # past runs it was learned from

    def describe(self) -> str:
        if self.source == "history":
            return f"{self.width} (p90 of {self.runs} past runs, median {self.median:g})"
        told = "a literal list at parse time" if self.source == "literal" else "[agora] default_map_width"
        return f"{self.width} ({told})"


def past_widths(attempts: Iterable[TaskAttempt], dag_id: str) -> dict[str, list[int]]:
    """Each mapped task's width in each of its recent runs (oldest first, at most :data:`RECENT_RUNS`)."""
    widths: dict[str, dict[str, int]] = {}
    started: dict[str, float] = {}
    for attempt in attempts:
        if attempt.dag_id != dag_id or attempt.map_index < 0:
            continue
        runs = widths.setdefault(attempt.task_id, {})
        runs[attempt.run_id] = max(runs.get(attempt.run_id, 0), attempt.map_index + 1)
        if attempt.started_at is not None:
            moment = attempt.started_at.timestamp()
            started[attempt.run_id] = min(started.get(attempt.run_id, moment), moment)
    return {
        task: [runs[run] for run in sorted(runs, key=lambda run: (started.get(run, math.inf), run))][-RECENT_RUNS:]
        for task, runs in widths.items()
    }


def learned_width(widths: list[int]) -> MapWidth | None:
    """The planned width from past widths: their 90th percentile (nearest rank); None without any."""
    if not widths:
        return None
    ordered = sorted(widths)
    p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
    return MapWidth(_bounded(p90), "history", median=float(statistics.median(ordered)), runs=len(ordered))


def planned_width(task_id: str, past: Mapping[str, list[int]], literal: int | None, default: int) -> MapWidth:
    """The width the planner expands ``task_id`` into: history, else the literal count, else ``default``."""
    learned = learned_width(past.get(task_id, []))
    if learned is not None:
        return learned
    if literal is not None:
        return MapWidth(_bounded(literal), "literal")
    return MapWidth(_bounded(default), "default")


def _bounded(width: int) -> int:
    """At least one instance (an empty expansion is skipped: its slot is freed), at most :data:`MAX_MAP_WIDTH`."""
    return min(max(1, int(width)), MAX_MAP_WIDTH)
