"""``bench/run_time_limits.py``: the kept rule, and a small workflow run through the real command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.bench import bench_script
from tests.conftest import BUNDLED

run_time_limits = bench_script("run_time_limits")


@pytest.mark.parametrize(
    ("wall_s", "limit_s", "expected"),
    [(10.9, 10.0, True), (11.1, 10.0, False), (65.9, 60.0, True), (66.2, 60.0, False), (1.5, 0.5, True)],
)
def test_a_limit_is_kept_within_a_second_or_ten_percent_whichever_is_larger(
    wall_s: float, limit_s: float, expected: bool
) -> None:
    assert run_time_limits.kept(wall_s, limit_s) is expected


@pytest.mark.slow  # seconds: three commands in processes of their own
def test_a_small_workflow_is_timed_checked_and_reported_with_its_command(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(BUNDLED / "blast-chameleon-small-001.json", data / "blast-small.json")
    out = tmp_path / "limits"
    argv = ["--recipes", "blast", "--size", "small", "--data", str(data), "--limits", "10", "--out", str(out)]
    assert run_time_limits.main(argv) == 0
    runs = json.loads(out.with_suffix(".json").read_text())["runs"]
    assert [(r["command"], r["limit_s"], bool(r.get("first_plan"))) for r in runs] == [
        ("optimize", 0.01, True),
        ("optimize", 10.0, False),
        ("pareto", 10.0, False),
    ]
    first, optimized, front = runs
    assert first["valid"] and first["methods"] and first["peak_rss_mib"] > 10 and 0 < first["cpu_s"] < 60
    assert optimized["kept"] and optimized["valid"] and optimized["exit_code"] == 0
    assert front["kept"] and front["methods"] and front["valid"] is None  # a front has no one plan to check
    page = out.with_suffix(".md").read_text()
    assert page.startswith("# Time limits kept at small tasks (")
    assert "`python bench/run_time_limits.py --recipes blast" in page
    assert "| blast-small | optimize | first plan |" in page
