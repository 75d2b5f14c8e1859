"""What the pages are built from, without a server: plans, traces, the rebuilt workflow and the savings."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.optimize.optimize import default_plan, optimize
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from agora_optimizer.ui.baseline import BaselineUnavailableError, Comparison, DagStructure, plan_workflow
from agora_optimizer.ui.plans import PlanReader
from agora_optimizer.ui.traces import TraceFilter, TraceReader
from tests.conftest import AWS_CATALOG
from tests.ui.conftest import example_workflow

START = datetime(2026, 11, 1, tzinfo=UTC)


def plan(created_at: str, *assignments: Assignment) -> Plan:
    return Plan("etl", "aws", Objective(), 10.0, 1.0, assignments, SolverInfo("m", "heuristic", None, 0.0), created_at)


def test_plan_reader_lists_history_newest_first_and_sees_a_new_current_plan(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    reader = PlanReader(store)
    one = Assignment("a", "c5.large", "c5.large#0", 0, 5, 1, 2**30)
    store.save("etl", plan("2026-11-01T00:00:00Z", one))
    first = reader.current("etl")
    assert first is not None and first.plan.created_at == "2026-11-01T00:00:00Z"
    store.save("etl", plan("2026-11-02T00:00:00Z", replace(one, machine="c5.large#1")))  # another plan
    current = reader.current("etl")
    assert current is not None and current.plan.created_at == "2026-11-02T00:00:00Z"
    assert current.version != first.version
    total, entries = reader.history("etl", 0, 1)
    assert total == 2 and [e.plan.created_at for e in entries] == ["2026-11-02T00:00:00Z"]
    assert reader.current("nothing") is None and reader.history("nothing", 0, 10) == (0, [])


def test_after_a_rollback_the_history_shows_the_rolled_back_to_plan_first(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    reader = PlanReader(store)
    one = Assignment("a", "c5.large", "c5.large#0", 0, 5, 1, 2**30)
    old = store.save("etl", plan("2026-11-01T00:00:00Z", one))
    store.save("etl", plan("2026-11-02T00:00:00Z", replace(one, machine="c5.large#1")))
    store.save("etl", load_plan(old.path))  # roll back to the first plan
    total, entries = reader.history("etl", 0, 10)
    assert total == 3
    newest_first = ["2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", "2026-11-01T00:00:00Z"]
    assert [e.plan.created_at for e in entries] == newest_first


def test_the_plan_rebuilds_its_workflow_and_its_one_type_default() -> None:
    catalog = load_catalog(AWS_CATALOG)
    workflow = example_workflow()
    planned = optimize(workflow, catalog, Objective(kind="cost"), "aws", 0.5)  # any plan will do
    edges = (*((e.parent, e.child) for e in workflow.edges), ("extract", "not-planned"))
    rebuilt = plan_workflow(planned, catalog, DagStructure(frozenset(t.id for t in workflow.tasks), edges))
    for task in workflow.tasks:
        assert rebuilt.by_id[task.id].runtime_s == pytest.approx(task.runtime_s)  # duration x speed
    assert {(e.parent, e.child) for e in rebuilt.edges} == {(e.parent, e.child) for e in workflow.edges}
    default, again = default_plan(workflow, catalog, "aws"), default_plan(rebuilt, catalog, "aws")
    assert default is not None and again is not None
    assert (again.makespan_s, again.cost_usd) == pytest.approx((default.makespan_s, default.cost_usd))
    saving = Comparison(default).saving(planned.cost_usd, "cost_usd")
    assert saving == pytest.approx(1 - planned.cost_usd / default.cost_usd) and saving >= 0
    assert Comparison(None, "no catalog").saving(1.0, "cost_usd") is None


def test_a_plan_on_a_resource_the_catalog_lacks_has_no_baseline() -> None:
    odd = plan("2026-11-01T00:00:00Z", Assignment("a", "gpu.huge", "gpu.huge#0", 0, 5, 1, 2**30))
    with pytest.raises(BaselineUnavailableError, match=r"gpu\.huge"):
        plan_workflow(odd, load_catalog(AWS_CATALOG), DagStructure(frozenset({"a"}), ()))


def attempt(dag: str, task: str, run: int, state: str = "success", **fields: object) -> TaskAttempt:
    begin = START + timedelta(hours=run)
    return TaskAttempt(
        dag_id=dag,
        task_id=task,
        run_id=f"r{run}",
        started_at=begin,
        ended_at=begin + timedelta(seconds=10 + run),
        state=state,  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture
def reader(tmp_path: Path) -> TraceReader:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    rows = [attempt("etl", "load", run, resource_type="c5.large", peak_rss_bytes=run * 100) for run in range(5)]
    rows.append(attempt("etl", "load", 4, "failed", try_number=2, peak_rss_bytes=10_000, resource_type="m5.large"))
    rows += [attempt("secret", "load", run) for run in range(3)]
    with TraceStore(url) as store:
        store.add(rows)
    return TraceReader(url)


def test_trace_pages_hold_only_the_readable_dags_newest_first(reader: TraceReader) -> None:
    total, rows = reader.page({"etl"}, TraceFilter(), 0, 4)
    assert total == 6 and len(rows) == 4 and {r["dag_id"] for r in rows} == {"etl"}
    assert [r["run_id"] for r in rows] == ["r4", "r4", "r3", "r2"]
    assert rows[0]["started_at"].tzinfo is not None
    total, rows = reader.page({"etl"}, TraceFilter(state="failed", resource_type="m5.large"), 0, 50)
    assert total == 1 and rows[0]["try_number"] == 2
    assert reader.page({"etl"}, TraceFilter(dag_id="secret"), 0, 50) == (0, [])
    assert reader.page(set(), TraceFilter(), 0, 50) == (0, [])


def test_actuals_aggregate_the_recent_runs_per_task(reader: TraceReader) -> None:
    runs = reader.recent_runs("etl", 2)
    assert runs == ["r4", "r3"]
    actual = reader.actuals("etl", runs, ["load", "absent"])
    assert set(actual) == {"load"}
    load = actual["load"]
    assert (load.runs, load.failed) == (2, 1)
    assert load.mean_runtime_s == pytest.approx(13.5) and load.max_runtime_s == pytest.approx(14.0)
    assert load.max_peak_rss_bytes == 10_000 and load.resource_types == ("c5.large", "m5.large")
