"""Replay a plan with what really happened: the actual workflow's runtimes and memory.

A plan made from predictions keeps its decisions (each task's machine, and the order in
which each machine starts its tasks) while the times follow the truth: tasks are taken
in the plan's start order, and each starts at the earliest instant that

- its parents have ended and their bytes have arrived (``bytes / bandwidth`` across machines),
- its machine is up (``boot_s``) and has started the task before it in the plan's order,
- its own release (``release_s``, e.g. an Airflow sensor's wait before it) has passed,
- the machine has the task's cores and *reserved* memory free for its whole true runtime
  (the reservation is the plan's ``memory_bytes``: that is what an executor asks for).

A task whose true peak exceeds its reservation would be killed for lack of memory: the
replay counts and lists them (``oom_tasks``), and times them as if they had run, so the
makespan and cost it reports are a lower bound whenever that list is not empty. Tasks
whose true peak is unknown (not recorded) are counted apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from agora_optimizer.errors import PlanMismatchError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.timeline import MachineTimeline
from agora_optimizer.predict.errors import UnknownResourceError


@dataclass(frozen=True)
class OomTask:
    task: str
    machine: str
    reserved_bytes: int
    actual_bytes: int


@dataclass(frozen=True)
class Replay:
    """The plan's claims, and what its decisions give under the actual runtimes and memory."""

    workflow: str
    planned_makespan_s: float
    planned_cost_usd: float
    makespan_s: float
    cost_usd: float
    assignments: tuple[Assignment, ...]
    oom_tasks: tuple[OomTask, ...]
    unknown_memory_tasks: int

    def summary(self) -> dict[str, object]:
        return {
            "workflow": self.workflow,
            "planned": {"makespan_s": self.planned_makespan_s, "cost_usd": self.planned_cost_usd},
            "actual": {"makespan_s": self.makespan_s, "cost_usd": self.cost_usd},
            "makespan_ratio": self.makespan_s / self.planned_makespan_s if self.planned_makespan_s > 0 else None,
            "cost_ratio": self.cost_usd / self.planned_cost_usd if self.planned_cost_usd > 0 else None,
            "oom_count": len(self.oom_tasks),
            "oom_tasks": [
                {
                    "task": t.task,
                    "machine": t.machine,
                    "reserved_bytes": t.reserved_bytes,
                    "actual_bytes": t.actual_bytes,
                }
                for t in self.oom_tasks
            ],
            "unknown_memory_tasks": self.unknown_memory_tasks,
        }


def replay(plan: Plan, actual: Workflow, catalog: Catalog) -> Replay:
    """Re-time ``plan`` with ``actual``'s runtimes; raises if the plan does not fit the workflow or catalog."""
    _check_matches(plan, actual, catalog)
    position = {task_id: i for i, task_id in enumerate(actual.topological_order)}
    order = sorted(plan.assignments, key=lambda a: (a.start_s, position[a.task]))
    placed: dict[str, Assignment] = {}
    timelines: dict[str, MachineTimeline] = {}
    last_start: dict[str, float] = {}
    for planned in order:
        task = actual.by_id[planned.task]
        resource = catalog.by_name[planned.resource]
        ready = max(resource.boot_s, task.release_s, last_start.get(planned.machine, 0.0))
        for edge in actual.parents[task.id]:
            parent = placed.get(edge.parent)
            if parent is None:  # a parent the plan starts later: the plan breaks precedence
                raise PlanMismatchError(
                    f"plan starts task '{task.id}' before its parent '{edge.parent}'; validate the plan first"
                )
            transfer = 0.0 if parent.machine == planned.machine else catalog.transfer_s(edge.bytes)
            ready = max(ready, parent.end_s + transfer)
        timeline = timelines.get(planned.machine)
        if timeline is None:
            timeline = timelines[planned.machine] = MachineTimeline(
                resource.vcpus, resource.memory_bytes, gpus=resource.gpus
            )
        duration = resource.runtime_s(task)
        cores, memory = min(planned.cores, resource.vcpus), min(planned.memory_bytes, resource.memory_bytes)
        gpus = min(planned.gpus, resource.gpus)
        start = timeline.earliest_start(ready, duration, cores, memory, gpus)
        timeline.add(start, start + duration, cores, memory, gpus)
        last_start[planned.machine] = start
        placed[task.id] = Assignment(
            task=task.id,
            resource=resource.name,
            machine=planned.machine,
            start_s=start,
            end_s=start + duration,
            cores=planned.cores,
            memory_bytes=planned.memory_bytes,
            gpus=planned.gpus,
        )
    items = [placed[a.task] for a in order]
    oom = tuple(
        OomTask(a.task, a.machine, a.memory_bytes, actual.by_id[a.task].memory_bytes)
        for a in items
        if actual.by_id[a.task].memory_source == "recorded" and actual.by_id[a.task].memory_bytes > a.memory_bytes
    )
    unknown = sum(1 for task in actual.tasks if task.memory_source != "recorded")
    return Replay(
        workflow=actual.name,
        planned_makespan_s=plan.makespan_s,
        planned_cost_usd=plan.cost_usd,
        makespan_s=makespan_s(items),
        cost_usd=cost_usd(items, catalog),
        assignments=tuple(items),
        oom_tasks=oom,
        unknown_memory_tasks=unknown,
    )


def _check_matches(plan: Plan, actual: Workflow, catalog: Catalog) -> None:
    if plan.workflow != actual.name:
        raise PlanMismatchError(f"plan is for workflow '{plan.workflow}', not '{actual.name}' ({actual.source})")
    planned = {a.task for a in plan.assignments}
    missing = [t.id for t in actual.tasks if t.id not in planned]
    extra = sorted(planned - set(actual.by_id))
    if missing or extra or len(plan.assignments) != len(planned):
        raise PlanMismatchError(
            f"plan does not assign each task of '{actual.name}' exactly once: "
            f"{len(missing)} missing (e.g. {missing[:3]}), {len(extra)} unknown (e.g. {extra[:3]})"
        )
    known = [r.name for r in catalog.resources]
    for a in plan.assignments:
        if a.resource not in catalog.by_name:
            raise UnknownResourceError(a.resource, known)
