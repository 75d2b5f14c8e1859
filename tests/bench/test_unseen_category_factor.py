"""bench/unseen_category_factor.py: how well the run's factor predicts a category the run has not seen yet."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.unseen_category_factor import main, run_errors

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def test_a_category_seen_after_another_is_scored_against_the_rule_at_each_k() -> None:
    # "prep" ends at 10 s having run 4x its prediction; "work" starts then and runs at 2x in all.
    tasks = [(0.0, 10.0, "prep", 10.0, 40.0), (10.0, 30.0, "work", 20.0, 30.0), (10.0, 30.0, "work", 20.0, 50.0)]
    error, under = run_errors(tasks, 3.0)  # the rule: 4 ** (1 / (1 + 3)), sqrt(2), short of 2 by more than 20 %
    assert error == pytest.approx(math.log(2) / 2) and under == 1.0
    error, under = run_errors(tasks, 1.0)  # 4 ** (1 / 2) = 2: right
    assert error == pytest.approx(0.0) and under == 0.0
    error, under = run_errors(tasks, math.inf)  # no run factor: 1
    assert error == pytest.approx(math.log(2)) and under == 1.0


def test_a_run_whose_categories_all_start_at_once_has_nothing_to_score() -> None:
    assert run_errors([(0.0, 5.0, "a", 5.0, 5.0), (0.0, 5.0, "b", 5.0, 9.0)], 3.0) is None


def test_the_table_has_a_row_per_k(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("blast-chameleon-small-001", "blast-chameleon-small-002"):
        (tmp_path / f"{name}.json").write_bytes((WORKFLOWS / f"{name}.json").read_bytes())
    assert main(["--dir", str(tmp_path), "--k", "1,inf"]) == 0
    rows = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 |") or line.startswith("| inf |")
    ]
    assert len(rows) == 2
