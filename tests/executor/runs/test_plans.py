"""Which plan a DAG run follows (executor/runs/plans.py): its own run plan from the store, else as parsed."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.executor.runs.plans import PlanReader
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.placement import Placement
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore, plan_version
from tests.conftest import CATALOGS

MIB = 2**20
RUN_AFTER = datetime(2026, 12, 3, 1, tzinfo=UTC)
RESOURCES = ("local-small", "local-large")
PARSED = Placement("local-small", 1, 256 * MIB, time_limit_s=60.0, machine="local-small#0", plan_version="parsed")


def run_plan(resource: str = "local-large") -> Plan:
    placed = (
        Assignment("a", resource, f"{resource}#0", 0.0, 10.0, 1, 300 * MIB),
        Assignment("b[1]", resource, f"{resource}#0", 10.0, 20.0, 1, 200 * MIB),
    )
    return Plan(
        "etl", "local", Objective(), 20.0, 0.0, placed, SolverInfo("window:joint", "heuristic", None, 0.0),
        "2026-12-01T00:00:00Z",
    )  # fmt: skip


class Dates:
    """Airflow's dates of each run, counting the reads."""

    def __init__(self, **runs: tuple[datetime | None, datetime | None]) -> None:
        self.runs = runs
        self.reads = 0

    def __call__(self, dag_id: str, run_id: str) -> tuple[datetime | None, datetime | None]:
        self.reads += 1
        if run_id == "db_down":
            raise RuntimeError("database is locked")
        return self.runs.get(run_id, (None, None))


@pytest.fixture
def store(tmp_path: Path) -> PlanStore:
    return PlanStore(tmp_path / "plans")


def looker(store: PlanStore, dates: Dates) -> PlanReader:
    resources = load_catalog(CATALOGS / "local.yaml").by_name
    assert set(resources) == set(RESOURCES)
    return PlanReader(lambda: store, dates, resources, logging.getLogger("test.run_plans"))


def test_a_run_with_its_own_plan_runs_each_task_at_that_plans_placement(store: PlanStore) -> None:
    kept = store.save_run("etl", RUN_AFTER, run_plan())
    dates = Dates(scheduled=(RUN_AFTER, RUN_AFTER))
    plans = looker(store, dates)
    found = plans.run_plan("etl", "scheduled")
    assert found is not None and found.path == kept.path and found.version == plan_version(kept.path.read_bytes())
    placed = found.placement("a", PARSED)
    assert placed == Placement(
        "local-large", 1, 300 * MIB, time_limit_s=60.0, machine="local-large#0", planned_start_s=0.0,
        plan_version=found.version,
    )  # fmt: skip  # the task's own time limit kept
    mapped = found.placement("b[1]", None)
    assert mapped is not None and (mapped.machine, mapped.planned_start_s, mapped.time_limit_s) == (
        "local-large#0", 10.0, None,
    )  # fmt: skip
    unnamed = found.placement("added_since", PARSED)  # not in the run plan: as parsed, on no machine
    assert unnamed == Placement("local-small", 1, 256 * MIB, time_limit_s=60.0, plan_version=found.version)
    assert found.placement("added_since", None) is None
    assert plans.run_plan("etl", "scheduled") is found and dates.reads == 1  # looked up once per run


def test_a_run_triggered_by_hand_follows_the_plan_of_its_logical_date(store: PlanStore) -> None:
    store.save_run("etl", RUN_AFTER, run_plan())
    plans = looker(store, Dates(manual=(RUN_AFTER + timedelta(minutes=3), RUN_AFTER)))
    assert plans.run_plan("etl", "manual") is not None


def test_a_dag_without_run_plans_reads_nothing_from_airflow(store: PlanStore) -> None:
    store.save("etl", run_plan())  # a current plan only
    dates = Dates(scheduled=(RUN_AFTER, RUN_AFTER))
    plans = looker(store, dates)
    assert plans.run_plan("etl", "scheduled") is None and plans.run_plan("other", "r") is None
    assert dates.reads == 0


def test_a_run_the_window_did_not_plan_keeps_its_parse_time_placements(store: PlanStore) -> None:
    store.save_run("etl", RUN_AFTER, run_plan())
    plans = looker(store, Dates(later=(RUN_AFTER + timedelta(hours=1), RUN_AFTER + timedelta(hours=1))))
    assert plans.run_plan("etl", "later") is None
    assert plans.run_plan("etl", "gone") is None  # no such run in Airflow's database


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda path: path.write_text('{"format": "agora-plan/1"'), "invalid JSON"),
        (lambda path: path.write_text(PlanStore.__name__), "invalid JSON"),
        (lambda path: path.write_bytes(b"\xff\xfe"), ""),
        (lambda path: (path.unlink(), path.mkdir()), "Is a directory"),
        (None, "it names local-gpu, which [agora] catalog does not declare"),
    ],
)
def test_a_run_plan_that_cannot_be_used_is_logged_once_naming_its_file_and_the_run_goes_on_as_parsed(
    store: PlanStore, caplog: pytest.LogCaptureFixture, damage: object, why: str
) -> None:
    path = store.save_run("etl", RUN_AFTER, run_plan("local-gpu" if damage is None else "local-large")).path
    if callable(damage):
        damage(path)
    plans = looker(store, Dates(scheduled=(RUN_AFTER, RUN_AFTER)))
    with caplog.at_level(logging.WARNING):
        assert plans.run_plan("etl", "scheduled") is None
        assert plans.run_plan("etl", "scheduled") is None
    assert len(caplog.records) == 1, caplog.text
    line = caplog.records[0].getMessage()
    assert str(path) in line and "etl run scheduled" in line and why in line, line
    assert line.endswith("its tasks run at their parse-time placements")


def test_dates_that_cannot_be_read_leave_the_run_as_parsed_with_one_line(
    store: PlanStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.save_run("etl", RUN_AFTER, run_plan())
    dates = Dates()
    plans = looker(store, dates)
    with caplog.at_level(logging.WARNING):
        assert plans.run_plan("etl", "db_down") is None
        assert plans.run_plan("etl", "db_down") is None
    assert dates.reads == 1 and len(caplog.records) == 1
    assert "cannot read the dates of etl run db_down (database is locked)" in caplog.records[0].getMessage()


def test_a_plans_machine_order_carries_its_workflows_categories_and_parents_and_none_without_one(
    store: PlanStore,
) -> None:
    from agora_optimizer.model.workflow import Edge, Task, Workflow

    tasks = [Task("a", 10.0, 1, MIB, "extract"), Task("b[1]", 10.0, 1, MIB, "")]
    workflow = Workflow.create("etl", tasks, [Edge("a", "b[1]", 0)])
    store.save("etl", run_plan(), workflow)
    version = plan_version(store.current_path("etl").read_bytes())
    order = looker(store, Dates()).order("etl", version)
    assert order is not None and dict(order.categories) == {"a": "extract"}  # b[1]: its stem serves
    assert dict(order.parents) == {"a": frozenset(), "b[1]": frozenset({"a"})}
    store.save("bare", run_plan())
    bare = looker(store, Dates()).order("bare", plan_version(store.current_path("bare").read_bytes()))
    assert bare is not None and bare.categories == {} and bare.parents == {} and set(bare.by_task) == {"a", "b[1]"}
