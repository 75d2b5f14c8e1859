"""The re-plan of a run that drifted from its plan (:mod:`~agora_optimizer.executor.runs.repair` says when):
its inputs read once (the plan and the workflow it was made from, the catalog), the re-planner asked.

The run machine (:mod:`~agora_optimizer.executor.runs.machine`) decides that a run is due for a re-plan and
applies the answer; the executor carries the re-plan out here, between the two, as it does every I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.runs.learning import corrected_workflow, correction_note
from agora_optimizer.executor.runs.machine_order import RunBook
from agora_optimizer.executor.runs.repair import (
    Drift,
    Repaired,
    RepairError,
    RunRepair,
    repair_catalog,
    repaired,
    replan_state,
)
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.replan import replan
from agora_optimizer.planning.run_state import REPLAN_TIME_LIMIT_S
from agora_optimizer.plans.store import PlanStore, default_plan_store
from agora_optimizer.predict.memory_in_run import applied_factors, memory_note, raised_workflow

PLANS_MAX = 64  # (dag_id, plan_version) whose plan and workflow are kept for re-planning


class Replanner:
    """Re-plans a run's tasks that are not queued yet, around what has run.

    ``catalogs`` are the ``[agora] catalog`` files, read (with the measured platform latency defaults,
    :data:`agora_optimizer.predict.latency.MEASURED_DEFAULTS`, as plans are made with a latency and
    learning it reads every trace) at the first re-plan; ``resources`` the executor's, by name; ``plans``
    the plan store, where each plan was saved with the workflow it was made from.
    """

    def __init__(
        self,
        catalogs: str = "",
        resources: Mapping[str, Resource] | None = None,
        plans: Callable[[], PlanStore] = default_plan_store,
    ) -> None:
        self._catalogs = catalogs
        self._resources = dict(resources or {})
        self._plans = plans
        self._catalog: Catalog | None = None
        self._inputs: BoundedDict[tuple[str, str], tuple[Plan, Workflow | None]] = BoundedDict(PLANS_MAX)

    def replan(
        self,
        book: RunBook,
        run: RunRepair,
        now_s: float,
        drifts: list[Drift],
        runtime_factors: Mapping[str, float] | None = None,
        memory_factors: Mapping[str, float] | None = None,
    ) -> Repaired:
        """Re-plan the run's tasks not yet queued at the executor's monotonic ``now_s``, each task of
        ``runtime_factors`` lasting that many times its planned runtime and each of ``memory_factors`` reserving
        that many times its predicted memory, at most the largest type's (learned during the run,
        :mod:`~agora_optimizer.executor.runs.learning`); raises on any trouble."""
        plan, workflow = self._plan_and_workflow(run.dag_id, book.plan_version)
        if workflow is None:
            raise RepairError(
                f"plan {book.plan_version} of DAG {run.dag_id} was saved without its workflow "
                "(agora optimize --apply keeps it); nothing to re-plan from"
            )
        if run.overrides:  # the run follows its last repair now
            plan = replace(plan, assignments=tuple(run.overrides.get(a.task, a) for a in plan.assignments))
        clock_s = book.clock_s(now_s)
        state = replan_state(book, clock_s, run.retries)
        catalog = repair_catalog(self._catalog_of(), plan)
        factors = {task: f for task, f in (runtime_factors or {}).items() if task in workflow.by_id}
        memory = applied_factors(workflow, memory_factors or {})  # what moves a reservation, as the plan carries it
        largest_bytes = max((r.memory_bytes for r in catalog.resources), default=None)
        corrected = raised_workflow(corrected_workflow(workflow, factors), memory, largest_bytes)
        answer = replan(corrected, catalog, plan, state, clock_s, time_limit_s=REPLAN_TIME_LIMIT_S)
        note = "; ".join(n for n in (correction_note(workflow, factors), memory_note(workflow, memory)) if n)
        return repaired(book, answer, self._resources, drifts, clock_s, factors, note, memory)

    def _plan_and_workflow(self, dag_id: str, version: str) -> tuple[Plan, Workflow | None]:
        if (dag_id, version) not in self._inputs:
            store = self._plans()
            stored = store.find(dag_id, version)
            if stored is None:
                raise RepairError(f"plan {version} of DAG {dag_id} is no longer in the plan store")
            self._inputs[(dag_id, version)] = (stored.plan, store.workflow(dag_id, version))
        return self._inputs[(dag_id, version)]

    def _catalog_of(self) -> Catalog:
        if self._catalog is None:
            from agora_optimizer.io.catalog_file import merged_catalog
            from agora_optimizer.predict.latency import PlatformLatency, with_platform_latency

            self._catalog = with_platform_latency(merged_catalog(self._catalogs), PlatformLatency({}), "median")
        return self._catalog
