"""The "Plan vs actual" page and its JSON twin, served in-process on run records put in a temp SQLite store.

The app is the real one from ``create_app`` with FastAPI's TestClient; Airflow's login and its
per-DAG rights are replaced (a fixed user who may read any DAG; the real rights are checked
against a real api-server in test_access.py), and so is the look-up of a DAG in Airflow's
database. The records are written with :class:`RunStore`, the plans with :class:`PlanStore`, and
the predicted saving comes from the real one-type default on the AWS catalog.
"""

from __future__ import annotations

import re
import statistics
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.plan import Objective, Plan
from agora_optimizer.optimize.optimize import default_plan, optimize
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.runs.record import Repair, RunRecord, RunTask
from agora_optimizer.runs.store import RunStore
from agora_optimizer.ui import baseline, run_records
from agora_optimizer.ui.app import create_app
from agora_optimizer.ui.auth import DagIdPath, current_user, readable_dag, valid_dag_id
from agora_optimizer.ui.baseline import DagStructure
from agora_optimizer.ui.plans import PlanReader
from agora_optimizer.ui.svg import run_gantt_svg
from tests.conftest import AWS_CATALOG
from tests.ui.conftest import example_workflow

SVG = "{http://www.w3.org/2000/svg}"
DAG = "etl"
EMPTY = "café_vide"  # a planned DAG (Unicode id) with no recorded run
START = datetime(2026, 11, 1, tzinfo=UTC)
EVIL = '<script>alert("run")</script>'


class _User:
    def get_id(self) -> str:
        return "1"

    def get_name(self) -> str:
        return "tester"


def _readable(dag_id: DagIdPath) -> str:
    return valid_dag_id(dag_id)


def planned_record(plan: Plan, version: str, run: int, makespan_factor: float, cost_factor: float) -> RunRecord:
    """A successful planned run: every task where the plan put it, ``makespan_factor`` times as long."""
    tasks = tuple(
        RunTask(
            a.task,
            try_number=1,
            state="success",
            planned_resource=a.resource,
            planned_machine=a.machine,
            planned_start_s=a.start_s,
            planned_end_s=a.end_s,
            actual_resource=a.resource,
            actual_machine=a.machine,
            actual_start_s=a.start_s * makespan_factor,
            actual_end_s=a.end_s * makespan_factor,
        )
        for a in plan.assignments
    )
    return RunRecord(
        dag_id=DAG,
        run_id=f"scheduled__planned{run}",
        state="success",
        planned=True,
        plan_version=version,
        started_at=START + timedelta(hours=run),
        ended_at=START + timedelta(hours=run, seconds=plan.makespan_s * makespan_factor),
        planned_makespan_s=plan.makespan_s,
        actual_makespan_s=plan.makespan_s * makespan_factor,
        planned_cost_usd=plan.cost_usd,
        actual_cost_usd=plan.cost_usd * cost_factor,
        tasks=tasks,
    )


def unplanned_record(run: int, makespan_s: float, cost_usd: float, state: str = "success") -> RunRecord:
    tasks = (RunTask("extract", try_number=1, state=state, actual_resource="c5.large", actual_start_s=0.0,
                     actual_end_s=makespan_s),)  # fmt: skip
    return RunRecord(
        dag_id=DAG,
        run_id=f"manual__default{run}",
        state=state,
        planned=False,
        plan_version="",
        started_at=START + timedelta(hours=run),
        ended_at=START + timedelta(hours=run, seconds=makespan_s),
        planned_makespan_s=None,
        actual_makespan_s=makespan_s,
        planned_cost_usd=None,
        actual_cost_usd=cost_usd,
        tasks=tasks,
    )


class Data:
    def __init__(self, root: Path) -> None:
        self.url = f"sqlite:///{root / 'traces.db'}"
        self.plans = PlanStore(root / "plans")
        workflow = example_workflow()
        self.catalog = load_catalog(AWS_CATALOG)
        self.plan = optimize(replace(workflow, name=DAG), self.catalog, Objective(kind="cost"), str(AWS_CATALOG), 0.5)
        stored = self.plans.save(DAG, self.plan)
        self.version = plan_version(stored.path.read_bytes())
        self.plans.save(EMPTY, replace(self.plan, workflow=EMPTY))
        self.default = default_plan(workflow, self.catalog, str(AWS_CATALOG))
        # Oldest first: two unplanned runs (and a failed one), then planned runs: 5 % slow, 30 % slow, 20 % fast.
        self.records = [
            unplanned_record(0, 900.0, 0.20),
            unplanned_record(1, 1100.0, 0.30),
            unplanned_record(2, 50.0, 0.01, state="failed"),  # stopped early: not a measure of the default
            planned_record(self.plan, self.version, 3, 1.05, 1.02),
            planned_record(self.plan, self.version, 4, 1.30, 1.12),
            # as if its plan had spot tasks: an expected cost with their interruptions beside the planned one
            replace(planned_record(self.plan, self.version, 5, 0.80, 0.95), planned_expected_cost_usd=0.0123),
        ]
        with RunStore(self.url) as store:
            for record in self.records:
                store.put(record)
            store.add_repair(DAG, "scheduled__planned4", Repair(42.5, "oom", ("aggregate",), "moved to r5.large"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    return Data(tmp_path_factory.mktemp("runs"))


@pytest.fixture
def client(data: Data, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", data.url)
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(AWS_CATALOG))
    workflow = example_workflow()
    edges = tuple((e.parent, e.child) for e in workflow.edges)
    structure = DagStructure(frozenset(t.id for t in workflow.tasks), edges)
    monkeypatch.setattr(baseline, "dag_structure", lambda dag_id: structure)
    monkeypatch.setattr(run_records, "plan_reader", lambda: PlanReader(data.plans))
    monkeypatch.setattr(run_records, "in_airflow", lambda dag_id: dag_id == "in_airflow_only")
    app = create_app()
    app.dependency_overrides[current_user] = _User
    app.dependency_overrides[readable_dag] = _readable
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def test_the_api_gives_each_run_as_recorded_newest_first(client: TestClient, data: Data) -> None:
    answer = client.get(f"/api/dags/{DAG}/runs")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    newest_first = data.records[::-1]
    assert [r["run_id"] for r in body["runs"]] == [r.run_id for r in newest_first]
    for shown, record in zip(body["runs"], newest_first, strict=True):
        assert (shown["state"], shown["planned"], shown["plan_version"]) == (
            record.state,
            record.planned,
            record.plan_version,
        )
        assert shown["planned_makespan_s"] == record.planned_makespan_s
        assert shown["actual_makespan_s"] == pytest.approx(record.actual_makespan_s)
        assert shown["actual_cost_usd"] == pytest.approx(record.actual_cost_usd)
        for ratio in ("makespan_ratio", "cost_ratio"):
            expected = getattr(record, ratio)
            assert shown[ratio] == (None if expected is None else pytest.approx(expected)), ratio
    flags = {r["run_id"]: (r["makespan_off"], r["cost_off"], r["repairs"]) for r in body["runs"]}
    assert flags["scheduled__planned3"] == (False, False, 0)  # 5 % and 2 % off
    assert flags["scheduled__planned4"] == (True, True, 1)  # 30 % and 12 % over
    assert flags["scheduled__planned5"] == (True, False, 0)  # 20 % under is news too
    assert flags["manual__default0"] == (False, False, 0)  # nothing planned, nothing to be off
    assert body["selected"]["run"]["run_id"] == "scheduled__planned5"  # the newest by default
    assert body["limit"] == run_records.DEFAULT_RUNS and body["off_threshold"] == pytest.approx(0.1)


def test_the_realised_saving_is_planned_median_against_unplanned_median(client: TestClient, data: Data) -> None:
    saving = client.get(f"/api/dags/{DAG}/runs").json()["saving"]
    planned = [r for r in data.records if r.planned]
    unplanned = [r for r in data.records if not r.planned and r.state == "success"]
    planned_makespan = statistics.median(r.actual_makespan_s or 0.0 for r in planned)
    planned_cost = statistics.median(r.actual_cost_usd for r in planned)
    assert saving["available"] and (saving["planned_runs"], saving["unplanned_runs"]) == (3, 2)
    assert saving["unplanned_median_makespan_s"] == pytest.approx(1000.0)  # the failed run is left out
    assert saving["unplanned_median_cost_usd"] == pytest.approx(0.25)
    assert saving["planned_median_makespan_s"] == pytest.approx(planned_makespan)
    assert saving["makespan_saving"] == pytest.approx(1 - planned_makespan / 1000.0)
    assert saving["cost_saving"] == pytest.approx(1 - planned_cost / 0.25)
    assert len(unplanned) == 2
    assert data.default is not None and saving["predicted_plan_version"] == data.version
    predicted = saving["predicted"]
    assert predicted["available"] and predicted["default_cost_usd"] == pytest.approx(data.default.cost_usd)
    assert predicted["cost_saving"] == pytest.approx(1 - data.plan.cost_usd / data.default.cost_usd)
    assert predicted["makespan_saving"] == pytest.approx(1 - data.plan.makespan_s / data.default.makespan_s)


def test_without_unplanned_runs_the_page_says_so_instead_of_a_number(client: TestClient) -> None:
    answer = client.get(f"/api/dags/{DAG}/runs", params={"limit": 3}).json()  # the three planned runs only
    saving = answer["saving"]
    assert not saving["available"] and saving["makespan_saving"] is None and saving["cost_saving"] is None
    assert saving["unplanned_runs"] == 0 and "no unplanned run of etl among the 3 shown" in saving["reason"]
    assert saving["predicted"]["available"]  # the prediction is still shown
    page = client.get(f"/dags/{DAG}/runs", params={"limit": 3}).text
    realised = re.search(r'<tr id="realised">.*?</tr>', page, re.S)
    assert realised is not None and "no unplanned run of etl" in realised[0] and "%" not in realised[0]


def test_the_page_marks_ratios_more_than_ten_percent_off(client: TestClient) -> None:
    page = client.get(f"/dags/{DAG}/runs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    rows = dict(re.findall(r'<tr data-run-id="([^"]+)"[^>]*>(.*?)</tr>', page.text, re.S))
    assert len(rows) == 6

    def marked(run_id: str) -> list[tuple[str, str]]:
        return re.findall(r'<td class="num ratio( off)?" data-off="(true|false)"', rows[run_id])  # type: ignore[return-value]

    assert marked("scheduled__planned3") == [("", "false"), ("", "false")]
    assert marked("scheduled__planned4") == [(" off", "true"), (" off", "true")]
    assert marked("scheduled__planned5") == [(" off", "true"), ("", "false")]
    assert marked("manual__default0") == []  # no ratio: a dash
    assert ">1.30<" in rows["scheduled__planned4"] and ">0.80<" in rows["scheduled__planned5"]
    assert 'class="selected"' in page.text.split('data-run-id="scheduled__planned5"')[1].split(">")[0]
    assert 'id="run-gantt"' in page.text and 'id="realised"' in page.text


def test_one_selected_run_shows_its_chart_notes_and_repairs(client: TestClient, data: Data) -> None:
    page = client.get(f"/dags/{DAG}/runs", params={"run_id": "scheduled__planned4"}).text
    assert '<span id="run-id">scheduled__planned4</span>' in page
    repairs = re.search(r'<table id="repairs">.*?</table>', page, re.S)
    assert repairs is not None and "oom" in repairs[0] and "moved to r5.large" in repairs[0] and "42.5" in repairs[0]
    detail = client.get(f"/api/dags/{DAG}/runs", params={"run_id": "manual__default0", "limit": 1}).json()
    assert [r["run_id"] for r in detail["runs"]] == ["scheduled__planned5"]  # older than the rows shown: still found
    assert detail["selected"]["run"]["run_id"] == "manual__default0" and detail["selected"]["repairs"] == []
    assert client.get(f"/api/dags/{DAG}/runs", params={"run_id": "nope"}).status_code == 404
    assert client.get(f"/dags/{DAG}/run-gantt.svg", params={"run_id": "nope"}).status_code == 404


def test_the_chart_has_a_planned_and_an_actual_bar_per_machine(client: TestClient, data: Data) -> None:
    answer = client.get(f"/dags/{DAG}/run-gantt.svg", params={"run_id": "scheduled__planned4"})
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/svg+xml"
    chart = ET.fromstring(answer.text)
    rows = {g.get("data-machine"): g for g in chart.iter(f"{SVG}g") if g.get("class") == "machine-row"}
    planned_machines = {a.machine for a in data.plan.assignments}
    assert set(rows) == planned_machines
    for machine, row in rows.items():
        tasks = {a.task for a in data.plan.assignments if a.machine == machine}
        for kind in ("planned", "actual"):  # tasks less than a pixel apart share a bar that counts them
            bars = [r for r in row.iter(f"{SVG}rect") if r.get("class") == kind]
            assert bars and {r.get("data-task") for r in bars} <= tasks, (machine, kind)
            assert sum(int(r.get("data-tasks") or 0) for r in bars) == len(tasks), (machine, kind)
    newest = ET.fromstring(client.get(f"/dags/{DAG}/run-gantt.svg").text)
    assert "scheduled__planned5" in (newest.findtext(f"{SVG}title") or "")


def test_a_task_that_ran_elsewhere_or_failed_is_drawn_where_and_as_it_ran() -> None:
    tasks = (
        RunTask(EVIL, 0, 1, "success", "c5.large", "c5.large#0", 0.0, 10.0, "c5.large", "c5.large#0", 1.0, 11.0),
        RunTask("moved", -1, 2, "failed", "c5.large", "c5.large#0", 10.0, 20.0, "m5.large", "m5.large#3", 12.0, 30.0),
        RunTask("skipped", -1, 0, "not run", "c5.large", "c5.large#0", 20.0, 30.0),
    )
    record = RunRecord(DAG, "r<1>", "failed", True, "abc", START, None, 30.0, 30.0, 0.1, 0.1, tasks)
    svg = run_gantt_svg(record).svg
    assert EVIL not in svg and "&lt;script&gt;" in svg
    chart = ET.fromstring(svg)
    rows = {g.get("data-machine"): g for g in chart.iter(f"{SVG}g") if g.get("class") == "machine-row"}
    assert set(rows) == {"c5.large#0", "m5.large#3"}

    def bars(machine: str, kind: str) -> dict[str | None, str | None]:
        return {r.get("data-task"): r.get("fill") for r in rows[machine].iter(f"{SVG}rect") if r.get("class") == kind}

    planned = [r for r in rows["c5.large#0"].iter(f"{SVG}rect") if r.get("class") == "planned"]
    assert sum(int(r.get("data-tasks") or 0) for r in planned) == 3  # back to back: one bar of 3 tasks
    assert bars("c5.large#0", "actual") == {f"{EVIL}[0]": "#59a14f"}
    assert bars("m5.large#3", "planned") == {} and bars("m5.large#3", "actual") == {"moved": "#e15759"}


def test_a_dag_without_records_gets_a_page_that_says_how_they_are_recorded(client: TestClient) -> None:
    page = client.get(f"/dags/{EMPTY}/runs")
    assert page.status_code == 200 and f'<span id="dag-id">{EMPTY}</span>' in page.text
    assert "No recorded runs yet" in page.text and f"agora runs record --dag {EMPTY}" in page.text
    body = client.get(f"/api/dags/{EMPTY}/runs").json()
    assert body["runs"] == [] and body["selected"] is None and not body["saving"]["available"]
    assert client.get(f"/dags/{EMPTY}/run-gantt.svg").status_code == 404
    assert client.get("/api/dags/in_airflow_only/runs").json()["runs"] == []  # a DAG without any plan yet


def test_an_unknown_dag_is_a_404(client: TestClient) -> None:
    for path in ("/api/dags/nowhere/runs", "/dags/nowhere/runs", "/dags/nowhere/run-gantt.svg"):
        answer = client.get(path)
        assert answer.status_code == 404 and "no DAG nowhere" in answer.json()["detail"], path
    page = client.get("/dags/nowhere/runs", headers={"Accept": "text/html"})
    assert page.status_code == 404 and "no DAG nowhere" in page.text
    assert client.get("/api/dags/a%20b/runs").status_code == 404  # a DAG id Airflow would refuse


def test_the_number_of_runs_is_bounded(client: TestClient) -> None:
    assert len(client.get(f"/api/dags/{DAG}/runs", params={"limit": 2}).json()["runs"]) == 2
    for limit in (0, run_records.MAX_RUNS + 1):
        assert client.get(f"/api/dags/{DAG}/runs", params={"limit": limit}).status_code == 422
    assert client.get(f"/dags/{DAG}/runs", params={"limit": 0}, headers={"Accept": "text/html"}).status_code == 422


def test_an_unreachable_trace_store_is_a_503_without_its_password(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", "postgresql+psycopg://agora:s3cret@127.0.0.1:1/traces")
    for path in (f"/api/dags/{DAG}/runs", f"/dags/{DAG}/runs", f"/dags/{DAG}/run-gantt.svg"):
        answer = client.get(path)
        assert answer.status_code == 503, (path, answer.text[:300])
        assert "trace store cannot be read" in answer.json()["detail"] and "s3cret" not in answer.text
    page = client.get(f"/dags/{DAG}/runs", headers={"Accept": "text/html"})
    assert page.status_code == 503 and "trace store cannot be read" in page.text


def test_a_runs_expected_cost_with_spot_interruptions_is_shown_beside_its_planned_cost(client: TestClient) -> None:
    runs = {r["run_id"]: r for r in client.get(f"/api/dags/{DAG}/runs").json()["runs"]}
    assert runs["scheduled__planned5"]["planned_expected_cost_usd"] == 0.0123
    assert runs["scheduled__planned3"]["planned_expected_cost_usd"] is None
    page = client.get(f"/dags/{DAG}/runs").text
    rows = dict(re.findall(r'<tr data-run-id="([^"]+)"[^>]*>(.*?)</tr>', page, re.S))
    assert 'class="expected"' in rows["scheduled__planned5"] and "expected 0.0123" in rows["scheduled__planned5"]
    assert "expected" not in rows["scheduled__planned3"]


def test_a_run_still_going_shows_its_repairs_and_its_forecast(client: TestClient, data: Data) -> None:
    end_at = START + timedelta(seconds=130)
    going = Repair(30.0, "category aggregate runs 1.85x its planned time", ("aggregate",), "d", 130.0, 0.0456, end_at)
    with RunStore(data.url) as store:
        store.add_repair(DAG, "scheduled__going", going)
    answer = client.get(f"/api/dags/{DAG}/runs", params={"run_id": "scheduled__going"}).json()
    assert "scheduled__going" not in [r["run_id"] for r in answer["runs"]]  # not recorded: not among the runs
    selected = answer["selected"]
    assert selected["run"]["state"] == "running" and [r["reason"] for r in selected["repairs"]] == [going.reason]
    assert selected["forecast"] == {"at_s": 30.0, "end_s": 130.0, "end_at": "2026-11-01T00:02:10Z", "cost_usd": 0.0456}
    page = client.get(f"/dags/{DAG}/runs", params={"run_id": "scheduled__going"}).text
    forecast = re.search(r'<p id="forecast">(.*?)</p>', page, re.S)
    assert forecast is not None and " ".join(forecast[1].split()) == (
        "Forecast at 30.0 s: ends at 130.0 s (2026-11-01 00:02:10 UTC), costs 0.0456 USD."
    )
    assert client.get(f"/dags/{DAG}/run-gantt.svg", params={"run_id": "scheduled__going"}).status_code == 200
    newest = client.get(f"/api/dags/{DAG}/runs").json()["selected"]
    assert newest["run"]["run_id"] == "scheduled__planned5" and newest["forecast"] is None  # never re-planned
