"""The [agora] configuration reference is generated from the settings table, and matches the code."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agora_optimizer.cli.config import airflow_cfg, markdown
from agora_optimizer.settings import SETTINGS
from tests.conftest import REPO

READS = re.compile(r"""settings\.(?:get|get_bool|get_float|directory)\(\s*["']([a-z0-9_]+)["']""")


def test_the_docs_page_is_the_generated_reference() -> None:
    page = (REPO / "docs" / "configuration.md").read_text()
    assert page == markdown(), "regenerate it: agora config reference > docs/configuration.md"
    for setting in SETTINGS:
        assert f"| `{setting.key}` | `AIRFLOW__AGORA__{setting.key.upper()}` |" in page


def test_every_key_the_code_reads_is_declared_and_every_declared_key_is_read() -> None:
    sources = [*(REPO / "agora_optimizer").rglob("*.py"), *(REPO / "dags").glob("*.py")]
    sources += (REPO / "plugins").glob("*.py")
    read = {key for path in sources for key in READS.findall(path.read_text())}
    declared = {setting.key for setting in SETTINGS}
    assert read, "the scan found no reads: the pattern is stale"
    assert read - declared == set()  # settings.get refuses these at run time; caught here first
    assert declared - read == set()  # a documented key that nothing reads


def test_the_cfg_section_parses_as_every_key_at_its_default() -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(airflow_cfg())
    assert {key: parser["agora"][key] for key in parser["agora"]} == {s.key: s.default for s in SETTINGS}


SHOWN = re.compile(r"^(\w+) += (.*?)   \((.*)\)$", re.MULTILINE)


def test_config_alone_shows_the_values_in_effect_and_where_each_came_from(tmp_path: Path) -> None:
    home = tmp_path / "airflow"
    home.mkdir()
    (home / "airflow.cfg").write_text(airflow_cfg().replace("\nobjective = balanced\n", "\nobjective = cost\n"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(home), "AIRFLOW__AGORA__PLAN_TIME_LIMIT_S": "7"}
    env["AIRFLOW__AGORA__TRACE_STORE_URL"] = "postgresql+psycopg://agora:s3cret@db/traces"
    answers = [
        subprocess.run(
            [sys.executable, "-m", "agora_optimizer", *command], cwd=REPO,
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        for command in (["config", "show"], ["config"])
    ]  # fmt: skip
    shown = answers[0]
    assert answers[1] == shown  # "agora config" alone is "agora config show", not a usage error
    assert shown.splitlines()[0] == f"agora settings in effect (airflow.cfg: {home / 'airflow.cfg'})"
    values = {key: (value, source) for key, value, source in SHOWN.findall(shown)}
    assert set(values) == {s.key for s in SETTINGS} and len(shown.splitlines()) == len(SETTINGS) + 1
    cfg = "airflow.cfg"
    assert values["objective"] == ("cost", cfg)
    assert values["plan_time_limit_s"] == ("7", "environment AIRFLOW__AGORA__PLAN_TIME_LIMIT_S")  # env wins
    assert values["plan_dir"] == (f"{home}/agora/plans", cfg)  # the path used, though the file says nothing
    assert values["trace_store_url"][0] == "postgresql+psycopg://agora:***@db/traces" and "s3cret" not in shown
    assert re.search(r"^objective +  = cost   \(", shown, re.MULTILINE)  # keys padded alike
    assert sorted(p.name for p in home.iterdir()) == ["airflow.cfg"]  # nothing written


def test_config_show_on_an_empty_home_gives_the_default_paths(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {"AIRFLOW_HOME": str(tmp_path)}
    shown = subprocess.run(
        [sys.executable, "-m", "agora_optimizer", "config", "show"], cwd=REPO,
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    values = {key: (value, source) for key, value, source in SHOWN.findall(shown)}
    assert shown.splitlines()[0].endswith(f"(airflow.cfg: {tmp_path / 'airflow.cfg'}, not found)")
    assert values["trace_store_url"] == (f"sqlite:///{tmp_path}/agora/traces.db", "default")
    assert values["state_dir"] == (f"{tmp_path}/agora/jobs", "default")
    assert values["objective"] == ("balanced", "default")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # starts a Python that imports Airflow
def test_airflow_knows_the_agora_section_through_the_provider_entry_point(tmp_path: Path) -> None:
    import json

    import airflow
    import jsonschema

    from agora_optimizer.provider_info import get_provider_info

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)  # what Airflow checks before it loads the provider
    options = info["config"]["agora"]["options"]
    assert {key: option["default"] for key, option in options.items()} == {s.key: s.default for s in SETTINGS}
    assert options["trace_store_url"]["sensitive"] is True and options["airflow_pools"]["type"] == "boolean"
    assert options["parallelism"]["type"] == "integer" and options["token_refresh_s"]["type"] == "float"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {"AIRFLOW_HOME": str(tmp_path)}
    airflow_cli = Path(sys.executable).parent / "airflow"
    answer = subprocess.run(
        [str(airflow_cli), "config", "get-value", "agora", "reoptimize_tag"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert answer.returncode == 0 and answer.stdout.strip() == "agora", answer.stderr[-2000:]


@pytest.mark.slow  # starts a Python that imports Airflow
def test_a_sensitive_setting_may_come_from_a_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | {"AIRFLOW_HOME": str(tmp_path)}
    env["AIRFLOW__AGORA__TRACE_STORE_URL_CMD"] = "echo postgresql+psycopg://agora:from-a-vault@db/traces"
    env["AIRFLOW__AGORA__OBJECTIVE_CMD"] = "echo cost"  # not sensitive: Airflow ignores _CMD for it
    script = "from agora_optimizer import settings\nfor k in ('trace_store_url', 'objective'): print(settings.get(k))"
    shown = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.splitlines()[-2:]
    assert shown == ["postgresql+psycopg://agora:from-a-vault@db/traces", "balanced"]
