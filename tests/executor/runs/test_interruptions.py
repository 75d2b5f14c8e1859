"""The executor's side of spot capacity, on a backend that reports what the test tells it (no processes).

The real path (a reclaimed Spot Instance on AWS Batch, the real backend, the executor) is
tests/executor/backends/aws/test_spot.py against moto; here are the executor's decisions:
when it re-runs on the fallback, when Airflow hears of the interruption instead, and what is recorded.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus
from agora_optimizer.executor.worker.preemption import SPOT_ENV
from tests.executor.conftest import TaskInstanceTable
from tests.executor.test_agora_executor import hand_over

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
    from agora_optimizer.executor.backends.registry import register_backend, unregister_backend

    catalog = tmp_path / "spot.yaml"
    catalog.write_text(CATALOG)
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(catalog))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__AIRFLOW_POOLS", "False")
    previous = register_backend("local", lambda resources: Scripted(set()))  # no fork server: it runs nothing
    try:
        executor = AgoraExecutor()
        executor.start()
    finally:
        unregister_backend("local", previous)
    return executor


def workload(resource: str, try_number: int = 1, task_id: str = "t", ti_id: Any = None) -> Any:
    from airflow.executors.workloads import ExecuteTask
    from airflow.executors.workloads.base import BundleInfo
    from airflow.executors.workloads.task import TaskInstanceDTO

    placement = {"resource": resource, "cores": 1, "memory_bytes": 256 * MIB}
    ti = TaskInstanceDTO(
        id=ti_id or uuid.uuid4(), dag_version_id=uuid.uuid4(), task_id=task_id, dag_id="unit", run_id="r1",
        try_number=try_number, map_index=-1, pool_slots=1, priority_weight=1, queue="default",
        executor_config={"agora": {"placement": placement}},
    )  # fmt: skip
    return ExecuteTask(
        ti=ti, dag_rel_path="unit.py", token="first", log_path=None, bundle_info=BundleInfo(name="dags-folder")
    )


def run(executor: Any, backend: Scripted, item: Any, syncs: int = 8) -> list[tuple[Any, Any]]:
    """Hand ``item`` over and sync; the task's final events, in order (QUEUED ones left out)."""
    from airflow.utils.state import TaskInstanceState

    executor.backends.use("local", backend)
    hand_over(executor, [item])
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
    executor: Any, task_instances: TaskInstanceTable, tmp_path: Path
) -> None:
    from airflow.utils.state import TaskInstanceState

    backend = Scripted({"local-spot"})
    item = workload("local-spot", ti_id=task_instances.add("t", "running"))  # its task process had set it running
    events = run(executor, backend, item)
    assert [state for state, _ in events] == [TaskInstanceState.SUCCESS]
    assert [resource for resource, _ in backend.submitted] == ["local-spot", "local-large"]
    assert backend.submitted[0][1] == backend.submitted[1][1]  # the same try: the same job key and directory
    spot, fallback = backend.environments  # the worker on spot capacity tells a preemption from a cancel
    assert (spot.get(SPOT_ENV), spot["AGORA_RESOURCE_TYPE"]) == ("1", "local-spot")
    assert SPOT_ENV not in fallback and fallback["AGORA_RESOURCE_TYPE"] == "local-large"
    assert fallback["AGORA_MACHINE"] == ""  # no planned machine: the trace row names none
    assert task_instances.column("state") == {"t": "queued"} and item.ti.key not in executor.running
    (attempt,), (repair,) = traces(tmp_path)
    assert attempt.resource_type == "local-large" and attempt.state == "success" and attempt.try_number == 1
    assert repair.reason == f"task t interrupted on spot local-spot: {RECLAIMED}"
    assert repair.detail.startswith("local job job-0, ran 2026-12-03T07:00:00+00:00 to 2026-12-03T07:00:42+00:00;")
    assert repair.tasks == ("t",)
    assert repair.detail.endswith("re-run on local-large (on demand), the same try 1")
    assert not executor.runs.on_fallback  # the fallback's job ended: later runs follow their plan again
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
    executor: Any, task_instances: TaskInstanceTable, tmp_path: Path
) -> None:
    from airflow.utils.state import TaskInstanceState

    failed = task_instances.add("t", "failed")  # the scheduler has already failed the try (a zombie)
    backend = Scripted({"local-spot"})
    [(state, info)] = run(executor, backend, workload("local-spot", ti_id=failed))
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
    assert task_instances.column("state") == {"t": "failed"}
    assert leases(tmp_path) == []  # try 1's own row (interrupted, on local-spot) counts its spot time


def test_a_rerun_on_the_fallback_is_not_rerun_again_and_other_types_fail_as_before(
    executor: Any, task_instances: TaskInstanceTable, tmp_path: Path
) -> None:
    from airflow.utils.state import TaskInstanceState

    backend = Scripted({"local-spot", "local-large"})  # a backend that says its on-demand capacity went too
    [(state, info)] = run(executor, backend, workload("local-spot", ti_id=task_instances.add("t", "running")))
    assert state == TaskInstanceState.FAILED and "try 1 on local-large interrupted" in info
    assert [resource for resource, _ in backend.submitted] == ["local-spot", "local-large"]  # one re-run, no more

    u = workload("local-large", task_id="u", ti_id=task_instances.add("u", "running"))
    [(state, info)] = run(executor, backend, u)
    assert state == TaskInstanceState.FAILED and "unit.u run r1 try 1 on local-large interrupted" in info
    assert task_instances.column("state") == {"t": "queued", "u": "running"}  # only the spot try went back
    attempts, repairs = traces(tmp_path)
    assert len(repairs) == 1 and {a.task_id: a.state for a in attempts} == {"t": "interrupted", "u": "interrupted"}
