"""The re-optimize action: queue a run of the rerun DAG ``agora_reoptimize`` for one DAG.

A run with ``{"dag_id": X}`` in its conf retrains the predictor and re-plans X alone
(``dags/agora_reoptimize.py``). The run is created in Airflow's metadata database the way
Airflow's own trigger endpoint does (:func:`airflow.api.common.trigger_dag.trigger_dag`),
marked as triggered from the UI by the user who asked. While a run for X still waits or
runs, asking again returns that run instead of queuing another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agora_optimizer.errors import AgoraError

RERUN_DAG_ID = "agora_reoptimize"


class RerunError(AgoraError):
    """The DAG or the rerun DAG is not in Airflow's database."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class QueuedRun:
    run_id: str
    state: str
    already_queued: bool


def queue_reoptimization(dag_id: str, user_name: str) -> QueuedRun:
    """Queue (or find queued) a run of the rerun DAG for ``dag_id``."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.exceptions import DagNotFound
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from airflow.utils.types import DagRunTriggeredByType

    with create_session() as session:
        if session.get(DagModel, dag_id) is None:
            raise RerunError(f"DAG {dag_id} is not in Airflow", 404)
        if session.get(DagModel, RERUN_DAG_ID) is None:
            raise RerunError(f"the rerun DAG {RERUN_DAG_ID} is not deployed in this Airflow", 503)
        waiting = _waiting_run(session, dag_id)
        if waiting is not None:
            return QueuedRun(str(waiting.run_id), str(waiting.state), already_queued=True)
        try:
            run = trigger_dag(
                RERUN_DAG_ID,
                triggered_by=DagRunTriggeredByType.UI,
                triggering_user_name=user_name,
                conf={"dag_id": dag_id},
                session=session,
            )
        except (DagNotFound, ValueError) as exc:
            raise RerunError(f"cannot queue {RERUN_DAG_ID}: {exc}", 503) from None
        if run is None:
            raise RerunError(f"Airflow did not create a run of {RERUN_DAG_ID}", 503)
        return QueuedRun(str(run.run_id), str(run.state), already_queued=False)


def _waiting_run(session: Any, dag_id: str) -> Any:
    from airflow.models.dagrun import DagRun
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    active = session.scalars(
        select(DagRun).where(DagRun.dag_id == RERUN_DAG_ID, DagRun.state.in_([DagRunState.QUEUED, DagRunState.RUNNING]))
    )
    return next((run for run in active if (run.conf or {}).get("dag_id") == dag_id), None)
