"""The ``agora`` app as installed: the console script, ``python -m agora_optimizer``, every command group mounted;
the commands that only read import no Airflow and no heavy library, and write nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agora_optimizer.cli import HELP_MAX_WIDTH, main
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


HEAVY = ("airflow", "sklearn", "pandas", "numpy", "ortools", "pulp", "matplotlib", "scipy")
READ_ONLY = (
    ["--help"],
    *([name, "--help"] for name in (*COMMANDS, *GROUPS)),
    ["runs", "list"],
    ["runs", "list", "--json"],
    ["runs", "show", "nope", "nope"],
    ["traces", "list"],
    ["traces", "stats"],
    ["config", "show"],
    ["config"],
)
RUN_ALL = """
import json, sys
from agora_optimizer.cli import main
codes = [main(command) for command in json.loads(sys.argv[1])]
print(json.dumps({"codes": codes, "heavy": [name for name in json.loads(sys.argv[2]) if name in sys.modules]}))
"""


def test_the_app_imports_no_airflow_and_no_heavy_library(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {"AIRFLOW_HOME": str(tmp_path)}
    script = "import json, sys, agora_optimizer.cli; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert imported & {*HEAVY, "sqlalchemy"} == set()


def test_the_commands_that_only_read_write_nothing_on_an_empty_home(tmp_path: Path) -> None:
    airflow_home, home = tmp_path / "airflow", tmp_path / "user"
    airflow_home.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(airflow_home), "HOME": str(home), "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-c", RUN_ALL, json.dumps(READ_ONLY), json.dumps([*HEAVY, "sqlalchemy"])],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.splitlines()[-1])
    codes = dict(zip(map(" ".join, READ_ONLY), answer["codes"], strict=True))
    assert codes.pop("runs show nope nope") == 2  # not found: one line, exit 2
    assert set(codes.values()) == {0}, codes
    assert answer["heavy"] == []  # Airflow, the planners' libraries and SQLAlchemy (no store here) are left out
    assert sorted(tmp_path.rglob("*")) == [airflow_home, home]  # no traces.db, no logs/, nothing in ~
    store = f"sqlite:///{airflow_home}/agora/traces.db"
    assert f"\nno runs recorded in {store}\n[]\n" in done.stdout  # one line, or an empty JSON list
    assert done.stderr == f"agora: error: no record of DAG 'nope' in {store} (no runs recorded)\n"


@pytest.mark.parametrize(("columns", "width"), [(80, 80), (250, HELP_MAX_WIDTH)])
def test_help_uses_the_terminal_width_up_to_a_limit_and_flags_show_no_type(
    columns: int, width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))  # what a terminal of that width says when not a terminal
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    for command in (["--help"], ["optimize", "--help"], ["runs", "list", "--help"], ["config", "show", "--help"]):
        assert main(command) == 0
        shown = capsys.readouterr().out
        assert {len(line) for line in shown.splitlines() if line.startswith("╭")} == {width}, command
        assert "<bool>" not in shown and "--help  " in shown  # a flag's row: its name, then its help
        if command[0] == "optimize":
            assert re.search(r"--json +Print a JSON", shown)
