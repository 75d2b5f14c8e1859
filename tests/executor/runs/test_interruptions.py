"""The executor's side of spot capacity, on a backend that reports what the test tells it (no processes).

The real path (a reclaimed Spot Instance on AWS Batch, the real backend, the executor) is
tests/executor/backends/aws/test_aws_batch_spot.py against moto; here are the executor's decisions:
when it re-runs on the fallback, when Airflow hears of the interruption instead, and what is recorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus
from agora_optimizer.executor.worker.preemption import SPOT_ENV

MIB = 2**20
CATALOG = """
network: {bandwidth_bytes_per_s: 2000000000}
resources:
  - {name: local-large, backend: local, vcpus: 2, memory_gib: 8, speed: 1.0, price_per_hour_usd: 0.1, count: 1}
  - {name: local-spot, backend: local, vcpus: 2, memory_gib: 8, speed: 1.0, price_per_hour_usd: 0.03, count: 1,
     spot: true, interruption_rate_per_hour: 0.01, fallback: local-large}
"""
RECLAIMED = "node taken back by its provider"
T0 = datetime(2026, 12, 3, 7, 0, tzinfo=UTC)
HELD = timedelta(seconds=42)  # how long the interrupted spot job ran


class Scripted(Backend):
    """Runs nothing: each job ends at its second poll, interrupted while it runs on one of ``interrupting``."""

    name = "local"

    def __init__(self, interrupting: set[str]) -> None:
        self.interrupting = interrupting
        self.submitted: list[tuple[str, str]] = []  # (resource, key)
        self.environments: list[Mapping[str, str]] = []
        self.polls: dict[str, int] = {}

    def submit(self, job: JobSpec) -> str:
        external_id = f"job-{len(self.submitted)}"
        self.submitted.append((job.resource, job.key))
        self.environments.append(job.environment)
        self.polls[external_id] = 0
        return external_id

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        statuses = {}
        for external_id in external_ids:
            self.polls[external_id] += 1
            resource = self.submitted[int(external_id.split("-")[1])][0]
            if self.polls[external_id] < 2:
                statuses[external_id] = JobStatus("running", host="node-1")
            elif resource in self.interrupting:
                statuses[external_id] = JobStatus(
                    "finished", exit_code=1, reason=RECLAIMED, interrupted=True, started_at=T0, ended_at=T0 + HELD
                )
            else:
                statuses[external_id] = JobStatus("finished", exit_code=0)
        return statuses

    def cancel(self, external_id: str) -> None:
        pass


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    catalog = tmp_path / "spot.yaml"
    catalog.write_text(CATALOG)
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(catalog))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__AIRFLOW_POOLS", "False")
    executor = AgoraExecutor()
    executor._start_local_pools = lambda: None  # no fork server: the scripted backend runs nothing
    executor.start()
    return executor


@pytest.fixture
def requeued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, int]]:
    """Airflow's metadata database, played: every try may go back to QUEUED (the calls are recorded)."""
    from agora_optimizer.executor.runs import interruptions

    calls: list[tuple[Any, int]] = []
    monkeypatch.setattr(interruptions, "requeue_task_instance", lambda ti_id, n: calls.append((ti_id, n)) or "")
    return calls


def workload(resource: str, try_number: int = 1, task_id: str = "t") -> Any:
    from airflow.executors.workloads import ExecuteTask
    from airflow.executors.workloads.base import BundleInfo
    from airflow.executors.workloads.task import TaskInstanceDTO

    placement = {"resource": resource, "cores": 1, "memory_bytes": 256 * MIB}
    ti = TaskInstanceDTO(
        id=uuid.uuid4(), dag_version_id=uuid.uuid4(), task_id=task_id, dag_id="unit", run_id="r1",
        try_number=try_number, map_index=-1, pool_slots=1, priority_weight=1, queue="default",
        executor_config={"agora": {"placement": placement}},
    )  # fmt: skip
    return ExecuteTask(
        ti=ti, dag_rel_path="unit.py", token="first", log_path=None, bundle_info=BundleInfo(name="dags-folder")
    )


def run(executor: Any, backend: Scripted, item: Any, syncs: int = 8) -> list[tuple[Any, Any]]:
    """Hand ``item`` over and sync; the task's final events, in order (QUEUED ones left out)."""
    from airflow.utils.state import TaskInstanceState

    executor._backends["local"] = backend
    executor.queued_tasks[item.ti.key] = item
    executor._process_workloads([item])
    events: list[tuple[Any, Any]] = []
    for _ in range(syncs):
        executor.sync()
        for key, event in executor.get_event_buffer().items():
            if key == item.ti.key and event[0] != TaskInstanceState.QUEUED:
                events.append(event)
    return events


def traces(tmp_path: Path) -> tuple[list[Any], list[Any]]:
    from agora_optimizer.runs.store import RunStore

    with RunStore(f"sqlite:///{tmp_path / 'traces.db'}") as store:
        return store.attempts(dag_id="unit"), store.repairs("unit", "r1")


def leases(tmp_path: Path) -> list[Any]:
    from agora_optimizer.runs.store import RunStore

    with RunStore(f"sqlite:///{tmp_path / 'traces.db'}") as store:
        return store.leases("unit", "r1")


def test_an_interrupted_spot_task_reruns_its_try_on_the_fallback_and_airflow_sees_one_success(
    executor: Any, requeued: list[tuple[Any, int]], tmp_path: Path
) -> None:
    from airflow.utils.state import TaskInstanceState

    backend = Scripted({"local-spot"})
    item = workload("local-spot")
    events = run(executor, backend, item)
    assert [state for state, _ in events] == [TaskInstanceState.SUCCESS]
    assert [resource for resource, _ in backend.submitted] == ["local-spot", "local-large"]
    assert backend.submitted[0][1] == backend.submitted[1][1]  # the same try: the same job key and directory
    spot, fallback = backend.environments  # the worker on spot capacity tells a preemption from a cancel
    assert (spot.get(SPOT_ENV), spot["AGORA_RESOURCE_TYPE"]) == ("1", "local-spot")
    assert SPOT_ENV not in fallback and fallback["AGORA_RESOURCE_TYPE"] == "local-large"
    assert fallback["AGORA_MACHINE"] == ""  # no planned machine: the trace row names none
    assert requeued == [(item.ti.id, 1)] and item.ti.key not in executor.running
    (attempt,), (repair,) = traces(tmp_path)
    assert attempt.resource_type == "local-large" and attempt.state == "success" and attempt.try_number == 1
    assert repair.reason == f"task t interrupted on spot local-spot: {RECLAIMED}"
    assert repair.detail.startswith("local job job-0, ran 2026-12-03T07:00:00+00:00 to 2026-12-03T07:00:42+00:00;")
    assert repair.tasks == ("t",)
    assert repair.detail.endswith("re-run on local-large (on demand), the same try 1")
    assert not executor._on_fallback  # the fallback's job ended: later runs follow their plan again
    # The interrupted job's spot time was billed: a lease of the run (the try's row is now the re-run's).
    [held] = leases(tmp_path)
    assert (held.machine, held.resource, held.external_id, held.source) == (
        "",
        "local-spot",
        "job-0",
        "interrupted job",
    )
    assert (held.started_at, held.seconds) == (T0, HELD.total_seconds())


def test_a_try_airflow_no_longer_runs_fails_with_the_interruption_and_its_next_try_runs_on_the_fallback(
    executor: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor.runs import interruptions

    gone = "Airflow no longer has try 1 running or queued (it may have failed it already)"
    monkeypatch.setattr(interruptions, "requeue_task_instance", lambda ti_id, n: gone)
    backend = Scripted({"local-spot"})
    [(state, info)] = run(executor, backend, workload("local-spot"))
    assert state == TaskInstanceState.FAILED
    assert info == (f"agora: unit.t run r1 try 1 on local-spot interrupted (its capacity was taken back): {RECLAIMED}")
    [(state, _)] = run(executor, backend, workload("local-spot", try_number=2))  # Airflow's retry
    assert state == TaskInstanceState.SUCCESS
    assert [resource for resource, _ in backend.submitted] == ["local-spot", "local-large"]
    attempts, (repair,) = traces(tmp_path)
    assert [(a.try_number, a.resource_type, a.state) for a in attempts] == [
        (1, "local-spot", "interrupted"),
        (2, "local-large", "success"),
    ]
    assert "reported to Airflow as try 1's failure; its next try runs on local-large (on demand)" in repair.detail
    assert leases(tmp_path) == []  # try 1's own row (interrupted, on local-spot) counts its spot time


def test_a_rerun_on_the_fallback_is_not_rerun_again_and_other_types_fail_as_before(
    executor: Any, requeued: list[tuple[Any, int]], tmp_path: Path
) -> None:
    from airflow.utils.state import TaskInstanceState

    backend = Scripted({"local-spot", "local-large"})  # a backend that says its on-demand capacity went too
    [(state, info)] = run(executor, backend, workload("local-spot"))
    assert state == TaskInstanceState.FAILED and "try 1 on local-large interrupted" in info
    assert [resource for resource, _ in backend.submitted] == ["local-spot", "local-large"]  # one re-run, no more

    [(state, info)] = run(executor, backend, workload("local-large", task_id="u"))
    assert state == TaskInstanceState.FAILED and "unit.u run r1 try 1 on local-large interrupted" in info
    assert len(requeued) == 1  # only the spot try went back to Airflow's queue
    attempts, repairs = traces(tmp_path)
    assert len(repairs) == 1 and {a.task_id: a.state for a in attempts} == {"t": "interrupted", "u": "interrupted"}


def test_requeue_task_instance_says_why_without_airflows_database(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow import settings as airflow_settings

    from agora_optimizer.executor.runs.interruptions import requeue_task_instance

    monkeypatch.setattr(airflow_settings, "Session", None)
    assert requeue_task_instance(uuid.uuid4(), 1) == "no Airflow metadata database in this process"


@dataclass
class TaskInstanceTable:
    """Airflow's own ``task_instance`` table (and the ``dag_run`` it joins) in an in-memory SQLite that Airflow's
    ``Session`` opens."""

    engine: Any
    table: Any

    def add(self, task_id: str, state: str, **columns: Any) -> uuid.UUID:
        """A try 1 of task ``task_id`` in ``state`` (scheduled from a spot node), with ``columns`` besides."""
        ti_id = uuid.uuid4()
        row = {
            "id": ti_id, "task_id": task_id, "dag_id": "unit", "run_id": "r1", "map_index": -1, "try_number": 1,
            "state": state, "pool": "default_pool", "pool_slots": 1, "queue": "default", "priority_weight": 1,
            "max_tries": 1, "hostname": "spot-node", "unixname": "", "dag_version_id": uuid.uuid4(), **columns,
        }  # fmt: skip
        with self.engine.begin() as connection:
            connection.execute(self.table.insert().values(**{k: v for k, v in row.items() if k in self.table.c}))
        return ti_id

    def column(self, name: str) -> dict[str, Any]:
        """``name`` of every row, by task id."""
        with self.engine.begin() as connection:
            return dict(connection.execute(select(self.table.c.task_id, self.table.c[name])).all())


@pytest.fixture
def task_instances(monkeypatch: pytest.MonkeyPatch) -> TaskInstanceTable:
    """The statement the executor runs on the scheduler's metadata database meets Airflow's real table."""
    import sqlalchemy as sa
    from airflow import settings as airflow_settings
    from airflow.models import import_all_models
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy.orm import scoped_session, sessionmaker

    import_all_models()  # the table's foreign keys name the others
    engine = sa.create_engine("sqlite://", poolclass=sa.pool.StaticPool)
    TaskInstance.__table__.create(engine)
    DagRun.__table__.create(engine)
    with engine.begin() as connection:
        run = {"dag_id": "unit", "run_id": "r1", "run_type": "manual", "run_after": T0, "log_template_id": None}
        connection.execute(DagRun.__table__.insert().values(**run))
    monkeypatch.setattr(airflow_settings, "Session", scoped_session(sessionmaker(bind=engine)))
    return TaskInstanceTable(engine, TaskInstance.__table__)


@contextmanager
def settings_session() -> Iterator[Any]:
    """A session of Airflow's ``Session`` factory (the table's database), closed after use."""
    from airflow import settings as airflow_settings

    with airflow_settings.Session.session_factory() as session:
        yield session


def test_requeue_task_instance_puts_a_running_try_back_to_queued_and_nothing_else(
    task_instances: TaskInstanceTable,
) -> None:
    from agora_optimizer.executor.runs.interruptions import requeue_task_instance

    ids = {state: task_instances.add(state, state) for state in ("running", "queued", "failed")}
    assert requeue_task_instance(ids["running"], 1) == ""
    assert requeue_task_instance(ids["queued"], 1) == ""  # the job never started its task: as good
    assert requeue_task_instance(ids["failed"], 1).startswith("Airflow no longer has try 1 running or queued")
    assert requeue_task_instance(ids["running"], 2).startswith("Airflow no longer has try 2")  # another try
    assert task_instances.column("state") == {"running": "queued", "queued": "queued", "failed": "failed"}


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

    from agora_optimizer.executor.runs.interruptions import requeue_task_instance

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
