"""What the AgoraExecutor reads from and writes to Airflow's metadata database, each in a session of its own.

Four statements, all the executor's own I/O with the database but for the pools it creates at start
(:mod:`~agora_optimizer.executor.airflow_pools`; its other I/O with Airflow goes through ``BaseExecutor``:
events, ``change_state``): each run's task states (:func:`task_states`, for the
machine order and repairs), a run's dates (:func:`run_times`, to find its run plan), an interrupted
spot try put back in Airflow's queue (:func:`requeue_task_instance`, to re-run it on its fallback), and the
priority weights of a repaired run's tasks Airflow has not queued yet (:func:`reprioritize`).
The scheduler's thread-local session is never used: it commits on exit, which Airflow forbids inside
the scheduler's loop (its HA locks), and sharing it would mix these statements into the scheduler's
transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from agora_optimizer.model.instances import instance_id

NO_STATE = "none"  # a task instance Airflow has not scheduled yet (its state is NULL)


def task_states(dag_id: str, run_id: str) -> dict[str, str]:
    """The state of each task instance of a DAG run, from Airflow's metadata database, by its plan
    name (``task[i]`` for a mapped task's instance; a mapped task not expanded yet is its one instance
    of map index -1, by its task id).

    A task with no state yet (its upstream tasks still run) is in it too, as :data:`NO_STATE`: the run
    has it, and it is still to come (left out, the machine order took it for a task the run lacks).

    A read-only session of its own, never committed.
    """
    from airflow import settings as airflow_settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    if airflow_settings.Session is None:
        return {}
    with airflow_settings.Session.session_factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        ).all()
    return {
        instance_id(str(task_id), int(index)): str(state) if state is not None else NO_STATE
        for task_id, index, state in rows
    }


def run_times(dag_id: str, run_id: str) -> tuple[datetime | None, datetime | None]:
    """The run's ``run_after`` and logical date from Airflow's metadata database ((None, None): no such run).

    A read-only session of its own, never committed (as :func:`task_states` reads).
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


def requeue_task_instance(ti_id: Any, try_number: int) -> str:
    """Put try ``try_number`` of the task instance ``ti_id`` back to QUEUED in Airflow's metadata database,
    from RUNNING or QUEUED only; '' when done, else why not (for the log).

    ``queued_dttm`` becomes now, as the scheduler sets it when it queues a try: Airflow revokes a try QUEUED
    since before ``[scheduler] task_queued_timeout`` by that column, and the re-run's wait for the fallback
    starts here, not when the try was first queued (maybe hours ago, before its spot job ran). The other
    columns stay: ``queued_by_job_id`` is already this scheduler's (the executor holds the try's workload),
    and the Execution API's start of the re-run writes ``hostname``, ``pid``, ``start_date`` and
    ``last_heartbeat_at`` anew.

    A session of its own, committed at once (as :func:`task_states` reads: never the scheduler's
    thread-local session, whose transaction this must not join)."""
    from airflow import settings as airflow_settings
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import update

    if airflow_settings.Session is None:
        return "no Airflow metadata database in this process"
    with airflow_settings.Session.session_factory() as session:
        changed = session.execute(
            update(TaskInstance)
            .where(
                TaskInstance.id == ti_id,
                TaskInstance.try_number == try_number,
                TaskInstance.state.in_([TaskInstanceState.RUNNING, TaskInstanceState.QUEUED]),
            )
            .values(state=TaskInstanceState.QUEUED, queued_dttm=datetime.now(UTC))
            .execution_options(synchronize_session=False)
        )
        session.commit()
    if changed.rowcount != 1:
        return f"Airflow no longer has try {try_number} running or queued (it may have failed it already)"
    return ""


REPRIORITIZE_CHUNK = 500  # task instances per statement


def reprioritize(dag_id: str, run_id: str, weights: Mapping[str, tuple[int, int]]) -> int:
    """Give each unmapped task of ``weights`` (task id -> (weight now, new weight)) of the run its new
    ``priority_weight`` in Airflow's metadata database, where Airflow has not queued it yet and its weight is
    still the one agora gave it (a weight its author set, or a task queued meanwhile, is left as it is); returns
    how many task instances changed.

    Airflow sets a task instance's weight when it creates it and queues ready ones by it, highest first, up to
    the DAG's ``max_active_tasks`` (``SchedulerJobRunner._executable_task_instances_to_queued``): after a repair,
    a task the run now needs soon but the plan started late would wait behind tasks the executor holds for later
    turns, and its machine's lease with it. A session of its own, committed at once."""
    from airflow import settings as airflow_settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import case, or_, tuple_, update

    if airflow_settings.Session is None or not weights:
        return 0
    changed = 0
    items = sorted(weights.items())
    with airflow_settings.Session.session_factory() as session:
        for first in range(0, len(items), REPRIORITIZE_CHUNK):
            chunk = items[first : first + REPRIORITIZE_CHUNK]
            done = session.execute(
                update(TaskInstance)
                .where(
                    TaskInstance.dag_id == dag_id,
                    TaskInstance.run_id == run_id,
                    TaskInstance.map_index == -1,
                    tuple_(TaskInstance.task_id, TaskInstance.priority_weight).in_(
                        [(task_id, now) for task_id, (now, _) in chunk]
                    ),
                    or_(TaskInstance.state.is_(None), TaskInstance.state == "scheduled"),
                )
                .values(priority_weight=case({task_id: new for task_id, (_, new) in chunk}, value=TaskInstance.task_id))
                .execution_options(synchronize_session=False)
            )
            changed += done.rowcount
        session.commit()
    return changed
