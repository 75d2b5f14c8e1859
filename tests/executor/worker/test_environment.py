"""The scheduler's secrets reach no job, under any name Airflow reads them by."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agora_optimizer.executor.worker.environment import is_scheduler_secret, job_environment

SECRET_NAMES = (
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
    "AIRFLOW__CORE__SQL_ALCHEMY_CONN",  # deprecated, still honoured by Airflow 3.3
    "AIRFLOW__CORE__SQL_ALCHEMY_CONN_CMD",
    "AIRFLOW__CORE__SQL_ALCHEMY_CONN_SECRET",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC",
    "AIRFLOW__WEBSERVER__SECRET_KEY",  # deprecated name of [api] secret_key
    "AIRFLOW__WEBSERVER__SECRET_KEY_CMD",
    "AIRFLOW__API__SECRET_KEY_SECRET",
    "AIRFLOW__API_AUTH__JWT_SECRET",
    "AIRFLOW__CORE__FERNET_KEY",
    "AIRFLOW__CORE__FERNET_KEY_CMD",
    "AIRFLOW__CELERY__BROKER_URL",
    "AIRFLOW__CELERY__RESULT_BACKEND_SECRET",
    "AIRFLOW__TEAM_A___DATABASE__SQL_ALCHEMY_CONN",  # team-scoped
    "AIRFLOW__TEAM_A___CORE__SQL_ALCHEMY_CONN_CMD",
)
KEPT_NAMES = (
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
    "AIRFLOW__CORE__DAGS_FOLDER",
    "AIRFLOW__AGORA__TRACE_STORE_URL",  # the task's listener writes its row there
    "AIRFLOW_CONN_WAREHOUSE",  # the tasks' own connection
    "AIRFLOW__API__BASE_URL",
    "AIRFLOW__WEBSERVER__BASE_URL",
    "PATH",
    "SECRET_KEY",  # not Airflow's
)


def test_every_name_of_a_scheduler_secret_is_excluded_and_the_rest_kept() -> None:
    assert [name for name in SECRET_NAMES if not is_scheduler_secret(name)] == []
    assert [name for name in KEPT_NAMES if is_scheduler_secret(name)] == []
    given = {name: "x" for name in (*SECRET_NAMES, *KEPT_NAMES)}
    assert set(job_environment(given)) == set(KEPT_NAMES)


@pytest.mark.slow  # starts a Python that imports Airflow
def test_the_deprecated_names_excluded_are_the_ones_airflow_honours(tmp_path: Path) -> None:
    """Airflow itself reads the deprecated names as the database URL and the secret key."""
    code = (
        "import json; from airflow.configuration import conf; "
        "print(json.dumps([conf.get('database', 'sql_alchemy_conn'), conf.get('api', 'secret_key')]))"
    )
    environment = {k: v for k, v in os.environ.items() if not is_scheduler_secret(k)}
    url = f"sqlite:///{tmp_path / 'old-name.db'}"
    environment["AIRFLOW__CORE__SQL_ALCHEMY_CONN"] = url
    environment["AIRFLOW__WEBSERVER__SECRET_KEY"] = "old-name-key"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [url, "old-name-key"]
    assert is_scheduler_secret("AIRFLOW__CORE__SQL_ALCHEMY_CONN") and is_scheduler_secret(
        "AIRFLOW__WEBSERVER__SECRET_KEY"
    )
