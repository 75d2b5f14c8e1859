"""What the command groups share: one-line user errors, number ranges, tables that fit the width, and the catalog a
plan names."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
import typer
from rich.console import Console

from agora_optimizer.cli.common import (
    FOLD_MIN_WIDTH,
    OPTION_RANGES,
    Range,
    check_option,
    data_table,
    json_ready,
    number,
    out_console,
    plan_catalog,
    ranged,
    ratio_text,
    user_errors,
)
from agora_optimizer.errors import AgoraError, FieldError
from agora_optimizer.model.plan import Objective, Plan, SolverInfo
from tests.conftest import CATALOGS


def test_an_agora_error_is_one_line_on_stderr_and_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as ended, user_errors():
        raise AgoraError("bad input")
    assert ended.value.exit_code == 2
    assert capsys.readouterr().err == "agora: error: bad input\n"


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1.5, -0.1])
def test_check_option_refuses_what_is_out_of_range(value: float) -> None:
    with pytest.raises(AgoraError, match=r"^option --alpha: expected a number in \[0, 1\], got "):
        check_option("--alpha", value)


def test_ranges_open_and_closed() -> None:
    check_option("--alpha", None)
    check_option("--alpha", 0.0)
    with pytest.raises(AgoraError, match=r"in \(0, "):
        check_option("--deadline-s", 0.0)
    check_option("--time-limit-s", 5.0, Range(1.0, 10.0))  # another command's meaning of the name
    assert ranged("--alpha", "Weight.") == f"Weight. {OPTION_RANGES['--alpha']}" == "Weight. [0, 1]"
    assert (number(None, "{:.1f}"), number(2.25, "{:.1f}")) == ("-", "2.2")


def test_the_plans_own_catalog_is_found_beside_the_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    plan = Plan("wf", "local.yaml", Objective(), 0.0, 0.0, (), SolverInfo("t", "optimal", None, 0.0), "")
    with pytest.raises(FieldError, match=r"'local\.yaml' is not a file here or beside the plan: pass --catalog"):
        plan_catalog(tmp_path / "plan.json", plan, None)
    assert plan_catalog(CATALOGS / "plan.json", plan, None).by_name.keys() >= {"local-small", "local-large"}
    assert "local-small" not in plan_catalog(tmp_path / "plan.json", plan, CATALOGS / "aws-us-east-1.yaml").by_name


def test_a_ratio_against_nothing_is_n_a_and_a_missing_one_is_a_dash() -> None:
    assert ratio_text(3.0, 2.0) == "1.500" and ratio_text(3.0, 2.0, "{:+.1%}", change=True) == "+50.0%"
    assert ratio_text(0.0, 0.0) == ratio_text(1.0, 0.0, "{:+.1%}", change=True) == "n/a"  # a free catalog's bound
    assert ratio_text(None, 2.0) == ratio_text(1.0, None) == "-"


def test_a_data_table_shows_its_title_headers_and_cells_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    table = data_table(
        "wf[/x]", ["task[a100]", "runtime (s)"], [["gpu[a100]#0", "1.0"], ["[/x]", "2.0"]], ["runtime (s)"]
    )
    out_console.print(table)
    shown = capsys.readouterr().out
    for text in ("wf[/x]", "task[a100]", "gpu[a100]#0", "[/x]"):
        assert text in shown
    assert [column.justify for column in table.columns] == ["left", "right"]


def _rendered(table: object, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text().splitlines()


SUMMARY = ("", "makespan (s)", "cost (USD)", "makespan / LB", "cost / LB", "machines")
SUMMARY_ROWS = [
    ["agora", "12,345.6", "12.3456", "1.234", "1.111", "27"],
    ["one-type default", "123,456.7", "123.4567", "12.345", "2.222", "1"],
    ["lower bound", "1,234.5", "1.2345", "1.000", "1.000", ""],
]


def test_a_table_fits_80_columns_with_its_labels_on_one_line_and_its_header_words_whole() -> None:
    shown = _rendered(data_table("blast (43 tasks)", SUMMARY, SUMMARY_ROWS, right=SUMMARY[1:], width=80), 80)
    assert max(map(len, shown)) <= 80 and "…" not in "".join(shown)
    assert [line.split("│")[1].strip() for line in shown if line.startswith("│")] == [r[0] for r in SUMMARY_ROWS]
    header = " ".join(word for line in shown if line.startswith("┃") for word in line.replace("┃", " ").split())
    assert all(word in header.split() for column in SUMMARY for word in column.split())
    wide = _rendered(data_table("blast (43 tasks)", SUMMARY, SUMMARY_ROWS, right=SUMMARY[1:], width=120), 120)
    assert sum(line.startswith("┃") for line in wide) == 1  # room enough: every header on one line


def test_columns_are_left_out_by_priority_and_long_names_folded_until_the_table_fits() -> None:
    columns = ("dag", "run", "state", "makespan plan (s)", "makespan (s)", "cost (USD)", "repairs")
    run_id = "scheduled__2026-12-05T10:35:25.123456+00:00"
    rows = [["agora_example_etl", run_id, "success", "1,234.5", "1,300.2", "0.1234", "2"]]
    drop = ("makespan plan (s)", "repairs", "state")
    table = data_table("1 run(s)", columns, rows, drop=drop, fold=("run",), width=80)
    shown = _rendered(table, 80)
    assert [str(column.header) for column in table.columns] == [
        "dag",
        "run",
        "state",
        "makespan (s)",
        "cost (USD)",
        "repairs",
    ]
    assert shown[-1].strip() == "left out to fit 80 columns: makespan plan (s)"
    assert max(map(len, shown)) <= 80 and "…" not in "".join(shown)
    folded = "".join(line.split("│")[2].strip() for line in shown if line.startswith("│"))
    assert folded == run_id  # over lines, whole
    assert FOLD_MIN_WIDTH <= (table.columns[1].width or 0) < len(run_id)
    narrow = data_table("1 run(s)", columns, rows, drop=drop, fold=("run",), width=60)
    assert [str(column.header) for column in narrow.columns] == ["dag", "run", "makespan (s)", "cost (USD)"]
    assert max(map(len, _rendered(narrow, 60))) <= 60
    roomy = data_table("1 run(s)", columns, rows, drop=drop, fold=("run",), width=200)
    assert len(roomy.columns) == len(columns) and roomy.caption is None


def test_json_ready_makes_every_number_that_is_not_finite_null() -> None:
    document = {"bound": math.inf, "runs": [{"cost": math.nan, "name": "a"}, (1.5, -math.inf)], "count": 3}
    assert json_ready(document) == {"bound": None, "runs": [{"cost": None, "name": "a"}, [1.5, None]], "count": 3}
