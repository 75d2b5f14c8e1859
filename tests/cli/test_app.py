"""The ``agora`` app as installed: the console script, ``python -m agora_optimizer``, every command group mounted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agora_optimizer.cli import main
from tests.conftest import AWS_CATALOG, BUNDLED, REPO

BLAST = BUNDLED / "blast-chameleon-small-001.json"
QUICK = ("--time-limit-s", "3")
GROUPS = ("traces", "queue", "plans", "runs", "config")
COMMANDS = ("optimize", "validate", "gantt", "pareto", "train", "predict", "simulate")


@pytest.mark.slow  # plans for seconds
def test_installed_console_script(tmp_path: Path) -> None:
    agora = shutil.which("agora") or str(Path(__import__("sys").executable).with_name("agora"))
    result = subprocess.run(
        [agora, "optimize", BLAST, "-c", AWS_CATALOG, "-o", tmp_path / "p.json", "--json", *QUICK],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["tasks"] == 43


def test_every_command_and_group_is_mounted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in (*COMMANDS, *GROUPS))
    for group in GROUPS:
        assert main([group, "--help"]) == 0
    assert main(["no-such-command"]) == 2


@pytest.mark.slow  # a Python of its own per module
@pytest.mark.parametrize("first", ["agora_optimizer.cli.traces", "agora_optimizer.cli.common", "agora_optimizer"])
def test_any_cli_module_imports_first_and_python_m_runs_the_app(first: str) -> None:
    """No module of the package imports the app back (tests/test_import_cycles.py checks the whole package)."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {first}; import runpy, sys; sys.argv = ['agora', 'config', '--help'];"
         " runpy.run_module('agora_optimizer', run_name='__main__')"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reference" in done.stdout and "show" in done.stdout
