"""The README's main command works as written (the test command is what runs this)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


@pytest.mark.slow  # the tour as written: about a minute and a half (its pareto has the default 60 s limit)
def test_the_tours_commands_run_and_print_at_most_15_lines_each(tmp_path: Path) -> None:
    """The README's short tour, run as a reader runs it after the demo (in a checkout, the venv active): each
    command exits 0 and prints its results in at most :data:`LINE_BUDGET` lines (details are for ``-v``)."""
    from tests.test_guide_commands import LINE_BUDGET, fenced_blocks, fresh_checkout, sh_commands

    text = (REPO / "README.md").read_text()
    tour = text[text.index("## A short tour") :]
    commands = sh_commands(next(block for block in fenced_blocks(tour) if block.lang == "sh"))
    assert [c.split()[1] for c in commands] == ["optimize", "validate", "gantt", "pareto"]
    shell = fresh_checkout(tmp_path)
    shell.env["PATH"] = f"{Path(sys.prefix) / 'bin'}:{shell.env['PATH']}"  # source .venv/bin/activate
    shell.env["COLUMNS"] = "80"  # a terminal's default width
    for command in commands:
        result = shell.run(command)
        assert result.returncode == 0, result.show()
        assert len(result.stdout.splitlines()) <= LINE_BUDGET, result.show()
