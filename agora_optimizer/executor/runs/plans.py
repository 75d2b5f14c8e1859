"""The plans the executor follows, read once each (:class:`PlanReader`): each plan's machine order, and the
plan each DAG run follows (its own run plan where the plan store keeps one, else its tasks' parse-time
placements).

**Machine orders.** A task the plan put on a machine carries the plan's version; the order of that plan's
machines (:class:`~agora_optimizer.executor.runs.machine_order.MachineOrder`) is read from the plan store
once per (DAG, version). A plan that is gone or unreadable leaves its tasks unordered, with one log line.

Each order carries its tasks' categories from the workflow the plan was made from (read with it), which
learning during a run groups tasks by (:mod:`~agora_optimizer.executor.runs.learning`).

**Run plans.** ``agora optimize --dags ... --window 24h --apply`` plans every run of a window and keeps each
run's plan in the plan store by the run's ``run_after`` (:meth:`~agora_optimizer.plans.store.PlanStore.save_run`);
the DAG's current plan, which the cluster policy routes from at parse time, is its first run's. When
the executor builds the job of a task instance whose run has a run plan, the task runs at the run
plan's placement (resource, machine, planned start, cores, memory; the time limit stays the task's
own), and with that plan's version, so the run's machine order, repairs and record follow the run
plan (:meth:`PlanStore.find` finds it by version).

A run's plan is looked up once, at its first task, and kept for the run: by the run's ``run_after``,
then (a run triggered by hand) its logical date, both read from Airflow's database. A run with no
run plan behaves exactly as without this module. A run plan that cannot be used (unreadable, or
naming a resource ``[agora] catalog`` does not declare), or a run whose dates cannot be read, never
stops the run: one log line naming the file or the run, and its tasks keep their parse-time placements.

The policy's other parse-time choices are not the executor's to change: a task's Airflow pool (with
``[agora] airflow_pools``) and its executor (a task planned on a Celery pool goes to the
CeleryExecutor) stay those of the current plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.runs.machine_order import MachineOrder
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.placement import Placement
from agora_optimizer.model.plan import Assignment
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.predict.memory_in_run import LOWERED_SOURCES

RUNS_MAX = 1024  # DAG runs whose plan (or lack of one) is kept
PLANS_MAX = 256  # (dag_id, plan_version) whose machine order is kept; a plan is read once per pair

RunTimes = Callable[[str, str], tuple[datetime | None, datetime | None]]  # (dag_id, run_id) -> run_after, logical


@dataclass(frozen=True)
class StoredRunPlan:
    """A run plan as the plan store keeps it, which one DAG run follows: its file, its version, its
    assignments by plan name (``task[i]``). (Planning's own ``RunPlan`` is a run's schedule in a window.)"""

    path: Path
    version: str
    assignments: Mapping[str, Assignment]

    def placement(self, task: str, parse_time: Placement | None) -> Placement | None:
        """Where ``task`` runs in a run that follows this plan: its assignment here (with the parse-time time
        limit, the task's own), else its parse-time placement off any machine (another plan's machine is
        none of this run's), else None."""
        assignment = self.assignments.get(task)
        if assignment is None:
            return None if parse_time is None else replace(parse_time, machine="", plan_version=self.version)
        return Placement(
            resource=assignment.resource,
            cores=assignment.cores,
            memory_bytes=assignment.memory_bytes,
            gpus=assignment.gpus,
            time_limit_s=parse_time.time_limit_s if parse_time is not None else None,
            machine=assignment.machine,
            planned_start_s=assignment.start_s,
            plan_version=self.version,
        )


class PlanReader:
    """Reads each plan's machine order once per (DAG, version), and each DAG run's own plan once per run.

    ``store`` is the plan store, ``run_times`` the run's ``run_after`` and logical date (Airflow's
    database: :func:`~agora_optimizer.executor.airflow_db.run_times`), ``resources`` the executor's; ``log``
    the executor's logger.
    """

    def __init__(
        self, store: Callable[[], PlanStore], run_times: RunTimes, resources: Mapping[str, Resource], log: Any
    ) -> None:
        self._store = store
        self._run_times = run_times
        self._resources = resources
        self._log = log
        self._orders: BoundedDict[tuple[str, str], MachineOrder | None] = BoundedDict(PLANS_MAX)
        self._runs: BoundedDict[tuple[str, str], StoredRunPlan | None] = BoundedDict(RUNS_MAX)

    def order(self, dag_id: str, version: str) -> MachineOrder | None:
        """The machine order of the DAG's plan of ``version``, None when the plan is gone or unreadable."""
        if (dag_id, version) not in self._orders:
            order: MachineOrder | None = None
            try:
                stored = self._store().find(dag_id, version)
                if stored is None:
                    self._log.warning("agora: plan %s of DAG %s not found; its tasks run unordered", version, dag_id)
                else:
                    order = replace(
                        MachineOrder.from_plan(stored.plan, self._resources), **self._from_workflow(dag_id, version)
                    )
            except AgoraError as exc:
                self._log.warning(
                    "agora: plan %s of DAG %s unreadable (%s); its tasks run unordered", version, dag_id, exc
                )
            self._orders[(dag_id, version)] = order
        return self._orders[(dag_id, version)]

    def _from_workflow(self, dag_id: str, version: str) -> dict[str, Any]:
        """What the order takes from the workflow the plan was made from: each task's ``categories`` (what learning
        during a run groups by, :mod:`~agora_optimizer.executor.runs.learning`), the tasks whose reservation it
        declares or records (``fixed_memory``: never lowered) and each task's ``parents`` (whether a machine may
        open early); none when the plan kept no workflow or it cannot be read."""
        try:
            workflow = self._store().workflow(dag_id, version)
        except AgoraError as exc:
            self._log.warning("agora: workflow of plan %s of DAG %s unreadable (%s)", version, dag_id, exc)
            return {}
        if workflow is None:
            return {}
        return {
            "categories": {task.id: task.category for task in workflow.tasks if task.category},
            "fixed_memory": frozenset(task.id for task in workflow.tasks if task.memory_source not in LOWERED_SOURCES),
            "parents": {
                task.id: frozenset(edge.parent for edge in workflow.parents[task.id]) for task in workflow.tasks
            },
        }

    def run_plan(self, dag_id: str, run_id: str) -> StoredRunPlan | None:
        """The plan the run follows, None when it has none or it cannot be used (logged once per run)."""
        if (dag_id, run_id) not in self._runs:
            self._runs[(dag_id, run_id)] = self._look_up(dag_id, run_id)
        return self._runs[(dag_id, run_id)]

    def _look_up(self, dag_id: str, run_id: str) -> StoredRunPlan | None:
        try:
            store = self._store()
            if not store.run_plans(dag_id):  # most DAGs: no run plan, and no read of Airflow's database
                return None
        except Exception as exc:  # an id the store cannot name, an unreadable directory: as without run plans
            self._log.warning("agora: run plans of DAG %s not read (%s); run %s runs as parsed", dag_id, exc, run_id)
            return None
        try:
            moments = [moment for moment in self._run_times(dag_id, run_id) if moment is not None]
        except Exception as exc:  # the metadata database is the scheduler's; a hiccup leaves the run as parsed
            self._log.warning(
                "agora: cannot read the dates of %s run %s (%s); its tasks run at their parse-time placements",
                dag_id, run_id, exc,
            )  # fmt: skip
            return None
        for moment in moments:
            path = store.run_path(dag_id, moment)
            if path.exists():
                return self._read(path, dag_id, run_id)
        return None

    def _read(self, path: Path, dag_id: str, run_id: str) -> StoredRunPlan | None:
        from agora_optimizer.io.plan_file import load_plan

        try:
            data = path.read_bytes()
            plan = load_plan(path)
            unknown = sorted({a.resource for a in plan.assignments} - set(self._resources))
            if unknown:
                raise AgoraError(f"it names {', '.join(unknown)}, which [agora] catalog does not declare")
        except Exception as exc:  # whatever is wrong with the file, the run goes on as parsed
            self._log.warning(
                "agora: run plan %s of %s run %s not used (%s); its tasks run at their parse-time placements",
                path, dag_id, run_id, exc,
            )  # fmt: skip
            return None
        self._log.info("agora: %s run %s follows its run plan %s", dag_id, run_id, path)
        return StoredRunPlan(path, plan_version(data), {a.task: a for a in plan.assignments})
