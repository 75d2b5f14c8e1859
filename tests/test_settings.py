"""The ``[agora]`` settings (settings.py): the catalog setting read as one catalog, in one place; the values in
effect read as Airflow reads them (environment, then airflow.cfg, then the default) without importing Airflow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from tests.conftest import CATALOGS, REPO, resource, write_yaml


@pytest.mark.airflow  # read through Airflow's configuration
def test_the_catalog_setting_is_read_as_one_catalog_of_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    files = f"{CATALOGS / 'local.yaml'},{CATALOGS / 'celery-loopback.yaml'}"
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", files)
    catalog = settings.configured_catalog()
    assert catalog.source == files
    assert {r.backend for r in catalog.resources} == {"local", "celery"}
    assert settings.configured_catalog(required=True) is catalog  # read once per value of the setting


@pytest.mark.airflow  # read through Airflow's configuration
def test_a_changed_setting_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a", "b"):
        path = write_yaml(
            tmp_path / f"{name}.yaml", {"network": {"bandwidth_bytes_per_s": 1e9}, "resources": [resource(name)]}
        )
        monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(path))
        assert list(settings.configured_catalog().by_name) == [name]


@pytest.mark.airflow  # read through Airflow's configuration
def test_an_empty_catalog_setting_is_an_empty_catalog_unless_one_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", " , ")
    assert settings.configured_catalog().resources == ()
    with pytest.raises(AgoraError, match=r"^\[agora\] catalog is empty: name the catalog files of your resources$"):
        settings.configured_catalog(required=True)


@pytest.fixture
def airflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty AIRFLOW_HOME, no AIRFLOW_CONFIG and no AIRFLOW__AGORA__* in the environment."""
    for name in [n for n in os.environ if n.startswith("AIRFLOW__AGORA__") or n == "AIRFLOW_CONFIG"]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    return tmp_path


def test_the_environment_wins_over_the_file_which_wins_over_the_default(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROJECT", "/srv/project")
    (airflow_home / "airflow.cfg").write_text(
        "[core]\nobjective = makespan\n[agora]\nobjective = cost\nplan_time_limit_s = 30\n"
        "Catalog = ignored.yaml\nplan_dir = $PROJECT/plans\n"
    )
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_TIME_LIMIT_S", "7")
    cfg = "airflow.cfg"
    assert settings.in_effect("plan_time_limit_s") == settings.InEffect(
        "7", "environment AIRFLOW__AGORA__PLAN_TIME_LIMIT_S"
    )
    assert settings.in_effect("objective") == settings.InEffect("cost", cfg)  # [agora]'s, not [core]'s
    assert settings.in_effect("plan_dir") == settings.InEffect("/srv/project/plans", cfg)  # expanded, as Airflow does
    assert settings.in_effect("catalog") == settings.InEffect("", "default")  # names keep their case, as in Airflow
    assert settings.in_effect("reoptimize_tag") == settings.InEffect("agora", "default")


def test_an_empty_value_shows_what_it_means_under_airflow_home(
    airflow_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = airflow_home / "conf" / "mine.cfg"
    elsewhere.parent.mkdir()
    elsewhere.write_text("[agora]\nstate_dir =\n")
    monkeypatch.setenv("AIRFLOW_CONFIG", str(elsewhere))
    agora = airflow_home / "agora"
    assert settings.in_effect("trace_store_url") == settings.InEffect(
        f"sqlite:///{agora}/traces.db", "default", meant=True
    )
    assert settings.in_effect("plan_dir") == settings.InEffect(f"{agora}/plans", "default", meant=True)
    assert settings.in_effect("state_dir") == settings.InEffect(f"{agora}/jobs", "airflow.cfg", meant=True)
    assert list(airflow_home.rglob("*")) == [elsewhere.parent, elsewhere]  # nothing created


def test_an_unreadable_airflow_cfg_is_one_error_naming_it(airflow_home: Path) -> None:
    (airflow_home / "airflow.cfg").write_text("[agora]\nobjective = 50%\n")  # a lone % is bad interpolation
    with pytest.raises(AgoraError, match=rf"^{airflow_home / 'airflow.cfg'}: not a readable airflow.cfg \("):
        settings.in_effect("objective")
    with pytest.raises(settings.UnknownSettingError, match="no_such_key is not a setting"):
        settings.in_effect("no_such_key")


AGREE = """
import json
from agora_optimizer import settings
from agora_optimizer.integration.reoptimize import model_dir
from agora_optimizer.plans.store import default_plan_store
from agora_optimizer.queue_wait.recorder import default_store_url as queue_wait_url
from agora_optimizer.traces.store import default_store_url
read = {s.key: settings.get(s.key) for s in settings.SETTINGS}
read |= {"trace_store_url": default_store_url(), "plan_dir": str(default_plan_store().root),
         "state_dir": str(settings.directory("state_dir", "jobs", create=False)),
         "queue_wait_store_url": queue_wait_url(), "model_dir": str(model_dir())}
print(json.dumps({"airflow": read, "agora": {s.key: settings.in_effect(s.key).value for s in settings.SETTINGS}}))
"""


@pytest.mark.slow  # starts a Python that imports Airflow
@pytest.mark.airflow
def test_the_values_in_effect_are_the_ones_airflow_and_the_code_read(tmp_path: Path) -> None:
    (tmp_path / "airflow.cfg").write_text("[agora]\nobjective = cost\nplan_dir = ~/plans\ncatalog = a.yaml\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {"AIRFLOW_HOME": str(tmp_path)}
    env |= {"AIRFLOW__AGORA__CATALOG": "b.yaml", "AIRFLOW__AGORA__REPLAN_SLACK": "0.5", "HOME": str(tmp_path)}
    answer = subprocess.run(
        [sys.executable, "-c", AGREE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    read = json.loads(answer.stdout.splitlines()[-1])
    assert read["agora"] == read["airflow"]
    assert read["agora"]["catalog"] == "b.yaml" and read["agora"]["plan_dir"] == f"{tmp_path}/plans"


@pytest.mark.slow  # starts a Python that imports Airflow
@pytest.mark.airflow
def test_a_secret_given_as_a_command_is_left_to_airflow(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {"AIRFLOW_HOME": str(tmp_path)}
    env["AIRFLOW__AGORA__TRACE_STORE_URL_CMD"] = "echo postgresql+psycopg://agora:from-a-vault@db/traces"
    script = "from agora_optimizer import settings\nprint(repr(settings.in_effect('trace_store_url')))"
    shown = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()[-1]
    expected = settings.InEffect(
        "postgresql+psycopg://agora:from-a-vault@db/traces", "AIRFLOW__AGORA__TRACE_STORE_URL_CMD (read by Airflow)"
    )
    assert shown == repr(expected)
