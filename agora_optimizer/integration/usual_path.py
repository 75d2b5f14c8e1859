"""Plan a DAG with branches on the path its runs take most often.

A branch (``@task.branch``, ``BranchPythonOperator``, a short-circuit) skips the tasks of the paths
it does not take. With no history every path is planned: a skipped task frees its planned slot
for the tasks behind it on its machine (the executor's machine order lets them go). With history,
a task that ran in fewer than half of the DAG's recent runs since it first ran (at least
:data:`MIN_RUNS` of them) is off the usual path: it is left out of the plan, its children follow
its parents instead, and when a run does take it, it runs as a task the plan does not name
(``[agora] default_resource``). A task that never ran at all stays in the plan: it may be new.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from agora_optimizer.integration.dag_shape import DagShape
from agora_optimizer.traces.records import TaskAttempt

MIN_RUNS = 3  # runs since a task first ran before its absence means anything
RECENT_RUNS = 20


@dataclass(frozen=True)
class OffPath:
    """A task left out of the plan: it ran in ``ran`` of the ``runs`` recent runs since it first ran."""

    task_id: str
    ran: int
    runs: int

    def describe(self) -> str:
        return f"{self.task_id} (ran in {self.ran} of {self.runs} runs)"


def off_path(shape: DagShape, attempts: Iterable[TaskAttempt]) -> list[OffPath]:
    """The DAG's tasks off the path its recent runs took most often (see the module's docstring)."""
    started: dict[str, float] = {}
    ran: dict[str, set[str]] = {}
    for attempt in attempts:
        if attempt.dag_id != shape.dag_id:
            continue
        moment = attempt.started_at.timestamp() if attempt.started_at is not None else math.inf
        started[attempt.run_id] = min(started.get(attempt.run_id, moment), moment)
        ran.setdefault(attempt.task_id, set()).add(attempt.run_id)
    recent = sorted(started, key=lambda run: (started[run], run))[-RECENT_RUNS:]
    order = {run: index for index, run in enumerate(recent)}
    found = []
    for task in shape.tasks:
        seen = [order[run] for run in ran.get(task.task_id, ()) if run in order]
        if not seen:
            continue  # new, or not run lately: planned
        since = len(recent) - min(seen)
        if since >= MIN_RUNS and 2 * len(seen) < since:
            found.append(OffPath(task.task_id, len(seen), since))
    return found


def without(shape: DagShape, left_out: Iterable[str]) -> DagShape:
    """The DAG without the tasks ``left_out``: each remaining task follows, through them, their parents."""
    gone = set(left_out)
    if not gone:
        return shape
    upstream = {task.task_id: task.upstream for task in shape.tasks}

    def parents(task_id: str, seen: set[str]) -> set[str]:
        found: set[str] = set()
        for parent in upstream.get(task_id, ()):
            if parent not in gone:
                found.add(parent)
            elif parent not in seen:
                seen.add(parent)
                found |= parents(parent, seen)
        return found

    kept = tuple(
        replace(task, upstream=tuple(sorted(parents(task.task_id, set()))))
        for task in shape.tasks
        if task.task_id not in gone
    )
    return replace(shape, tasks=kept)
