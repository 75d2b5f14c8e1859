"""Putting a point of a plan's Pareto front in force, from the agora view (edit rights on the DAG).

The front of the current plan (:mod:`agora_optimizer.ui.baseline`) keeps each point's schedule;
applying point ``i`` writes it, as a plan in the spec's format, into the plan store as the DAG's
current plan, with the workflow it was planned on beside it in the history, as
``agora plans apply`` does. The request names the plan version its front was read for: when the
plan has changed since (another user applied, a re-optimization ran), the request is refused
(409) rather than applying a point of another front.
"""

from __future__ import annotations

import logging

from fastapi import HTTPException, status

from agora_optimizer.plans.store import PlanStoreError
from agora_optimizer.ui import schemas
from agora_optimizer.ui.baseline import front_service
from agora_optimizer.ui.plans import plan_reader
from agora_optimizer.ui.queries import current_plan

log = logging.getLogger(__name__)


def apply_front_point(dag_id: str, index: int, plan_version: str, user_name: str) -> schemas.ApplyPointResponse:
    entry = current_plan(dag_id)
    if entry.version != plan_version:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"the plan of DAG {dag_id} changed since this front was read: reload the page"
        )
    state = front_service().state(entry)
    if state.computed is None:
        reason = f": {state.reason}" if state.reason else ""
        raise HTTPException(status.HTTP_409_CONFLICT, f"the front of DAG {dag_id} is {state.status}{reason}")
    points = state.computed.front.points
    if index >= len(points):
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"the front of DAG {dag_id} has {len(points)} points (0 to {len(points) - 1})"
        )
    plan = state.computed.plan(index)
    reader = plan_reader()
    try:
        reader.store.save(dag_id, plan, state.computed.workflow)
    except PlanStoreError as exc:
        log.error("agora: %s", exc)
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, f"plan of DAG {dag_id} not saved") from None
    log.info(
        "agora: %s put point %d of the Pareto front in force for DAG %s (makespan %.1f s, cost %.4f USD)",
        user_name,
        index,
        dag_id,
        plan.makespan_s,
        plan.cost_usd,
    )
    applied = current_plan(dag_id)
    return schemas.ApplyPointResponse(
        dag_id=dag_id,
        index=index,
        plan_version=applied.version,
        objective=plan.objective.kind,
        makespan_s=plan.makespan_s,
        cost_usd=plan.cost_usd,
        tasks=len(plan.assignments),
    )
