"""Recording a run from Airflow's tries + the trace store (no Airflow process), and ``agora runs``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora_optimizer.cli import out_console
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.runs.cli import runs_app
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair
from agora_optimizer.runs.recorder import AirflowTry, record_run
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.records import TaskAttempt
from tests.conftest import CATALOGS

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GIB = 2**30


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[str, PlanStore, str]:
    """A store URL, a plan store with the DAG's plan, and that plan's version."""
    plans = PlanStore(tmp_path / "plans")
    plan = Plan(
        "etl", "local.yaml", Objective(), 60.0, 0.0,
        (Assignment("extract", "local-small", "local-small#0", 0.0, 20.0, 1, GIB),
         Assignment("load", "local-large", "local-large#0", 20.0, 60.0, 1, GIB)),
        SolverInfo("test", "heuristic", None, 0.0), "2026-03-01T00:00:00Z",
    )  # fmt: skip
    stored = plans.save("etl", plan)
    return f"sqlite:///{tmp_path / 'traces.db'}", plans, plan_version(stored.path.read_bytes())


def placement(version: str, resource: str) -> dict[str, str]:
    return {"resource": resource, "machine": f"{resource}#0", "plan_version": version}


def test_a_run_is_recorded_from_airflows_tries_and_recording_again_takes_the_late_trace_rows(
    setup: tuple[str, PlanStore, str],
) -> None:
    url, plans, version = setup
    resources = {r.name: r for r in load_catalog(CATALOGS / "local.yaml").resources}
    tries = [
        AirflowTry("extract", -1, 1, "success", at(2), at(25), "local-small", placement(version, "local-small")),
        AirflowTry("load", -1, 2, "failed", at(40), at(70), "local-large", placement(version, "local-large")),
        AirflowTry("report", -1, 0, "upstream_failed", None, None, "default", {}),
    ]
    with RunStore(url) as store:
        first = record_run(store, "etl", "r1", "failed", T0, at(71), tries, plans, resources)
        assert first.planned and first.plan_version == version and first.notes == ()
        assert first.actual_makespan_s == 70.0 and first.makespan_ratio == pytest.approx(70 / 60)
        load = next(t for t in first.tasks if t.task_id == "load")
        assert (load.try_number, load.state, load.actual_machine) == (2, "failed", "local-large#0")
        assert load.actual_start_s == 40.0
        assert {t.task_id for t in first.tasks} == {"extract", "load"}  # "report" never ran
        # The executor's rows land later: load's first try (OOM-killed, earlier) and its second try's state.
        store.add([
            TaskAttempt.create(dag_id="etl", task_id="load", run_id="r1", try_number=1, started_at=at(22),
                               ended_at=at(30), state="failed", resource_type="local-large", machine="local-large#0",
                               plan_version=version),
            TaskAttempt.create(dag_id="etl", task_id="load", run_id="r1", try_number=2, started_at=at(41),
                               ended_at=at(69), state="oom_killed", resource_type="local-large",
                               machine="local-large#0", plan_version=version),
        ])  # fmt: skip
        store.add_repair("etl", "r1", Repair(30.0, "retry with more memory", ("load",)))
        again = record_run(store, "etl", "r1", "failed", T0, at(71), tries, plans, resources)
        assert store.get("etl", "r1") == again
    load = next(t for t in again.tasks if t.task_id == "load")
    assert (load.state, load.actual_start_s) == ("oom_killed", 40.0)  # Airflow's times, the executor's state
    large = next(x for x in again.leases if x.machine == "local-large#0")
    assert (large.start_s, large.end_s) == (22.0, 70.0)  # from the first try's start
    assert [r.reason for r in again.repairs] == ["retry with more memory"]


def test_a_run_on_no_plan_and_a_plan_gone_from_the_store(setup: tuple[str, PlanStore, str]) -> None:
    url, plans, _ = setup
    with RunStore(url) as store:
        unplanned = record_run(
            store, "etl", "u1", "success", T0, at(9), [AirflowTry("x", -1, 1, "success", at(1), at(8), "default", {})],
            plans, {},
        )  # fmt: skip
        assert not unplanned.planned and unplanned.actual_makespan_s == 8.0 and unplanned.actual_cost_usd == 0.0
        gone = record_run(
            store, "etl", "g1", "success", T0, at(9),
            [AirflowTry("extract", -1, 1, "success", at(1), at(8), "q", placement("0123456789ab", "local-small"))],
            plans, {},
        )  # fmt: skip
    assert gone.planned and gone.planned_makespan_s is None
    assert any("plan 0123456789ab of DAG etl is not in the plan store" in n for n in gone.notes)


def _recorded(url: str, plans: PlanStore, version: str) -> None:
    resources = {r.name: r for r in load_catalog(CATALOGS / "local.yaml").resources}
    with RunStore(url) as store:
        pool = LeaseRecord("etl", "r1", "local-small#0", "local-small", "local", "", T0, at(30), "local pool")
        store.add_leases([pool])
        for run_id, hours in (("r1", 0), ("r2", 1)):
            start = T0 + timedelta(hours=hours)
            tries = [
                AirflowTry("extract", -1, 1, "success", start + timedelta(seconds=1), start + timedelta(seconds=21),
                           "local-small", placement(version, "local-small")),
                AirflowTry("load", -1, 1, "success", start + timedelta(seconds=22), start + timedelta(seconds=80),
                           "local-large", placement(version, "local-large")),
            ]  # fmt: skip
            record_run(store, "etl", run_id, "success", start, start + timedelta(seconds=81), tries, plans, resources)


def test_runs_list_and_show_print_json_tables_and_a_chart(
    setup: tuple[str, PlanStore, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tables whole: the console's width is fixed when agora.cli is imported (COLUMNS then, else 80).
    monkeypatch.setattr(out_console, "width", 250)
    url, plans, version = setup
    _recorded(url, plans, version)
    runner = CliRunner()
    listed = runner.invoke(runs_app, ["list", "--store", url, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [r["run_id"] for r in rows] == ["r2", "r1"]
    assert rows[0]["planned"] and rows[0]["plan_version"] == version and "tasks" not in rows[0]
    assert rows[0]["actual_makespan_s"] == 80.0 and rows[0]["makespan_ratio"] == pytest.approx(80 / 60)

    table = runner.invoke(runs_app, ["list", "--store", url, "--dag", "etl"])
    assert table.exit_code == 0 and "r2" in table.stdout and version in table.stdout and "1.33" in table.stdout

    shown = runner.invoke(runs_app, ["show", "etl", "r1", "--store", url, "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert [t["task_id"] for t in data["tasks"]] == ["extract", "load"]
    # local-small#0 as its backend reported it; local-large#0 from its task's times.
    assert sorted((x["machine"], x["source"]) for x in data["leases"]) == [
        ("local-large#0", "task times"),
        ("local-small#0", "local pool"),
    ]

    for suffix in (".png", ".svg"):
        chart = tmp_path / f"run{suffix}"
        text = runner.invoke(runs_app, ["show", "etl", "r1", "--store", url, "--chart", str(chart)])
        assert text.exit_code == 0, text.output
        assert "extract" in text.stdout and "local-large#0" in text.stdout and "+2.0" in text.stdout
        assert chart.stat().st_size > 1000
    assert (tmp_path / "run.svg").read_text().lstrip().startswith("<?xml")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["show", "nodag", "r1"], "DAG 'nodag'"),
        (["show", "etl", "nope"], "run 'nope' of DAG 'etl'"),
        (["list", "--dag", "nodag"], "DAG 'nodag'"),
        (["show", "etl", "r1", "--chart", "x.gif"], "x.gif"),
    ],
)
def test_bad_input_is_one_line_naming_it_with_exit_2(
    setup: tuple[str, PlanStore, str], args: list[str], named: str
) -> None:
    url, plans, version = setup
    _recorded(url, plans, version)
    result = CliRunner().invoke(runs_app, [*args, "--store", url])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and named in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_main_cli_has_the_runs_commands() -> None:
    from agora_optimizer.cli import main

    assert main(["runs", "--help"]) == 0


def test_the_run_listener_never_raises_and_says_why_in_one_line(caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from agora_optimizer.runs.recorder import RunListener

    listener = RunListener(store_url="mysql://nobody@nowhere/agora")  # a database the store refuses
    run = SimpleNamespace(dag_id="etl", run_id="r9", state="success", start_date=T0, end_date=at(5))
    with caplog.at_level("WARNING", logger="agora_optimizer.runs.recorder"):
        listener.on_dag_run_success(dag_run=run, msg="success")
        listener.on_dag_run_failed(dag_run=run, msg="task_failure")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("cannot record DAG run etl/r9" in line and "\n" not in line for line in lines)
    assert "unsupported database 'mysql'" in lines[0]
