"""AgoraExecutor runs planned machines: leases opened and closed, tasks held for their turn, re-placed when refused.

The executor runs in this process on the real local pools of ``catalogs/local.yaml``; the plan is a
real plan file in a real plan store, as the cluster policy would have found it.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import structlog

from agora_optimizer.executor.backends.local.backend import LocalBackend, LocalPool
from agora_optimizer.executor.jobs.spec import TASK_ENDED_MARK, BackendError, MachineLease, lease_key, read_result
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore, plan_version
from tests.conftest import REPO
from tests.executor.test_agora_executor import MIB, executor, hand_over, reconfigure, workload

__all__ = ["executor"]  # the fixture, shared
GIB = 2**30


# Two machines: a then b on local-small#0 (one core: never together), c on local-large#0.
TWO_MACHINES = (
    Assignment("a", "local-small", "local-small#0", 0.0, 10.0, 1, GIB),
    Assignment("b", "local-small", "local-small#0", 10.0, 20.0, 1, GIB),
    Assignment("c", "local-large", "local-large#0", 0.0, 5.0, 1, GIB),
)


def save_plan(plan_dir: Path, assignments: tuple[Assignment, ...] = TWO_MACHINES) -> str:
    """Put a plan of DAG "unit" with ``assignments`` in force in ``plan_dir``; returns its version."""
    plan = Plan(
        "unit",
        "local",
        Objective(),
        max(a.end_s for a in assignments),
        0.0,
        assignments,
        SolverInfo("t", "heuristic", None, 0),
        "2026-12-01T00:00:00Z",
    )
    store = PlanStore(plan_dir)
    store.save("unit", plan)
    return plan_version(store.current_path("unit").read_bytes())


def placed(task: str, machine: str, version: str) -> dict[str, Any]:
    resource = machine.split("#")[0]
    return {"resource": resource, "cores": 1, "memory_bytes": 256 * MIB, "machine": machine, "plan_version": version}


@pytest.fixture
def version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(tmp_path / "plans"))
    return save_plan(tmp_path / "plans")


class Recording(LocalBackend):
    """The real local pools, recording the lease calls (and refusing the machines named in ``refuse``)."""

    def __init__(self, refuse: tuple[str, ...] = ()) -> None:
        super().__init__(
            {
                "local-small": LocalPool("local-small", 1, 4 * GIB, (0,)),
                "local-large": LocalPool("local-large", 1, 16 * GIB, (1,)),
            }
        )
        self.refuse = refuse
        self.calls: list[tuple[str, str]] = []

    def open_lease(self, lease: MachineLease) -> None:
        self.calls.append(("open", lease.machine))
        if lease.machine in self.refuse:
            raise BackendError("local", "node down", transient=False)
        super().open_lease(lease)

    def close_lease(self, lease: MachineLease) -> None:
        self.calls.append(("close", lease.machine))
        super().close_lease(lease)


def heartbeat_until(executor: Any, done: Any, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        executor.sync()
        if done():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out; jobs: {[(j.record.task_id, j.state) for j in executor.jobs.values()]}")


def cancel(executor: Any, items: list[Any]) -> None:
    """Revoke the tasks as Airflow would one stuck past every limit: their jobs stop."""
    reconfigure(executor, task_queued_timeout_s=0, backend_queue_timeout_s=0, machine_hold_s=0)
    for item in items:
        executor.revoke_task(ti=item.ti)


def states(executor: Any) -> dict[str, str]:
    return {job.record.task_id: job.state for job in executor.jobs.values()}


@pytest.mark.slow
def test_a_machines_tasks_run_in_the_planned_order_on_their_lease_which_closes_after_the_last(
    executor: Any, version: str, tmp_path: Path
) -> None:
    backend = Recording()
    executor.backends.use("local", backend)
    items = [
        workload("b", placed("b", "local-small#0", version), tmp_path),  # Airflow hands b over first
        workload("a", placed("a", "local-small#0", version), tmp_path),
        workload("c", placed("c", "local-large#0", version), tmp_path),
    ]
    hand_over(executor, items)
    assert states(executor) == {"a": "held", "b": "held", "c": "held"}
    jobs = {job.record.task_id: job for job in executor.jobs.values()}
    assert jobs["a"].spec.lease == jobs["b"].spec.lease
    lease = jobs["a"].spec.lease
    assert lease.key == lease_key("unit", "r1", "local-small#0")
    assert (lease.resource, lease.cores, lease.memory_bytes, lease.tasks) == ("local-small", 1, 4 * GIB, 2)
    assert sorted(backend.calls) == [("open", "local-large#0"), ("open", "local-small#0")]  # once per machine
    executor.sync()
    assert states(executor)["b"] == "held" and states(executor)["a"] != "held" and states(executor)["c"] != "held"
    started: dict[str, float] = {}

    def record_starts() -> bool:
        for task, state in states(executor).items():
            if state not in ("held", "pending_submit"):
                started.setdefault(task, time.monotonic())
        return not executor.jobs

    heartbeat_until(executor, record_starts)
    assert started["a"] < started["b"]
    a_ended = datetime.fromisoformat((jobs["a"].spec.job_dir / TASK_ENDED_MARK).read_text())
    b_result = read_result(jobs["b"].spec.result_path)
    assert b_result is not None and a_ended <= b_result.started_at  # one core: b only once a's task had ended
    assert sorted(backend.calls) == sorted(
        [("open", "local-small#0"), ("open", "local-large#0"), ("close", "local-small#0"), ("close", "local-large#0")]
    )
    assert {(record.machine, record.backend) for record in executor.lease_records} == {
        ("local-small#0", "local"),
        ("local-large#0", "local"),
    }


def test_a_machine_the_backend_refuses_is_re_placed_and_its_tasks_run_on_their_pool(
    executor: Any, version: str, tmp_path: Path
) -> None:
    backend = Recording(refuse=("local-small#0",))
    executor.backends.use("local", backend)
    items = [workload(task, placed(task, "local-small#0", version), tmp_path) for task in ("a", "b")]
    with structlog.testing.capture_logs() as logged:  # the executor's log (Airflow's structlog logger)
        hand_over(executor, items)
    assert backend.calls == [("open", "local-small#0")]  # asked once, not per task
    assert all(job.spec.lease is None and job.state != "held" for job in executor.jobs.values())
    (replaced,) = executor.replaced_machines
    assert (replaced.machine, replaced.resource, replaced.reason) == ("local-small#0", "local-small", "node down")
    lines = [entry["event"] for entry in logged if "cannot be had" in entry["event"]]
    assert len(lines) == 1 and "local-small#0" in lines[0] and "node down" in lines[0]
    cancel(executor, items)


def test_a_task_with_a_plan_that_is_gone_or_no_machine_runs_as_before(
    executor: Any, version: str, tmp_path: Path
) -> None:
    backend = Recording()
    executor.backends.use("local", backend)
    stale = workload("a", placed("a", "local-small#0", "0123456789ab"), tmp_path)
    unplanned = workload("z", {"resource": "local-large", "cores": 1, "memory_bytes": 256 * MIB}, tmp_path)
    hand_over(executor, [stale, unplanned])
    assert all(job.spec.lease is None and job.state != "held" for job in executor.jobs.values())
    assert backend.calls == []
    cancel(executor, [stale, unplanned])


def test_the_plan_is_read_once_per_dag_and_version(
    executor: Any, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    original = PlanStore.find

    def counting(store: PlanStore, dag_id: str, wanted: str) -> Any:
        reads.append(wanted)
        return original(store, dag_id, wanted)

    monkeypatch.setattr(PlanStore, "find", counting)
    executor.backends.use("local", Recording())
    items = [workload(task, placed(task, "local-small#0", version), tmp_path) for task in ("a", "b")]
    hand_over(executor, items)
    assert reads == [version]
    cancel(executor, items)


class Leading(Recording):
    """The local pools, predicting a wait of ``lead_s`` seconds before a machine of a type is held."""

    def __init__(self, lead_s: dict[str, float]) -> None:
        super().__init__()
        self.lead_s = lead_s

    def lease_lead_s(self, resource: str) -> float:
        return self.lead_s.get(resource, 0.0)


def test_a_machine_with_a_predicted_wait_is_asked_for_that_long_before_its_planned_start(
    executor: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """c's machine starts at 10 s on the plan clock and waits 5 s to be held: it is asked for at 5 s,
    before c itself arrives; a's machine, with no predicted wait, opens with its first task as before."""
    plans = tmp_path / "ahead-plans"
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(plans))
    version = save_plan(
        plans,
        (
            Assignment("a", "local-small", "local-small#0", 0.0, 10.0, 1, GIB),
            Assignment("c", "local-large", "local-large#0", 10.0, 15.0, 1, GIB),
        ),
    )
    backend = Leading({"local-large": 5.0})
    executor.backends.use("local", backend)
    first = workload("a", placed("a", "local-small#0", version), tmp_path)
    hand_over(executor, [first])
    executor.sync()
    assert backend.calls == [("open", "local-small#0")]  # c's machine is 10 s away, its wait 5 s
    book = executor.runs.book(("unit", "r1"))
    book.origin_s -= 5.5  # the run's plan clock at 5.5 s
    executor.sync()
    assert backend.calls == [("open", "local-small#0"), ("open", "local-large#0")]
    later = workload("c", placed("c", "local-large#0", version), tmp_path)
    hand_over(executor, [later])
    assert backend.calls.count(("open", "local-large#0")) == 1  # c runs in the lease asked for ahead
    assert {job.record.task_id: job.spec.lease.machine for job in executor.jobs.values()} == {
        "a": "local-small#0",
        "c": "local-large#0",
    }
    cancel(executor, [first, later])


@pytest.mark.slow  # runs a real task on a local pool
def test_a_plan_with_a_celery_pools_machine_still_closes_the_lease_of_its_local_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan may put tasks on a Celery pool, which the CeleryExecutor runs: the AgoraExecutor has no backend for
    it. The pool's machine, which no task of this executor ever uses, is no reason to stop its heartbeat: the
    local machine's lease still closes after its last task, and sync logs no failure."""
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    catalog = tmp_path / "mixed.yaml"
    pool = (REPO / "catalogs" / "celery-loopback.yaml").read_text().split("resources:\n", 1)[1]
    catalog.write_text((REPO / "catalogs" / "local.yaml").read_text() + pool)
    plans = tmp_path / "mixed-plans"
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(catalog))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(plans))
    version = save_plan(
        plans,
        (
            Assignment("a", "local-small", "local-small#0", 0.0, 10.0, 1, GIB),
            Assignment("p", "pool_small", "pool_small#0", 10.0, 20.0, 1, GIB),  # the CeleryExecutor's task
        ),
    )
    executor = AgoraExecutor()
    executor.start()
    backend = Recording()
    executor.backends.use("local", backend)
    with structlog.testing.capture_logs() as logged:
        hand_over(executor, [workload("a", placed("a", "local-small#0", version), tmp_path)])
        heartbeat_until(executor, lambda: ("close", "local-small#0") in backend.calls, timeout_s=60)
    assert backend.calls == [("open", "local-small#0"), ("close", "local-small#0")]
    assert not [entry for entry in logged if "sync failed" in str(entry.get("event"))]
