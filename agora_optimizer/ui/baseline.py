"""What a plan is compared with: the one-type default and the cost/makespan Pareto front.

A plan file holds each task's placement, not the workflow it was planned from. The
workflow is rebuilt from the plan itself and the DAG's edges in Airflow's serialized DAG:
a task's reference runtime is its planned duration times the speed of its planned
resource type, its cores and memory are those the plan reserved. The one-type default
(:func:`agora_optimizer.optimize.optimize.default_plan`, as ``agora optimize`` prints it) and the
Pareto front (:func:`agora_optimizer.optimize.pareto.pareto_front`) are then computed on the
catalogs of ``[agora] catalog``, so the savings are measured on the very predictions the
plan was made from.

The default takes about 2 s for 5,000 tasks and is cached per plan version. The front is
computed on first view in one background thread, within ``[agora] ui_pareto_time_limit_s``,
and kept until the plan changes; meanwhile its state is "computing".
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Literal

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Plan
from agora_optimizer.model.workflow import Edge, Task, Workflow, category_of
from agora_optimizer.optimize.pareto import Front
from agora_optimizer.ui.cache import LruCache
from agora_optimizer.ui.plans import PlanFile

log = logging.getLogger(__name__)

FrontStatus = Literal["computing", "ready", "unavailable"]


class BaselineUnavailableError(AgoraError):
    """The plan cannot be compared: no catalog, a resource the catalog lacks, or no such DAG in Airflow."""


@dataclass(frozen=True)
class DagStructure:
    """A DAG's task ids and edges (parent, child), as Airflow serialized it."""

    task_ids: frozenset[str]
    edges: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Comparison:
    """The one-type default of a plan's workflow, or why there is none."""

    default: Plan | None
    reason: str = ""

    def saving(self, planned: float, field: Literal["makespan_s", "cost_usd"]) -> float | None:
        """``1 - planned / default`` (0.25: the plan saves a quarter), or None without a default."""
        if self.default is None:
            return None
        reference = float(getattr(self.default, field))
        return None if reference <= 0 else 1.0 - planned / reference


@dataclass(frozen=True)
class ComputedFront:
    """A plan's front with the workflow and catalog it was computed on, so each point can become a plan."""

    front: Front
    workflow: Workflow
    catalog: Catalog

    def plan(self, index: int) -> Plan:
        """The ``index``-th point of the front (by increasing makespan) as a plan."""
        from agora_optimizer.optimize.pareto import point_plan

        return point_plan(self.front.points[index], self.workflow, self.catalog, self.front.catalog)


@dataclass(frozen=True)
class FrontState:
    status: FrontStatus
    computed: ComputedFront | None = None
    reason: str = ""

    @property
    def front(self) -> Front | None:
        return None if self.computed is None else self.computed.front


_structures: LruCache[tuple[str, str], DagStructure] = LruCache(64)
_comparisons: LruCache[tuple[str, str, str], Comparison] = LruCache(256)


def dag_structure(dag_id: str) -> DagStructure:
    """The DAG's edges from Airflow's metadata database (cached per serialized version)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        serialized = SerializedDagModel.get(dag_id, session=session)
        if serialized is None:
            raise BaselineUnavailableError(f"DAG {dag_id!r} is not (yet) in Airflow's database")
        return _structures.get_or_compute((dag_id, str(serialized.dag_hash)), lambda: _structure(serialized.dag))


def _structure(dag: object) -> DagStructure:
    tasks = list(getattr(dag, "tasks", []))
    edges = tuple((parent, task.task_id) for task in tasks for parent in sorted(task.upstream_task_ids))
    return DagStructure(frozenset(task.task_id for task in tasks), edges)


def plan_workflow(plan: Plan, catalog: Catalog, structure: DagStructure) -> Workflow:
    """The workflow the plan was made from: durations times speeds, the plan's reservations, the DAG's edges."""
    tasks = []
    for a in plan.assignments:
        resource = catalog.by_name.get(a.resource)
        if resource is None:
            raise BaselineUnavailableError(f"resource {a.resource!r} of the plan is not in [agora] catalog")
        runtime_s = max(a.end_s - a.start_s, 0.0) * resource.speed
        tasks.append(Task(a.task, runtime_s, a.cores, a.memory_bytes, category_of(a.task), "predicted"))
    planned = {task.id for task in tasks}
    edges = [Edge(parent, child) for parent, child in structure.edges if parent in planned and child in planned]
    return Workflow.create(plan.workflow, tasks, edges, source=f"plan of DAG {plan.workflow}")


def comparison(entry: PlanFile) -> Comparison:
    """The plan's one-type default, cached per plan version; the reason when there is none."""
    key = (entry.dag_id, entry.version, settings.get("catalog"))
    found = _comparisons.get(key)
    if found is not None:
        return found
    try:
        result = _compare(entry)
    except AgoraError as exc:
        return Comparison(None, str(exc))  # not cached: the DAG may be parsed, the catalog fixed, any moment
    return _comparisons.put(key, result)


def _compare(entry: PlanFile) -> Comparison:
    from agora_optimizer.optimize.optimize import default_plan

    catalog = settings.configured_catalog(required=True)
    workflow = plan_workflow(entry.plan, catalog, dag_structure(entry.dag_id))
    default = default_plan(workflow, catalog, catalog.source)
    if default is None:
        return Comparison(None, "no single resource type of [agora] catalog fits every task")
    return Comparison(default)


class FrontService:
    """Pareto fronts of current plans, computed one at a time in a background thread and cached."""

    def __init__(self, cache_size: int = 16) -> None:
        self._futures: LruCache[tuple[str, str, str], Future[ComputedFront]] = LruCache(cache_size)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agora-pareto")

    def state(self, entry: PlanFile) -> FrontState:
        """The front of the plan if ready; else start computing it (once) and say so."""
        key = (entry.dag_id, entry.version, settings.get("catalog"))
        future = self._futures.get(key)
        if future is None:
            future = self._futures.put(key, self._executor.submit(_front, entry))
        if not future.done():
            return FrontState("computing")
        error = future.exception()
        if error is None:
            return FrontState("ready", future.result())
        if isinstance(error, BaselineUnavailableError):
            self._futures.discard(key)  # the DAG may be parsed, the catalog fixed: try again next time
            return FrontState("unavailable", reason=str(error))
        if not isinstance(error, AgoraError):
            log.error("agora: the Pareto front of DAG %s failed", entry.dag_id, exc_info=error)
            return FrontState("unavailable", reason=f"the computation failed ({type(error).__name__})")
        return FrontState("unavailable", reason=str(error))


def _front(entry: PlanFile) -> ComputedFront:
    from agora_optimizer.optimize.pareto import pareto_front

    catalog = settings.configured_catalog(required=True)
    workflow = plan_workflow(entry.plan, catalog, dag_structure(entry.dag_id))
    time_limit_s = settings.get_float("ui_pareto_time_limit_s")
    front = pareto_front(workflow, catalog, catalog.source, deadlines=6, time_limit_s=time_limit_s)
    return ComputedFront(front, workflow, catalog)


@cache
def front_service() -> FrontService:
    """One front service per process."""
    return FrontService()
