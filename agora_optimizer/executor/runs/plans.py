"""Which plan a DAG run follows: its own run plan where the plan store keeps one, else its tasks' parse-time placements.

``agora optimize --dags ... --window 24h --apply`` plans every run of a window and keeps each run's plan
in the plan store by the run's ``run_after`` (:meth:`~agora_optimizer.plans.store.PlanStore.save_run`);
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

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.placement import Placement
from agora_optimizer.model.plan import Assignment
from agora_optimizer.plans.store import PlanStore, plan_version

RUNS_MAX = 1024  # DAG runs whose plan (or lack of one) is kept

RunTimes = Callable[[str, str], tuple[datetime | None, datetime | None]]  # (dag_id, run_id) -> run_after, logical


@dataclass(frozen=True)
class RunPlan:
    """The plan one DAG run follows: its file, its version, its assignments by plan name (``task[i]``)."""

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


class RunPlans:
    """The run plan of each DAG run the executor sees (None: it has none), looked up once per run."""

    def __init__(self, store: Callable[[], PlanStore], run_times: RunTimes, log: Any) -> None:  # the executor's logger
        self._store = store
        self._run_times = run_times
        self._log = log
        self._runs: BoundedDict[tuple[str, str], RunPlan | None] = BoundedDict(RUNS_MAX)

    def of_run(self, dag_id: str, run_id: str, resources: Collection[str]) -> RunPlan | None:
        """The plan the run follows, None when it has none or it cannot be used (logged once per run)."""
        if (dag_id, run_id) not in self._runs:
            self._runs[(dag_id, run_id)] = self._look_up(dag_id, run_id, resources)
        return self._runs[(dag_id, run_id)]

    def _look_up(self, dag_id: str, run_id: str, resources: Collection[str]) -> RunPlan | None:
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
                return self._read(path, dag_id, run_id, resources)
        return None

    def _read(self, path: Path, dag_id: str, run_id: str, resources: Collection[str]) -> RunPlan | None:
        from agora_optimizer.io.plan_file import load_plan

        try:
            data = path.read_bytes()
            plan = load_plan(path)
            unknown = sorted({a.resource for a in plan.assignments} - set(resources))
            if unknown:
                raise AgoraError(f"it names {', '.join(unknown)}, which [agora] catalog does not declare")
        except Exception as exc:  # whatever is wrong with the file, the run goes on as parsed
            self._log.warning(
                "agora: run plan %s of %s run %s not used (%s); its tasks run at their parse-time placements",
                path, dag_id, run_id, exc,
            )  # fmt: skip
            return None
        self._log.info("agora: %s run %s follows its run plan %s", dag_id, run_id, path)
        return RunPlan(path, plan_version(data), {a.task: a for a in plan.assignments})


def airflow_run_times(dag_id: str, run_id: str) -> tuple[datetime | None, datetime | None]:
    """The run's ``run_after`` and logical date from Airflow's metadata database ((None, None): no such run).

    A read-only session of its own, never committed (as the executor's reads of task states:
    :func:`agora_optimizer.executor.planned_runs._airflow_states`).
    """
    from airflow import settings as airflow_settings
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    if airflow_settings.Session is None:
        return None, None
    with airflow_settings.Session.session_factory() as session:
        row = session.execute(
            select(DagRun.run_after, DagRun.logical_date).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
        ).first()
    return (None, None) if row is None else (_aware(row[0]), _aware(row[1]))


def _aware(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
