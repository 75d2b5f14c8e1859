"""``bench/run_plans_come_true.py`` in CI size: one small real workflow, one round, a real Airflow 3.3.

The benchmark itself (five workflows, three runs each, task runtimes of 5-60 s) takes hours on
this machine; this runs the same code path on bacass-dirt02-001 (11 tasks) with runtimes of
0.5-1.5 s: agora's plan and the one-type default, each put in force and run by the AgoraExecutor
on the local pools, each run's record read back. It checks that the numbers are the run's
(Airflow's own task times), not how close they come: that is the benchmark's to measure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
WORKFLOW = "bacass-dirt02-001"


def test_one_small_workflow_is_planned_run_and_measured_against_its_plan_and_the_default(tmp_path: Path) -> None:
    out = tmp_path / "plans-come-true.json"
    command = [
        sys.executable, str(REPO / "bench" / "run_plans_come_true.py"), "--workflows-dir", str(REPO / "workflows"),
        "--workflows", WORKFLOW, "--backend", "local", "--runs", "1", "--out", str(out),
        "--min-runtime-s", "0.5", "--max-runtime-s", "1.5", "--optimize-time-limit-s", "5",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    document = json.loads(out.read_text())
    runs = document["runs"]
    assert [(r["workflow"], r["plan"], r["run"]) for r in runs] == [(WORKFLOW, "agora", 1), (WORKFLOW, "default", 1)]
    versions = set()
    for run in runs:
        assert run["state"] == "success" and run["tasks"] == 11 and run["backend"] == "local"
        assert run["plan_version"] and run["plan_version"] not in versions  # each ran under its own plan
        versions.add(run["plan_version"])
        # 11 tasks of at least 0.5 s, on two one-core pools, along bacass's longest chain: well above 1 s
        assert run["planned_makespan_s"] > 1.0 and run["actual_makespan_s"] > 1.0, run
        assert run["planned_cost_usd"] > 0 and run["actual_cost_usd"] > 0, run  # local-priced.yaml's prices
        assert isinstance(run["repairs"], int)  # runs of 0.5-1.5 s tasks drift past 20 % and may be repaired
        assert 0 < run["cpu_share"] <= 1.2, run  # CPU-bound tasks: a core at most (the sampler's rounding aside)
    summary = document["summary"]
    assert summary["agora"]["runs"] == summary["default"]["runs"] == 1
    assert summary["agora"]["makespan_s_median_error"] is not None
    assert WORKFLOW in summary["saving_against_default"]
    table = out.with_suffix(".md").read_text()
    assert f"| {WORKFLOW} | agora | 1 | 11 | success |" in table and "| default |" in table
