"""Sensors and deferrable tasks: their runtime is waiting, not work on a machine.

A task that waits without holding a worker (a sensor in ``mode="reschedule"``, which gives its
slot back between pokes, or a deferrable operator, ``deferrable=True``, whose wait runs in
Airflow's triggerer) occupies no machine while it waits. So the planner leaves it out of the plan
and makes its predicted wait a *release time* of its children (``Task.release_s``): a child starts
no earlier than the wait's predicted end. The wait's own start is counted from the earliest its
ancestors can end (each on the type that ends it first, as the makespan's critical-path bound
does), which is exact when they are waits themselves or take no time (an ``EmptyOperator``, a
first task); later ancestors only delay the child further, through its edges. The children keep
the wait's parents as their own (edges through the wait carry no bytes: Airflow passes XComs
through the metadata database).

At run time the wait is a task the plan does not name: the policy puts it on the catalog's smallest
resource that fits it (its pokes, or its first run before it defers, are short) and the executor
runs it outside the planned machine order. A sensor in the default ``poke`` mode holds its worker
for the whole wait: it stays in the plan as work.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.workflow import Edge, Task, Workflow


def waits_without_worker(task: Any) -> bool:
    """Whether an Airflow task waits without a worker: deferrable, or a sensor in reschedule mode.

    A mapped operator keeps its arguments in ``partial_kwargs``; they are read there too.
    """
    partial = getattr(task, "partial_kwargs", None)
    given = partial if isinstance(partial, Mapping) else {}
    deferrable = given.get("deferrable", getattr(task, "deferrable", False))
    mode = given.get("mode", getattr(task, "mode", None))
    return deferrable is True or bool(getattr(task, "start_from_trigger", False)) or mode == "reschedule"


@dataclass(frozen=True)
class Wait:
    """A wait left out of the plan: its predicted length and the earliest its children may start."""

    task_id: str
    wait_s: float
    ends_s: float

    def describe(self) -> str:
        return f"{self.task_id} (waits ~{self.wait_s:,.0f} s, children from {self.ends_s:,.0f} s)"


def release_waits(workflow: Workflow, catalog: Catalog, waits: Collection[str]) -> tuple[Workflow, list[Wait]]:
    """``workflow`` without the tasks ``waits``, their waits made release times of the tasks after them.

    Each remaining task's parents are its nearest remaining ancestors through the waits; its
    ``release_s`` is the latest predicted end of a wait among its parents (see the module's
    docstring). A wait lasts its ``runtime_s`` (a reference runtime) over the speed of the smallest
    type that fits it, where the policy runs it: the predictor learnt it from runs there.
    """
    gone = set(waits) & set(workflow.by_id)
    if not gone:
        return workflow, []
    fastest = _fastest_options(workflow, catalog, gone)
    end: dict[str, float] = {}
    for task_id in workflow.topological_order:
        task = workflow.by_id[task_id]
        ready = max([task.release_s, *(end[e.parent] for e in workflow.parents[task_id])])
        if task_id in gone:
            end[task_id] = ready + wait_s(task, catalog)
        else:
            end[task_id] = min(max(ready, r.earliest_start_of(task)) + r.runtime_s(task) for r in fastest[task_id])
    through: dict[str, tuple[set[str], float]] = {}  # per task: its kept parents, and its release
    for task_id in workflow.topological_order:
        kept: set[str] = set()
        release = workflow.by_id[task_id].release_s
        for edge in workflow.parents[task_id]:
            if edge.parent in gone:
                parents, _ = through[edge.parent]
                kept |= parents
                release = max(release, end[edge.parent])
            else:
                kept.add(edge.parent)
        through[task_id] = (kept, release)
    edges = {(e.parent, e.child): e.bytes for e in workflow.edges if e.parent not in gone and e.child not in gone}
    tasks: list[Task] = []
    for task in workflow.tasks:
        if task.id in gone:
            continue
        parents, release = through[task.id]
        for parent in parents:
            edges.setdefault((parent, task.id), 0)
        tasks.append(replace(task, release_s=release) if release > task.release_s else task)
    released = Workflow.create(
        workflow.name, tasks, [Edge(p, c, b) for (p, c), b in edges.items()], source=workflow.source
    )
    found = [Wait(t, wait_s(workflow.by_id[t], catalog), end[t]) for t in workflow.topological_order if t in gone]
    return released, found


def wait_s(task: Task, catalog: Catalog) -> float:
    """How long a wait lasts on the smallest type that fits it (at reference speed if none does)."""
    where = smallest_fitting(catalog.resources, task.cores, task.memory_bytes)
    return task.runtime_s / (where.speed if where is not None else 1.0)


def _fastest_options(workflow: Workflow, catalog: Catalog, gone: set[str]) -> dict[str, list[Resource]]:
    from agora_optimizer.planning.bounds import feasible_types_of

    # a wait need not fit any type: it runs on none
    return feasible_types_of((t for t in workflow.tasks if t.id not in gone), catalog)


def smallest_fitting(resources: Collection[Resource], cores: int, memory_bytes: int) -> Resource | None:
    """The smallest resource (fewest cores, then least memory, then cheapest) that fits the need."""
    fitting = [r for r in resources if cores <= r.vcpus and memory_bytes <= r.memory_bytes]
    return min(fitting, key=lambda r: (r.vcpus, r.memory_bytes, r.price_per_hour_usd, r.name), default=None)
