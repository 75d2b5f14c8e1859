"""A real Airflow 3.3 discovers the agora plugin through its entry point."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.airflow


def _airflow(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    airflow = shutil.which("airflow") or str(Path(sys.executable).with_name("airflow"))
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    return subprocess.run([airflow, *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def test_airflow_lists_the_agora_plugin_from_the_entry_point(tmp_path: Path) -> None:
    result = _airflow(tmp_path, "plugins", "--output", "json")
    assert result.returncode == 0, result.stderr
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    assert "agora" in plugins
    assert "agora_optimizer.plugin:AgoraPlugin" in plugins["agora"]["source"]
    # The agora view: an app at /agora (every route behind Airflow's login: tests/ui), in the navigation and DAG tabs.
    assert plugins["agora"]["fastapi_apps"] == [
        {"app": "agora_optimizer.plugin.LazyAgoraApp", "url_prefix": "/agora", "name": "agora"}
    ]
    views = {view["url_route"]: view for view in plugins["agora"]["external_views"]}
    # relative to Airflow's base URL, so that a sub-path deployment ([api] base_url) keeps them inside it
    assert views["agora"]["destination"] == "nav" and views["agora"]["href"] == "agora/"
    assert views["agora-plan"]["destination"] == "dag" and views["agora-plan"]["href"] == "agora/dags/{DAG_ID}"


def test_loading_the_plugin_does_not_import_the_web_app() -> None:
    """Every task process loads the plugin (for its listener): FastAPI and the app load in the api-server only."""
    code = (
        "import sys, agora_optimizer.plugin as p\n"
        "print('fastapi' in sys.modules, 'agora_optimizer.ui.app' in sys.modules)\n"
        "print(type(p.LazyAgoraApp().app()).__name__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False", "FastAPI"]


def test_plugins_folder_entry_loads_the_same_plugin(tmp_path: Path) -> None:
    (tmp_path / "plugins").mkdir()
    shutil.copy(REPO / "plugins" / "agora_plugin.py", tmp_path / "plugins" / "agora_plugin.py")
    result = _airflow(tmp_path, "plugins", "--output", "json")
    assert result.returncode == 0, result.stderr
    names = [p["name"] for p in json.loads(result.stdout)]
    assert names.count("agora") == 1  # one plugin, whichever way Airflow found it


def test_the_domain_model_does_not_import_airflow() -> None:
    code = (
        "import sys, agora_optimizer.model, agora_optimizer.optimize.optimize, agora_optimizer.planning.validate;"
        "print(any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
