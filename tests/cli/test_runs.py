"""``agora runs list|show``: JSON, tables and a chart from recorded runs; bad input is one line and exit 2."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora_optimizer.cli.common import out_console
from agora_optimizer.cli.runs import runs_app
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import RunLease, RunTask
from agora_optimizer.runs.recorder import AirflowTry, record_run
from agora_optimizer.runs.store import RunStore
from tests.conftest import CATALOGS
from tests.runs.conftest import T0, at, placement, planned_etl
from tests.runs.test_store import record


@pytest.fixture
def setup(tmp_path: Path) -> tuple[str, PlanStore, str]:
    return planned_etl(tmp_path)


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
    # The tables whole: the console's width is fixed when agora_optimizer.cli.common is imported
    # (COLUMNS then, else 80).
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


def test_the_tables_fit_80_columns_leaving_out_the_plans_figures_first(
    setup: tuple[str, PlanStore, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(out_console, "width", 80)
    url, plans, version = setup
    _recorded(url, plans, version)
    for command in (["list"], ["show", "etl", "r1"]):
        shown = CliRunner().invoke(runs_app, [*command, "--store", url])
        assert shown.exit_code == 0, shown.output
        lines = shown.stdout.splitlines()
        assert max(map(len, lines)) <= 80 and "…" not in shown.stdout, shown.stdout
        if command == ["list"]:
            assert lines[-1].strip() == "left out to fit 80 columns: makespan plan (s), cost plan (USD), plan"
            assert "1.33" in shown.stdout and "etl │ r2" in shown.stdout  # the run and its ratio stay
        else:
            assert "extract" in shown.stdout and "local-large#0" in shown.stdout
            assert lines[:3] == [f"etl r1: success, plan {version}", "makespan 80.0 s (planned 60.0, ratio 1.33)",
                                 "cost 0.0000 USD (planned 0.0000, ratio n/a)"]  # fmt: skip


def test_no_runs_is_one_line_and_a_missing_store_is_not_created(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'none' / 'traces.db'}"
    with RunStore(f"sqlite:///{tmp_path / 'empty.db'}") as store:
        empty = store.url
    for url in (missing, empty):
        listed = CliRunner().invoke(runs_app, ["list", "--store", url])
        assert (listed.exit_code, listed.stdout) == (0, f"no runs recorded in {url}\n")
    shown = CliRunner().invoke(runs_app, ["show", "etl", "r1", "--store", missing])
    assert (
        shown.exit_code == 2
        and shown.stderr == f"agora: error: no record of DAG 'etl' in {missing} (no runs recorded)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]  # reading made no directory, no database


def test_the_main_cli_has_the_runs_commands() -> None:
    from agora_optimizer.cli import main

    assert main(["runs", "--help"]) == 0


def test_show_gives_a_spot_plans_expected_cost_beside_the_planned_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with RunStore(url) as store:
        store.put(record("spot", planned_cost_usd=0.0029, planned_expected_cost_usd=0.0031))
        store.put(record("plain", planned_cost_usd=0.0029))
    runner = CliRunner()
    spot = runner.invoke(runs_app, ["show", "dag", "spot", "--store", url])
    assert spot.exit_code == 0, spot.output
    assert "(planned 0.0029, ratio" in spot.stdout and "; expected with spot interruptions 0.0031)" in spot.stdout
    plain = runner.invoke(runs_app, ["show", "dag", "plain", "--store", url])
    assert plain.exit_code == 0 and "expected with spot" not in plain.stdout


def test_names_show_as_they_are_never_as_rich_markup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine ``gpu[a100]#0`` once showed as ``gpu#0`` (rich read ``[a100]`` as a style), and a name
    holding ``[/x]`` ended ``runs list`` in a MarkupError traceback."""
    monkeypatch.setattr(out_console, "width", 250)
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    tasks = (RunTask("train[/x]", -1, 1, "success", "gpu[a100]", "gpu[a100]#0", 0.0, 30.0, "gpu[a100]", "gpu[a100]#0",
                     1.0, 31.0),)  # fmt: skip
    leases = (RunLease("gpu[a100]#0", "gpu[a100]", 0.0, 31.0, 0.5, "slurm [bold]accounting"),)
    with RunStore(url) as store:
        store.put(record("nightly[/x]", dag_id="etl[a100]", tasks=tasks, leases=leases, notes=("see [red]this",)))
    runner = CliRunner()
    listed = runner.invoke(runs_app, ["list", "--store", url])
    assert listed.exit_code == 0, listed.output
    assert "etl[a100]" in listed.stdout and "nightly[/x]" in listed.stdout
    shown = runner.invoke(runs_app, ["show", "etl[a100]", "nightly[/x]", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith("etl[a100] nightly[/x]: success")
    task_row = next(line for line in shown.stdout.splitlines() if "train[/x]" in line)
    assert task_row.count("gpu[a100]#0") == 2  # planned and actual machine
    assert "lease gpu[a100]#0 on gpu[a100]: " in shown.stdout and "(slurm [bold]accounting)" in shown.stdout
    assert "note: see [red]this" in shown.stdout


def test_a_run_planned_at_no_cost_shows_its_cost_ratio_as_n_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a free catalog (local pools) the plan costs 0: its cost ratio is n/a, not a number and not missing."""
    monkeypatch.setattr(out_console, "width", 250)
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with RunStore(url) as store:
        store.put(record("free", planned_cost_usd=0.0, actual_cost_usd=0.0))
        store.put(record("unplanned", planned=False, plan_version="", planned_makespan_s=None, planned_cost_usd=None))
    runner = CliRunner()
    shown = runner.invoke(runs_app, ["show", "dag", "free", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "cost 0.0000 USD (planned 0.0000, ratio n/a)" in shown.stdout
    assert "(planned 60.0, ratio 1.26)" in shown.stdout  # 75.5 s against 60 s planned
    unplanned = runner.invoke(runs_app, ["show", "dag", "unplanned", "--store", url])
    assert unplanned.exit_code == 0 and "(planned -, ratio -)" in unplanned.stdout  # nothing to compare: missing
    listed = runner.invoke(runs_app, ["list", "--store", url])
    free_row = next(line for line in listed.stdout.splitlines() if " free " in line)
    assert [cell.strip() for cell in free_row.split("│")][-4:-1] == ["0.0000", "n/a", "0"]  # cost, its ratio, repairs


def test_show_gives_the_runs_forecast_and_a_run_still_going_its_repairs_so_far(tmp_path: Path) -> None:
    from agora_optimizer.runs.record import Repair

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    late = Repair(30.0, "category sim runs 1.85x its planned time", ("sim_3",), "list schedule", 95.5, 0.0456)
    with RunStore(url) as store:
        store.add_repair("dag", "going", replace(late, forecast_end_at=T0 + timedelta(seconds=95.5)))
        store.put(record("done"))
        store.add_repair("dag", "done", late)
    runner = CliRunner()
    going = runner.invoke(runs_app, ["show", "dag", "going", "--store", url])
    assert going.exit_code == 0, going.output
    assert going.stdout.startswith("dag going: running, not recorded yet; 1 repair(s) so far\n")
    assert "forecast: ends at 95.5 s (2026-03-01 12:01:35 UTC), costs 0.0456 USD (forecast at 30.0 s)" in going.stdout
    assert "repair at 30.0 s: category sim runs 1.85x its planned time (sim_3)" in going.stdout
    data = json.loads(runner.invoke(runs_app, ["show", "dag", "going", "--store", url, "--json"]).stdout)
    assert data["state"] == "running" and data["forecast"]["end_s"] == 95.5 and data["forecast"]["cost_usd"] == 0.0456
    done = runner.invoke(runs_app, ["show", "dag", "done", "--store", url])
    assert done.exit_code == 0 and "forecast: ends at 95.5 s, costs 0.0456 USD (forecast at 30.0 s)" in done.stdout
    plain = runner.invoke(runs_app, ["show", "dag", "never", "--store", url])
    assert plain.exit_code == 2 and "no record of run 'never' of DAG 'dag'" in plain.stderr
