"""agora_reoptimize: retrain the predictor on new traces and re-plan every DAG that opted in.

Scheduled by ``[agora] reoptimize_schedule`` (default daily). A DAG opts in with the tag
``[agora] reoptimize_tag`` (default ``agora``). Each re-plan becomes the DAG's current plan
(the cluster policy applies it at the next parse) and is kept in its plan history
(``agora plans history DAG_ID``), unless it is the plan in force already; the history keeps
``[agora] plan_history_max`` entries per DAG, and every plan a recorded run names. Trigger it
with ``{"dag_id": "..."}`` in the run's conf to re-plan one DAG now (the UI's re-optimize action
does this).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, get_current_context, task

from agora_optimizer import settings
from agora_optimizer.integration.reoptimize import RERUN_DAG_ID

log = logging.getLogger(__name__)

with DAG(
    dag_id=RERUN_DAG_ID,
    schedule=settings.get("reoptimize_schedule") or None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["agora-system"],
    doc_md=__doc__,
):

    @task
    def retrain() -> dict[str, Any]:
        """Fit the predictor on the trace store (skipped when nothing new was recorded)."""
        from agora_optimizer.integration.reoptimize import model_dir, retrain
        from agora_optimizer.traces.store import default_store_url

        result = retrain(default_store_url(), model_dir(), settings.configured_catalog(required=True))
        return {"trained": result.trained, "attempts": result.attempts, "reason": result.reason}

    @task
    def dags_to_replan(_trained: dict[str, Any]) -> list[str]:
        """The DAG named in the run's conf, else every DAG with the opt-in tag."""
        from agora_optimizer.integration.airflow_dag import dag_folder
        from agora_optimizer.integration.reoptimize import opted_in_dags

        asked = (get_current_context()["dag_run"].conf or {}).get("dag_id")
        if asked:
            return [str(asked)]
        return opted_in_dags(dag_folder(), settings.get("reoptimize_tag"))

    @task
    def replan(dag_id: str) -> dict[str, Any]:
        """Predict, optimize and put in force a new plan for one DAG."""
        from agora_optimizer.integration.reoptimize import model_dir, replan
        from agora_optimizer.plans.store import default_plan_store
        from agora_optimizer.traces.store import default_store_url

        stored = replan(
            dag_id,
            settings.configured_catalog(required=True),
            default_plan_store(),
            store_url=default_store_url(),
            models=model_dir(),
            objective=settings.get("objective"),
            time_limit_s=settings.get_float("plan_time_limit_s"),
        )
        plan = stored.plan
        if stored.unchanged:
            log.info("%s: the new plan is the one in force (%s): no history entry added", dag_id, stored.path.name)
        if stored.pruned:
            log.info("%s: %d plan history entries past [agora] plan_history_max removed", dag_id, len(stored.pruned))
        return {
            "dag_id": dag_id,
            "makespan_s": plan.makespan_s,
            "cost_usd": plan.cost_usd,
            "plan": str(stored.path),
            "unchanged": stored.unchanged,
            "pruned": len(stored.pruned),
        }

    replan.expand(dag_id=dags_to_replan(retrain()))
