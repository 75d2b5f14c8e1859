"""What the command groups share: one-line user errors, number ranges, and the catalog a plan names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import typer

from agora_optimizer.cli.common import (
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


def test_json_ready_makes_every_number_that_is_not_finite_null() -> None:
    document = {"bound": math.inf, "runs": [{"cost": math.nan, "name": "a"}, (1.5, -math.inf)], "count": 3}
    assert json_ready(document) == {"bound": None, "runs": [{"cost": None, "name": "a"}, [1.5, None]], "count": 3}
