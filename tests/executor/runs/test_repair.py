"""The executor repairs a run that drifts from its plan, and reports leases and repairs to the run store.

The executor runs in this process on the real local pools of ``catalogs/local.yaml`` (one core
each: ``local-small`` CPU 0, ``local-large`` CPU 1); the plan and the workflow it was made from are
in a real plan store, the run store is the trace store's SQLite file. Each job runs the real agora
worker with a command of the test's (the worker's ``-- COMMAND``, as benchmarks use it): Python
sleeping for as long as the test makes the task last, then exiting 0, or 3 for a task that fails.
There is no Airflow API server here for the task's own ``execute_workload``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog

from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus, read_result
from agora_optimizer.executor.runs.machine_order import MachineOrder, PlannedTask, RunBook
from agora_optimizer.executor.runs.repair import Drift, RunRepairs, late_end, replan_state
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.planning.run_state import Done, Pending, Running
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.runs.store import RunStore
from tests.executor.test_agora_executor import MIB, executor, hand_over, reconfigure, workload
from tests.executor.test_executor_machines import Recording, heartbeat_until, states

__all__ = ["executor"]  # the fixture, shared
GIB = 2**30

# task -> (machine, planned start, planned end, runtime_s): a, then x, then b on local-small#0; c on
# local-large#0. b is a's child. x is planned for minutes, so it is never late.
PLANNED = {
    "a": ("local-small#0", 0.0, 2.0, 2.0),
    "x": ("local-small#0", 2.0, 300.0, 298.0),
    "b": ("local-small#0", 300.0, 302.0, 2.0),
    "c": ("local-large#0", 0.0, 30.0, 30.0),
}
SLOWED = {"a": 9.0}  # a runs 9 s, planned 2 s: 350 % and 7 s late (past the slack, 20 %, and the 5 s floor)


class Sleeping(Recording):
    """The real local pools, each job the real worker following ``sleep(seconds)`` (0.2 s unless told),
    exiting 3 for the tasks in ``failing``."""

    def __init__(self, seconds: dict[str, float], failing: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seconds, self.failing = seconds, failing

    def submit(self, spec: JobSpec) -> str:
        task_id = spec.label.split(" ")[0].split(".", 1)[1]
        exit_code = 3 if task_id in self.failing else 0
        code = f"import time; time.sleep({self.seconds.get(task_id, 0.2)}); raise SystemExit({exit_code})"
        return super().submit(replace(spec, command=(*spec.command, "--", sys.executable, "-c", code)))


def save_plan(
    plan_dir: Path, planned: dict[str, tuple[str, float, float, float]], with_workflow: bool = True, category: str = ""
) -> str:
    """The plan and the workflow it was made from, each task its own category (the executor learns nothing of one
    task from another: these tests are of drifts), or all of ``category``."""
    workflow = Workflow.create(
        "unit",
        [Task(task, runtime, 1, 256 * MIB, category or task) for task, (_, _, _, runtime) in planned.items()],
        [Edge("a", "b")] if {"a", "b"} <= planned.keys() else [],
    )
    assignments = tuple(
        Assignment(task, machine.split("#")[0], machine, start, end, 1, 256 * MIB)
        for task, (machine, start, end, _) in planned.items()
    )
    makespan = max(a.end_s for a in assignments)
    solver = SolverInfo("t", "heuristic", None, 0)
    plan = Plan("unit", "local", Objective(kind="time"), makespan, 0.0, assignments, solver, "2026-12-01T00:00:00Z")
    store = PlanStore(plan_dir)
    store.save("unit", plan, workflow if with_workflow else None)
    return plan_version(store.current_path("unit").read_bytes())


def placed(machine: str, version: str, **more: Any) -> dict[str, Any]:
    resource = machine.split("#")[0]
    return {
        "resource": resource, "cores": 1, "memory_bytes": 256 * MIB, "machine": machine, "plan_version": version,
        **more,
    }  # fmt: skip


def hand_over_planned(executor: Any, version: str, tmp_path: Path, planned: dict[str, Any], **more: Any) -> list[Any]:
    items = [
        workload(task, placed(machine, version, **more.get(task, {})), tmp_path)
        for task, (machine, *_) in planned.items()
    ]
    hand_over(executor, items)
    return items


@pytest.fixture
def plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(tmp_path / "plans"))
    return tmp_path / "plans"


def run_store(tmp_path: Path) -> RunStore:
    return RunStore(f"sqlite:///{tmp_path / 'traces.db'}")


def job_of(executor: Any, task_id: str) -> Any:
    return next(job for job in executor.jobs.values() if job.record.task_id == task_id)


# -- the rule, pure ----------------------------------------------------------------------------------


def test_a_task_is_late_past_the_slack_times_its_planned_duration() -> None:
    order = MachineOrder.from_assignments([Assignment("a", "local-small", "local-small#0", 10.0, 20.0, 1, GIB)], {})
    assert order.machines == {}  # a type the executor does not have is left out
    task = PlannedTask("a", "local-small#0", 10.0, 20.0, 1, GIB)
    assert late_end(task, 21.9, 0.2) is None  # 19 % late
    drift = late_end(task, 23.5, 0.2)
    assert drift == Drift("a", "task a ended 35 % later than planned (at 23.5 s, planned 20.0 s)")
    assert late_end(task, 100.0, 0.0) is None and late_end(task, 100.0, -1.0) is None  # repair off
    assert late_end(task, 23.5, 0.2, min_late_s=5.0) is None  # 3.5 s late: the platform's jitter
    assert late_end(task, 25.5, 0.2, min_late_s=5.0) is not None


def test_the_replanner_sees_what_ran_what_runs_and_what_waits() -> None:
    from agora_optimizer.io.catalog_file import load_catalog
    from tests.conftest import CATALOGS

    resources = load_catalog(CATALOGS / "local.yaml").by_name
    assignments = [
        Assignment(task, machine.split("#")[0], machine, start, end, 1, 256 * MIB)
        for task, (machine, start, end, _) in PLANNED.items()
    ]
    book = RunBook(MachineOrder.from_assignments(assignments, resources), origin_s=100.0)
    book.start("a", 0.2)
    book.end("a", 4.0)
    book.start("c", 0.3)
    book.gone.add("x")
    state = replan_state(book, 5.0, {})
    assert state == {
        "a": Done("local-small#0", 4.0, 0.2),
        "c": Running("local-large#0", 0.3),
        "x": Done("local-small#0", 5.0, 2.0),  # never comes: its planned times, cut at now
    }  # b waits: pending
    assert replan_state(book, 5.0, {"a": 512 * MIB})["a"] == Pending(512 * MIB)  # a failed try, retried


def test_a_failed_try_is_one_drift_whether_its_job_or_airflow_says_so_first() -> None:
    book = RunBook(MachineOrder({}, {"a": PlannedTask("a", "local-small#0", 0.0, 2.0, 1, GIB)}), origin_s=0.0)
    repairer = RunRepairs(slack=0.2)
    book.start("a", 1.0)
    book.end("a", 3.0)
    repairer.failed(book, "d", "r", "a", JobStatus("finished", exit_code=1), 0)
    repairer.settled(book, "d", "r", {"a": "up_for_retry"})
    assert [d.reason for d in repairer.run("d", "r").drifts] == ["task a failed (exit code 1)"]
    book.start("a", 5.0)  # the retry
    repairer.run("d", "r").started("a")
    repairer.settled(book, "d", "r", {"a": "failed"})  # it raised in the task: its job exited 0
    assert [d.reason for d in repairer.run("d", "r").drifts][1:] == ["task a failed"]
    repairer.settled(book, "d", "r", {"a": "failed"})  # read again 5 s later: the same try
    assert len(repairer.run("d", "r").drifts) == 2
    assert RunRepairs(slack=0.0).on is False


# -- the executor on real pools ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_late_task_makes_the_executor_re_plan_and_move_a_held_successor_and_record_it(
    executor: Any, plans: Path, tmp_path: Path
) -> None:
    version = save_plan(plans, PLANNED)
    backend = Sleeping(SLOWED)
    executor.backends.use("local", backend)
    hand_over_planned(executor, version, tmp_path, PLANNED)
    assert states(executor) == {"a": "held", "x": "held", "b": "held", "c": "held"}
    b_dir = job_of(executor, "b").spec.job_dir
    heartbeat_until(executor, lambda: not executor.jobs, timeout_s=120)
    # b waited behind x (planned for minutes) on local-small#0; c's machine was free: b moved there
    record = JobRecord.read(b_dir)
    assert record is not None and (record.resource, record.machine) == ("local-large", "local-large#0")
    result = read_result(b_dir / "result.json")
    assert result is not None and result.exit_code == 0  # and ran there
    assert backend.calls.count(("open", "local-large#0")) == 2  # c's lease had ended; b's opened it again
    executor.sync()  # the last leases and repairs reach the run store
    store = run_store(tmp_path)
    repairs = store.repairs("unit", "r1")
    assert repairs, "no repair recorded"
    (first,) = repairs  # c was on time, and x, b ran as re-planned
    assert first.reason.startswith("task a ended ") and "% later than planned" in first.reason
    assert "b" in first.tasks and "b local-small#0 -> local-large#0" in first.detail
    assert 6 < first.at_s < 60
    assert {r.machine for r in store.leases("unit", "r1")} == {"local-small#0", "local-large#0"}
    assert backend.calls.count(("close", "local-large#0")) == 2


@pytest.mark.slow
def test_a_task_on_time_brings_no_repair(executor: Any, plans: Path, tmp_path: Path) -> None:
    on_time = {"a": ("local-small#0", 0.0, 30.0, 30.0), "c": ("local-large#0", 0.0, 30.0, 30.0)}
    version = save_plan(plans, on_time)
    executor.backends.use("local", Sleeping({}))
    hand_over_planned(executor, version, tmp_path, on_time)
    heartbeat_until(executor, lambda: not executor.jobs)
    executor.sync()
    assert run_store(tmp_path).repairs("unit", "r1") == []
    assert {r.machine for r in run_store(tmp_path).leases("unit", "r1")} == {"local-small#0", "local-large#0"}


@pytest.mark.slow
def test_a_failed_task_makes_the_executor_re_plan(executor: Any, plans: Path, tmp_path: Path) -> None:
    planned = {"a": ("local-small#0", 0.0, 30.0, 30.0), "b": ("local-small#0", 30.0, 60.0, 30.0)}
    version = save_plan(plans, planned)
    executor.backends.use("local", Sleeping({}, failing=("a",)))
    hand_over_planned(executor, version, tmp_path, planned)
    heartbeat_until(executor, lambda: not executor.jobs)
    executor.sync()
    (repair,) = run_store(tmp_path).repairs("unit", "r1")
    assert repair.reason == "task a failed (exit code 3)"
    assert {"a", "b"} <= set(repair.tasks)  # a's retry and b, re-placed: b may start before a's planned 30 s


@pytest.mark.slow
def test_replan_slack_0_turns_repair_off(executor: Any, plans: Path, tmp_path: Path) -> None:
    version = save_plan(plans, PLANNED)
    executor.config = replace(executor.config, replan_slack=0.0)  # as [agora] replan_slack = 0 at start would
    executor.backends.use("local", Sleeping(SLOWED))
    items = hand_over_planned(executor, version, tmp_path, PLANNED)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "x" not in {t for t, s in states(executor).items() if s != "held"}:
        executor.sync()  # until a ended (late) and x took its turn
        time.sleep(0.1)
    assert job_of(executor, "b").spec.lease.machine == "local-small#0"  # not moved
    assert not executor.runs.repair_state(("unit", "r1")).repairs
    reconfigure(executor, task_queued_timeout_s=0, backend_queue_timeout_s=0, machine_hold_s=0)
    for item in items:
        executor.revoke_task(ti=item.ti)
    heartbeat_until(executor, lambda: not executor.jobs)
    executor.sync()
    assert run_store(tmp_path).repairs("unit", "r1") == []


def test_a_machine_the_backend_refuses_is_recorded_as_a_repair(executor: Any, plans: Path, tmp_path: Path) -> None:
    version = save_plan(plans, PLANNED)
    executor.backends.use("local", Recording(refuse=("local-small#0",)))
    items = hand_over_planned(executor, version, tmp_path, PLANNED)
    executor.sync()
    (repair,) = run_store(tmp_path).repairs("unit", "r1")
    assert repair.reason == "machine local-small#0 could not be had: node down"
    assert repair.tasks == ("a", "x", "b")
    assert "local-small's pool without a lease" in repair.detail
    reconfigure(executor, task_queued_timeout_s=0, backend_queue_timeout_s=0, machine_hold_s=0)
    for item in items:
        executor.revoke_task(ti=item.ti)


def test_a_plan_without_its_workflow_is_not_repaired_and_runs_on(executor: Any, plans: Path, tmp_path: Path) -> None:
    version = save_plan(plans, PLANNED, with_workflow=False)
    executor.backends.use("local", Recording())
    items = hand_over_planned(executor, version, tmp_path, PLANNED)
    book = executor.runs.book(("unit", "r1"))
    order = book.order
    run = executor.runs.repair_state(("unit", "r1"))
    run.drift(Drift("a", "task a ended 900 % later than planned"))
    with structlog.testing.capture_logs() as logged:  # the executor's log (Airflow's structlog logger)
        executor.sync()
    lines = [entry["event"] for entry in logged if "cannot repair" in entry["event"]]
    assert len(lines) == 1 and "saved without its workflow" in lines[0] and "goes on as planned" in lines[0]
    assert executor.runs.book(("unit", "r1")) is book and book.order is order and not run.overrides
    assert JobStatus("finished", exit_code=0).succeeded
    reconfigure(executor, task_queued_timeout_s=0, backend_queue_timeout_s=0, machine_hold_s=0)
    for item in items:
        executor.revoke_task(ti=item.ti)


def test_a_re_plan_never_moves_a_task_onto_a_celery_pool_it_was_not_planned_on() -> None:
    """Found by running the Docker stack: a run behind its plan was re-planned over the whole catalog, Celery
    pools included, and tasks moved onto a pool failed (the AgoraExecutor cannot send a task to a Celery worker)."""
    from agora_optimizer.executor.runs.repair import repair_catalog
    from agora_optimizer.model.catalog import Billing, Catalog, Resource
    from agora_optimizer.planning.replan import replan

    slurm = Resource("slurm-small", "slurm", 1, 4, 1.0, 0.0, 1, Billing(1.0, 0.0))
    pool = Resource("pool_large", "celery", 4, 16, 2.0, 0.0, 1, Billing(1.0, 0.0))  # faster, free, idle
    catalog = Catalog((slurm, pool), 1e9)
    tasks = [Task(t, 10.0, 1, GIB, t) for t in ("a", "b", "c")]
    workflow = Workflow.create("chain", tasks, [Edge("a", "b", 0), Edge("b", "c", 0)])
    planned = [
        Assignment(t, "slurm-small", "slurm-small#0", 10.0 * i, 10.0 * (i + 1), 1, GIB) for i, t in enumerate("abc")
    ]
    solver = SolverInfo("list-scheduling", "heuristic", None, 0.1)
    plan = Plan("chain", "c", Objective(kind="time"), 30.0, 0.0, tuple(planned), solver, "2026-12-02T00:00:00Z")
    state = {"a": Done("slurm-small#0", 25.0, 0.0)}  # a ended 15 s late
    anywhere = replan(workflow, catalog, plan, state, 25.0, time_limit_s=5.0)
    assert {a.resource for a in anywhere.assignments if a.task != "a"} == {"pool_large"}  # what went wrong
    kept = repair_catalog(catalog, plan)
    assert [r.name for r in kept.resources] == ["slurm-small"]
    repaired = replan(workflow, kept, plan, state, 25.0, time_limit_s=5.0)
    assert {a.resource for a in repaired.assignments} == {"slurm-small"}
    on_pool = replace(
        plan, assignments=(*planned[:2], replace(planned[2], resource="pool_large", machine="pool_large#0"))
    )
    assert [r.name for r in repair_catalog(catalog, on_pool).resources] == ["slurm-small", "pool_large"]


def test_a_repair_that_keeps_a_deadline_at_risk_says_so_and_carries_the_runs_forecast() -> None:
    from agora_optimizer.executor.runs.repair import repaired
    from agora_optimizer.model.catalog import Billing, Catalog, Resource
    from agora_optimizer.planning.replan import replan

    cheap = Resource("cheap", "aws", 1, 4, 1.0, 3.6, 1, Billing(1.0, 0.0))
    fast = Resource("fast", "aws", 1, 4, 2.0, 14.4, 2, Billing(1.0, 0.0))  # twice as fast, four times the price
    catalog = Catalog((cheap, fast), 1e9)
    workflow = Workflow.create("chain", [Task(t, 10.0, 1, GIB, "c") for t in "abc"], [Edge("a", "b"), Edge("b", "c")])
    planned = tuple(Assignment(t, "cheap", "cheap#0", 10.0 * i, 10.0 * (i + 1), 1, GIB) for i, t in enumerate("abc"))
    solver = SolverInfo("list-scheduling", "heuristic", None, 0.1)
    objective = Objective(kind="cost", deadline_s=35.0)
    plan = Plan("chain", "c", objective, 30.0, 0.03, planned, solver, "2026-12-05T00:00:00Z")
    book = RunBook(MachineOrder.from_plan(plan, catalog.by_name), origin_s=0.0)
    book.start("a", 0.0)
    book.end("a", 20.0)
    answer = replan(workflow, catalog, plan, replan_state(book, 20.0, {}), 20.0, time_limit_s=5.0, deadline_margin=0.0)
    late = Drift("a", "task a ended 100 % later than planned (at 20.0 s, planned 10.0 s)")
    fixed = repaired(book, answer, catalog.by_name, [late], 20.0)
    reason = fixed.repair.reason
    assert reason.startswith(late.reason + "; deadline at risk: the run ends at 40.0 s, past its deadline 35.0 s; ")
    assert "1 task moved to a faster type (c cheap -> fast)" in reason  # the least that keeps it: b stays
    assert {a.resource for a in fixed.moved.values()} == {"fast"}
    assert fixed.repair.forecast_end_s == pytest.approx(answer.makespan_s) and answer.makespan_s <= 35.0
    assert fixed.repair.forecast_cost_usd == pytest.approx(answer.cost_usd) and fixed.repair.forecast_end_at is None
