"""``bench/run_spot.py``: one small workflow planned and replayed end to end, results written with the command."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench import bench_script
from tests.conftest import BUNDLED, REPO

run_spot = bench_script("run_spot")


def test_a_small_workflow_is_planned_replayed_and_reported(tmp_path: Path) -> None:
    out = tmp_path / "spot"
    workflow = str(BUNDLED / "montage-chameleon-2mass-01d-001.json")
    argv = [
        "--workflows",
        workflow,
        "--rate-factors",
        "1,1000",
        "--runs",
        "3",
        "--time-limit-s",
        "1",
        "--out",
        str(out),
    ]
    assert run_spot.main(argv) == 0
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["command"].startswith("python bench/run_spot.py --workflows")
    (case,) = results["cases"]
    assert [row["rate_factor"] for row in case["by_rate_factor"]] == [1.0, 1000.0]
    for row in case["by_rate_factor"]:
        assert row["runs"] == 3 and 0 <= row["deadline_met_runs"] <= 3
        assert row["worst_case_makespan_s"] <= case["deadline_s"] + 1e-6  # the plan's own check
        assert row["all_interrupted_makespan_s"] >= row["worst_case_makespan_s"] - 1e-6
    calm = case["by_rate_factor"][0]
    assert abs(calm["claim_error"]) < 0.15 and calm["deadline_met_runs"] == 3
    text = out.with_suffix(".md").read_text()
    assert "montage-chameleon-2mass-01d-001.json" in text and "Command: `python bench/run_spot.py" in text


def test_scaled_rates_multiply_only_spot_types() -> None:
    from agora_optimizer.io.catalog_file import load_catalog

    catalog = load_catalog(REPO / "catalogs" / "aws-us-east-1-spot.yaml")
    scaled = run_spot.scaled_rates(catalog, 100.0)
    for before, after in zip(catalog.resources, scaled.resources, strict=True):
        if before.spot:
            assert after.interruption_rate_per_hour == (before.interruption_rate_per_hour or 0) * 100
        else:
            assert after == before
