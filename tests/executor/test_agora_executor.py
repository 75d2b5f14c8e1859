"""AgoraExecutor's own logic, in this process, on a real local pool: retries, failures, tokens, revoke.

A backend that fails on purpose (``Flaky``) wraps the real LocalBackend to inject the errors a
real backend has (a refused or throttled submit, an unreachable controller).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.backends.local.backend import LocalBackend, LocalPool
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus, job_key
from tests.conftest import CATALOGS

MIB = 2**20
KEY = job_key("unit", "t", "r1", 1, -1)  # the key of the attempt most tests submit


class Flaky(Backend):
    """LocalBackend, but the first ``submit_failures`` submits and ``status_failures`` polls fail."""

    name = "local"

    def __init__(
        self, inner: LocalBackend, *, submit_failures: int = 0, status_failures: int = 0, transient: bool = True
    ):
        self.inner = inner
        self.submit_failures = submit_failures
        self.status_failures = status_failures
        self.transient = transient
        self.submits = 0
        self.cancelled: list[str] = []

    def submit(self, job: JobSpec) -> str:
        self.submits += 1
        if self.submit_failures > 0:
            self.submit_failures -= 1
            raise BackendError(
                "local", "throttled" if self.transient else "refused: no such queue", transient=self.transient
            )
        return self.inner.submit(job)

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        if self.status_failures > 0:
            self.status_failures -= 1
            raise BackendError("local", "controller unreachable", transient=True)
        return self.inner.status(external_ids)

    def cancel(self, external_id: str) -> None:
        self.cancelled.append(external_id)
        self.inner.cancel(external_id)


def reconfigure(executor: Any, **lifecycle: float) -> None:
    """Change the executor's lifecycle settings, which it reads once, at start (as a restart would)."""
    from dataclasses import replace

    executor.config = replace(executor.config, lifecycle=replace(executor.config.lifecycle, **lifecycle))


def workload(task_id: str, placement: dict[str, Any] | None, tmp_path: Path) -> Any:
    from airflow.executors.workloads import ExecuteTask
    from airflow.executors.workloads.base import BundleInfo
    from airflow.executors.workloads.task import TaskInstanceDTO

    config = {"agora": {"placement": placement}} if placement else {}
    ti = TaskInstanceDTO(
        id=uuid.uuid4(), dag_version_id=uuid.uuid4(), task_id=task_id, dag_id="unit", run_id="r1", try_number=1,
        map_index=-1, pool_slots=1, priority_weight=1, queue="default", executor_config=config,
    )  # fmt: skip
    return ExecuteTask(
        ti=ti, dag_rel_path="unit.py", token="first", log_path=None, bundle_info=BundleInfo(name="dags-folder")
    )


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "local.yaml"))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__BACKOFF_MAX_S", "0.2")
    monkeypatch.setenv("AIRFLOW__AGORA__SUBMIT_RETRIES", "3")
    executor = AgoraExecutor()
    executor.start()
    return executor


@pytest.mark.parametrize(("catalog", "starts"), [("local.yaml", 1), ("slurm-loopback.yaml", 0)])
def test_start_starts_the_local_pools_fork_server_only_where_there_are_local_pools(
    catalog: str, starts: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    started: list[LocalBackend] = []
    monkeypatch.setattr(LocalBackend, "start_fork_server", lambda backend: started.append(backend))
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / catalog))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    executor = AgoraExecutor()
    executor.start()  # the first task must not wait seconds for the fork server to load Airflow
    assert len(started) == starts
    if starts:
        assert executor.backends.get("local") is started[0]  # the backend that runs the tasks, not a spare


def hand_over(executor: Any, items: list[Any]) -> None:
    """Hand the workloads to the executor as Airflow's scheduler does: queued, then triggered (in this order:
    their priorities are equal)."""
    for item in items:
        executor.queue_workload(item, session=None)
    executor.trigger_tasks(open_slots=len(items))


def run_with(executor: Any, backend: Flaky, workloads: list[Any], timeout_s: float = 60) -> dict[Any, tuple[Any, Any]]:
    """Queue the workloads, heartbeat until each has a final event; returns key -> (state, info)."""
    from airflow.utils.state import TaskInstanceState

    executor.backends.use("local", backend)
    hand_over(executor, workloads)
    events: dict[Any, tuple[Any, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len([e for e in events.values() if e[0] != TaskInstanceState.QUEUED]) < len(
        workloads
    ):
        executor.sync()
        for key, event in executor.get_event_buffer().items():
            if event[0] != TaskInstanceState.QUEUED or key not in events:
                events[key] = event
        time.sleep(0.1)
    return events


def placement(resource: str = "local-small", memory_mib: int = 256) -> dict[str, Any]:
    return {"resource": resource, "cores": 1, "memory_bytes": memory_mib * MIB}


def test_a_throttled_submit_is_retried_and_the_job_then_runs(executor: Any, tmp_path: Path) -> None:
    from airflow.utils.state import TaskInstanceState

    backend = Flaky(LocalBackend({"local-small": LocalPool("local-small", 1, 4 * 2**30)}), submit_failures=2)
    executor.backends.use("local", backend)
    item = workload("t", placement(), tmp_path)
    hand_over(executor, [item])
    deadline = time.monotonic() + 20
    events: dict[Any, Any] = {}
    while not events and time.monotonic() < deadline:
        time.sleep(0.1)
        executor.sync()
        events = executor.get_event_buffer()
    # the external id reaches Airflow with the QUEUED event (it is what a restarted scheduler adopts by)
    assert events[item.ti.key] == (TaskInstanceState.QUEUED, f"agora|local|local-small|{KEY}")
    assert backend.submits == 3 and item.ti.key in executor.running
    record = json.loads((tmp_path / "jobs" / KEY / "job.json").read_text())
    assert record["external_id"] == KEY and record["resource"] == "local-small"
    assert json.loads((tmp_path / "jobs" / KEY / "workload.json").read_text())["ti"]["task_id"] == "t"
    reconfigure(executor, task_queued_timeout_s=0)  # stuck, by Airflow's measure: revoked
    reconfigure(executor, backend_queue_timeout_s=0)  # (were it still pending in its pool)
    executor.revoke_task(ti=item.ti)
    assert backend.cancelled == [KEY]


def test_a_submit_that_keeps_failing_fails_the_task_with_the_reason(executor: Any, tmp_path: Path) -> None:
    from airflow.utils.state import TaskInstanceState

    backend = Flaky(LocalBackend({"local-small": LocalPool("local-small", 1, 4 * 2**30)}), submit_failures=99)
    item = workload("t", placement(), tmp_path)
    state, info = run_with(executor, backend, [item])[item.ti.key]
    assert state == TaskInstanceState.FAILED and "throttled" in info and "after 3 attempts" in info
    assert backend.submits == 3


def test_a_refused_submit_fails_at_once_and_is_traced(executor: Any, tmp_path: Path) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.traces.store import TraceStore

    backend = Flaky(
        LocalBackend({"local-small": LocalPool("local-small", 1, 4 * 2**30)}), submit_failures=1, transient=False
    )
    item = workload("t", placement(), tmp_path)
    state, info = run_with(executor, backend, [item])[item.ti.key]
    assert state == TaskInstanceState.FAILED and "refused: no such queue" in info and backend.submits == 1
    with TraceStore(f"sqlite:///{tmp_path / 'traces.db'}") as store:
        (attempt,) = store.attempts(dag_id="unit")
    assert attempt.state == "failed" and "refused" in attempt.error_text and attempt.resource_type == "local-small"


def test_an_unknown_resource_or_no_placement_fails_naming_the_task(executor: Any, tmp_path: Path) -> None:
    from airflow.utils.state import TaskInstanceState

    backend = Flaky(LocalBackend({}))
    unknown, bare = workload("gpu", placement("gpu-node"), tmp_path), workload("bare", None, tmp_path)
    events = run_with(executor, backend, [unknown, bare])
    assert events[unknown.ti.key][0] == TaskInstanceState.FAILED and "unit.gpu" in events[unknown.ti.key][1]
    assert "'gpu-node' is not in [agora] catalog" in events[unknown.ti.key][1]
    assert "unit.bare has no agora placement" in events[bare.ti.key][1] and backend.submits == 0


def test_a_backend_down_longer_than_the_outage_limit_fails_its_jobs(executor: Any, tmp_path: Path) -> None:
    from airflow.utils.state import TaskInstanceState

    reconfigure(executor, backend_outage_s=1)
    backend = Flaky(LocalBackend({"local-small": LocalPool("local-small", 1, 4 * 2**30)}), status_failures=10**6)
    item = workload("t", placement(), tmp_path)
    state, info = run_with(executor, backend, [item], timeout_s=30)[item.ti.key]
    assert state == TaskInstanceState.FAILED and "unreachable" in info and "controller unreachable" in info


def test_sync_survives_a_backend_that_raises_anything(executor: Any, tmp_path: Path) -> None:
    class Broken(Flaky):
        def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
            raise RuntimeError("bug in a backend")

    backend = Broken(LocalBackend({"local-small": LocalPool("local-small", 1, 4 * 2**30)}))
    executor.backends.use("local", backend)
    item = workload("t", placement(), tmp_path)
    hand_over(executor, [item])
    executor.sync()  # logs, does not raise
    executor.revoke_task(ti=item.ti)
    assert backend.cancelled == [KEY] and item.ti.key not in executor.running


def test_a_job_waiting_in_a_queue_gets_a_fresh_token(executor: Any, tmp_path: Path) -> None:
    reconfigure(executor, token_refresh_s=0)
    inner = LocalBackend({"local-small": LocalPool("local-small", 1, 4 * 2**30)})
    blocker = JobSpec(
        "blocker",
        "blocker",
        "local-small",
        1,
        MIB,
        None,
        (sys.executable, "-c", "import time; time.sleep(5)"),
        tmp_path / "b",
    )
    inner.submit(blocker)  # holds the pool's only core: the task's job stays pending
    executor.backends.use("local", Flaky(inner))
    item = workload("t", placement(), tmp_path)
    hand_over(executor, [item])
    path = tmp_path / "jobs" / KEY / "workload.json"
    assert json.loads(path.read_text())["token"] == "first"
    executor.sync()
    token = json.loads(path.read_text())["token"]
    assert token != "first" and token.count(".") == 2  # a signed JWT from Airflow's generator
    inner.cancel("blocker")  # the job may start now: neither its wait nor its start keeps it any more
    reconfigure(executor, backend_queue_timeout_s=0, task_queued_timeout_s=0)
    executor.revoke_task(ti=item.ti)


def _pending_behind_a_blocker(executor: Any, tmp_path: Path) -> tuple[Flaky, LocalBackend, Any]:
    inner = LocalBackend({"local-small": LocalPool("local-small", 1, 4 * 2**30)})
    command = (sys.executable, "-c", "import time; time.sleep(30)")
    inner.submit(JobSpec("blocker", "blocker", "local-small", 1, MIB, None, command, tmp_path / "b"))
    backend = Flaky(inner)
    executor.backends.use("local", backend)
    item = workload("t", placement(), tmp_path)
    hand_over(executor, [item])
    executor.sync()
    return backend, inner, item


def test_a_job_waiting_in_its_queue_is_not_revoked_for_airflows_queued_timeout(executor: Any, tmp_path: Path) -> None:
    backend, inner, item = _pending_behind_a_blocker(executor, tmp_path)
    try:
        # The scheduler skips its stuck-in-queued handling for an executor whose revoke raises this.
        with pytest.raises(NotImplementedError, match=r"unit\.t run r1 try 1 waits in local-small's queue"):
            executor.revoke_task(ti=item.ti)
        assert backend.cancelled == [] and item.ti.key in executor.running  # kept, with its place in the queue
        reconfigure(executor, backend_queue_timeout_s=0)
        executor.revoke_task(ti=item.ti)  # past agora's own limit the scheduler may revoke it as usual
        assert backend.cancelled == [KEY] and item.ti.key not in executor.running
    finally:
        inner.cancel("blocker")


def test_a_job_that_has_just_started_is_not_revoked_until_its_task_had_time_to_report(
    executor: Any, tmp_path: Path
) -> None:
    backend, inner, item = _pending_behind_a_blocker(executor, tmp_path)
    inner.cancel("blocker")  # the pool frees up: the job starts at the next poll
    deadline = time.monotonic() + 20
    while executor.jobs[item.ti.key].state != "running" and time.monotonic() < deadline:
        executor.sync()
        time.sleep(0.1)
    # The scheduler's stuck check may come between the job's start and its task's first report.
    with pytest.raises(NotImplementedError, match=r"started on local-small \d+ s ago"):
        executor.revoke_task(ti=item.ti)
    assert backend.cancelled == []
    reconfigure(executor, task_queued_timeout_s=0)  # a job running that long is stuck
    executor.revoke_task(ti=item.ti)
    assert backend.cancelled == [KEY]


def test_a_job_that_waits_in_its_queue_past_the_limit_is_cancelled_and_fails_with_why(
    executor: Any, tmp_path: Path
) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.traces.store import TraceStore

    backend, inner, item = _pending_behind_a_blocker(executor, tmp_path)
    try:
        reconfigure(executor, backend_queue_timeout_s=0.5)
        time.sleep(0.6)
        executor.sync()
        state, info = executor.get_event_buffer()[item.ti.key]
    finally:
        inner.cancel("blocker")
    assert state == TaskInstanceState.FAILED and backend.cancelled == [KEY]
    assert "in local-small's queue (waiting for pool capacity)" in info and "backend_queue_timeout_s" in info
    with TraceStore(f"sqlite:///{tmp_path / 'traces.db'}") as store:
        (attempt,) = store.attempts(dag_id="unit")
    assert attempt.state == "cancelled" and "waiting for pool capacity" in attempt.error_text


def test_the_executor_refuses_to_start_on_a_state_dir_others_may_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agora_optimizer.errors import InputFileError
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "slurm-loopback.yaml"))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(shared))
    with pytest.raises(InputFileError, match="state_dir may be written by its group or by others") as refused:
        AgoraExecutor().start()
    assert str(shared) in str(refused.value)


def test_a_state_dir_the_executor_creates_is_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import stat

    from agora_optimizer.executor.agora_executor import AgoraExecutor

    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "slurm-loopback.yaml"))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "new" / "jobs"))
    old = os.umask(0o002)  # a group-writable default, as on many shared systems
    try:
        AgoraExecutor().start()  # would refuse the directory it had just made group-writable
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "jobs").st_mode) == 0o700


@pytest.mark.parametrize(
    ("catalog", "setting", "value", "option"),
    [
        ("slurm-loopback.yaml", "SLURM_PILOT_WINDOW_S", "-1", "slurm_pilot_window_s"),
        ("slurm-loopback.yaml", "SLURM_PILOT_MAX_TASKS", "many", "slurm_pilot_max_tasks"),
        ("slurm-loopback.yaml", "SLURM_RECORD_QUEUE_WAITS", "maybe", "slurm_record_queue_waits"),
        ("aws-us-east-1.yaml", "AWS_S3_PREFIX", "https://bucket/agora/", "aws_s3_prefix"),
        ("aws-us-east-1.yaml", "AWS_SUBNETS", "subnet-1", "aws_security_group_ids"),
    ],
)
def test_a_bad_backend_setting_fails_the_start_naming_its_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: str, setting: str, value: str, option: str
) -> None:
    from agora_optimizer.errors import AgoraError
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / catalog))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv(f"AIRFLOW__AGORA__{setting}", value)
    executor = AgoraExecutor()
    with pytest.raises(AgoraError, match=rf"\[agora\] .*{option}"):
        executor.start()  # not at the first task on that backend
    assert executor.backends.made() == {}  # the backend itself is still made at its first job


def test_a_setting_of_a_backend_the_catalog_does_not_use_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "slurm-loopback.yaml"))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_S3_PREFIX", "not a URL")  # no AWS resource: never read
    AgoraExecutor().start()


class InMemory(Backend):
    """Runs nothing: a job is pending at its first poll, running at its second, and then ends (exit 3 if its
    task is called ``bad``). Records the hooks the executor calls."""

    name = "local"

    def __init__(self, resources: Mapping[str, Any]) -> None:
        self.resources = dict(resources)
        self.polls: dict[str, int] = {}
        self.keys: dict[str, str] = {}
        self.hooks: list[str] = []
        self.cancelled: list[str] = []

    def start(self) -> None:
        self.hooks.append("start")

    def tick(self, *, force: bool = False) -> None:
        self.hooks.append(f"tick(force={force})")

    def close(self) -> None:
        self.hooks.append("close")

    def submit(self, job: JobSpec) -> str:
        external_id = f"mem-{len(self.polls)}"
        self.polls[external_id], self.keys[external_id] = 0, job.key
        return external_id

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        statuses = {}
        for external_id in external_ids:
            self.polls[external_id] += 1
            polls = self.polls[external_id]
            exit_code = 3 if ".bad." in self.keys[external_id] else 0
            statuses[external_id] = (
                JobStatus("pending") if polls == 1 else JobStatus("running") if polls == 2 else
                JobStatus("finished", exit_code=exit_code, reason=f"exit {exit_code}" if exit_code else "")
            )  # fmt: skip
        return statuses

    def cancel(self, external_id: str) -> None:
        self.cancelled.append(external_id)


def test_a_backend_registered_by_name_runs_the_executors_jobs_and_gets_its_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor.agora_executor import AgoraExecutor
    from agora_optimizer.executor.backends.registry import register_backend, unregister_backend

    made: list[InMemory] = []
    previous = register_backend("local", lambda resources: made.append(InMemory(resources)) or made[-1])
    try:
        monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "local.yaml"))
        monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
        monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
        executor = AgoraExecutor()
        executor.start()
        (backend,) = made  # made once, at start, for the catalog's local pools only
        assert sorted(backend.resources) == ["local-large", "local-small"] and backend.hooks == ["start"]
        good, bad = workload("good", placement(), tmp_path), workload("bad", placement(), tmp_path)
        events: dict[Any, Any] = {}
        hand_over(executor, [good, bad])
        for _ in range(3):
            executor.sync()
            events.update(executor.get_event_buffer())
        executor.end()
    finally:
        unregister_backend("local", previous)
    assert events[good.ti.key][0] == TaskInstanceState.SUCCESS
    assert events[bad.ti.key][0] == TaskInstanceState.FAILED and "unit.bad run r1 try 1 on local-small" in str(
        events[bad.ti.key][1]
    )
    # a tick per heartbeat; as the scheduler stops, one that does everything due, the last heartbeat's, then close
    ticks = ["tick(force=False)"] * 3
    assert backend.hooks == ["start", *ticks, "tick(force=True)", "tick(force=False)", "close"]
    assert backend.cancelled == []
    assert [backend.polls[external_id] for external_id in sorted(backend.polls)] == [3, 3]
    assert not (good.ti.key in executor.running or bad.ti.key in executor.running)
