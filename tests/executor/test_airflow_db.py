"""The executor's statements on Airflow's metadata database (executor/airflow_db.py), on Airflow's own tables."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.executor.conftest import RUN_AFTER, TaskInstanceTable, settings_session

# each statement on both databases Airflow's metadata lives in
ON_BOTH_DATABASES = pytest.mark.parametrize("task_instances", ["sqlite", "postgresql"], indirect=True)


@ON_BOTH_DATABASES
def test_task_states_name_each_task_instance_by_its_plan_name_and_a_task_not_scheduled_yet_as_none(
    task_instances: TaskInstanceTable,
) -> None:
    from agora_optimizer.executor.airflow_db import NO_STATE, task_states

    task_instances.add("a", "success")
    task_instances.add("b", None)  # its upstream tasks still run
    task_instances.add("m", "running", map_index=2)
    assert task_states("unit", "r1") == {"a": "success", "b": NO_STATE, "m[2]": "running"}
    assert task_states("unit", "r2") == {}


@ON_BOTH_DATABASES
def test_run_times_are_the_runs_dates_and_none_for_a_run_airflow_does_not_have(
    task_instances: TaskInstanceTable,
) -> None:
    from agora_optimizer.executor.airflow_db import run_times

    assert run_times("unit", "r1") == (RUN_AFTER, None)  # a run triggered by hand has no logical date
    assert run_times("unit", "r2") == (None, None)


def test_requeue_task_instance_says_why_without_airflows_database(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow import settings as airflow_settings

    from agora_optimizer.executor.airflow_db import requeue_task_instance

    monkeypatch.setattr(airflow_settings, "Session", None)
    assert requeue_task_instance(uuid.uuid4(), 1) == "no Airflow metadata database in this process"


@ON_BOTH_DATABASES
def test_requeue_task_instance_puts_a_running_try_back_to_queued_and_nothing_else(
    task_instances: TaskInstanceTable,
) -> None:
    from agora_optimizer.executor.airflow_db import requeue_task_instance

    ids = {state: task_instances.add(state, state) for state in ("running", "queued", "failed")}
    assert requeue_task_instance(ids["running"], 1) == ""
    assert requeue_task_instance(ids["queued"], 1) == ""  # the job never started its task: as good
    assert requeue_task_instance(ids["failed"], 1).startswith("Airflow no longer has try 1 running or queued")
    assert requeue_task_instance(ids["running"], 2).startswith("Airflow no longer has try 2")  # another try
    assert task_instances.column("state") == {"running": "queued", "queued": "queued", "failed": "failed"}


@ON_BOTH_DATABASES
def test_a_requeued_try_waits_a_whole_task_queued_timeout_before_airflow_calls_it_stuck(
    task_instances: TaskInstanceTable,
) -> None:
    """Airflow's scheduler revokes (and after two rounds fails) a try QUEUED since before ``[scheduler]
    task_queued_timeout``, by its ``queued_dttm`` (``SchedulerJobRunner._get_tis_stuck_in_queued``, run here
    on the table). A try queued an hour ago and interrupted goes back to QUEUED for its re-run: its wait for
    the fallback counts from the requeue, not from the hour-old queueing, or the next check (every
    ``task_queued_timeout_check_interval``) would revoke a re-run that has only just been handed over."""
    from airflow.executors.local_executor import LocalExecutor
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    from agora_optimizer.executor.airflow_db import requeue_task_instance

    scheduler = SchedulerJobRunner(Job(id=7), executors=[LocalExecutor()])
    timeout = timedelta(seconds=scheduler._task_queued_timeout)
    queued_at = datetime.now(UTC) - 6 * timeout  # the first queueing: the spot job then ran for a while
    running = task_instances.add("running", "running", queued_dttm=queued_at, queued_by_job_id=7)
    task_instances.add("stuck", "queued", queued_dttm=queued_at, queued_by_job_id=7)  # Airflow's own case
    with settings_session() as session:
        assert [ti.task_id for ti in scheduler._get_tis_stuck_in_queued(session)] == ["stuck"]

    before = datetime.now(UTC)
    assert requeue_task_instance(running, 1) == ""
    with settings_session() as session:
        assert [ti.task_id for ti in scheduler._get_tis_stuck_in_queued(session)] == ["stuck"]
    requeued_at = task_instances.column("queued_dttm")["running"]
    assert before <= requeued_at.replace(tzinfo=UTC) <= datetime.now(UTC)
    assert task_instances.column("queued_by_job_id")["running"] == 7  # still this scheduler's to watch


@ON_BOTH_DATABASES
def test_reprioritize_gives_tasks_not_queued_yet_their_new_weight_where_agora_gave_the_old_one(
    task_instances: TaskInstanceTable,
) -> None:
    """After a repair, Airflow must queue the tasks the run now needs first: it queues by ``priority_weight``."""
    from agora_optimizer.executor.airflow_db import reprioritize

    task_instances.add("waiting", None, priority_weight=3)  # its upstream tasks still run
    task_instances.add("ready", "scheduled", priority_weight=2)
    task_instances.add("queued", "queued", priority_weight=4)  # queued already: too late to matter
    task_instances.add("authored", "scheduled", priority_weight=50)  # its author's weight, not agora's 5
    task_instances.add("mapped", "scheduled", priority_weight=1, map_index=0)
    weights = {"waiting": (3, 7), "ready": (2, 8), "queued": (4, 9), "authored": (5, 10), "mapped": (1, 11)}
    assert reprioritize("unit", "r1", weights) == 2
    assert task_instances.column("priority_weight") == {
        "waiting": 7, "ready": 8, "queued": 4, "authored": 50, "mapped": 1,
    }  # fmt: skip
    assert reprioritize("unit", "r2", weights) == 0  # another run's tasks are not touched
    assert reprioritize("unit", "r1", {}) == 0
