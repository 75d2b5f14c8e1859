"""The data of every page and API answer, built from the plan store, the trace store and the baselines.

Callers authorize first (:mod:`agora_optimizer.ui.auth`); these functions only read. Long
lists are paginated here: a plan's tasks, its history and the trace table come a page at a
time, and the actual runtimes are aggregated in SQL for the tasks of the page alone.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from fastapi import HTTPException, status

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.optimize.pareto import Point
from agora_optimizer.plans.store import applied_at
from agora_optimizer.traces.store import TraceStoreError
from agora_optimizer.ui import schemas
from agora_optimizer.ui.auth import User, authorized_dag_ids
from agora_optimizer.ui.baseline import Comparison, comparison, front_service
from agora_optimizer.ui.plans import PlanFile, plan_reader
from agora_optimizer.ui.traces import TaskActual, TraceFilter, trace_reader

log = logging.getLogger(__name__)


def current_plan(dag_id: str) -> PlanFile:
    """The DAG's current plan; 404 when it has none."""
    entry = plan_reader().current(dag_id)
    if entry is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"DAG {dag_id} has no plan yet")
    return entry


def dag_list(user: User) -> schemas.DagList:
    """Every DAG with a current plan that the user may read."""
    readable = authorized_dag_ids(user, "GET")
    editable = authorized_dag_ids(user, "PUT")
    dags = []
    for dag_id in plan_reader().dag_ids():
        if dag_id not in readable:
            continue
        try:
            entry = plan_reader().current(dag_id)
        except AgoraError as exc:
            log.warning("agora: skipping the plan of DAG %s: %s", dag_id, exc)
            continue
        if entry is not None:
            dags.append(summary(entry, dag_id in editable))
    return schemas.DagList(total=len(dags), dags=dags)


def summary(entry: PlanFile, can_reoptimize: bool) -> schemas.DagSummary:
    plan = entry.plan
    return schemas.DagSummary(
        dag_id=entry.dag_id,
        plan_created_at=plan.created_at,
        objective=plan.objective.kind,
        method=plan.solver.method,
        solver_status=plan.solver.status,
        tasks=len(plan.assignments),
        machines=len({a.machine for a in plan.assignments}),
        makespan_s=plan.makespan_s,
        cost_usd=plan.cost_usd,
        tasks_per_resource=dict(sorted(Counter(a.resource for a in plan.assignments).items())),
        savings=savings(plan, comparison(entry)),
        can_reoptimize=can_reoptimize,
    )


def savings(plan: Plan, against: Comparison) -> schemas.Savings:
    default = against.default
    if default is None:
        return schemas.Savings(available=False, reason=against.reason)
    return schemas.Savings(
        available=True,
        default_resource=default.assignments[0].resource if default.assignments else None,
        default_makespan_s=default.makespan_s,
        default_cost_usd=default.cost_usd,
        makespan_saving=against.saving(plan.makespan_s, "makespan_s"),
        cost_saving=against.saving(plan.cost_usd, "cost_usd"),
    )


def task_page(entry: PlanFile, offset: int, limit: int, contains: str | None = None) -> schemas.TaskPage:
    """A page of the plan's tasks (in plan order), each with what the recent runs did."""
    assignments = list(entry.plan.assignments)
    if contains:
        needle = contains.lower()
        assignments = [a for a in assignments if needle in a.task.lower()]
    page = assignments[offset : offset + limit]
    runs: list[str] = []
    actuals: dict[str, TaskActual] = {}
    error = ""
    try:
        reader = trace_reader()
        runs = reader.recent_runs(entry.dag_id, int(settings.get_float("ui_recent_runs")))
        actuals = reader.actuals(entry.dag_id, runs, [a.task for a in page])
    except TraceStoreError as exc:
        log.warning("agora: %s", exc)
        error = "the trace store cannot be read; see the api-server log"
    return schemas.TaskPage(
        dag_id=entry.dag_id,
        recent_runs=runs,
        offset=offset,
        limit=limit,
        total=len(assignments),
        tasks=[_task_row(a, actuals.get(a.task)) for a in page],
        trace_store_error=error,
    )


def _task_row(a: Assignment, actual: TaskActual | None) -> schemas.TaskRow:
    return schemas.TaskRow(
        task=a.task,
        resource=a.resource,
        machine=a.machine,
        start_s=a.start_s,
        end_s=a.end_s,
        cores=a.cores,
        predicted_runtime_s=a.end_s - a.start_s,
        predicted_memory_bytes=a.memory_bytes,
        runs=actual.runs if actual else 0,
        failed=actual.failed if actual else 0,
        actual_mean_runtime_s=actual.mean_runtime_s if actual else None,
        actual_max_runtime_s=actual.max_runtime_s if actual else None,
        actual_max_peak_rss_bytes=actual.max_peak_rss_bytes if actual else None,
        ran_on=list(actual.resource_types) if actual else [],
    )


def history(dag_id: str, offset: int, limit: int) -> schemas.History:
    """The DAG's plans, newest first; the first of them is in force."""
    total, entries = plan_reader().history(dag_id, offset, limit)
    current = plan_reader().current(dag_id)
    current_created = current.plan.created_at if current else None
    plans = [
        schemas.HistoryEntry(
            created_at=e.plan.created_at,
            applied_at=_applied_at(e.path),
            objective=e.plan.objective.kind,
            method=e.plan.solver.method,
            solver_status=e.plan.solver.status,
            tasks=len(e.plan.assignments),
            makespan_s=e.plan.makespan_s,
            cost_usd=e.plan.cost_usd,
            current=offset + i == 0 and e.plan.created_at == current_created,
        )
        for i, e in enumerate(entries)
    ]
    return schemas.History(dag_id=dag_id, offset=offset, limit=limit, total=total, plans=plans)


def _applied_at(path: Path) -> str | None:
    when = applied_at(path)
    return None if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def pareto(entry: PlanFile) -> schemas.Pareto:
    """The front of the plan's workflow (or that it is being computed), with the plan as the chosen point."""
    plan = entry.plan
    chosen = schemas.FrontPoint(makespan_s=plan.makespan_s, cost_usd=plan.cost_usd, label="current plan")
    state = front_service().state(entry)
    answer = schemas.Pareto(
        dag_id=entry.dag_id,
        status=state.status,
        reason=state.reason,
        time_limit_s=settings.get_float("ui_pareto_time_limit_s"),
        plan_version=entry.version,
        chosen=chosen,
    )
    front = state.front
    if front is None:
        return answer
    answer.points = [_point(p, index=i) for i, p in enumerate(front.points)]
    answer.candidates = len(front.candidates)
    answer.default = None if front.default is None else _point(front.default, "one-type default")
    answer.lower_bound = schemas.FrontPoint(
        makespan_s=front.bounds.makespan_s, cost_usd=front.bounds.cost_usd, label="lower bounds"
    )
    return answer


def _point(p: Point, label: str | None = None, index: int | None = None) -> schemas.FrontPoint:
    objective = p.objective
    limit = f", deadline {objective.deadline_s:,.0f} s" if objective.deadline_s is not None else ""
    return schemas.FrontPoint(
        makespan_s=p.makespan_s,
        cost_usd=p.cost_usd,
        label=label or f"{objective.kind}{limit} ({p.method})",
        index=index,
    )


def trace_page(user: User, where: TraceFilter, offset: int, limit: int) -> schemas.TracePage:
    """A page of the attempts of the DAGs the user may read, newest first."""
    readable = authorized_dag_ids(user, "GET")
    if where.dag_id is not None and where.dag_id not in readable:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"you may not read DAG {where.dag_id}")
    try:
        total, rows = trace_reader().page(readable, where, offset, limit)
    except TraceStoreError as exc:
        log.warning("agora: %s", exc)
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the trace store cannot be read") from None
    attempts = [schemas.TraceRow.model_validate(row) for row in rows]
    return schemas.TracePage(offset=offset, limit=limit, total=total, attempts=attempts)


def platform_window(user: User) -> tuple[schemas.PlatformWindow, list[Assignment]]:
    """The last window in force, its runs and machines restricted to the DAGs the user may read; 404 when
    there is none. The assignments are the platform's chart: each task at its time in the window."""
    try:
        document = plan_reader().store.window()
    except AgoraError as exc:
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc)) from None
    if document is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no window of many DAGs is in force")
    readable = authorized_dag_ids(user, "GET")
    runs = [schemas.WindowRun(**{k: row[k] for k in schemas.WindowRun.model_fields}) for row in document["runs"]]
    shown = [run for run in runs if run.dag_id in readable]
    bars = [
        Assignment(
            f"{m['run']}/{m['task']}",
            m["resource"],
            m["machine"],
            m["start_s"],
            m["end_s"],
            m["cores"],
            m["memory_bytes"],
        )
        for m in document["machines"]
        if m["dag_id"] in readable
    ]
    ways = {
        name: schemas.WindowWay(
            cost_usd=way["cost_usd"],
            late_runs=way["late_runs"],
            over_counts={kind: over["peak"] for kind, over in way["over_counts"].items()},
        )
        for name, way in document["ways"].items()
    }
    window = schemas.PlatformWindow(
        created_at=document["created_at"],
        start=document["window"]["start"],
        length_s=document["window"]["length_s"],
        catalog=Path(str(document["catalog"])).name,  # the file, not the server's directories
        runs=shown,
        hidden_runs=len(runs) - len(shown),
        machines=len({a.machine for a in bars}),
        cost_lower_bound_usd=document["cost_lower_bound_usd"],
        ways=ways if len(shown) == len(runs) else {},  # the totals would tell of the hidden runs
    )
    return window, bars
