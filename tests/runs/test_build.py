"""build_run_record: planned and unplanned runs, a plan gone from the store, lease pricing, retries."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agora_optimizer.model.catalog import Billing, Resource
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo, SpotFigures
from agora_optimizer.runs.build import build_run_record, last_tries, run_plan_version
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair
from agora_optimizer.traces.records import TaskAttempt

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GIB = 2**30
VERSION = "abc123def456"
# 3.6 USD an hour = 0.001 USD a second: costs below read as seconds billed.
VM = Resource("vm", "aws", 2, 8, 1.0, 3.6, billing=Billing(granularity_s=60, minimum_s=120))
POOL = Resource("pool", "local", 1, 4, 1.0, 0.0)
SECOND = Resource("per-second", "aws", 2, 8, 1.0, 3.6, billing=Billing(granularity_s=1, minimum_s=0))
RESOURCES = {r.name: r for r in (VM, POOL, SECOND)}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def attempt(task_id: str, start_s: float, end_s: float, **fields: Any) -> TaskAttempt:
    values: dict[str, Any] = {"dag_id": "d", "run_id": "r", "task_id": task_id, "started_at": at(start_s)}
    values |= {"ended_at": at(end_s), "plan_version": VERSION} | fields
    return TaskAttempt.create(**values)


def plan(*assignments: tuple[str, str, str, float, float], makespan_s: float = 100.0, cost_usd: float = 0.2) -> Plan:
    rows = tuple(Assignment(t, r, m, s, e, 1, GIB) for t, r, m, s, e in assignments)
    return Plan("d", "c.yaml", Objective(), makespan_s, cost_usd, rows, SolverInfo("t", "heuristic", None, 0.0), "x")


def build(attempts: list[TaskAttempt], the_plan: Plan | None, **kwargs: Any) -> Any:
    return build_run_record("d", "r", "success", T0, at(500), attempts, the_plan, RESOURCES, **kwargs)


def test_a_planned_run_compares_each_task_and_the_totals_with_its_plan() -> None:
    the_plan = plan(("a", "vm", "vm#0", 0, 50), ("b", "vm", "vm#0", 50, 100), makespan_s=100, cost_usd=0.12)
    attempts = [
        attempt("a", 5, 70, resource_type="vm", machine="vm#0"),
        attempt("b", 75, 150, resource_type="vm", machine="vm#0"),
    ]
    record = build(attempts, the_plan)
    assert (record.planned, record.plan_version, record.notes) == (True, VERSION, ())
    assert record.actual_makespan_s == 150.0 and record.makespan_ratio == pytest.approx(1.5)
    # No backend reported vm#0: its lease is its tasks' first start (5) to last end (150): 145 s,
    # billed in 60 s steps -> 180 s.
    (lease,) = record.leases
    assert (lease.machine, lease.start_s, lease.end_s, lease.source) == ("vm#0", 5.0, 150.0, "task times")
    assert record.actual_cost_usd == pytest.approx(0.18) and record.cost_ratio == pytest.approx(1.5)
    b = next(t for t in record.tasks if t.task_id == "b")
    assert (b.planned_machine, b.planned_start_s, b.planned_end_s) == ("vm#0", 50.0, 100.0)
    assert (b.actual_machine, b.actual_start_s, b.actual_end_s, b.state) == ("vm#0", 75.0, 150.0, "success")


def test_a_plan_with_spot_figures_gives_the_record_its_expected_cost_and_one_without_none() -> None:
    attempts = [attempt("a", 0, 50, resource_type="vm", machine="vm#0")]
    the_plan = plan(("a", "vm", "vm#0", 0, 50), cost_usd=0.12)
    assert build(attempts, the_plan).planned_expected_cost_usd is None
    spot = replace(the_plan, spot=SpotFigures(1, 0.1, 0.135, 80.0))
    record = build(attempts, spot)
    assert (record.planned_cost_usd, record.planned_expected_cost_usd) == (0.12, 0.135)
    assert record.to_json()["planned_expected_cost_usd"] == 0.135


def test_a_run_whose_tasks_name_no_plan_is_unplanned_and_each_attempt_is_its_own_lease() -> None:
    attempts = [
        attempt("a", 0, 10, resource_type="per-second", plan_version=""),
        attempt("b", 20, 30.5, resource_type="pool", plan_version=""),
    ]
    record = build(attempts, None)
    assert (record.planned, record.plan_version, record.planned_makespan_s, record.planned_cost_usd) == (
        False, "", None, None,
    )  # fmt: skip
    assert record.makespan_ratio is None and record.cost_ratio is None
    assert [(x.resource, x.source, x.seconds) for x in record.leases] == [
        ("per-second", "attempt", 10.0),
        ("pool", "attempt", 10.5),
    ]
    assert record.actual_cost_usd == pytest.approx(0.010)  # 10 s per second; the pool is free
    assert record.actual_makespan_s == 30.5 and record.notes == ()


def test_a_plan_missing_from_the_store_leaves_planned_numbers_empty_with_a_note() -> None:
    record = build([attempt("a", 0, 10, resource_type="vm", machine="vm#0")], None)
    assert record.planned and record.plan_version == VERSION
    assert record.planned_makespan_s is None and record.makespan_ratio is None
    assert any(f"plan {VERSION}" in note and "not in the plan store" in note for note in record.notes)
    assert record.actual_cost_usd == pytest.approx(0.12)  # 10 s, billed at the 120 s minimum


def test_reported_leases_are_priced_with_billing_minimum_and_granularity_and_replace_task_times() -> None:
    attempts = [
        attempt("a", 10, 20, resource_type="vm", machine="vm#0"),
        attempt("b", 10, 20, resource_type="vm", machine="vm#1"),
    ]
    reported = [
        LeaseRecord("d", "r", "vm#0", "vm", "slurm", "42", at(0), at(30), "slurm accounting"),  # 30 s -> 120 s min
        LeaseRecord("d", "r", "vm#0", "vm", "slurm", "43", at(100), at(281), "slurm accounting"),  # 181 s -> 240 s
        LeaseRecord("d", "other", "vm#1", "vm", "slurm", "7", at(0), at(9000), "slurm accounting"),  # another run
    ]
    record = build(attempts, None, lease_records=reported)
    by_source = sorted((x.machine, x.external_id, x.source, round(x.cost_usd, 6)) for x in record.leases)
    assert by_source == [
        ("vm#0", "42", "slurm accounting", 0.12),
        ("vm#0", "43", "slurm accounting", 0.24),
        ("vm#1", "", "task times", 0.12),  # not reported for this run: its tasks' times (10 s -> 120 s)
    ]
    assert record.actual_cost_usd == pytest.approx(0.48)


def test_a_resource_not_in_the_catalog_costs_nothing_and_says_so() -> None:
    record = build([attempt("a", 0, 3600, resource_type="gone.xlarge", machine="gone.xlarge#0")], None)
    assert record.actual_cost_usd == 0.0
    assert any("'gone.xlarge' is not in the catalog" in note for note in record.notes)


def test_retries_keep_the_last_try_in_the_task_table_and_every_try_in_the_machine_lease() -> None:
    attempts = [
        attempt("a", 0, 40, resource_type="vm", machine="vm#0", state="failed", try_number=1),
        attempt("a", 60, 200, resource_type="vm", machine="vm#0", try_number=2),
        attempt("b", 0, 10, resource_type="vm", machine="vm#1", try_number=3, state="oom_killed"),
        attempt("b", 0, 5, resource_type="vm", machine="vm#1", try_number=2, state="failed"),
    ]
    assert [(a.task_id, a.try_number) for a in last_tries(attempts)] == [("a", 2), ("b", 3)]
    record = build(attempts, plan(("a", "vm", "vm#0", 0, 100), ("b", "vm", "vm#1", 0, 10), ("c", "vm", "vm#1", 10, 20)))
    a, b, c = record.tasks
    assert (a.try_number, a.state, a.actual_start_s, a.actual_end_s) == (2, "success", 60.0, 200.0)
    assert (b.try_number, b.state) == (3, "oom_killed")
    assert (c.task_id, c.state, c.planned_machine, c.actual_start_s) == ("c", "not run", "vm#1", None)
    assert record.actual_makespan_s == 200.0
    vm0 = next(x for x in record.leases if x.machine == "vm#0")
    assert (vm0.start_s, vm0.end_s) == (0.0, 200.0)  # the failed first try held the machine too


def test_the_plan_version_is_the_one_most_tasks_name_and_a_mix_is_noted() -> None:
    attempts = [attempt("a", 0, 1), attempt("b", 0, 1), attempt("c", 0, 1, plan_version="other000000")]
    assert run_plan_version(attempts) == (VERSION, [VERSION, "other000000"])
    record = build(attempts, plan(("a", "vm", "vm#0", 0, 1)))
    assert record.plan_version == VERSION and any("2 plan versions" in note for note in record.notes)


def test_times_count_from_the_dag_run_start_and_repairs_are_kept_in_time_order() -> None:
    repairs = [Repair(30.0, "machine lost", ("b",), "vm#1 gone"), Repair(5.0, "late", ("a",))]
    record = build_run_record(
        "d", "r", "failed", at(-10), at(100), [attempt("a", 0, 20, plan_version="")], None, RESOURCES, repairs=repairs
    )
    assert record.state == "failed" and record.actual_makespan_s == 30.0
    assert record.tasks[0].actual_start_s == 10.0
    assert [r.at_s for r in record.repairs] == [5.0, 30.0]
    data = record.to_json()
    assert data["started_at"] == at(-10).isoformat() and data["repairs"][1]["tasks"] == ["b"]


def test_a_run_nothing_ran_in_has_no_makespan_and_costs_nothing() -> None:
    record = build([], plan(("a", "vm", "vm#0", 0, 1)))
    assert not record.planned and record.actual_makespan_s is None and record.actual_cost_usd == 0.0
    assert any("no task of the run has ended" in note for note in record.notes)


def test_mapped_instances_meet_their_planned_rows_and_tasks_that_never_ran_say_why() -> None:
    the_plan = plan(
        ("add[0]", "vm", "vm#0", 0, 10), ("add[1]", "vm", "vm#1", 0, 10), ("add[2]", "vm", "vm#1", 10, 20),
        ("branch_b", "vm", "vm#0", 10, 20), ("after", "vm", "vm#0", 20, 30),
    )  # fmt: skip
    attempts = [
        attempt("add", 0, 9, map_index=0, resource_type="vm", machine="vm#0"),
        attempt("add", 0, 11, map_index=1, resource_type="vm", machine="vm#1"),
        attempt("add", 12, 14, map_index=3, resource_type="vm"),  # beyond the planned width: the overflow
    ]
    record = build(attempts, the_plan, never_ran={"branch_b": "skipped", "after": "upstream_failed"})
    tasks = {task.key: task for task in record.tasks}
    assert (tasks["add[1]"].planned_machine, tasks["add[1]"].actual_machine) == ("vm#1", "vm#1")
    assert (tasks["add[3]"].planned_machine, tasks["add[3]"].state) == ("", "success")
    assert tasks["add[2]"].state == "not in run"  # the run expanded add to 0, 1 and 3 only
    assert (tasks["branch_b"].state, tasks["after"].state) == ("skipped", "upstream_failed")
    assert build(attempts, the_plan).tasks[2].state == "not run"  # no word from Airflow
    assert record.state == "success"  # the DAG run's own state, not the last never-run task's
