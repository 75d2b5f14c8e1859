"""The README's main command works as written (the test command is what runs this)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO


def test_readme_names_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert "bash scripts/demo.sh" in readme
    assert "bash scripts/test.sh" in readme
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text().splitlines()  # CI: that, then more


@pytest.mark.airflow  # the demo runs the example DAG in a real Airflow
def test_demo_optimizes_checks_draws_and_runs_the_example_dag_on_local_pools(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {
        "AGORA_DEMO_OUT": str(tmp_path),
        "TIME_LIMIT_S": "3",
    }
    result = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert result.returncode == 0, result.stderr
    name = "montage-chameleon-2mass-01d-001"
    assert (tmp_path / f"{name}.plan.json").is_file()
    assert (tmp_path / f"{name}.gantt.png").read_bytes().startswith(b"\x89PNG")
    assert re.search(r"makespan [+-]\d+\.\d%, cost [+-]\d+\.\d%", result.stdout)
    assert "valid" in result.stdout
    assert re.search(r"run manual__\S+: success", result.stdout)  # the example DAG ran in a real Airflow
    for task in ("extract", "clean", "aggregate", "profile", "load"):
        # each task ran on the CPU of the pool its plan chose (local.yaml: small = CPU 0, large = CPU 1)
        # and its row has a runtime and the worker's peak memory (the executor's half of the row, not only the task's)
        assert re.search(
            rf"^{task} +(local-small +\[0\]|local-large +\[1\]) +\d+\.\d +\d+$", result.stdout, re.MULTILINE
        ), result.stdout[-2500:]
    assert (tmp_path / "airflow" / "traces.db").is_file()
    assert f"demo output: {tmp_path}" in result.stdout
